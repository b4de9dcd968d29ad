"""What the rollout engines share: the single-turn engine
(:class:`mintrl.rollout.single_turn.SingleTurnRollout`) and the episode engine
(:class:`mintrl.rollout.episodes.EpisodeRollout`) both make a step's control and semi-on-policy
rollouts with one sampler, one judge (always guarded, :mod:`mintrl.rollout.guards`) and one
intervention, decide the intervention phase with one :class:`~mintrl.rollout.schedule.InterventionSchedule`,
let an allocation branch extra rollouts within its budget, and close the step the same way.

:meth:`RolloutEngine.generate` is the step: it lays out the empty rollouts
(:meth:`RolloutEngine._new_rollouts`), lets the engine write and score them (:meth:`RolloutEngine._roll`),
then feeds the schedule and stamps the batch (:meth:`RolloutEngine._end_step`).
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections import defaultdict
from typing import Sequence

import torch

from mintrl.allocation.base import Allocation
from mintrl.allocation.branching import Brancher
from mintrl.allocation.budget import RolloutBudget
from mintrl.allocation.top_up import spend_remaining
from mintrl.core.batch import Provenance, Rollout, RolloutBatch
from mintrl.core.checks import check_int, check_range
from mintrl.core.ranks import data_parallel_size, rank_share
from mintrl.data.base import PromptItem
from mintrl.intervention.base import Intervention
from mintrl.judge.base import Judge
from mintrl.rollout.guards import Guarded, GuardedJudge
from mintrl.rollout.schedule import InterventionSchedule, all_ranks_gap
from mintrl.rollout.stats import rollout_counts
from mintrl.sampler.base import Sampler


class RolloutEngine(ABC):
    """The parts of a rollout engine that do not depend on what a rollout is (see module docstring).

    Args:
        sampler: policy sampler (:class:`mintrl.sampler.Sampler`).
        judge, intervention: the judge-intervention policy's two halves.
        tokenizer: the policy tokenizer.
        n_control: control rollouts per prompt ``N_c`` (>= 1: they give the baseline).
        n_semi: semi-on-policy rollouts per prompt ``N_m`` (>= 0).
        max_reviews: judge reviews per semi-on-policy rollout (chunks or action turns).
        continuation_len: maximum intervention tokens per revision (tokens).
        max_response_tokens: response length limit, intervention (and environment) tokens included
            (tokens).
        temperature, top_p: policy sampling parameters.
        intervention_steps: interventions happen during the first this-many optimizer steps;
            afterwards every rollout is a pure on-policy control rollout (early stopping, sec. 2.3).
        adaptive_stop: None, or the knobs of the adaptive stop (``gap_threshold``, ``patience``,
            ``smoothing``, ``min_steps``; see :class:`mintrl.rollout.schedule.InterventionSchedule`).
        step_delimiters: see :func:`mintrl.text.steps.split_steps`.
        progress: show a transient progress bar of the step's generation rounds (or turns).
        allocation: the allocation that branches extra rollouts (None: no branching).
        judge_timeout_s: limit of one judge ``review`` call (seconds; None: none). The judge is
            wrapped by :class:`mintrl.rollout.guards.GuardedJudge`: a call that raises, hangs or
            answers garbage gives its rows a "failed" verdict (Keep), counted in the step's
            ``judge/{errors,timeouts,garbage}``.
        min_kept_tokens: a Revise is applied only when its cut keeps at least this many response
            tokens (tokens; 0: always; 1: never from the response's first token); the others keep
            the chunk as sampled and are logged as ``judge/early_cuts``
            (:func:`mintrl.rollout.verdicts.apply_verdict`).

    Attributes:
        multi_turn: class-level capability; True for an engine that drives an environment over
            several turns, which ``env=`` requires (each engine declares it; read by the config
            checks from the class).
        judge: the judge, wrapped by :class:`mintrl.rollout.guards.GuardedJudge` (``.inner`` is the
            judge itself); a judge assigned later is wrapped too (:class:`mintrl.rollout.guards.Guarded`).

    Raises:
        ValueError: a size or length out of range, naming the ``rollout.*`` field.
    """

    multi_turn: bool = False
    judge = Guarded(GuardedJudge, "judge_timeout_s")

    def __init__(
        self,
        sampler: Sampler,
        judge: Judge,
        intervention: Intervention,
        tokenizer,
        *,
        n_control: int = 2,
        n_semi: int = 2,
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
        min_kept_tokens: int = 0,
    ):
        for name, value, low in (
            ("n_control", n_control, 1),
            ("n_semi", n_semi, 0),
            ("max_reviews", max_reviews, 0),
            ("continuation_len", continuation_len, 1),
            ("max_response_tokens", max_response_tokens, 1),
            ("intervention_steps", intervention_steps, 0),
            ("min_kept_tokens", min_kept_tokens, 0),
        ):
            check_int(f"rollout.{name}", value, low)
        check_range("rollout.temperature", temperature, 0, low_open=True)
        check_range("rollout.top_p", top_p, 0, 1, low_open=True)
        self.judge_timeout_s = judge_timeout_s
        self.sampler, self.judge, self.intervention, self.tokenizer = sampler, judge, intervention, tokenizer
        self.n_control, self.n_semi = n_control, n_semi
        self.max_reviews, self.continuation_len = max_reviews, continuation_len
        self.max_response_tokens, self.temperature, self.top_p = max_response_tokens, temperature, top_p
        self.schedule = InterventionSchedule(
            intervention_steps, adaptive=adaptive_stop is not None, **dict(adaptive_stop or {})
        )
        self.step_delimiters = tuple(step_delimiters)
        self.progress = progress
        self.allocation = allocation
        self.pad_token_id = sampler.pad_token_id
        self.min_kept_tokens = min_kept_tokens
        # False: this engine generates outside the trainer's thread (the rollout producer of
        # rollout.max_staleness >= 1), where a collective would interleave with the update's; with
        # several ranks it then pools no reward gap (no adaptive stop, no rollout/gap_smoothed)
        self.runs_collectives = True

    # ------------------------------------------------------------------ the step
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
            guide: let the engine's guide add its guided rollouts (validation: False; an engine
                without a guide adds none).

        Returns:
            :class:`RolloutBatch` with ``G * (n_control + n_semi)`` rows, grouped by prompt,
            control rollouts first in each group, then any branched and guided rows; ``stats``
            holds the logged rollout metrics.
        """
        start = time.perf_counter()
        rollouts, intervene = self._new_rollouts(items, step, n_control, n_semi)
        batch = self._roll(items, rollouts, step, start, allocate=allocate, guide=guide)
        self._end_step(batch, step, intervene)
        return batch

    @abstractmethod
    def _roll(
        self, items: list[PromptItem], rollouts: list[Rollout], step: int, start: float, allocate: bool, guide: bool
    ) -> RolloutBatch:
        """Write and score the step's empty ``rollouts`` (from :meth:`_new_rollouts`: outside the
        intervention phase all are control rollouts), let the allocation branch more
        (:meth:`_branch`) and collate them with their statistics. ``start`` is the step's
        ``time.perf_counter()`` (seconds); the other arguments as in :meth:`generate`."""

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

    def _end_step(self, batch: RolloutBatch, step: int, intervene: bool) -> None:
        """Log the intervention phase, feed the step's reward gap of all data-parallel ranks to the
        adaptive stop (:func:`mintrl.rollout.schedule.all_ranks_gap`, a collective with several
        ranks: every rank's schedule decides alike; left out with several ranks when
        :attr:`runs_collectives` is False) and stamp the batch with its step."""
        batch.stats["rollout/intervention_phase"] = float(intervene)
        if intervene and (self.runs_collectives or data_parallel_size() == 1):
            gap = all_ranks_gap(batch.stats, batch.stat_weights)
            if not math.isnan(gap):
                if self.schedule.update(step, gap):
                    batch.stats["rollout/adaptive_stop"] = float(step)
                batch.stats["rollout/gap_smoothed"] = self.schedule.smoothed_gap
        batch.step = step

    # ------------------------------------------------------------------ writing
    def _remaining(self, r: Rollout) -> int:
        """Response tokens ``r`` may still take (tokens)."""
        return self.max_response_tokens - len(r.response_ids)

    def _sample(self, rollouts: list[Rollout], budgets: list[int], temperature: float | None = None) -> list:
        """Continue each rollout by up to its own budget (tokens), in one batched ``generate``
        call with per-row budgets (a row that reaches its budget is unfinished unless its EOS fell
        within it). ``temperature``: the sampling temperature (None: ``rollout.temperature``; a
        branch's own otherwise).

        Returns:
            per rollout ``(ids [n], log-probs [n], finished)``: int64 and float32 tensors, ``n`` at
            most its budget.
        """
        if not rollouts:
            return []
        gen = self.sampler.generate(
            [r.prompt_ids + r.response_ids for r in rollouts],
            budgets,
            self.temperature if temperature is None else temperature,
            self.top_p,
            cache_keys=[id(r) for r in rollouts],
        )
        return list(zip(gen.token_ids, gen.logprobs, gen.finished))

    def _intervene(self, fixes, length: int | None = None) -> None:
        """Write each fix's correction: ``fixes`` are ``(rollout, InterventionRequest)`` pairs; each
        gets up to ``length`` intervention tokens (default ``continuation_len``), within its room."""
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

    # ------------------------------------------------------------------ allocation
    @abstractmethod
    def _brancher(self) -> Brancher:
        """The allocation's brancher for this engine's rollouts."""

    def _branch(self, rollouts: list[Rollout], items: list[PromptItem], allocate: bool) -> dict[str, float]:
        """With ``allocate``, let the allocation branch extra scored rollouts, append them to
        ``rollouts`` (rows numbered on) and return the allocation statistics (see :meth:`_allocate`);
        without, change nothing and return ``{}``."""
        extra, stats = self._allocate(rollouts, items) if allocate else ([], {})
        for row, r in enumerate(extra, start=len(rollouts)):
            r.row = row
        rollouts += extra
        return stats

    def _allocate(self, rollouts: list[Rollout], items: list[PromptItem]) -> tuple[list[Rollout], dict]:
        """Branch extra rollouts within ``allocation.budget_per_step`` (RAIL; the budget of all
        data-parallel ranks together, of which each rank spends its even share): the new scored
        rollouts and the allocation stats. Every training step logs its rollout count, branching or
        not (RAIL's performance-vs-rollouts axis): ``allocation/rollouts_per_prompt`` (the batch's
        rollouts / prompts), ``allocation/budget_used`` (rollouts generated, discarded shadow
        branches included) and ``allocation/generated_per_prompt`` (that / prompts); with
        ``allocation.spend_all`` also ``allocation/top_up`` (fresh rollouts that spent the rest).

        Raises:
            ValueError: ``allocation.budget_per_step`` below the step's initial rollouts, or not a
                multiple of the data-parallel ranks.
        """
        total = self.allocation.budget_per_step if self.allocation is not None else None
        if not total:
            return [], rollout_counts(len(rollouts), len(rollouts), len(items))
        ranks = data_parallel_size()
        budget = RolloutBudget(rank_share(total, ranks, "allocation.budget_per_step"))
        if budget.take(len(rollouts)) < len(rollouts):
            raise ValueError(
                f"allocation.budget_per_step={total} is below this step's {len(rollouts)} initial rollouts "
                "(data.prompts_per_step x (rollout.n_control + rollout.n_semi))"
                + (f" ({budget.total} and {len(rollouts)} per rank, of {ranks} ranks)" if ranks > 1 else "")
            )
        brancher = self._brancher()
        extra, stats = self.allocation.allocate(rollouts, items, brancher, budget, self.step_delimiters)
        if self.allocation.spend_all:  # the rest of the budget on fresh rollouts: every step spends it all
            fresh = spend_remaining([*rollouts, *extra], items, brancher, budget)
            extra = [*extra, *fresh]
            stats = {**stats, "allocation/top_up": float(len(fresh))}
        return extra, {
            **stats,
            **brancher.metrics(),
            **rollout_counts(len(rollouts) + len(extra), budget.used, len(items)),
        }

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """The intervention schedule's and the allocation's state (saved in checkpoints by the data module)."""
        return {
            "schedule": self.schedule.state_dict(),
            "allocation": self.allocation.state_dict() if self.allocation else {},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
        self.schedule.load_state_dict(state["schedule"])
        if self.allocation is not None and state.get("allocation"):
            self.allocation.load_state_dict(state["allocation"])
