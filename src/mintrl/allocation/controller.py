"""The RAIL gain predictor: a small MLP over (state, action), fit with a recency-weighted Huber loss
over the last ``W`` traces (RAIL eq. 6)."""

from __future__ import annotations

import torch
from torch import nn


def recency_weights(n: int, decay: float) -> torch.Tensor:
    """``[n]`` non-increasing recency weights ``w_{t-j} = decay ** (t - j)`` for traces ``j`` in
    order (oldest first, newest last, weight 1)."""
    ages = torch.arange(n - 1, -1, -1, dtype=torch.float32)
    return decay**ages


def recency_huber_loss(predicted: torch.Tensor, realized: torch.Tensor, decay: float, delta: float) -> torch.Tensor:
    """RAIL eq. 6: ``sum_j w_{t-j} huber_delta(predicted_j - realized_j)`` over the window (oldest
    first), normalised by ``sum_j w_{t-j}`` so that its scale does not grow with the window.

    Args:
        predicted, realized: ``[n]`` predicted and realized gains (variance units, reward^2).
        decay: recency decay in (0, 1]. delta: the Huber threshold (reward^2).
    """
    w = recency_weights(len(predicted), decay).to(predicted)
    per_trace = nn.functional.huber_loss(predicted, realized, reduction="none", delta=delta)
    return (w * per_trace).sum() / w.sum()


class GainController(nn.Module):
    """``Delta_hat(z, b)``: predicted reward-variance gain of action ``b`` in state ``z``.

    Args:
        state_dim: number of state features. num_actions: size of the action grid B.
        hidden: hidden width of the two-layer MLP.

    ``forward(states [n, state_dim], actions [n] int64) -> [n]``; ``scores(state [state_dim]) -> [A]``.
    """

    def __init__(self, state_dim: int, num_actions: int, hidden: int = 32):
        super().__init__()
        self.num_actions = num_actions
        self.net = nn.Sequential(nn.Linear(state_dim + num_actions, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    def forward(self, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        one_hot = nn.functional.one_hot(actions, self.num_actions).to(states)
        return self.net(torch.cat([states, one_hot], dim=-1)).squeeze(-1)

    def scores(self, state: torch.Tensor) -> torch.Tensor:
        """Predicted gain of every action in one state: ``[A]``."""
        actions = torch.arange(self.num_actions)
        return self.forward(state.expand(self.num_actions, -1), actions)

    def fit(
        self,
        states: torch.Tensor,
        actions: torch.Tensor,
        gains: torch.Tensor,
        decay: float = 0.98,
        delta: float = 0.05,
        steps: int = 50,
        lr: float = 1e-2,
    ) -> float:
        """Refit on a trace window (oldest first) with Adam; returns the final loss."""
        optimizer = torch.optim.Adam(self.parameters(), lr=lr)
        loss = torch.tensor(float("nan"))
        with torch.inference_mode(False), torch.enable_grad():  # rollouts are generated under no_grad
            for _ in range(steps):
                optimizer.zero_grad()
                loss = recency_huber_loss(self(states.clone(), actions.clone()), gains.clone(), decay, delta)
                loss.backward()
                optimizer.step()
        return float(loss.detach())
