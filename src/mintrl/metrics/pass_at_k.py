"""pass@k: the unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models Trained
on Code", eq. 1) and a torchmetrics ``Metric`` that sums it over problems and data-parallel ranks."""

from __future__ import annotations

from typing import Sequence

import torch
from torchmetrics import Metric


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with ``n`` samples of which ``c`` are correct:
    ``1 - C(n - c, k) / C(n, k)``, computed as ``1 - prod_{i = n-c+1}^{n} (1 - k / i)`` (no large
    binomials).

    Raises:
        ValueError: ``k < 1``, ``k > n``, or ``c`` outside ``[0, n]``.
    """
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def correct_counts(rewards: torch.Tensor, threshold: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples and correct samples per problem.

    Args:
        rewards: ``[P, n]`` rewards of ``n`` samples for each of ``P`` problems (NaN: no reward,
            the sample does not count).
        threshold: a sample is correct when its reward is at least this (1.0: fully correct, so
            partial credit does not count as a pass).

    Returns:
        ``(n_valid, n_correct)``, both ``[P]`` int64.
    """
    valid = ~torch.isnan(rewards)
    correct = valid & (rewards >= threshold - 1e-6)
    return valid.sum(-1), correct.sum(-1)


class PassAtK(Metric):
    """Mean unbiased pass@k over problems, for several ``k`` at once.

    ``update(rewards)`` takes ``[P, n]`` rewards (see :func:`correct_counts`), ``n >= max(ks)``; a
    problem with fewer than ``k`` valid samples (missing rewards) is left out of pass@k (counted in
    ``skipped``). States are sums, so the
    data-parallel reduction (``dist_reduce_fx="sum"``) is exact: the mean over all ranks' problems.

    Args:
        ks: the ``k`` values (positive integers).
        threshold: reward at or above which a sample is correct.

    ``compute()`` returns ``{k: pass@k}`` (NaN for a ``k`` no problem could estimate).
    """

    full_state_update = False

    def __init__(self, ks: Sequence[int] = (1,), threshold: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        ks = sorted({int(k) for k in ks})
        if not ks or ks[0] < 1:
            raise ValueError(f"pass@k needs positive k values, got {list(ks)}")
        self.ks, self.threshold = ks, threshold
        self.add_state("sums", default=torch.zeros(len(ks), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("problems", default=torch.zeros(len(ks), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("skipped", default=torch.zeros(len(ks), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, rewards: torch.Tensor) -> None:
        """Add ``P`` problems' ``[P, n]`` rewards.

        Raises:
            ValueError: not 2-D; or ``n`` samples per problem below the largest ``k`` (a
                configuration error, both named; a problem whose *valid* samples fall below ``k``
                because rewards are missing is skipped instead).
        """
        if rewards.dim() != 2:
            raise ValueError(f"PassAtK.update expects [problems, samples] rewards, got shape {tuple(rewards.shape)}")
        if rewards.shape[1] < self.ks[-1]:
            raise ValueError(f"pass@k with k={self.ks[-1]} needs k <= n samples per problem, got n={rewards.shape[1]}")
        n_valid, n_correct = correct_counts(rewards.detach().float().cpu(), self.threshold)
        sums, problems, skipped = ([0.0] * len(self.ks) for _ in range(3))
        for j, k in enumerate(self.ks):
            for n, c in zip(n_valid.tolist(), n_correct.tolist()):
                if n < k:
                    skipped[j] += 1
                else:
                    sums[j] += pass_at_k(n, c, k)
                    problems[j] += 1
        # out of place: the states may be inference tensors (validation runs under inference_mode)
        as_state = lambda values: torch.tensor(values, dtype=torch.float64, device=self.sums.device)  # noqa: E731
        self.sums = self.sums + as_state(sums)
        self.problems = self.problems + as_state(problems)
        self.skipped = self.skipped + as_state(skipped)

    def compute(self) -> dict[int, float]:
        """``{k: mean pass@k}`` over the problems seen (on all ranks)."""
        return {
            k: float(self.sums[j] / self.problems[j]) if self.problems[j] > 0 else float("nan")
            for j, k in enumerate(self.ks)
        }
