"""Rollout records and their padded tensor form, the unit a training step consumes."""

from __future__ import annotations

import math
from dataclasses import InitVar, dataclass, field, replace
from enum import IntEnum
from typing import Literal

import torch

from mintrl.core.verdict import VerdictKind


class Provenance(IntEnum):
    """Who wrote a token of a :class:`RolloutBatch` (its ``provenance`` tensor, int8).

    - ``NONE``: a prompt or padding position (not a response token).
    - ``POLICY``: sampled by the policy at rollout time (on-policy).
    - ``INTERVENTION``: a judge-intervention correction spliced into a semi-on-policy rollout.
    - ``GUIDE``: a prefix or a whole trace the policy did not sample (a reference solution's prefix,
      a demonstration; :mod:`mintrl.guide`). No on-policy objective counts it unless it says so
      (:attr:`mintrl.objective.base.Objective.trains_guide_tokens`).
    - ``ENVIRONMENT``: an environment's observation turn inside an episode; never trained.
    """

    NONE = 0
    POLICY = 1
    INTERVENTION = 2
    GUIDE = 3
    ENVIRONMENT = 4


@dataclass
class ReviewRecord:
    """One judge review of one chunk of a rollout, as the rollout records show it.

    Attributes:
        round: the review's index within its rollout (0-based; the rollout's ``reviews`` count
            before this review).
        kind: the judge's :class:`mintrl.judge.base.VerdictKind`.
        step: index of the earliest wrong step within the chunk (the judge's, Revise only), or None.
        correction: the corrected claim the judge stated (the rule judge does), or None.
        revised: the chunk was cut and a correction asked for (a Revise whose step is inside the
            chunk); what ``judge/revise`` counts. False for Keep and unusable verdicts.
        at_token: the response length (tokens) right after the verdict was applied: where the
            correction starts on a revision, the end of the accepted chunk otherwise.
        written: intervention tokens written after this verdict (0 unless ``revised``, and 0 when
            no length budget was left).
    """

    round: int
    kind: VerdictKind
    step: int | None
    correction: str | None
    revised: bool
    at_token: int
    written: int = 0


@dataclass(frozen=True)
class BranchRecord:
    """How the allocation made a branched rollout (RAIL).

    Attributes:
        kind: ``"resample"`` (the policy continues from the anchor) or ``"intervene"`` (the judge
            reviews the chunk at the anchor and a correction follows).
        anchor: response tokens shared with the parent (the branch point, tokens).
        parent: the parent's row in its step's batch (-1: unknown).
        temperature: sampling temperature of the continuation (None: the rollout temperature).
    """

    kind: Literal["resample", "intervene"]
    anchor: int
    parent: int = -1
    temperature: float | None = None


@dataclass(frozen=True)
class TurnRecord:
    """One action turn of an episode (multi-turn rollouts, :mod:`mintrl.rollout.episodes`).

    Attributes:
        action_start, action_end: the action's response tokens ``[action_start, action_end)``
            (policy and intervention tokens; response token positions, tokens).
        observation_end: the environment's tokens are ``[action_end, observation_end)`` (the turn
            wrapper and the observation; empty when the episode ended at this turn).
        kind: the environment's parsed kind of the action (e.g. ``"query"``, ``"answer"``, ``"invalid"``).
        invalid: the action was unusable (the observation says why).
        intervened: the judge revised this turn and the intervention wrote part of the action.
        observation: the observation text the environment returned (for the records).
    """

    action_start: int
    action_end: int
    observation_end: int
    kind: str
    invalid: bool = False
    intervened: bool = False
    observation: str = ""


@dataclass(frozen=True)
class RolloutTrace:
    """What the judge and the allocation did to one rollout: its reviews in order and, for a
    branched rollout, how it was branched (None for the step's initial rollouts); for an episode,
    its turns in order."""

    reviews: tuple[ReviewRecord, ...] = ()
    branch: BranchRecord | None = None
    turns: tuple[TurnRecord, ...] = ()


@dataclass
class Rollout:
    """One response to one prompt, built token by token.

    Attributes:
        group: index of its prompt in the step's prompt batch.
        is_control: True for the ``N_c`` pure on-policy control rollouts (MInTRL eq. 8).
        prompt_ids: prompt token ids.
        response_ids: response token ids (policy and intervention tokens, EOS included if sampled;
            in an episode also the environment's observation turns, see ``environment``).
        logprobs: per response token, log-prob under the policy at rollout time (nats; the
            intervention tokens are filled by a scoring pass at the end of the rollout).
        behaviour: per response token, log-prob under the policy that actually wrote it (nats):
            equal to ``logprobs`` on policy tokens, the intervention's own log-prob on
            intervention tokens (see :class:`mintrl.intervention.base.Correction`).
        intervention: per response token, True if intervention-authored.
        guide: per response token, True if spliced from a guide (a reference solution's prefix or a
            demonstration, :mod:`mintrl.guide`), not sampled by the policy.
        environment: per response token, True if written by the environment (an observation turn
            of an episode: the chat template's turn wrapper and the observation), never trained.
        finished: ended with EOS (else the length limit); in an episode: the environment ended it.
        reviews, revisions, unparseable, failed: judge counts for this rollout (unparseable and
            failed verdicts count as Keep).
        early_cuts: Revise verdicts not applied because the cut would keep fewer than
            ``rollout.min_kept_tokens`` response tokens (the chunk was kept as sampled).
        revision_steps: for each revision, the index of the revised step within its chunk.
        reward: verifiable reward in [0, 1]; NaN when the reward function gave none (the
            rollout then gets no training signal, see :func:`valid_rows`).
        review_records: one :class:`ReviewRecord` per review, in order (the rollout records).
        branch: how the allocation branched this rollout, or None.
        row: the rollout's row in its step's batch (set by the rollout engine; -1 before).
        turns: an episode's action turns (:class:`TurnRecord`), empty for a single-turn rollout.
        first_error: for a failed rollout that the judge reviewed whole after scoring
            (:mod:`mintrl.rollout.error_location`), the response token where its first wrong step
            starts (tokens from the response start; the tokens before it are wholly before that
            step); None when not reviewed or no error was found.
    """

    group: int
    is_control: bool
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    behaviour: list[float] = field(default_factory=list)
    intervention: list[bool] = field(default_factory=list)
    finished: bool = False
    reviews: int = 0
    revisions: int = 0
    unparseable: int = 0
    failed: int = 0
    early_cuts: int = 0
    revision_steps: list[int] = field(default_factory=list)
    reward: float = 0.0
    review_records: list[ReviewRecord] = field(default_factory=list)
    branch: BranchRecord | None = None
    row: int = -1
    environment: list[bool] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    guide: list[bool] = field(default_factory=list)
    first_error: int | None = None

    def append(self, ids, logprobs, intervention: bool, behaviour=None, guide: bool = False) -> None:
        """Append tokens (ids and their log-probs) with one provenance (policy, intervention or,
        with ``guide=True``, guide); ``behaviour`` defaults to ``logprobs`` (tokens the policy
        sampled itself).

        Raises:
            ValueError: lengths differ, or a token marked both intervention and guide.
        """
        ids, logprobs = list(ids), list(logprobs)
        behaviour = logprobs if behaviour is None else list(behaviour)
        if not len(ids) == len(logprobs) == len(behaviour):
            raise ValueError(f"append: {len(ids)} ids, {len(logprobs)} log-probs, {len(behaviour)} behaviour log-probs")
        if intervention and guide:
            raise ValueError("append: a token is either intervention or guide, not both")
        self._pad_guide()
        self.response_ids += ids
        self.logprobs += logprobs
        self.behaviour += behaviour
        self.intervention += [intervention] * len(ids)
        self.environment += [False] * len(ids)
        self.guide += [guide] * len(ids)

    def _pad_guide(self) -> None:
        # code that sets ``intervention`` / ``environment`` directly (branch copies) leaves ``guide``
        # short: the missing flags are False (no guide token was copied there)
        missing = len(self.response_ids) - len(self.guide)
        if missing > 0:
            self.guide += [False] * missing

    @property
    def provenance(self) -> list[Provenance]:
        """Per response token, its :class:`Provenance`."""
        self._pad_guide()
        return [
            Provenance.ENVIRONMENT
            if env
            else Provenance.INTERVENTION
            if iv
            else Provenance.GUIDE
            if g
            else Provenance.POLICY
            for iv, env, g in zip(self.intervention, self.environment, self.guide)
        ]

    @property
    def guide_tokens(self) -> int:
        """Response tokens spliced from a guide."""
        return sum(self.guide)

    def observe(self, ids) -> None:
        """Append environment tokens (an observation turn): log-probs 0.0, never trained."""
        ids = list(ids)
        self._pad_guide()
        self.response_ids += ids
        self.logprobs += [0.0] * len(ids)
        self.behaviour += [0.0] * len(ids)
        self.intervention += [False] * len(ids)
        self.environment += [True] * len(ids)
        self.guide += [False] * len(ids)

    @property
    def agent_tokens(self) -> int:
        """Response tokens written by the policy or the intervention (environment tokens excluded)."""
        return len(self.response_ids) - sum(self.environment)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` response tokens."""
        del self.response_ids[length:], self.logprobs[length:], self.behaviour[length:], self.intervention[length:]
        del self.environment[length:], self.guide[length:]


def provenance_from_masks(
    response_mask: torch.Tensor, intervention_mask: torch.Tensor | None, environment_mask: torch.Tensor | None
) -> torch.Tensor:
    """``[N, L]`` int8 :class:`Provenance` of a batch given as the older boolean masks:
    environment where ``environment_mask``, else intervention where ``intervention_mask`` (inside the
    response), else policy where ``response_mask``, else none. No guide tokens (masks cannot say so)."""
    prov = torch.full(response_mask.shape, int(Provenance.NONE), dtype=torch.int8, device=response_mask.device)
    prov[response_mask] = int(Provenance.POLICY)
    if intervention_mask is not None:
        prov[intervention_mask & response_mask] = int(Provenance.INTERVENTION)
    if environment_mask is not None:
        prov[environment_mask] = int(Provenance.ENVIRONMENT)
    return prov


@dataclass
class RolloutBatch:
    """Right-padded tensors of ``N`` rollouts (prompt + response), ``L`` = longest sequence.

    Position ``j`` of the per-token tensors refers to the token ``input_ids[:, j]`` (its log-prob
    is predicted from positions ``< j``); prompt and padding positions hold 0 / False.

    Who wrote each token is one typed tensor, ``provenance``; the boolean masks the objectives,
    KL, entropy, ratios and denominators use are read-only views derived from it:

    - ``response_mask``: policy and intervention tokens (the agent's; what every on-policy
      objective's loss, KL, entropy and denominator count). Guide and environment tokens are not in it.
    - ``intervention_mask``: intervention tokens. ``guide_mask``: guide tokens. ``policy_mask``:
      policy tokens. ``environment_mask``: environment tokens (observation turns of an episode).
    - ``scored_mask``: ``response_mask | guide_mask``, the tokens whose log-probs the trainer computes.

    The constructor takes ``provenance`` or, for batches built by hand, the older
    ``response_mask`` / ``intervention_mask`` / ``environment_mask`` (turned into provenance by
    :func:`provenance_from_masks`; ignored when ``provenance`` is given, as ``dataclasses.replace``
    does); assigning a mask later raises (set ``provenance``).

    Attributes:
        input_ids: ``[N, L]`` int64. attention_mask: ``[N, L]`` int64.
        provenance: ``[N, L]`` int8 :class:`Provenance` (``NONE`` on prompt and padding).
        rollout_logprobs: ``[N, L]`` float32, log pi_t of each response token at rollout time
            (guide tokens: scored by the rollout-time policy after the rollout).
        rewards: ``[N]`` float32 (NaN: no reward). group_index: ``[N]`` int64 in ``[0, G)``.
        is_control: ``[N]`` bool.
        finished: ``[N]`` bool, the response ended with EOS (False: truncated at the length limit).
        behaviour_logprobs: ``[N, L]`` float32, log-prob of each response token under the policy
            that wrote it (rollout policy, intervention, or 0.0 for a fixed guide text), for
            importance-weight diagnostics.
        prompts: the step's ``G`` :class:`mintrl.data.base.PromptItem` (question, reference).
        train_rows: ``[N]`` bool, rows that train (set by ``Objective.prepare``; None before).
        loss_mask: ``[N, L]`` bool, the tokens the loss counts (set by ``Objective.prepare``:
            ``response_mask`` of ``train_rows``, plus ``guide_mask`` for objectives that train
            guide tokens; None before).
        extras: objective-private per-row ``[N, ...]`` tensors added by its ``prepare``
            (advantages, reference or teacher log-probs); sliced with the batch.
        num_groups: ``G``, prompts in the step. temperature: sampling temperature of the rollouts
        (the trainer's log-probs use the same ``log_softmax(logits / T)``).
        stats: scalar rollout statistics for logging (floats).
        stat_weights: for the keys of ``stats`` that are means, the count each is a mean over
            (rollouts, tokens), which combines the means of data-parallel ranks
            (:func:`mintrl.rollout.stats.rollout_stat_weights`).
        step: the optimizer step whose weights generated the batch.
        traces: per row, a :class:`RolloutTrace` (the judge's reviews, the allocation's branch),
            or None (a batch built without them); sliced with the batch, read by the rollout
            records (:mod:`mintrl.rollout.records`).
        first_error: ``[N]`` int64, per row the response token offset (from the response start,
            tokens) where the judge found the first wrong step of a failed rollout
            (:attr:`Rollout.first_error`), -1 where none was marked; read by
            ``objective=first_error``.
        sampler_exact: True when ``rollout_logprobs`` came from the fp32 policy module itself
            (:attr:`mintrl.sampler.base.Sampler.exact_logprobs`), so an fp32 trainer reproduces
            them up to float rounding; otherwise the trainer recomputes them before the update
            (:mod:`mintrl.training.rollout_logprobs`).

    Raises:
        ValueError: neither ``provenance`` nor ``response_mask`` given.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    rollout_logprobs: torch.Tensor
    rewards: torch.Tensor
    group_index: torch.Tensor
    is_control: torch.Tensor
    num_groups: int
    provenance: torch.Tensor | None = None
    finished: torch.Tensor | None = None
    behaviour_logprobs: torch.Tensor | None = None
    prompts: list | None = None
    temperature: float = 1.0
    stats: dict[str, float] = field(default_factory=dict)
    stat_weights: dict[str, float] = field(default_factory=dict)
    step: int = -1
    train_rows: torch.Tensor | None = None
    loss_mask: torch.Tensor | None = None
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    traces: list[RolloutTrace] | None = None
    first_error: torch.Tensor | None = None
    sampler_exact: bool = True
    response_mask: InitVar[torch.Tensor | None] = None
    intervention_mask: InitVar[torch.Tensor | None] = None
    environment_mask: InitVar[torch.Tensor | None] = None

    def __post_init__(self, response_mask, intervention_mask, environment_mask):
        # with provenance given the masks are ignored: ``dataclasses.replace`` passes the derived views back
        if self.provenance is None:
            if response_mask is None:
                raise ValueError("RolloutBatch needs provenance (or the older response_mask)")
            self.provenance = provenance_from_masks(response_mask, intervention_mask, environment_mask)
        n = self.input_ids.shape[0]
        if self.first_error is None:
            self.first_error = torch.full((n,), -1, dtype=torch.long, device=self.input_ids.device)
        if self.finished is None:
            self.finished = torch.ones(n, dtype=torch.bool, device=self.input_ids.device)
        if self.behaviour_logprobs is None:
            self.behaviour_logprobs = self.rollout_logprobs

    def is_from(self, *kinds: Provenance) -> torch.Tensor:
        """``[N, L]`` bool: tokens whose provenance is one of ``kinds``."""
        out = torch.zeros(self.provenance.shape, dtype=torch.bool, device=self.provenance.device)
        for kind in kinds:
            out |= self.provenance == int(kind)
        return out

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def _traces(self, rows: torch.Tensor) -> list[RolloutTrace] | None:
        return None if self.traces is None else [self.traces[i] for i in rows.tolist()]

    _ROW_FIELDS = (
        "input_ids",
        "attention_mask",
        "provenance",
        "rollout_logprobs",
        "rewards",
        "group_index",
        "is_control",
        "finished",
        "behaviour_logprobs",
        "first_error",
    )
    _PREPARED_FIELDS = ("train_rows", "loss_mask")  # set by Objective.prepare; None before

    def _prepared(self, fn) -> dict:
        return {f: (None if getattr(self, f) is None else fn(getattr(self, f))) for f in self._PREPARED_FIELDS}

    def select(self, rows: torch.Tensor) -> "RolloutBatch":
        """The sub-batch of ``rows`` (``[n]`` int64 indices), extras included, with trailing
        all-padding columns cut off. Group indices and ``num_groups`` are kept (advantages are
        computed on the whole batch before it is split)."""
        out = replace(
            self,
            **{f: getattr(self, f)[rows] for f in self._ROW_FIELDS},
            **self._prepared(lambda v: v[rows]),
            extras={k: v[rows] for k, v in self.extras.items()},
            stats=dict(self.stats),
            traces=self._traces(rows),
        )
        width = int(out.attention_mask.sum(-1).max().item()) if len(rows) else 0
        if width < out.input_ids.shape[1]:
            for f in self._ROW_FIELDS:
                value = getattr(out, f)
                if value.dim() == 2:
                    setattr(out, f, value[:, :width])
            if out.loss_mask is not None:
                out.loss_mask = out.loss_mask[:, :width]
            out.extras = {
                k: (v[:, :width] if v.dim() == 2 and v.shape[1] == self.input_ids.shape[1] else v)
                for k, v in out.extras.items()
            }
        return out

    def to(self, device) -> "RolloutBatch":
        """A copy with every tensor on ``device``."""
        return replace(
            self,
            **{f: getattr(self, f).to(device) for f in self._ROW_FIELDS},
            **self._prepared(lambda v: v.to(device)),
            extras={k: v.to(device) for k, v in self.extras.items()},
        )


def _mask_view(name: str, kinds: tuple[Provenance, ...], doc: str) -> property:
    def get(self: RolloutBatch) -> torch.Tensor:
        return self.is_from(*kinds)

    def refuse(self: RolloutBatch, value) -> None:
        raise AttributeError(f"RolloutBatch.{name} is derived from provenance; set batch.provenance instead")

    return property(get, refuse, doc=doc)


# read-only ``[N, L]`` bool views of ``provenance`` (defined after the class: the dataclass takes
# the same names as init-only arguments)
RolloutBatch.response_mask = _mask_view(
    "response_mask", (Provenance.POLICY, Provenance.INTERVENTION), "Policy and intervention tokens."
)
RolloutBatch.intervention_mask = _mask_view("intervention_mask", (Provenance.INTERVENTION,), "Intervention tokens.")
RolloutBatch.environment_mask = _mask_view("environment_mask", (Provenance.ENVIRONMENT,), "Environment tokens.")
RolloutBatch.guide_mask = _mask_view("guide_mask", (Provenance.GUIDE,), "Guide tokens.")
RolloutBatch.policy_mask = _mask_view("policy_mask", (Provenance.POLICY,), "Policy-sampled tokens.")
RolloutBatch.scored_mask = _mask_view(
    "scored_mask",
    (Provenance.POLICY, Provenance.INTERVENTION, Provenance.GUIDE),
    "Tokens whose log-probs the trainer computes (policy, intervention, guide).",
)


def concat_batches(batches: list[RolloutBatch]) -> RolloutBatch:
    """One batch holding the rows of ``batches`` in order (e.g. the union of data-parallel ranks'
    batches): per-token tensors right-padded to the widest, group indices offset so groups stay
    apart (``num_groups`` summed), prompts concatenated, traces concatenated (branch parents
    offset by the rows before them; None unless every batch has traces); ``step`` and
    ``temperature`` of the first.

    Raises:
        ValueError: no batches, different temperatures, or extras present (concatenate before
            ``Objective.prepare``, which computes group baselines over the whole batch).
    """
    if not batches:
        raise ValueError("concat_batches: no batches")
    if any(b.extras or b.loss_mask is not None for b in batches):
        raise ValueError(
            "concat_batches: batches already prepared (extras present); concatenate before Objective.prepare"
        )
    if len({b.temperature for b in batches}) > 1:
        raise ValueError(f"concat_batches: temperatures differ: {[b.temperature for b in batches]}")
    width = max(b.input_ids.shape[1] for b in batches)
    fields = {}
    for f in RolloutBatch._ROW_FIELDS:
        parts = [getattr(b, f) for b in batches]
        if parts[0].dim() == 2:
            parts = [torch.nn.functional.pad(p, (0, width - p.shape[1])) for p in parts]
        fields[f] = torch.cat(parts)
    offsets = torch.tensor([0] + [b.num_groups for b in batches[:-1]]).cumsum(0)
    fields["group_index"] = torch.cat([b.group_index + int(o) for b, o in zip(batches, offsets)])
    prompts = [p for b in batches for p in (b.prompts or [])] if all(b.prompts is not None for b in batches) else None
    traces = None
    if all(b.traces is not None for b in batches):
        traces, offset = [], 0
        for b in batches:
            for t in b.traces:
                moved = (
                    t.branch
                    if t.branch is None or t.branch.parent < 0
                    else replace(t.branch, parent=t.branch.parent + offset)
                )
                traces.append(replace(t, branch=moved))
            offset += len(b)
    return RolloutBatch(
        **fields,
        num_groups=sum(b.num_groups for b in batches),
        prompts=prompts,
        temperature=batches[0].temperature,
        step=batches[0].step,
        traces=traces,
        sampler_exact=all(b.sampler_exact for b in batches),
    )


def collate_rollouts(
    rollouts: list[Rollout], num_groups: int, pad_token_id: int, temperature: float, prompts: list | None = None
) -> RolloutBatch:
    """Pad rollouts into a :class:`RolloutBatch` (right padding).

    Raises:
        ValueError: a rollout with a non-finite log-prob (e.g. an intervention token that was never
            scored), naming the row: it would otherwise turn the loss into NaN silently.
    """
    for i, r in enumerate(rollouts):
        if not all(math.isfinite(x) for x in r.logprobs):
            raise ValueError(
                f"rollout row {i} (group {r.group}) has non-finite log-probs; were its intervention tokens scored?"
            )
        if len(r.behaviour) != len(r.response_ids) or not all(math.isfinite(x) for x in r.behaviour):
            raise ValueError(f"rollout row {i} (group {r.group}) has missing or non-finite behaviour log-probs")
    n = len(rollouts)
    width = max(len(r.prompt_ids) + len(r.response_ids) for r in rollouts)
    batch = RolloutBatch(
        input_ids=torch.full((n, width), pad_token_id, dtype=torch.long),
        attention_mask=torch.zeros((n, width), dtype=torch.long),
        provenance=torch.zeros((n, width), dtype=torch.int8),
        rollout_logprobs=torch.zeros((n, width), dtype=torch.float32),
        rewards=torch.tensor([r.reward for r in rollouts], dtype=torch.float32),
        group_index=torch.tensor([r.group for r in rollouts], dtype=torch.long),
        is_control=torch.tensor([r.is_control for r in rollouts], dtype=torch.bool),
        num_groups=num_groups,
        finished=torch.tensor([r.finished for r in rollouts], dtype=torch.bool),
        behaviour_logprobs=torch.zeros((n, width), dtype=torch.float32),
        prompts=prompts,
        temperature=temperature,
        traces=[RolloutTrace(tuple(replace(x) for x in r.review_records), r.branch, tuple(r.turns)) for r in rollouts],
        first_error=torch.tensor([-1 if r.first_error is None else r.first_error for r in rollouts], dtype=torch.long),
    )
    for i, r in enumerate(rollouts):
        p, t = len(r.prompt_ids), len(r.response_ids)
        batch.input_ids[i, : p + t] = torch.tensor(r.prompt_ids + r.response_ids, dtype=torch.long)
        batch.attention_mask[i, : p + t] = 1
        r._pad_guide()
        flags = (r.intervention, r.environment or [False] * t, r.guide or [False] * t)
        if any(len(f) != t for f in flags):
            raise ValueError(
                f"rollout row {i} (group {r.group}): provenance flags do not match its {t} response tokens"
            )
        if any(sum(map(bool, token)) > 1 for token in zip(*flags)):
            raise ValueError(f"rollout row {i} (group {r.group}): a token has two provenances")
        batch.provenance[i, p : p + t] = torch.tensor([int(k) for k in r.provenance], dtype=torch.int8)
        batch.rollout_logprobs[i, p : p + t] = torch.tensor(r.logprobs, dtype=torch.float32)
        batch.behaviour_logprobs[i, p : p + t] = torch.tensor(r.behaviour, dtype=torch.float32)
    return batch
