"""``allocation.spend_all``: the rest of a step's budget spread over prompts, fewest first."""

from __future__ import annotations

from mintrl.allocation.top_up import top_up_plan


def test_top_up_goes_to_the_groups_with_fewest_rollouts_first():
    # groups 0, 1, 2 hold 4, 6, 4 rollouts; 5 more: 0 -> 5, 2 -> 5, 0 -> 6, 2 -> 6, then 0 (ties: lowest index)
    assert top_up_plan({0: 4, 1: 6, 2: 4}, 5) == {0: 3, 2: 2}
    assert top_up_plan({0: 4, 1: 4}, 4) == {0: 2, 1: 2}
    assert top_up_plan({0: 4, 1: 4}, 0) == {}
    assert top_up_plan({3: 1}, 2) == {3: 2}
