"""One real training step of the embedded model, and the main job end to end (small variant)."""

import functools
from pathlib import Path

import pytest
import torch
from conftest import ARITHMETIC, TINY_RUN
from hydra import compose, initialize_config_dir
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers import AutoModelForCausalLM

from mintrl.build.components import ModelContext
from mintrl.build.config import CONFIG_DIR
from mintrl.build.run import run
from mintrl.data.reasoning_gym import ReasoningGymPrompts
from mintrl.intervention.rule import RuleIntervention
from mintrl.judge.rule import RuleJudge
from mintrl.model.logprobs import token_logprobs
from mintrl.objective import AdvantageRegression, step_totals
from mintrl.reward import ReasoningGymReward
from mintrl.rollout.single_turn import SingleTurnRollout
from mintrl.sampler import HFSampler
from mintrl.training.module import PolicyModule

REPO = Path(__file__).resolve().parents[2]


def test_one_training_step_changes_weights_and_lowers_the_loss(embedded, fresh_policy, tokenizer):
    items = ReasoningGymPrompts(task_kwargs=ARITHMETIC, train_size=8, val_size=2).build("train", tokenizer)
    engine = SingleTurnRollout(
        HFSampler(fresh_policy, tokenizer, dtype="fp32"),  # the exact fp32 path: rollout log-probs = the trainer's
        RuleJudge(),
        RuleIntervention(ModelContext(embedded)),
        ReasoningGymReward(),
        tokenizer,
        n_control=2,
        n_semi=2,
        chunk_size=8,
        max_reviews=1,
        continuation_len=8,
        max_response_tokens=16,
    )
    torch.manual_seed(0)
    batch = engine.generate(items[:2])
    # fixed rewards so that advantages are non-zero whatever was sampled:
    # group 0 controls [1, 0] -> A = [.5, -.5, .5, -.5]; group 1 controls [0, 0] -> A = [0, 0, 1, 1]
    batch.rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    module = PolicyModule(
        fresh_policy, AdvantageRegression(beta=0.05, kappa=-0.2), functools.partial(torch.optim.AdamW, lr=1e-5)
    )
    optimizer = module.configure_optimizers()
    before = {n: p.detach().clone() for n, p in fresh_policy.named_parameters()}
    fresh_policy.train()
    module.objective.prepare(batch, module.frozen_logprobs)
    totals = step_totals(batch.loss_mask)

    def loss_now():
        lp, _ = token_logprobs(
            fresh_policy, batch.input_ids, batch.attention_mask, batch.response_mask, batch.temperature
        )
        return module.objective(batch, lp, totals).loss

    loss0 = loss_now()
    # hand check: at theta = pi_t the policy tokens' log-ratio is ~0 and each intervention token adds
    # log pi(y) - kappa (kappa = -0.2), so loss = mean_i (beta * sum_interv (lp + 0.2) - A_i)^2
    # (= mean(A^2) = 0.375 for a batch without intervention tokens)
    with torch.no_grad():
        lp, _ = token_logprobs(
            fresh_policy, batch.input_ids, batch.attention_mask, batch.response_mask, batch.temperature
        )
    advantages = torch.tensor([0.5, -0.5, 0.5, -0.5, 0.0, 0.0, 1.0, 1.0])
    anchor_term = ((lp + 0.2) * batch.intervention_mask).sum(-1)  # [8] nats
    expected = ((0.05 * anchor_term - advantages) ** 2).mean()
    assert loss0.item() == pytest.approx(expected.item(), abs=2e-3)
    loss0.backward()
    optimizer.step()
    optimizer.zero_grad()
    with torch.no_grad():
        loss1 = loss_now()
    changed = sum(not torch.equal(before[n], p) for n, p in fresh_policy.named_parameters())
    assert changed == len(before)
    assert loss1.item() < loss0.item()


TINY = [  # the main job, 2 steps of 2 prompts, 4 held-out prompts
    "trainer.max_steps=2",
    *TINY_RUN,
    "module.optimizer.lr=1e-5",
]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    overrides = [f"paths.output_dir={out}", *TINY]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=False)
    summary = run(cfg)
    return out, summary


REQUIRED_SCALARS = {
    "reward/control",
    "reward/semi",
    "reward/gap",
    "rollout/offpolicy_frac",
    "judge/interventions_per_rollout",
    "judge/keep",
    "judge/revise",
    "judge/unparseable",
    "rollout/response_len",
    "train/policy_entropy",
    "train/loss",
    "train/grad_norm",
    "perf/gen_tokens_per_s",
    "perf/step_seconds",
    "val/reward",
    "train/sampler_logprob_gap",
}


def test_main_job_writes_scalars_checkpoint_and_hf_folder(tiny_run, embedded):
    out, summary = tiny_run
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert events
    tags = set()
    values = {}
    for event in events:
        acc = EventAccumulator(str(event))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            tags.add(tag)
            values.setdefault(tag, []).extend((s.step, s.value) for s in acc.Scalars(tag))
    assert REQUIRED_SCALARS <= tags, f"missing: {REQUIRED_SCALARS - tags}"
    # each batch was generated by the weights it trained: no stale rollouts
    assert sorted(v for _, v in values["rollout/generated_at_step"]) == [0.0, 1.0]
    # the HF sampler samples from the live fp32 policy: its log-probs are the trainer's
    assert all(v < 1e-3 for _, v in values["train/sampler_logprob_gap"])
    assert len(values["val/reward"]) == 2  # before training and at the end
    # one sample per validation prompt and 0/1 rewards: pass@1 is the mean reward
    assert [v for _, v in values["val/pass@1"]] == pytest.approx([v for _, v in values["val/reward"]])
    # the best checkpoint holds the best validation of training (steps > 0); the step-0 validation runs before
    # fit and has no checkpoint of its own (its weights are the loaded model's)
    assert summary["best_monitor"] == "val/pass@1" and summary["best_score"] == pytest.approx(
        max(v for step, v in values["val/pass@1"] if step > 0)
    )
    assert Path(summary["best_checkpoint"]).is_file() and Path(summary["best_checkpoint"]).name == "best-step2.ckpt"
    assert (out / "checkpoints" / "last.ckpt").is_file()
    model = AutoModelForCausalLM.from_pretrained(out / "hf_policy")
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, embedded.model(ids).logits), (
            "the exported policy is the trained one"
        )
    assert summary["steps"] == 2 and summary["val_reward_first"] is not None and summary["val_reward_last"] is not None


def test_analysis_notebook_runs_on_the_tiny_run(tiny_run, monkeypatch, tmp_path):
    import json

    import nbformat
    from nbclient import NotebookClient

    out, _ = tiny_run
    monkeypatch.setenv("MINTRL_RUNS", json.dumps({"tiny": str(out)}))
    monkeypatch.delenv("MINTRL_MULTIRUN", raising=False)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(Path(__file__).resolve().parents[2] / "notebooks" / "analysis.ipynb", as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "tiny: val/pass@1" in text
    assert [o for o in outputs if "image/png" in o.get("data", {})], "the training-dynamics figures"


@pytest.mark.slow  # 16 s; the main-job test covers the default callbacks
def test_sweep_callbacks_keep_tensorboard_summary_and_bf16_policy_but_no_checkpoint(tmp_path):
    """`callbacks=sweep` (configs/sweep/*.yaml): TensorBoard, summary.json and the final policy in
    bf16, no Lightning checkpoint (no last.ckpt with the optimizer state, no best checkpoint); every run
    writes the run manifest manifest.json with the commit of the code it imported (this checkout's HEAD)."""
    import json
    import subprocess

    from safetensors import safe_open

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=[f"paths.output_dir={tmp_path}", "callbacks=sweep", *TINY])
    summary = run(cfg)
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["steps"] == summary["steps"] == 2 and written["val_reward_last"] == summary["val_reward_last"]
    assert written["checkpoint"] == "" and written["best_checkpoint"] is None
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert len(head) == 40 and manifest["commit"].startswith(head)
    assert manifest["source"] == str(REPO / "src" / "mintrl") and manifest["machine"]["cpu_count"] >= 1
    assert not list(tmp_path.rglob("*.ckpt")), "no Lightning checkpoint"
    with safe_open(str(tmp_path / "hf_policy" / "model.safetensors"), framework="pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    assert json.loads((tmp_path / "hf_policy" / "config.json").read_text())["dtype"] == "bfloat16"
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf_policy")
    with torch.no_grad():
        assert torch.isfinite(model(torch.tensor([[1, 2, 3]])).logits).all()


@pytest.mark.slow
def test_default_main_job_raises_held_out_reward(tmp_path):
    """The full `make train` job (about 8 minutes on 2 cores): held-out reward must go up."""
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose("train", overrides=[f"paths.output_dir={tmp_path}", "rollout.progress=false"])
    summary = run(cfg)
    assert summary["steps"] == cfg.trainer.max_steps
    assert summary["val_reward_last"] > summary["val_reward_first"] + 0.1
