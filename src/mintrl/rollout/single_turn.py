"""The single-turn rollout engine (``rollout=single_turn``): one response per rollout, sampled as in
MInTRL Algorithm 1, semi-on-policy rollouts beside control rollouts (eq. 8); with ``n_semi=0`` it is
the plain on-policy engine of GRPO and the other methods without interventions. Multi-turn
episodes: :mod:`mintrl.rollout.episodes`.

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

from tqdm.auto import tqdm

from mintrl.allocation.branching import Brancher, fork_prefix
from mintrl.core.batch import BranchRecord, Rollout, RolloutBatch, collate_rollouts
from mintrl.core.checks import check_int
from mintrl.core.verdict import ReviewRequest
from mintrl.data.base import PromptItem
from mintrl.guide.base import Guide
from mintrl.reward.base import Reward, score_rewards
from mintrl.rollout.engine import RolloutEngine
from mintrl.rollout.error_location import is_failed, locate_first_errors
from mintrl.rollout.guards import Guarded, GuardedReward
from mintrl.rollout.stats import guide_stat_weights, guide_stats, rollout_stat_weights, rollout_stats
from mintrl.rollout.verdicts import apply_verdict
from mintrl.text.steps import split_steps


class SingleTurnRollout(RolloutEngine):
    """Generates one step's rollouts (see module docstring); ``rollout=single_turn``.

    Args:
        sampler, judge, intervention, tokenizer: as :class:`mintrl.rollout.engine.RolloutEngine`.
        reward: batched reward, ``(responses, items) -> rewards`` (see :func:`mintrl.reward.base.score_rewards`).
        chunk_size: policy tokens per chunk between reviews (tokens).
        reward_timeout_s: limit of one reward call (seconds; None: none). The reward is wrapped by
            :class:`mintrl.rollout.guards.GuardedReward`: a call that raises, hangs or answers
            garbage gives its rows no reward, counted in the step's ``reward/{failed,timeout}``.
        guide: the guide that adds rollouts started from a reference solution (:mod:`mintrl.guide`;
            None: no guided rollouts).
        mark_first_error: after scoring, the judge reviews each failed rollout's whole response
            once (one batched call) and marks the token where its first wrong step starts
            (:attr:`mintrl.core.batch.Rollout.first_error`; :mod:`mintrl.rollout.error_location`).
            Set by the run when the objective declares ``needs_first_error`` (``objective=first_error``).
        engine: the shared fields of :class:`mintrl.rollout.engine.RolloutEngine` (``n_control``,
            ``n_semi``, ``max_reviews``, ``continuation_len``, ``max_response_tokens``,
            ``temperature``, ``top_p``, ``intervention_steps``, ``adaptive_stop``,
            ``step_delimiters``, ``progress``, ``allocation``, ``judge_timeout_s``,
            ``min_kept_tokens``); any other keyword is a TypeError.

    Attributes:
        reward: the reward, wrapped by :class:`mintrl.rollout.guards.GuardedReward` (``.inner`` is
            the reward itself); a reward assigned later is wrapped too.

    Raises:
        ValueError: a non-positive size or length, naming the ``rollout.*`` field.
        TypeError: a keyword this engine does not take.
    """

    multi_turn = False
    reward = Guarded(GuardedReward, "reward_timeout_s")

    def __init__(
        self,
        sampler,
        judge,
        intervention,
        reward: Reward,
        tokenizer,
        *,
        chunk_size: int = 16,
        reward_timeout_s: float | None = 600.0,
        guide: Guide | None = None,
        mark_first_error: bool = False,
        **engine,
    ):
        check_int("rollout.chunk_size", chunk_size, 1)
        super().__init__(sampler, judge, intervention, tokenizer, **engine)
        self.reward_timeout_s = reward_timeout_s
        self.reward = reward
        self.chunk_size = chunk_size
        self.guide = guide
        self.mark_first_error = mark_first_error

    # ------------------------------------------------------------------ generation
    def _review_round(self, rollouts: list[Rollout], items: list[PromptItem], riders: list[Rollout] = ()) -> None:
        """One chunk for every unfinished rollout that still has reviews, then judge + intervene.

        ``riders`` (the control rollouts) are written a chunk further in the same ``generate`` call
        and never reviewed: a decode step costs about the same for a few rows more (reading the
        weights dominates on a CPU), so their tokens come nearly free instead of in a longer
        finish."""
        active = [r for r in rollouts if not r.finished and self._remaining(r) > 0 and r.reviews < self.max_reviews]
        if not active:
            return
        riding = [r for r in riders if not r.finished and self._remaining(r) > 0]
        chunks = self._sample(active + riding, [min(self.chunk_size, self._remaining(r)) for r in active + riding])
        for r, (ids, lps, finished) in zip(riding, chunks[len(active) :]):
            r.append(ids.tolist(), lps.tolist(), intervention=False)
            r.finished = finished
        chunks = chunks[: len(active)]
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

    def _finish(self, rollouts: list[Rollout]) -> None:
        """The policy writes the rest of every unfinished rollout in one call."""
        todo = [r for r in rollouts if not r.finished and self._remaining(r) > 0]
        if not todo:
            return
        for r, (ids, lps, finished) in zip(todo, self._sample(todo, [self._remaining(r) for r in todo])):
            r.append(ids.tolist(), lps.tolist(), intervention=False)
            r.finished = finished

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

    def intervene_at(self, parent: Rollout, anchor: int, length: int, item: PromptItem) -> list[Rollout]:
        """An "intervene" branch (the allocation's intervene actions): a child holding ``parent``'s
        first ``anchor`` response tokens (:func:`mintrl.allocation.branching.fork_prefix`); the judge
        reviews the chunk of ``parent`` that starts at response token ``anchor``; on Revise the kept steps are followed by
        a correction of up to ``length`` tokens and the policy writes the rest. Returns the scored
        semi-on-policy rollout, or ``[]`` when the judge keeps the chunk."""
        record = BranchRecord("intervene", anchor, parent.row, float(self.temperature))
        child = fork_prefix(parent, anchor, record, is_control=False)
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
        """The intervention schedule's, the allocation's and the guide's state (saved in checkpoints
        by the data module)."""
        return {**super().state_dict(), "guide": self.guide.state_dict() if self.guide else {}}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        if self.guide is not None and state.get("guide"):
            self.guide.load_state_dict(state["guide"])

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

    def _roll(
        self, items: list[PromptItem], rollouts: list[Rollout], step: int, start: float, allocate: bool, guide: bool
    ) -> RolloutBatch:
        """The step's rounds of chunk, review and correction for the semi-on-policy rows, the
        policy's finish of every row, rewards, then the allocation's branches, the first-error
        marks and the guide's rows (see :meth:`RolloutEngine.generate`)."""
        semi = [r for r in rollouts if not r.is_control]
        bar = tqdm(
            total=(self.max_reviews if semi else 0) + 1,
            desc=f"rollouts (step {step})",
            unit="round",
            leave=False,
            disable=not self.progress,
        )
        while any(not r.finished and self._remaining(r) > 0 and r.reviews < self.max_reviews for r in semi):
            self._review_round(semi, items, riders=[r for r in rollouts if r.is_control])
            bar.update(1)
        self._finish(rollouts)
        self._score_interventions(semi)
        bar.update(bar.total - bar.n)
        bar.close()
        gen_seconds = time.perf_counter() - start
        texts = self.tokenizer.batch_decode([r.response_ids for r in rollouts], skip_special_tokens=True)
        for r, value in zip(rollouts, score_rewards(self.reward, texts, [items[r.group] for r in rollouts])):
            r.reward = value
        allocation_stats = self._branch(rollouts, items, allocate)
        first_error_stats = self._mark_first_errors(rollouts, items) if self.mark_first_error else {}
        guided = self._guided(rollouts, items, step) if guide and self.guide is not None else []
        for row, r in enumerate(guided, start=len(rollouts)):
            r.row = row
        batch = collate_rollouts(
            rollouts + guided, len(items), self.pad_token_id, self.temperature, prompts=list(items)
        )
        batch.sampler_exact = self.sampler.exact_logprobs
        batch.stats = rollout_stats(rollouts, gen_seconds, white_box=self.intervention.white_box)
        batch.stat_weights = rollout_stat_weights(rollouts, len(items))  # the means' denominators, to combine ranks
        if self.guide is not None and guide:
            batch.stats.update(guide_stats(rollouts, guided))
            batch.stat_weights.update(guide_stat_weights(rollouts, guided))
            batch.stats.update(self.guide.metrics())
        batch.stats.update(self.reward.metrics())  # reward/{failed,timeout}; code/{passed,failed,timeout,crashed}
        batch.stats.update(self.judge.metrics())  # judge/{errors,timeouts,garbage}
        batch.stats.update(self.sampler.metrics())  # e.g. vLLM weight syncs
        batch.stats.update(allocation_stats)
        batch.stats.update(first_error_stats)
        return batch
