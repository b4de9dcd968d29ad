"""``mintrl-pilot``: choose the intervention knobs the way MInTRL Appendix H does.

For each (chunk size, reviews, continuation length) of ``pilot.*`` and each seed, the base policy
writes ``rollout.n_control`` control and ``rollout.n_semi`` semi-on-policy rollouts for
``pilot.prompts`` training prompts with the configured judge and intervention; the table reports
control and semi-on-policy reward, their paired difference (± standard error over prompts), the
off-policy token fraction, revisions per rollout, seconds per rollout, the mean log-prob the
intervention gave its own tokens (the kappa estimate; 0 for the deterministic rule writer), the
policy's mean log-prob of those tokens, and how often the judge agreed with the noise-free rule
judge on the same chunks (arithmetic tasks; both Keep, or both Revise at the same step).
Pick settings that lift reward while keeping the off-policy fraction small.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from typing import Sequence

import torch
from omegaconf import DictConfig

from mintrl.build.components import build_components
from mintrl.core.verdict import REVISE, Verdict
from mintrl.judge.base import Judge
from mintrl.judge.rule import RuleJudge
from mintrl.rollout.stats import kappa_estimate

log = logging.getLogger(__name__)


def verdicts_agree(a: Verdict, b: Verdict) -> bool:
    """Both Revise at the same step, or neither Revise (unparseable / failed count as Keep)."""
    if a.kind == REVISE or b.kind == REVISE:
        return a.kind == b.kind and a.step == b.step
    return True


class AgreementJudge(Judge):
    """Wraps a judge; every review is also given to ``reference`` and agreement is counted.

    Attributes:
        reviews: chunks reviewed. agreements: of them, verdicts that agree (:func:`verdicts_agree`).
    """

    def __init__(self, judge: Judge, reference: Judge):
        self.judge, self.reference = judge, reference
        self.reviews = self.agreements = 0

    def review(self, requests: Sequence) -> list[Verdict]:
        verdicts = self.judge.review(requests)
        for v, ref in zip(verdicts, self.reference.review(requests)):
            self.reviews += 1
            self.agreements += verdicts_agree(v, ref)
        return verdicts

    @property
    def rate(self) -> float:
        """Agreement rate (NaN before any review)."""
        return self.agreements / self.reviews if self.reviews else float("nan")


def _paired_gap(batch) -> list[float]:
    out = []
    for g in range(batch.num_groups):
        in_g = batch.group_index == g
        semi, ctrl = batch.rewards[in_g & ~batch.is_control], batch.rewards[in_g & batch.is_control]
        if semi.numel() and ctrl.numel():
            out.append(float(semi.nanmean() - ctrl.nanmean()))
    return out


def run_pilot(cfg: DictConfig) -> list[dict]:
    """Build the components of ``cfg`` (no trainer) and measure every grid point.

    Returns:
        one dict per (chunk, reviews, continuation): the table's columns.

    Raises:
        ValueError: ``rollout.n_semi`` is 0 (nothing to pilot) or ``pilot.prompts`` too large.
    """
    p = cfg.pilot
    c = build_components(cfg, trainer=False)
    try:
        c.datamodule.setup()
        engine = c.rollout
        if engine.n_semi == 0:
            raise ValueError("mintrl-pilot needs rollout.n_semi > 0")
        if p.prompts * len(p.seeds) > len(c.datamodule.train_items):
            raise ValueError(f"pilot.prompts x seeds exceeds the {len(c.datamodule.train_items)} training prompts")
        compare = bool(p.agreement_with_rule) and not isinstance(engine.judge.inner, RuleJudge)
        rows = []
        for chunk, reviews, continuation in itertools.product(p.chunk_sizes, p.max_reviews, p.continuation_lens):
            engine.chunk_size, engine.max_reviews, engine.continuation_len = int(chunk), int(reviews), int(continuation)
            judge = engine.judge = AgreementJudge(engine.judge, RuleJudge()) if compare else engine.judge
            gaps, stats, seconds, n, kappas, policy_lp = [], [], 0.0, 0, [], []
            for i, seed in enumerate(p.seeds):
                torch.manual_seed(int(seed))
                items = c.datamodule.train_items[i * p.prompts : (i + 1) * p.prompts]
                start = time.perf_counter()
                batch = engine.generate(items, step=0)
                seconds += time.perf_counter() - start
                n += len(batch)
                gaps += _paired_gap(batch)
                stats.append(batch.stats)
                kappas.append(kappa_estimate(batch.behaviour_logprobs, batch.intervention_mask))
                policy_lp.append(kappa_estimate(batch.rollout_logprobs, batch.intervention_mask))
            if compare:
                engine.judge = judge.judge

            def mean(key: str) -> float:
                return sum(s.get(key, float("nan")) for s in stats) / len(stats)

            def finite(xs: list[float]) -> list[float]:
                return [x for x in xs if not math.isnan(x)]

            gap = sum(gaps) / max(len(gaps), 1)
            se = (
                math.sqrt(sum((d - gap) ** 2 for d in gaps) / (len(gaps) - 1) / len(gaps))
                if len(gaps) > 1
                else float("nan")
            )
            rows.append(
                {
                    "chunk": int(chunk),
                    "reviews": int(reviews),
                    "continuation": int(continuation),
                    "control": mean("reward/control"),
                    "semi": mean("reward/semi"),
                    "gap": gap,
                    "gap_se": se,
                    "offpolicy": mean("rollout/offpolicy_frac_semi"),
                    "revisions": mean("judge/interventions_per_rollout"),
                    "seconds_per_rollout": seconds / max(n, 1),
                    "kappa_estimate": sum(finite(kappas)) / len(finite(kappas)) if finite(kappas) else float("nan"),
                    "policy_logprob": sum(finite(policy_lp)) / len(finite(policy_lp))
                    if finite(policy_lp)
                    else float("nan"),
                    "agreement": judge.rate if compare else float("nan"),
                }
            )
            log.info("pilot %s", rows[-1])
        return rows
    finally:
        c.close()  # the sampler's engine is freed, also on error


def format_table(rows: list[dict]) -> str:
    """The markdown table of :func:`run_pilot` rows."""
    head = (
        "| chunk | reviews | continuation | control | semi | semi - control (± s.e.) | off-policy (semi) | revisions / rollout "
        "| s / rollout | kappa estimate | policy log-prob of iv. tokens | agreement with rule |"
    )
    lines = [head, "|" + "---|" * 12]

    def f(v, spec: str) -> str:
        return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)

    for r in rows:
        lines.append(
            f"| {r['chunk']} | {r['reviews']} | {r['continuation']} | {f(r['control'], '.3f')} | {f(r['semi'], '.3f')} "
            f"| {f(r['gap'], '+.3f')} ± {f(r['gap_se'], '.3f')} | {f(r['offpolicy'], '.1%')} | {f(r['revisions'], '.2f')} "
            f"| {f(r['seconds_per_rollout'], '.2f')} | {f(r['kappa_estimate'], '.3f')} | {f(r['policy_logprob'], '.2f')} "
            f"| {f(r['agreement'], '.1%')} |"
        )
    return "\n".join(lines)
