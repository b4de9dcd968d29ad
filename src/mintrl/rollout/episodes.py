"""Multi-turn rollouts: an agent acting in an environment, token in / token out.

An episode is one rollout whose response alternates action turns and observation turns::

    prompt | action_0 | obs_wrapper(observation_0) | action_1 | ... | action_k

The policy writes each action turn until its end-of-turn id (the sampler's EOS) or the turn's
token budget; the action's text (decoded for the environment only) goes to
:meth:`mintrl.env.base.Environment.step`; the observation comes back as the next user turn of the
chat template, appended as **ids**: the template's turn wrapper is tokenized once
(:func:`turn_wrapper`), the observation text is tokenized on its own and capped, and nothing the
policy sampled is ever decoded and re-encoded for training. Every response token carries its
provenance (:class:`mintrl.core.batch.Rollout`: policy, intervention, environment); the
environment's tokens are out of the loss, the KL, the entropy and every denominator because they
are not in ``RolloutBatch.response_mask`` (see its docstring).

MInTRL in episodes: in the intervention phase, each semi-on-policy episode's action turns are
reviewed by the judge (a turn is one chunk, split into steps as today; the judge gets the task's
data as privileged ``ReviewRequest.entry``), at most ``max_reviews`` turns per episode. On Revise
the action is cut before the earliest wrong step, the intervention writes the corrected action (at
most ``continuation_len`` tokens) and its end-of-turn id (intervention tokens too), the environment
executes the corrected action and the policy continues with the next turn. Control episodes are
never reviewed. The control / semi-on-policy split, the rewards (the environment's) and the
objectives are unchanged.

Generation is batched across episodes per turn; the HF sampler's per-rollout KV cache carries over
between turns (``cache_keys`` name the episode); environment steps of one turn run in a bounded
thread pool when the environment declares :attr:`mintrl.env.base.Environment.thread_safe`.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tqdm.auto import tqdm

from mintrl.core.batch import Rollout, RolloutBatch, TurnRecord, collate_rollouts
from mintrl.core.checks import check_int
from mintrl.core.verdict import ReviewRequest
from mintrl.data.base import PromptItem
from mintrl.env.base import Environment, StepResult
from mintrl.rollout.engine import RolloutEngine
from mintrl.rollout.stats import rollout_stat_weights, rollout_stats
from mintrl.rollout.verdicts import apply_verdict
from mintrl.text.steps import split_steps


@dataclass(frozen=True)
class TurnWrapper:
    """The chat template's tokens around an observation turn, tokenized once.

    Attributes:
        after_eos: ids between an action that ended with its end-of-turn id and the observation
            text (e.g. ChatML ``"\\n<|im_start|>user\\n"``).
        after_cut: the same for an action cut at its token budget: the end-of-turn token first
            (e.g. ``"<|im_end|>\\n<|im_start|>user\\n"``), written by the environment.
        before_action: ids between the observation text and the next action (e.g.
            ``"<|im_end|>\\n<|im_start|>assistant\\n"``).
    """

    after_eos: tuple[int, ...]
    after_cut: tuple[int, ...]
    before_action: tuple[int, ...]

    def observation_ids(self, observation_ids: list[int], action_ended: bool) -> list[int]:
        """The environment's ids of one observation turn: wrapper + observation + wrapper."""
        head = self.after_eos if action_ended else self.after_cut
        return [*head, *observation_ids, *self.before_action]


_ACTION, _OBSERVATION = "\x00ACTION\x00", "\x00OBSERVATION\x00"


def turn_wrapper(tokenizer) -> TurnWrapper:
    """Read the observation turn's wrapper off the tokenizer's chat template.

    Renders ``[user, assistant, user]`` with sentinel texts once and cuts the text between the
    assistant's sentinel and the second user's sentinel (``after_cut``) and after it, up to the end
    of the generation prompt (``before_action``); ``after_eos`` drops the end-of-turn token from
    the front of ``after_cut`` when the template ends an assistant turn with the EOS token.

    Raises:
        ValueError: the template does not render the sentinels in order (no usable chat template).
    """
    messages = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": _ACTION},
        {"role": "user", "content": _OBSERVATION},
    ]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    a, o = text.find(_ACTION), text.find(_OBSERVATION)
    if a < 0 or o < a:
        raise ValueError("turn_wrapper: the tokenizer's chat template does not render a user / assistant / user turn")
    between, after = text[a + len(_ACTION) : o], text[o + len(_OBSERVATION) :]
    eos = tokenizer.eos_token or ""
    after_eos = between[len(eos) :] if eos and between.startswith(eos) else between

    def encode(s: str) -> tuple[int, ...]:
        return tuple(tokenizer.encode(s, add_special_tokens=False))

    return TurnWrapper(encode(after_eos), encode(between), encode(after))


def merge_results(parts: list[StepResult]) -> StepResult:
    """One :class:`StepResult` from the results of consecutive slices of one call (in order);
    ``seconds`` is the longest part's (the parts ran concurrently)."""
    out = StepResult([], [], [], [], [], [], 0.0)
    for p in parts:
        for name in ("observations", "rewards", "done", "action_kinds", "invalid", "error"):
            getattr(out, name).extend(getattr(p, name))
        out.seconds = max(out.seconds, p.seconds)
    return out


@dataclass
class EpisodeTally:
    """One step's environment counters over its episodes (branches included): actions per kind
    (count), invalid actions (count), environment errors (count) and environment time (seconds)."""

    kinds: Counter = field(default_factory=Counter)
    invalid: int = 0
    errors: int = 0
    env_seconds: float = 0.0


class EpisodeRollout(RolloutEngine):
    """Generates one step's episodes (see module docstring); ``rollout=episodes``.

    Args:
        env: the :class:`mintrl.env.base.Environment` (``env=`` config group).
        sampler, judge, intervention, tokenizer: as :class:`mintrl.rollout.engine.RolloutEngine`.
        reward: must be None (``reward=null``): the environment scores episodes. The run passes its
            ``reward`` group to every rollout engine.
        max_turns: action turns per episode (turns).
        max_action_tokens: tokens per action turn, an intervention's included (tokens).
        max_observation_tokens: tokens of one observation's text; longer ones are cut (tokens; the
            turn wrapper comes on top).
        env_workers: threads stepping the environment within one turn (1: the calling thread;
            more only when the environment is ``thread_safe``).
        engine: the shared fields of :class:`mintrl.rollout.engine.RolloutEngine`; here
            ``max_response_tokens`` is the episode's whole token budget (actions, interventions
            and observation turns; an observation that would leave no room for one more action
            token ends the episode, scored by ``env.score_final``), ``max_reviews`` counts reviewed
            action turns (a turn is one chunk), ``continuation_len`` is the most tokens of a
            corrected action (its end-of-turn id comes on top) and ``progress`` shows a transient
            bar of the step's turns. Any other keyword is a TypeError.

    Attributes:
        on_episodes_end: None, or ``count -> None`` called each time ``count`` episodes have ended
            (by the environment, the turn or token limit), e.g. an evaluation's progress bar.

    Raises:
        ValueError: a non-positive size, naming the ``rollout.*`` field; ``env`` not an
            environment; a reward component.
        TypeError: a keyword this engine does not take (e.g. ``chunk_size``: a turn is one chunk).
    """

    multi_turn = True
    on_episodes_end: Callable[[int], None] | None = None

    def __init__(
        self,
        env: Environment,
        sampler,
        judge,
        intervention,
        tokenizer,
        *,
        reward: None = None,
        max_turns: int = 4,
        max_action_tokens: int = 48,
        max_observation_tokens: int = 64,
        env_workers: int = 2,
        **engine,
    ):
        if not isinstance(env, Environment):
            raise ValueError(f"rollout.env must be an Environment (set env=...), got {type(env).__name__}")
        if reward is not None:
            raise ValueError(
                f"rollout=episodes: the environment scores episodes, so reward must be null (reward=null), "
                f"got {type(reward).__name__}"
            )
        for name, value in (
            ("max_turns", max_turns),
            ("max_action_tokens", max_action_tokens),
            ("max_observation_tokens", max_observation_tokens),
            ("env_workers", env_workers),
        ):
            check_int(f"rollout.{name}", value, 1)
        super().__init__(sampler, judge, intervention, tokenizer, **engine)
        self.env = env
        self.max_turns, self.max_action_tokens = max_turns, max_action_tokens
        self.max_observation_tokens, self.env_workers = max_observation_tokens, env_workers
        self.wrapper = turn_wrapper(self.tokenizer)
        self.end_of_turn = self.tokenizer.eos_token_id
        self._pool = ThreadPoolExecutor(env_workers) if env_workers > 1 and env.thread_safe else None
        self.tally = EpisodeTally()  # the current step's counters (branches add to them)

    # ------------------------------------------------------------------ environment
    def _step_env(self, episodes: list[int], actions: list[str]) -> StepResult:
        """``env.step`` over the acting episodes, split over the pool's threads when there is one."""
        if self._pool is None or len(episodes) < 2:
            return self.env.step(episodes, actions)
        k = min(self.env_workers, len(episodes))
        bounds = [round(i * len(episodes) / k) for i in range(k + 1)]
        parts = self._pool.map(
            lambda j: self.env.step(episodes[bounds[j] : bounds[j + 1]], actions[bounds[j] : bounds[j + 1]]), range(k)
        )
        return merge_results(list(parts))

    # ------------------------------------------------------------------ one turn
    def _action_turn(
        self,
        active: list[Rollout],
        items: list[PromptItem],
        review: set[int],
        temperature: float | None = None,
        forced: dict[int, tuple] | None = None,
        correction_len: int | None = None,
    ) -> list[int]:
        """Sample one action for every active episode (at ``temperature``, None: the rollout's);
        review the turns of ``review`` (rollout ids) and intervene on Revise. ``forced`` maps a
        rollout id to an action already written, ``(ids [n], log-probs [n], ended)`` tensors and
        flag, used instead of sampling (an intervene branch re-reviews its parent's action).
        ``correction_len``: most tokens of a correction (None: ``continuation_len``). Returns each
        episode's action start (response tokens)."""
        forced = forced or {}
        starts = [len(r.response_ids) for r in active]
        to_sample = [r for r in active if id(r) not in forced]
        budgets = [min(self.max_action_tokens, self._remaining(r)) for r in to_sample]
        sampled = iter(self._sample(to_sample, budgets, temperature))
        samples = [forced[id(r)] if id(r) in forced else next(sampled) for r in active]
        requests, pending = [], []
        for r, (ids, lps, finished) in zip(active, samples):
            if id(r) not in review:
                r.append(ids.tolist(), lps.tolist(), intervention=False)
                continue
            item = items[r.group]
            steps = split_steps(self.tokenizer.decode(ids.tolist()), self.step_delimiters)
            requests.append(
                ReviewRequest(item.question, item.reference, "", [s.text for s in steps], finished, entry=item.entry)
            )
            pending.append((r, ids.tolist(), lps.tolist(), finished, steps))
        fixes = []
        for verdict, (r, ids, lps, finished, steps) in zip(self.judge.review(requests) if requests else [], pending):
            fix = apply_verdict(
                r, ids, lps, finished, steps, verdict, items[r.group], self.tokenizer, self.min_kept_tokens
            )
            r.finished = False  # the episode goes on; apply_verdict's flag is the turn's
            if fix is not None:
                fix.entry = items[r.group].entry
                fixes.append((r, fix))
        if fixes:
            start_of = {id(r): s for r, s in zip(active, starts)}
            # the correction and its end-of-turn id fit in the turn's budget
            by_room = {}
            for r, fix in fixes:
                room = self.max_action_tokens - (len(r.response_ids) - start_of[id(r)]) - 1
                by_room.setdefault(min(room, correction_len or self.continuation_len), []).append((r, fix))
            for room, group in by_room.items():
                if room > 0:
                    self._intervene(group, room)
            for r, _ in fixes:
                if self._remaining(r) > 0 and self.end_of_turn is not None:
                    r.append([self.end_of_turn], [math.nan], intervention=True, behaviour=[0.0])
                    r.review_records[-1].written += 1
        return starts

    # ------------------------------------------------------------------ episodes
    def _env_turn(
        self, episodes: list[Rollout], slots: list[int], starts: list[int], tally: EpisodeTally
    ) -> list[bool]:
        """Send each episode's new action (response tokens from ``starts``) to its environment
        episode ``slots[j]``, append the observation turn (ids) and the :class:`TurnRecord`; an
        episode the environment ends gets its reward and ``finished``. Returns, per episode, whether
        it is over: ended by the environment, or out of room for another action after its
        observation (then it is left unobserved, for ``env.score_final``)."""
        actions, ended = [], []
        for r, s in zip(episodes, starts):
            ids = r.response_ids[s:]
            ended.append(bool(ids) and ids[-1] in self.sampler.eos_token_ids)
            actions.append(self.tokenizer.decode(ids, skip_special_tokens=True))
        result = self._step_env(slots, actions)
        tally.env_seconds += result.seconds
        over = []
        for j, (r, s) in enumerate(zip(episodes, starts)):
            tally.kinds[result.action_kinds[j]] += 1
            tally.invalid += result.invalid[j]
            tally.errors += result.error[j]
            action_end = len(r.response_ids)
            intervened = any(r.intervention[s:action_end])
            observation = result.observations[j]
            stop = bool(result.done[j])
            if stop:
                r.finished, r.reward = True, float(result.rewards[j])
            else:
                obs = self.tokenizer.encode(observation, add_special_tokens=False)[: self.max_observation_tokens]
                ids = self.wrapper.observation_ids(obs, ended[j])
                if len(ids) < self._remaining(r):
                    r.observe(ids)
                else:  # no room for another action: the episode ends here, scored on its state
                    observation, stop = "", True
            over.append(stop)
            r.turns.append(
                TurnRecord(
                    s,
                    action_end,
                    len(r.response_ids),
                    result.action_kinds[j],
                    bool(result.invalid[j]),
                    intervened,
                    observation,
                )
            )
        return over

    def _play(
        self,
        rollouts: list[Rollout],
        items: list[PromptItem],
        slots: list[int],
        tally: EpisodeTally,
        reviewed: bool,
        temperature: float | None = None,
        bar: tqdm | None = None,
    ) -> None:
        """Run episodes to their end: action turns (batched across episodes) and environment steps
        until each is ended by the environment, out of tokens or at ``max_turns`` actions (turns it
        already has count: a branch continues its parent's); then ``env.score_final`` scores the
        episodes the environment did not end. ``rollouts[i]`` acts in environment episode
        ``slots[i]``. ``reviewed``: the judge reviews the semi-on-policy episodes' turns (up to
        ``max_reviews`` each). ``temperature``: sampling temperature (None: the rollout's). ``bar``:
        a progress bar advanced by one per turn."""
        over = [False] * len(rollouts)
        while True:
            active = [
                i
                for i, r in enumerate(rollouts)
                if not over[i] and not r.finished and self._remaining(r) > 0 and len(r.turns) < self.max_turns
            ]
            if not active:
                break
            episodes = [rollouts[i] for i in active]
            review = {id(r) for r in episodes if reviewed and not r.is_control and r.reviews < self.max_reviews}
            starts = self._action_turn(episodes, items, review, temperature)
            for i, stop in zip(active, self._env_turn(episodes, [slots[i] for i in active], starts, tally)):
                over[i] = stop
            self._report_ended(sum(1 for i in active if rollouts[i].finished))
            if bar is not None:
                bar.update(1)
        unfinished = [i for i, r in enumerate(rollouts) if not r.finished]
        if unfinished:
            for i, value in zip(unfinished, self.env.score_final([slots[i] for i in unfinished])):
                rollouts[i].reward = float(value)
            self._report_ended(len(unfinished))

    def _report_ended(self, count: int) -> None:
        """Tell :attr:`on_episodes_end` that ``count`` more episodes ended (nothing when 0 or unset)."""
        if count and self.on_episodes_end is not None:
            self.on_episodes_end(count)

    def _reset(self, items: list[PromptItem]) -> None:
        """``env.reset`` for one episode per item.

        Raises:
            ValueError: the environment returned a first observation (the instruction must hold it).
        """
        if any(self.env.reset(items)):
            raise ValueError(
                f"{type(self.env).__name__}.reset returned a first observation; rollout=episodes needs the "
                "task's instruction (the prompt) to hold it"
            )

    def _brancher(self):
        """RAIL at turn anchors: the allocation's brancher for episodes
        (:class:`mintrl.rollout.episode_branches.EpisodeBrancher`)."""
        from mintrl.rollout.episode_branches import EpisodeBrancher

        return EpisodeBrancher(self)

    def _roll(
        self, items: list[PromptItem], rollouts: list[Rollout], step: int, start: float, allocate: bool, guide: bool
    ) -> RolloutBatch:
        """The step's episodes played to their end (the judge reviews the turns of the semi-on-policy
        ones), then, with a branching allocation (``allocate``), more episodes branched from turn
        anchors (:class:`mintrl.rollout.episode_branches.EpisodeBrancher`), which join their
        prompts' groups after the initial rows. Episodes take no guide: ``guide`` adds nothing.

        Raises:
            ValueError: the environment returned a first observation (the instruction must hold it).
        """
        self._reset([items[r.group] for r in rollouts])
        tally = EpisodeTally()
        bar = tqdm(
            total=self.max_turns, desc=f"episodes (step {step})", unit="turn", leave=False, disable=not self.progress
        )
        # control episodes are never reviewed; outside the intervention phase every episode is a control one
        self._play(rollouts, items, list(range(len(rollouts))), tally, reviewed=True, bar=bar)
        bar.update(bar.total - bar.n)
        bar.close()
        self._score_interventions([r for r in rollouts if not r.is_control])
        self.tally = tally  # the branches' turns add to it (EpisodeBrancher)
        allocation_stats = self._branch(rollouts, items, allocate)
        gen_seconds = time.perf_counter() - start
        batch = collate_rollouts(rollouts, len(items), self.pad_token_id, self.temperature, prompts=list(items))
        batch.sampler_exact = self.sampler.exact_logprobs
        batch.stats = rollout_stats(rollouts, gen_seconds - tally.env_seconds, white_box=self.intervention.white_box)
        batch.stat_weights = rollout_stat_weights(rollouts, len(items))  # the means' denominators, to combine ranks
        batch.stats.update(
            episode_stats(
                rollouts, tally.kinds, tally.invalid, tally.errors, tally.env_seconds, type(self.env).action_kinds
            )
        )
        batch.stats.update(self.env.metrics())
        batch.stats.update(self.judge.metrics())
        batch.stats.update(self.sampler.metrics())
        batch.stats.update(allocation_stats)
        return batch


def episode_stats(
    rollouts: list[Rollout],
    kinds: Counter,
    invalid: int,
    errors: int,
    env_seconds: float,
    declared_kinds: Sequence[str] = (),
) -> dict:
    """The per-step episode metrics: success rate (reward 1, over episodes with a reward), turns per
    episode, actions per kind (count; every kind of ``declared_kinds``, the environment's
    ``action_kinds``, is present, 0 when absent: Lightning would log an omitted key's last value),
    invalid actions (count), environment errors (count), environment seconds (seconds),
    observation tokens per episode (tokens), the episodes the environment ended (fraction) and
    intervened turns per episode (turns)."""
    n = max(len(rollouts), 1)
    scored = [r.reward for r in rollouts if math.isfinite(r.reward)]
    stats = {
        "episode/success": sum(x >= 1.0 for x in scored) / len(scored) if scored else float("nan"),
        "episode/turns": sum(len(r.turns) for r in rollouts) / n,
        "episode/invalid_actions": float(invalid),
        "episode/env_errors": float(errors),
        "episode/env_seconds": env_seconds,
        "episode/observation_tokens": sum(sum(r.environment) for r in rollouts) / n,
        "episode/ended_frac": sum(r.finished for r in rollouts) / n,
        "episode/interventions": sum(t.intervened for r in rollouts for t in r.turns) / n,
    }
    counts = {kind: 0 for kind in declared_kinds} | dict(kinds)
    stats.update({f"episode/actions_{kind}": float(count) for kind, count in counts.items()})
    return {k: float(v) for k, v in stats.items() if not math.isnan(v)}
