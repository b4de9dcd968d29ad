"""Multi-turn episodes on the embedded model in the real SQL environment (issue 20): the batch's
ids are the sampled action ids plus the observation turns' ids, provenance masks partition the
response, and the rewards are the environment's."""

import torch

from mintrl.build.components import ModelContext
from mintrl.env.sql.environment import SqlEnvironment
from mintrl.env.sql.source import SqlTasks
from mintrl.intervention.rule import RuleIntervention
from mintrl.judge.sql import SqlJudge
from mintrl.rollout.episodes import EpisodeRollout, turn_wrapper
from mintrl.sampler import HFSampler


class RecordingSampler(HFSampler):
    """The HF sampler, remembering every row it sampled (what the batch must hold, unchanged)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sampled = []

    def generate(self, prefixes, *args, **kwargs):
        out = super().generate(prefixes, *args, **kwargs)
        self.sampled += [ids.tolist() for ids in out.token_ids]
        return out


def test_turn_wrapper_is_the_chat_templates(tokenizer):
    w = turn_wrapper(tokenizer)
    assert tokenizer.decode(list(w.after_eos)) == "\n<|im_start|>user\n"
    assert tokenizer.decode(list(w.after_cut)) == "<|im_end|>\n<|im_start|>user\n"
    assert tokenizer.decode(list(w.before_action)) == "<|im_end|>\n<|im_start|>assistant\n"


def test_episode_ids_provenance_and_rewards(embedded, tokenizer):
    torch.manual_seed(0)
    items = SqlTasks(train_size=2, val_size=2, min_columns=2, max_columns=2).build("train", tokenizer)[:1]
    sampler = RecordingSampler(model=embedded.model, tokenizer=tokenizer)
    rollout = EpisodeRollout(
        env=SqlEnvironment(),
        sampler=sampler,
        judge=SqlJudge(),
        intervention=RuleIntervention(ModelContext(embedded)),
        reward=None,
        tokenizer=tokenizer,
        n_control=1,
        n_semi=1,
        max_turns=2,
        max_action_tokens=12,
        continuation_len=40,
        max_response_tokens=96,
        progress=False,
    )
    ended: list[int] = []
    rollout.on_episodes_end = ended.append  # what an evaluation's progress bar listens to
    batch = rollout.generate(items)
    assert len(batch) == 2 and sum(ended) == 2 and all(n > 0 for n in ended)  # each episode reported once
    assert not (batch.response_mask & batch.environment_mask).any()
    assert not (batch.intervention_mask & ~batch.response_mask).any()
    wrapper = rollout.wrapper
    for i, trace in enumerate(batch.traces):
        p = len(items[0].prompt_ids)
        response = batch.input_ids[i][p:][batch.attention_mask[i][p:].bool()].tolist()
        env = batch.environment_mask[i][p:][: len(response)].tolist()
        for t in trace.turns:
            observation = response[t.action_end : t.observation_end]
            assert all(env[t.action_end : t.observation_end]) and not any(env[t.action_start : t.action_end])
            if observation:  # wrapper + the observation text's own ids + wrapper, never re-rendered
                ended = response[t.action_end - 1] == tokenizer.eos_token_id
                head = list(wrapper.after_eos if ended else wrapper.after_cut)
                assert observation[: len(head)] == head
                assert observation[-len(wrapper.before_action) :] == list(wrapper.before_action)
            if not t.intervened:  # a policy-only action is exactly one sampled row
                assert response[t.action_start : t.action_end] in sampler.sampled
        assert batch.rewards[i].item() in (0.0, 1.0)
    assert batch.stats["episode/turns"] == sum(len(t.turns) for t in batch.traces) / 2
