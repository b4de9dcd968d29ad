"""Semi-on-policy rollout sampling (MInTRL Algorithm 1) with control rollouts (eq. 8).

For each prompt, ``n_control`` rollouts come from the policy alone and ``n_semi`` are written in
chunks: the policy writes ``chunk_size`` tokens, the judge reviews the chunk's steps in the context
of the accepted prefix, and on Revise the chunk is cut before the earliest wrong step and the
intervention writes at most ``continuation_len`` tokens; then the policy resumes. After
``max_reviews`` reviews the policy finishes the response unreviewed. All model calls are batched
across rollouts: one ``generate`` per round (per distinct budget), one judge call, one
intervention call.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Sequence

import torch
from tqdm.auto import tqdm

from mintrl.allocation.base import Allocation
from mintrl.allocation.branching import Brancher
from mintrl.allocation.budget import RolloutBudget
from mintrl.core.batch import BranchRecord, Provenance, ReviewRecord, Rollout, RolloutBatch, collate_rollouts
from mintrl.core.checks import check_int, check_range
from mintrl.core.verdict import FAILED, REVISE, UNPARSEABLE, ReviewRequest
from mintrl.data.base import PromptItem
from mintrl.guide.base import Guide
from mintrl.intervention.base import Intervention, InterventionRequest
from mintrl.judge.base import Judge
from mintrl.reward.base import Reward, score_rewards
from mintrl.rollout.error_location import is_failed, locate_first_errors
from mintrl.rollout.guards import GuardedJudge, GuardedReward
from mintrl.rollout.schedule import InterventionSchedule
from mintrl.rollout.stats import guide_stats, rollout_stats
from mintrl.sampler.base import Sampler
from mintrl.text.steps import split_steps, token_index_of_char


def apply_verdict(
    rollout: Rollout,
    ids: list[int],
    logprobs: list[float],
    finished: bool,
    steps,
    verdict,
    item: PromptItem,
    tokenizer,
    min_kept_tokens: int = 0,
) -> InterventionRequest | None:
    """Apply a judge verdict to a freshly sampled chunk (MInTRL Alg. 1, lines 5-8).

    Keep (or an unusable verdict): the whole chunk joins the accepted prefix. Revise at step ``e``:
    only the tokens wholly before step ``e`` are kept (the cut drops any EOS) and an intervention
    request for the retained prefix is returned. A Revise whose cut would leave fewer than
    ``min_kept_tokens`` response tokens (the accepted prefix plus the chunk's tokens before step
    ``e``) is not applied: the chunk is kept as sampled, counted in ``rollout.early_cuts``
    (``min_kept_tokens=1``: no correction replaces a response from its first token). Counts
    reviews, revisions and unparseable verdicts, and appends the review to ``rollout.review_records``
    (:class:`mintrl.core.batch.ReviewRecord`).

    Args:
        rollout: the rollout to extend (mutated). ids, logprobs: the chunk's tokens and log-probs.
        finished: the chunk ended with EOS. steps: ``split_steps`` of the decoded chunk.
        verdict: the judge's verdict. item: the prompt. tokenizer: policy tokenizer.
        min_kept_tokens: fewest response tokens a cut may leave (tokens; 0: every Revise applies).

    Returns:
        The :class:`InterventionRequest` on Revise, else None.
    """
    rollout.reviews += 1
    rollout.unparseable += verdict.kind == UNPARSEABLE
    rollout.failed += verdict.kind == FAILED
    revise = verdict.kind == REVISE and verdict.step is not None and 0 <= verdict.step < len(steps)
    keep = token_index_of_char(tokenizer, ids, steps[verdict.step].start) if revise else len(ids)
    if revise and len(rollout.response_ids) + keep < min_kept_tokens:
        revise = False
        rollout.early_cuts += 1
    if not revise:
        rollout.append(ids, logprobs, intervention=False)
        rollout.finished = finished
    else:
        rollout.revisions += 1
        rollout.revision_steps.append(verdict.step)
        rollout.append(ids[:keep], logprobs[:keep], intervention=False)
    rollout.review_records.append(
        ReviewRecord(
            round=rollout.reviews - 1,
            kind=verdict.kind,
            step=verdict.step,
            correction=verdict.correction,
            revised=revise,
            at_token=len(rollout.response_ids),
        )
    )
    if not revise:
        return None
    text = tokenizer.decode(rollout.response_ids)
    return InterventionRequest(
        item.question, item.reference, rollout.prompt_ids, list(rollout.response_ids), text, verdict
    )


def rollout_counts(kept: int, generated: int, prompts: int) -> dict[str, float]:
    """A step's rollout counts: ``allocation/rollouts_per_prompt`` (rollouts in the batch / prompts),
    ``allocation/budget_used`` (rollouts generated, count) and ``allocation/generated_per_prompt``
    (generated / prompts); the x axis of RAIL's performance-vs-rollouts comparison (RAIL sec. 4)."""
    return {
        "allocation/rollouts_per_prompt": kept / max(prompts, 1),
        "allocation/budget_used": float(generated),
        "allocation/generated_per_prompt": generated / max(prompts, 1),
    }


class SemiOnPolicyRollout:
    """Generates one step's rollouts (see module docstring).

    Args:
        sampler: policy sampler (:class:`mintrl.sampler.Sampler`).
        judge, intervention: the judge-intervention policy's two halves.
        reward: batched reward, ``(responses, items) -> rewards`` (see :func:`mintrl.reward.base.score_rewards`).
        tokenizer: the policy tokenizer.
        n_control: control rollouts per prompt ``N_c`` (>= 1: they give the baseline).
        n_semi: semi-on-policy rollouts per prompt ``N_m`` (>= 0).
        chunk_size: policy tokens per chunk between reviews (tokens).
        max_reviews: judge reviews per semi-on-policy rollout.
        continuation_len: maximum intervention tokens per revision (tokens).
        max_response_tokens: response length limit, intervention tokens included (tokens).
        min_kept_tokens: a Revise is applied only when its cut keeps at least this many response
            tokens (tokens; 0: always; 1: never from the response's first token); the others
            keep the chunk as sampled and are logged as ``judge/early_cuts`` (see :func:`apply_verdict`).
        temperature, top_p: policy sampling parameters.
        intervention_steps: interventions happen during the first this-many optimizer steps;
            afterwards every rollout is a pure on-policy control rollout (early stopping, sec. 2.3).
        adaptive_stop: None, or the knobs of the adaptive stop (``gap_threshold``, ``patience``,
            ``smoothing``, ``min_steps``; see :class:`mintrl.rollout.schedule.InterventionSchedule`).
        step_delimiters: see :func:`mintrl.text.steps.split_steps`.
        progress: show a transient progress bar of the generation rounds.
        judge_timeout_s, reward_timeout_s: limit of one judge ``review`` / reward call (seconds;
            None: none). The judge and reward are wrapped by :class:`mintrl.rollout.guards.GuardedJudge`
            and :class:`mintrl.rollout.guards.GuardedReward`: a call that raises, hangs or answers
            garbage gives its rows a "failed" verdict (Keep) or no reward, counted in the step's
            ``judge/{errors,timeouts,garbage}`` and ``reward/{failed,timeout}``.
        mark_first_error: after scoring, the judge reviews each failed rollout's whole response
            once (one batched call) and marks the token where its first wrong step starts
            (:attr:`mintrl.core.batch.Rollout.first_error`; :mod:`mintrl.rollout.error_location`).
            Set by the run when the objective declares ``needs_first_error`` (``objective=first_error``).

    Attributes:
        multi_turn: class-level capability; True for engines that drive an environment over several
            turns (:class:`mintrl.rollout.episodes.EpisodeRollout`), which ``env=`` requires.

    Raises:
        ValueError: a non-positive size or length, naming the ``rollout.*`` field.
    """

    multi_turn: bool = False

    def __init__(
        self,
        sampler: Sampler,
        judge: Judge,
        intervention: Intervention,
        reward: Reward,
        tokenizer,
        n_control: int = 2,
        n_semi: int = 2,
        chunk_size: int = 16,
        max_reviews: int = 2,
        continuation_len: int = 16,
        max_response_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        intervention_steps: int = 1_000_000,
        adaptive_stop: dict | None = None,
        step_delimiters: Sequence[str] = ("blank_line", "code_fence"),
        progress: bool = True,
        allocation: Allocation | None = None,
        judge_timeout_s: float | None = 600.0,
        reward_timeout_s: float | None = 600.0,
        guide: Guide | None = None,
        mark_first_error: bool = False,
        min_kept_tokens: int = 0,
    ):
        for name, value, low in (
            ("n_control", n_control, 1),
            ("n_semi", n_semi, 0),
            ("chunk_size", chunk_size, 1),
            ("max_reviews", max_reviews, 0),
            ("continuation_len", continuation_len, 1),
            ("max_response_tokens", max_response_tokens, 1),
            ("intervention_steps", intervention_steps, 0),
            ("min_kept_tokens", min_kept_tokens, 0),
        ):
            check_int(f"rollout.{name}", value, low)
        check_range("rollout.temperature", temperature, 0, low_open=True)
        check_range("rollout.top_p", top_p, 0, 1, low_open=True)
        self.judge_timeout_s, self.reward_timeout_s = judge_timeout_s, reward_timeout_s
        self.sampler, self.judge, self.intervention, self.reward, self.tokenizer = (
            sampler,
            judge,
            intervention,
            reward,
            tokenizer,
        )
        self.n_control, self.n_semi = n_control, n_semi
        self.chunk_size, self.max_reviews, self.continuation_len = chunk_size, max_reviews, continuation_len
        self.max_response_tokens, self.temperature, self.top_p = max_response_tokens, temperature, top_p
        self.schedule = InterventionSchedule(
            intervention_steps, adaptive=adaptive_stop is not None, **dict(adaptive_stop or {})
        )
        self.step_delimiters = tuple(step_delimiters)
        self.progress = progress
        self.allocation = allocation
        self.guide = guide
        self.pad_token_id = sampler.pad_token_id
        self.mark_first_error = mark_first_error
        self.min_kept_tokens = min_kept_tokens

    # The judge and reward are always guarded (mintrl.rollout.guards), also when swapped later (the pilot does).
    @property
    def judge(self) -> GuardedJudge:
        """The judge, wrapped by :class:`mintrl.rollout.guards.GuardedJudge` (``.inner`` is the judge itself)."""
        return self._judge

    @judge.setter
    def judge(self, judge) -> None:
        self._judge = judge if isinstance(judge, GuardedJudge) else GuardedJudge(judge, self.judge_timeout_s)

    @property
    def reward(self) -> GuardedReward:
        """The reward, wrapped by :class:`mintrl.rollout.guards.GuardedReward` (``.inner`` is the reward itself)."""
        return self._reward

    @reward.setter
    def reward(self, reward) -> None:
        self._reward = reward if isinstance(reward, GuardedReward) else GuardedReward(reward, self.reward_timeout_s)

    # ------------------------------------------------------------------ generation
    def _sample(self, rollouts: list[Rollout], budgets: list[int], temperature: float | None = None) -> list:
        """Continue each rollout by up to its own budget (tokens), in one ``generate`` call with the
        largest budget: a row is cut to its budget afterwards (and is then unfinished unless its EOS
        fell within it). One batched call decodes all rows together, which costs far less than one
        call per distinct budget; the tokens past a row's budget are discarded. ``temperature``:
        the sampling temperature (None: ``rollout.temperature``; a branch's own otherwise)."""
        if not rollouts:
            return []
        gen = self.sampler.generate(
            [r.prompt_ids + r.response_ids for r in rollouts],
            max(budgets),
            self.temperature if temperature is None else temperature,
            self.top_p,
            cache_keys=[id(r) for r in rollouts],
        )
        results = []
        for j, budget in enumerate(budgets):
            ids, lps, finished = gen.token_ids[j], gen.logprobs[j], gen.finished[j]
            if len(ids) > budget:
                ids, lps, finished = ids[:budget], lps[:budget], False
            results.append((ids, lps, finished))
        return results

    def _remaining(self, r: Rollout) -> int:
        return self.max_response_tokens - len(r.response_ids)

    def _review_round(self, rollouts: list[Rollout], items: list[PromptItem]) -> None:
        """One chunk for every unfinished rollout that still has reviews, then judge + intervene."""
        active = [r for r in rollouts if not r.finished and self._remaining(r) > 0 and r.reviews < self.max_reviews]
        if not active:
            return
        chunks = self._sample(active, [min(self.chunk_size, self._remaining(r)) for r in active])
        requests, cuts = [], []
        for r, (ids, lps, finished) in zip(active, chunks):
            prefix_text = self.tokenizer.decode(r.response_ids)
            chunk_text = self.tokenizer.decode(ids.tolist())
            steps = split_steps(chunk_text, self.step_delimiters)
            requests.append(
                ReviewRequest(
                    items[r.group].question, items[r.group].reference, prefix_text, [s.text for s in steps], finished
                )
            )
            cuts.append((ids, lps, finished, steps))
        verdicts = self.judge.review(requests)
        fixes = []
        for r, verdict, (ids, lps, finished, steps) in zip(active, verdicts, cuts):
            fix = apply_verdict(
                r,
                ids.tolist(),
                lps.tolist(),
                finished,
                steps,
                verdict,
                items[r.group],
                self.tokenizer,
                self.min_kept_tokens,
            )
            if fix is not None:
                fixes.append((r, fix))
        self._intervene(fixes)

    def _intervene(self, fixes, length: int | None = None) -> None:
        """Write each fix's correction (up to ``length`` tokens, default ``continuation_len``)."""
        by_budget = defaultdict(list)
        for r, req in fixes:
            budget = min(length or self.continuation_len, self._remaining(r))
            if budget > 0:
                by_budget[budget].append((r, req))
        for budget, group in by_budget.items():
            corrections = self.intervention.intervene([req for _, req in group], budget)
            for (r, _), fix in zip(group, corrections):
                ids, behaviour = list(fix.ids)[:budget], list(fix.logprobs)[:budget]
                r.append(ids, [float("nan")] * len(ids), intervention=True, behaviour=behaviour)
                r.review_records[-1].written = len(ids)

    def _finish(self, rollouts: list[Rollout]) -> None:
        """The policy writes the rest of every unfinished rollout in one call."""
        todo = [r for r in rollouts if not r.finished and self._remaining(r) > 0]
        if not todo:
            return
        for r, (ids, lps, finished) in zip(todo, self._sample(todo, [self._remaining(r) for r in todo])):
            r.append(ids.tolist(), lps.tolist(), intervention=False)
            r.finished = finished

    def _score_interventions(self, rollouts: list[Rollout]) -> None:
        """Fill log pi_t of intervention and guide tokens (needed by the Proxy anchor and for logging)."""
        spliced = (Provenance.INTERVENTION, Provenance.GUIDE)
        touched = [r for r in rollouts if any(r.intervention) or any(r.guide)]
        if not touched:
            return
        scored = self.sampler.score(
            [r.prompt_ids + r.response_ids for r in touched], [len(r.prompt_ids) for r in touched], self.temperature
        )
        for r, lp in zip(touched, scored):
            r.logprobs = [
                float(lp[k]) if kind in spliced else old for k, (kind, old) in enumerate(zip(r.provenance, r.logprobs))
            ]

    def _guided(self, rollouts: list[Rollout], items: list[PromptItem], step: int) -> list[Rollout]:
        """The guide's rollouts of this step (:mod:`mintrl.guide`): each start's ids spliced as
        guide tokens (behaviour log-probs the guide's), the policy continuing unless the start is a
        complete trace, guide tokens scored under the rollout-time policy, rewards computed, and
        the guide told the outcome. Non-control rows of their prompt's group."""
        starts = self.guide.starts(rollouts, items, step, self.intervention, self.max_response_tokens)
        guided = []
        for start in starts:
            r = Rollout(group=start.group, is_control=False, prompt_ids=list(items[start.group].prompt_ids))
            r.append(
                start.ids, [float("nan")] * len(start.ids), intervention=False, behaviour=start.behaviour, guide=True
            )
            guided.append(r)
        self._finish([r for r, start in zip(guided, starts) if not start.complete])
        eos = self.tokenizer.eos_token_id
        for r, start in zip(guided, starts):
            if start.complete:
                r.finished = bool(r.response_ids) and r.response_ids[-1] == eos
        self._score_interventions(guided)
        texts = self.tokenizer.batch_decode([r.response_ids for r in guided], skip_special_tokens=True)
        for r, value in zip(guided, score_rewards(self.reward, texts, [items[r.group] for r in guided])):
            r.reward = value
        self.guide.observe(guided, starts, items)
        return guided

    def _brancher(self) -> Brancher:
        """The allocation's :class:`Brancher` for this engine's rollouts."""
        return Brancher(
            self.sampler,
            self.tokenizer,
            self.reward,
            self.temperature,
            self.top_p,
            self.max_response_tokens,
            intervene=self.intervene_at,
        )

    def _allocate(self, rollouts: list[Rollout], items: list[PromptItem]) -> tuple[list[Rollout], dict]:
        """Branch extra rollouts within ``allocation.budget_per_step`` (RAIL): the new scored
        rollouts and the allocation stats. Every training step logs its rollout count, branching or
        not (RAIL's performance-vs-rollouts axis): ``allocation/rollouts_per_prompt`` (the batch's
        rollouts / prompts), ``allocation/budget_used`` (rollouts generated, discarded shadow
        branches included) and ``allocation/generated_per_prompt`` (that / prompts)."""
        total = self.allocation.budget_per_step if self.allocation is not None else None
        if not total:
            return [], rollout_counts(len(rollouts), len(rollouts), len(items))
        budget = RolloutBudget(total)
        if budget.take(len(rollouts)) < len(rollouts):
            raise ValueError(
                f"allocation.budget_per_step={total} is below this step's {len(rollouts)} initial rollouts "
                "(data.prompts_per_step x (rollout.n_control + rollout.n_semi))"
            )
        brancher = self._brancher()
        extra, stats = self.allocation.allocate(rollouts, items, brancher, budget, self.step_delimiters)
        return extra, {
            **stats,
            **brancher.metrics(),
            **rollout_counts(len(rollouts) + len(extra), budget.used, len(items)),
        }

    def intervene_at(self, parent: Rollout, anchor: int, length: int, item: PromptItem) -> list[Rollout]:
        """An "intervene" branch (the allocation's intervene actions): the judge reviews the chunk of
        ``parent`` that starts at response token ``anchor``; on Revise the kept steps are followed by
        a correction of up to ``length`` tokens and the policy writes the rest. Returns the scored
        semi-on-policy rollout, or ``[]`` when the judge keeps the chunk."""
        child = Rollout(
            group=parent.group,
            is_control=False,
            prompt_ids=list(parent.prompt_ids),
            branch=BranchRecord("intervene", anchor, parent.row, float(self.temperature)),
        )
        child.append(
            parent.response_ids[:anchor],
            parent.logprobs[:anchor],
            intervention=False,
            behaviour=parent.behaviour[:anchor],
        )
        child.intervention[:anchor] = parent.intervention[:anchor]
        end = anchor + self.chunk_size
        ids, lps = parent.response_ids[anchor:end], parent.logprobs[anchor:end]
        finished = parent.finished and end >= len(parent.response_ids)
        steps = split_steps(self.tokenizer.decode(ids), self.step_delimiters)
        request = ReviewRequest(
            item.question, item.reference, self.tokenizer.decode(child.response_ids), [x.text for x in steps], finished
        )
        verdict = self.judge.review([request])[0]
        fix = apply_verdict(
            child, list(ids), list(lps), finished, steps, verdict, item, self.tokenizer, self.min_kept_tokens
        )
        if fix is None:
            return []
        self._intervene([(child, fix)], length)
        self._finish([child])
        self._score_interventions([child])
        text = self.tokenizer.batch_decode([child.response_ids], skip_special_tokens=True)
        child.reward = score_rewards(self.reward, text, [item])[0]
        return [child]

    def state_dict(self) -> dict:
        """The intervention schedule's and the allocation's state (saved in checkpoints by the data module)."""
        return {
            "schedule": self.schedule.state_dict(),
            "allocation": self.allocation.state_dict() if self.allocation else {},
            "guide": self.guide.state_dict() if self.guide else {},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
        self.schedule.load_state_dict(state["schedule"])
        if self.allocation is not None and state.get("allocation"):
            self.allocation.load_state_dict(state["allocation"])
        if self.guide is not None and state.get("guide"):
            self.guide.load_state_dict(state["guide"])

    def _new_rollouts(
        self, items: list[PromptItem], step: int, n_control: int | None, n_semi: int | None
    ) -> tuple[list[Rollout], bool]:
        """The step's empty rollouts (``G * (n_control + n_semi)``, grouped by prompt, control
        first, rows numbered) and whether this step intervenes; outside the intervention phase
        every rollout is a control rollout (early stopping)."""
        n_control = self.n_control if n_control is None else n_control
        n_semi = self.n_semi if n_semi is None else n_semi
        intervene = n_semi > 0 and self.schedule.active(step)
        if not intervene:
            n_control, n_semi = n_control + n_semi, 0
        rollouts = [
            Rollout(group=g, is_control=k < n_control, prompt_ids=list(item.prompt_ids))
            for g, item in enumerate(items)
            for k in range(n_control + n_semi)
        ]
        for row, r in enumerate(rollouts):
            r.row = row
        return rollouts, intervene

    def _mark_first_errors(self, rollouts: list[Rollout], items: list[PromptItem]) -> dict[str, float]:
        """Set ``first_error`` of every failed rollout whose first wrong step the judge finds (one
        batched review of whole responses) and return ``judge/first_error_reviewed`` (failed
        rollouts reviewed, count), ``judge/first_error_found`` (of them with an error found, count)
        and ``judge/first_error_position`` (mean fraction of the response before the error)."""
        failed = [r for r in rollouts if is_failed(r.reward) and r.response_ids]
        marks = locate_first_errors(
            self.judge,
            self.tokenizer,
            [r.response_ids for r in failed],
            [r.finished for r in failed],
            [items[r.group] for r in failed],
            self.step_delimiters,
        )
        fractions = []
        for r, mark in zip(failed, marks):
            r.first_error = None if mark is None else mark.token
            if mark is not None:
                fractions.append(mark.token / len(r.response_ids))
        return {
            "judge/first_error_reviewed": float(len(failed)),
            "judge/first_error_found": float(len(fractions)),
            "judge/first_error_position": sum(fractions) / len(fractions) if fractions else 0.0,
        }

    def _end_step(self, batch: RolloutBatch, step: int, intervene: bool) -> None:
        """Log the intervention phase, feed the step's reward gap to the adaptive stop and stamp
        the batch with its step."""
        batch.stats["rollout/intervention_phase"] = float(intervene)
        if intervene and "reward/gap" in batch.stats:
            if self.schedule.update(step, batch.stats["reward/gap"]):
                batch.stats["rollout/adaptive_stop"] = float(step)
            batch.stats["rollout/gap_smoothed"] = self.schedule.smoothed_gap
        batch.step = step

    # ------------------------------------------------------------------ public
    @torch.no_grad()
    def generate(
        self,
        items: list[PromptItem],
        step: int = 0,
        n_control: int | None = None,
        n_semi: int | None = None,
        allocate: bool = True,
        guide: bool = True,
    ) -> RolloutBatch:
        """All rollouts for one optimizer step.

        Args:
            items: the step's ``G`` prompts.
            step: the optimizer step (decides the intervention phase).
            n_control, n_semi: override the group sizes (validation uses ``n_semi=0``).
            allocate: let the allocation component branch extra rollouts (validation: False).
            guide: let the guide add its guided rollouts (validation: False).

        Returns:
            :class:`RolloutBatch` with ``G * (n_control + n_semi)`` rows, grouped by prompt,
            control rollouts first in each group; ``stats`` holds the logged rollout metrics.
        """
        start = time.perf_counter()
        rollouts, intervene = self._new_rollouts(items, step, n_control, n_semi)
        semi = [r for r in rollouts if not r.is_control]
        bar = tqdm(
            total=(self.max_reviews if semi else 0) + 1,
            desc=f"rollouts (step {step})",
            unit="round",
            leave=False,
            disable=not self.progress,
        )
        while any(not r.finished and self._remaining(r) > 0 and r.reviews < self.max_reviews for r in semi):
            self._review_round(semi, items)
            bar.update(1)
        self._finish(rollouts)
        self._score_interventions(semi)
        bar.update(bar.total - bar.n)
        bar.close()
        gen_seconds = time.perf_counter() - start
        texts = self.tokenizer.batch_decode([r.response_ids for r in rollouts], skip_special_tokens=True)
        for r, value in zip(rollouts, score_rewards(self.reward, texts, [items[r.group] for r in rollouts])):
            r.reward = value
        extra, allocation_stats = self._allocate(rollouts, items) if allocate else ([], {})
        for row, r in enumerate(extra, start=len(rollouts)):
            r.row = row
        rollouts += extra
        first_error_stats = self._mark_first_errors(rollouts, items) if self.mark_first_error else {}
        guided = self._guided(rollouts, items, step) if guide and self.guide is not None else []
        for row, r in enumerate(guided, start=len(rollouts)):
            r.row = row
        batch = collate_rollouts(
            rollouts + guided, len(items), self.pad_token_id, self.temperature, prompts=list(items)
        )
        batch.stats = rollout_stats(rollouts, gen_seconds, white_box=self.intervention.white_box)
        if self.guide is not None and guide:
            batch.stats.update(guide_stats(rollouts, guided))
            batch.stats.update(self.guide.metrics())
        batch.stats.update(self.reward.metrics())  # reward/{failed,timeout}; code/{passed,failed,timeout,crashed}
        batch.stats.update(self.judge.metrics())  # judge/{errors,timeouts,garbage}
        batch.stats.update(self.sampler.metrics())  # e.g. vLLM weight syncs
        batch.stats.update(allocation_stats)
        batch.stats.update(first_error_stats)
        self._end_step(batch, step, intervene)
        return batch
