"""``sft=interventions``: SFT on the policy's own failed rollouts cut at the first error and
continued by the intervention's correction, before RL.

After InT (Yang, Bai, Wu, Yang, Setlur, Kumar 2026, "InT: Self-Proposed Interventions Enable
Credit Assignment in LLM Reasoning", arXiv 2601.14209, and its released pipeline
github.com/intervention-training/int): (1) sample rollouts from the current policy and keep the
failed ones; (2) a verifier with the reference finds the first wrong step and an intervention
writes a single-step correction in its place; (3, optional in InT) keep an intervention only when
the policy, continuing after it, reaches a correct answer; (4) fine-tune on ``prefix +
intervention`` given the problem. Here the judge and intervention are the run's configured
components (:mod:`mintrl.rollout.error_location` finds the cut).

Token in, token out: an example's response is the sampled prefix ids ``response[:cut]`` (policy
provenance) followed by the intervention's ids (intervention provenance), spliced as ids and never
re-encoded. **Loss tokens** (InT trains on "correct prefix + intervention | problem" with the prompt
masked and no EOS appended, template ``qwen3_nothink_noeos``): every token of prefix and
correction, none of the prompt, none of the suffix the policy wrote after its error, and no EOS.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch

from mintrl.core.batch import Rollout
from mintrl.core.checks import check_int
from mintrl.intervention.base import Correction, InterventionRequest
from mintrl.reward.base import score_rewards
from mintrl.rollout.error_location import FirstError, is_failed, locate_first_errors
from mintrl.sft.stage import SFTStage

log = logging.getLogger(__name__)


def intervention_example(
    group: int, prompt_ids, response_ids, response_logprobs, mark: FirstError, correction: Correction
) -> Rollout:
    """One SFT example: the prompt, then ``response_ids[:mark.token]`` (policy tokens, their
    sampled log-probs) and the correction's ids (intervention tokens, the writer's log-probs for
    both log-prob fields). Unfinished: no EOS is appended (InT's no-EOS template)."""
    example = Rollout(group=group, is_control=True, prompt_ids=list(prompt_ids))
    cut = mark.token
    example.append(list(response_ids[:cut]), list(response_logprobs[:cut]), intervention=False)
    example.append(list(correction.ids), list(correction.logprobs), intervention=True)
    example.finished = False
    return example


@dataclass
class InterventionCounts:
    """Counts of one collection (rollouts): ``sampled``, ``failed`` (finite reward < 1),
    ``errors_found`` (failed with a first wrong step), ``corrected`` (the intervention wrote tokens),
    ``verified`` (the continuation after the correction scored above ``min_reward``; equals
    ``corrected`` when not verifying), ``kept`` (examples)."""

    sampled: int = 0
    failed: int = 0
    errors_found: int = 0
    corrected: int = 0
    verified: int = 0
    kept: int = 0


def collect_intervention_examples(
    rollout,
    items,
    per_prompt: int,
    max_new_tokens: int,
    correction_len: int,
    verify: bool = False,
    min_reward: float = 0.0,
    batch_prompts: int = 16,
) -> tuple[list[Rollout], InterventionCounts]:
    """InT steps 1-3 with the run's components (see module docstring).

    Args:
        rollout: the run's rollout engine (its sampler, guarded judge and reward, intervention,
            tokenizer, temperature, top-p and step delimiters are used).
        items: training :class:`mintrl.data.base.PromptItem`. per_prompt: rollouts sampled per prompt.
        max_new_tokens: length limit of a sampled rollout (tokens).
        correction_len: the correction's length limit (tokens).
        verify: keep an example only when the policy's continuation after the correction (up to
            ``max_new_tokens`` minus the example's response tokens) scores above ``min_reward``.
        batch_prompts: prompts per sampling call.

    Returns:
        ``(examples, counts)``; ``examples[k].group`` indexes ``items``.
    """
    tokenizer, sampler = rollout.tokenizer, rollout.sampler
    counts, examples = InterventionCounts(), []
    for s in range(0, len(items), batch_prompts):
        chunk = [(s + k, item) for k, item in enumerate(items[s : s + batch_prompts]) for _ in range(per_prompt)]
        gen = sampler.generate(
            [list(item.prompt_ids) for _, item in chunk], max_new_tokens, rollout.temperature, rollout.top_p
        )
        responses = [ids.tolist() for ids in gen.token_ids]
        texts = tokenizer.batch_decode(responses, skip_special_tokens=True)
        rewards = score_rewards(rollout.reward, texts, [item for _, item in chunk])
        counts.sampled += len(chunk)
        failed = [j for j, (ids, r) in enumerate(zip(responses, rewards)) if ids and is_failed(r)]
        counts.failed += len(failed)
        marks = locate_first_errors(
            rollout.judge,
            tokenizer,
            [responses[j] for j in failed],
            [gen.finished[j] for j in failed],
            [chunk[j][1] for j in failed],
            rollout.step_delimiters,
        )
        found = [(j, m) for j, m in zip(failed, marks) if m is not None]
        counts.errors_found += len(found)
        requests = []
        for j, mark in found:
            item, prefix = chunk[j][1], responses[j][: mark.token]
            requests.append(
                InterventionRequest(
                    item.question,
                    item.reference,
                    list(item.prompt_ids),
                    prefix,
                    tokenizer.decode(prefix),
                    mark.verdict,
                    item.entry,
                )
            )
        corrections = rollout.intervention.intervene(requests, correction_len) if requests else []
        made = []
        for (j, mark), fix in zip(found, corrections):
            fix = Correction(list(fix.ids)[:correction_len], list(fix.logprobs)[:correction_len])
            if fix.ids:
                group, item = chunk[j]
                made.append(
                    (
                        item,
                        intervention_example(group, item.prompt_ids, responses[j], gen.logprobs[j].tolist(), mark, fix),
                    )
                )
        counts.corrected += len(made)
        if verify and made:
            made = _verified(rollout, made, max_new_tokens, min_reward)
        counts.verified += len(made)
        examples += [example for _, example in made]
    counts.kept = len(examples)
    return examples, counts


def _verified(rollout, made, max_new_tokens: int, min_reward: float):
    """The ``(item, example)`` pairs whose continuation by the policy after the correction scores
    above ``min_reward`` (InT step 3); an example with no length left is scored as it stands."""
    budgets = [max(max_new_tokens - len(example.response_ids), 0) for _, example in made]
    todo = [k for k, b in enumerate(budgets) if b > 0]
    tails = {k: [] for k in range(len(made))}
    if todo:
        gen = rollout.sampler.generate(
            [made[k][1].prompt_ids + made[k][1].response_ids for k in todo],
            max(budgets[k] for k in todo),
            rollout.temperature,
            rollout.top_p,
        )
        for k, ids in zip(todo, gen.token_ids):
            tails[k] = ids.tolist()[: budgets[k]]
    texts = rollout.tokenizer.batch_decode(
        [example.response_ids + tails[k] for k, (_, example) in enumerate(made)], skip_special_tokens=True
    )
    rewards = score_rewards(rollout.reward, texts, [item for item, _ in made])
    return [pair for pair, r in zip(made, rewards) if r == r and r > min_reward]


class InterventionSFTStage(SFTStage):
    """The SFT stage with InT's data (see module docstring); training, export and the RL that
    follows are :class:`mintrl.sft.stage.SFTStage`'s.

    Args:
        prompts: training prompts to sample from (positive). per_prompt: rollouts per prompt (positive).
        max_new_tokens: rollout length limit (tokens). correction_len: correction length limit (tokens).
        verify: InT's optional filter (step 3): keep interventions after which the policy succeeds.
        min_reward: with ``verify``, the continuation's reward must exceed this.
        epochs: passes over the examples (InT: 4); when set, the stage's optimizer steps are
            ``ceil(epochs x examples / rows_per_step)`` instead of ``steps``. None: ``steps``.
        rows_per_step, steps, optimizer, export_dir, seed: see :class:`mintrl.sft.stage.SFTStage`.

    Raises:
        ValueError: a non-positive size (field named); no example could be built (the counts say
            at which step they ran out).
    """

    def __init__(self, correction_len: int = 16, verify: bool = False, epochs: int | None = None, **stage):
        super().__init__(**stage)
        check_int("sft.correction_len", correction_len)
        check_int("sft.epochs", epochs, none_ok=True)
        self.correction_len, self.verify, self.epochs = correction_len, verify, epochs

    @torch.no_grad()
    def collect(self, components, items) -> tuple[list[Rollout], dict]:
        """Examples from the current policy's failed rollouts; counts as :class:`InterventionCounts`."""
        examples, counts = collect_intervention_examples(
            components.rollout,
            items,
            self.per_prompt,
            self.max_new_tokens,
            self.correction_len,
            self.verify,
            self.min_reward,
        )
        log.info("SFT stage (interventions): %s", counts)
        if not examples:
            raise ValueError(
                f"sft=interventions built no example: {counts} (sampled -> failed -> errors_found -> corrected -> "
                "verified -> kept); use more sft.prompts, a judge that finds errors, or sft.verify=false"
            )
        if self.epochs is not None:
            self.steps = math.ceil(self.epochs * len(examples) / self.rows_per_step)
        return examples, vars(counts)
