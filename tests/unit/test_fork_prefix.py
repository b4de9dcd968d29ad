"""fork_prefix (mintrl.allocation.branching): the one copy of a parent rollout's accepted prefix
that resample branches, intervene branches and episode branches start from, on hand values."""

from __future__ import annotations

import pytest

from mintrl.allocation.branching import fork_prefix
from mintrl.core.batch import BranchRecord, Provenance, ReviewRecord, Rollout, TurnRecord
from mintrl.core.verdict import VerdictKind


def parent() -> Rollout:
    """Prompt [1, 2]; response: policy 10 11, intervention 12, environment 13 14, policy 15 (EOS);
    one turn per action, one review, a reward, a row and a first error."""
    p = Rollout(group=3, is_control=False, prompt_ids=[1, 2], row=7)
    p.append([10, 11], [-0.1, -0.2], intervention=False)
    p.append([12], [-1.5], intervention=True, behaviour=[-0.3])
    p.observe([13, 14])
    p.append([15], [-0.4], intervention=False)
    p.turns = [TurnRecord(0, 3, 5, "query", intervened=True), TurnRecord(5, 6, 6, "answer")]
    p.review_records = [ReviewRecord(0, VerdictKind.REVISE, 0, "x", True, 2, written=1)]
    p.reviews, p.revisions, p.revision_steps = 1, 1, [0]
    p.finished, p.reward, p.first_error = True, 1.0, 2
    return p


def test_the_prefix_is_copied_token_in_token_out_and_the_rest_resets():
    p = parent()
    record = BranchRecord("intervene", 5, p.row, 0.7)
    child = fork_prefix(p, 5, record, is_control=True, turns=1)
    assert child.response_ids == [10, 11, 12, 13, 14]
    assert child.logprobs == [-0.1, -0.2, -1.5, 0.0, 0.0]  # log pi_t at rollout time, nats
    assert child.behaviour == [-0.1, -0.2, -0.3, 0.0, 0.0]  # the intervention's own log-prob on token 12
    assert child.provenance == [Provenance.POLICY] * 2 + [Provenance.INTERVENTION] + [Provenance.ENVIRONMENT] * 2
    assert child.turns == p.turns[:1]
    assert (child.group, child.prompt_ids, child.is_control, child.branch) == (3, [1, 2], True, record)
    # what the child has not done yet starts afresh
    assert (child.finished, child.reward, child.row, child.first_error) == (False, 0.0, -1, None)
    assert (child.reviews, child.revisions, child.revision_steps, child.review_records) == (0, 0, [], [])
    # the parent is unchanged and shares no list with the child
    child.append([99], [-9.0], intervention=False)
    child.prompt_ids.append(0)
    child.turns.append(p.turns[1])
    assert p.response_ids == [10, 11, 12, 13, 14, 15] and len(p.guide) == 6 and p.prompt_ids == [1, 2]
    assert len(p.turns) == 2


def test_guide_flags_are_kept_and_the_cut_bounds_are_checked():
    p = Rollout(group=0, is_control=False, prompt_ids=[1])
    p.append([20, 21], [float("nan")] * 2, intervention=False, behaviour=[-0.5, -0.6], guide=True)
    p.append([22], [-0.2], intervention=False)
    child = fork_prefix(p, 2, BranchRecord("resample", 2), is_control=False)
    assert child.provenance == [Provenance.GUIDE] * 2 and child.behaviour == [-0.5, -0.6] and child.turns == []
    assert fork_prefix(p, 0, BranchRecord("resample", 0), is_control=True).response_ids == []
    assert fork_prefix(p, 3, BranchRecord("resample", 3), is_control=True).response_ids == [20, 21, 22]
    for cut in (-1, 4):
        with pytest.raises(ValueError, match=f"fork_prefix: cut {cut} outside"):
            fork_prefix(p, cut, BranchRecord("resample", cut), is_control=True)
    with pytest.raises(ValueError, match="fork_prefix: 1 turns"):
        fork_prefix(p, 1, BranchRecord("resample", 1), is_control=True, turns=1)
