"""Overrides shared by the tests that read a small training run's rollout records (records, the
TensorBoard text, the HTML page)."""

# two-digit addition and the last-number check on the exact fp32 path: the rule judge revises chunks of
# the first step's semi-on-policy rollouts at seed 3 (1, 1, 3 and 0 revisions at seeds 1-4 with the
# decode loop), so there are intervention tokens
INTERVENING = [
    "data.prompts.task_kwargs.min_digits=2",
    "data.prompts.task_kwargs.max_digits=2",
    "judge.check_last_number=true",
    "trainer.precision=32-true",
    "sampler.dtype=fp32",
    "seed=3",
]
# no checkpoints or export: these tests read the records and the logs only
RECORDS_ONLY = [
    "callbacks.checkpoint=null",
    "callbacks.best=null",
    "callbacks.hf_export=null",
    "+trainer.enable_checkpointing=false",
]
