"""Dr. GRPO's normaliser is a constant: a dropped row (no reward, no loss token) leaves the other rows'
weight in the loss unchanged."""

from __future__ import annotations

import torch

from mintrl.objective.aggregation import aggregate, step_totals


def test_a_dropped_row_leaves_the_others_weight_unchanged():
    token_loss = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0], [5.0, 5.0, 5.0]])  # [3 rows, 3 tokens]
    all_rows = torch.tensor([[True, True, False], [True, False, False], [True, True, True]])
    dropped = all_rows.clone()
    dropped[2] = False  # the third rollout got no reward: none of its tokens is trained
    full = aggregate(token_loss, all_rows, "seq-mean-token-sum", step_totals(all_rows))
    without = aggregate(token_loss, dropped, "seq-mean-token-sum", step_totals(dropped))
    assert full.item() == (3.0 + 3.0 + 15.0) / 3
    assert without.item() == (3.0 + 3.0) / 3  # still / 3 rows, not / 2: rows 1 and 2 weigh what they did
    # the other modes keep their own denominators: tokens, and rows with a loss token
    assert aggregate(token_loss, dropped, "token-mean", step_totals(dropped)).item() == 6.0 / 3
    assert aggregate(token_loss, dropped, "seq-mean-token-mean", step_totals(dropped)).item() == (1.5 + 3.0) / 2
