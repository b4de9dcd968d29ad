"""Data-parallel semantics: the logged scalars of several ranks combine into the values of all
their rollouts together (``training/step_logging.py``), and the adaptive intervention stop takes
one decision for all ranks (``rollout/schedule.py``), checked on two real gloo ranks."""

from __future__ import annotations

import math
import socket
import traceback
from types import SimpleNamespace

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from mintrl.core.batch import Rollout
from mintrl.core.ranks import rank_share
from mintrl.data.pipeline import ProducerError, agreed_on_all_ranks
from mintrl.rollout.engine import RolloutEngine
from mintrl.rollout.schedule import InterventionSchedule
from mintrl.rollout.stats import rollout_stat_weights, rollout_stats
from mintrl.training.step_logging import combine_parts, combine_ranks, reduction


def _rollout(control: bool, reward: float, policy: int, iv: int = 0, finished=True, revisions=0, steps=()):
    r = Rollout(group=0, is_control=control, prompt_ids=[1])
    r.append([5] * policy, [-0.5 - 0.1 * k for k in range(policy)], intervention=False)
    if iv:
        r.append([6] * iv, [-2.0 - k for k in range(iv)], intervention=True, behaviour=[-0.25] * iv)
    r.finished, r.reward, r.reviews, r.revisions = finished, reward, 0 if control else 2, revisions
    r.revision_steps = list(steps)
    return r


RANK_A = [  # 3 control, 2 semi; one reward missing
    _rollout(True, 1.0, 4),
    _rollout(True, 0.0, 7, finished=False),
    _rollout(True, float("nan"), 3),
    _rollout(False, 1.0, 2, iv=3, revisions=1, steps=[0]),
    _rollout(False, 0.0, 5),
]
RANK_B = [  # 1 control, 4 semi: the ranks' means are over different counts
    _rollout(True, 0.0, 6),
    _rollout(False, 1.0, 1, iv=2, revisions=1, steps=[2]),
    _rollout(False, 1.0, 3, iv=1, revisions=2, steps=[1, 3]),
    _rollout(False, 0.0, 8, finished=False),
    _rollout(False, 1.0, 2),
]


def test_two_ranks_rollout_statistics_combine_into_those_of_all_their_rollouts():
    union = rollout_stats(RANK_A + RANK_B, 1.0, white_box=True)
    parts = [(rollout_stats(r, 1.0, white_box=True), rollout_stat_weights(r)) for r in (RANK_A, RANK_B)]
    combined = combine_ranks(parts)
    keys = {k for k in union if not k.startswith("perf/")}
    assert keys <= set(combined) and len(keys) == 21  # every key rollout_stats has but the timings
    for k in sorted(keys):
        assert combined[k] == pytest.approx(union[k], rel=1e-12, abs=1e-12), k
    # hand-computed: control rewards 1, 0, 0 of 3 scored (one missing); semi 1, 0, 1, 1, 0, 1 of 6
    assert combined["reward/control"] == pytest.approx(1 / 3)
    assert combined["reward/semi"] == pytest.approx(4 / 6)
    assert combined["reward/gap"] == pytest.approx(4 / 6 - 1 / 3)
    assert combined["rollout/truncated"] == 2.0 and combined["judge/revise"] == 4.0
    # a plain mean of the ranks' means would differ: control 0.5 and 0.0 -> 0.25
    assert parts[0][0]["reward/control"] == 0.5 and parts[1][0]["reward/control"] == 0.0


def test_combine_ranks_sums_counts_and_losses_keeps_shared_values_and_weights_means():
    parts = [
        (
            {
                "train/loss": 0.25,
                "train/grad_norm": 3.0,
                "perf/gen_seconds": 2.0,
                "objective/kl": 0.5,
                "env/queries": 4,
            },
            {"*": 6.0},
        ),
        ({"train/loss": -0.5, "train/grad_norm": 3.0, "perf/gen_seconds": 5.0, "objective/kl": 0.1}, {"*": 2.0}),
    ]
    out = combine_ranks(parts)
    assert out == {
        "train/loss": -0.25,  # each rank's share of a loss normalised by counts of both ranks
        "train/grad_norm": 3.0,  # reduced gradients: equal on both
        "perf/gen_seconds": 5.0,  # the slower rank
        "objective/kl": pytest.approx((0.5 * 6 + 0.1 * 2) / 8),  # rows-weighted
        "env/queries": 4.0,  # a count only rank 0 had
    }
    kinds = (
        "judge/keep",
        "code/passed",
        "reward/gap",
        "rollout/gap_smoothed",
        "is/token/max",
        "objective/is_weight_max",
        "is/token/ess",
        "rollout/dropped_stale",
    )
    assert [reduction(k) for k in kinds] == ["sum", "sum", "gap", "shared", "max", "max", "mean", "sum"]
    # a mean whose ranks all have weight 0 (no tokens): the ranks' values, averaged
    assert combine_ranks([({"rollout/offpolicy_frac": 0.0}, {"rollout/offpolicy_frac": 0.0})] * 2) == {
        "rollout/offpolicy_frac": 0.0
    }


def test_one_ranks_parts_combine_into_means_over_the_parts_that_logged_and_the_largest_maximum():
    # three micro-batches (or updates); the second had no policy token: no importance weight
    parts = [
        {"objective/is_weight_mean": 1.5, "objective/is_weight_max": 3.0, "objective/kl": 0.2},
        {"objective/kl": 0.4},
        {"objective/is_weight_mean": 0.5, "objective/is_weight_max": 2.0, "objective/kl": 0.6},
    ]
    assert combine_parts(parts) == {
        "objective/is_weight_mean": 1.0,  # (1.5 + 0.5) / 2, not / 3
        "objective/is_weight_max": 3.0,  # the largest, not the mean 2.5
        "objective/kl": pytest.approx(0.4),
    }
    assert combine_parts([]) == {}


def test_rank_share_refuses_a_global_count_not_divisible_by_the_ranks():
    assert rank_share(32, 8, "allocation.budget_per_step") == 4
    with pytest.raises(ValueError, match=r"allocation.budget_per_step=30 .* multiple of 8"):
        rank_share(30, 8, "allocation.budget_per_step")


# ---------------------------------------------------------------- two real ranks (gloo)
STEPS = 4
# per rank and step: rollout statistics of its own rollouts. Rank 0: 6 semi rollouts without a
# lift (gap 0); rank 1: 2 semi rollouts that all succeed over 6 failed controls (gap 1). Together:
# semi 2 / 8 = 0.25, control 0 / 8 = 0: gap 0.25 (a plain mean of the two ranks' gaps: 0.5)
EVIDENCE = [
    ({"reward/semi": 0.0, "reward/control": 0.0, "reward/gap": 0.0}, {"reward/semi": 6.0, "reward/control": 2.0}),
    ({"reward/semi": 1.0, "reward/control": 0.0, "reward/gap": 1.0}, {"reward/semi": 2.0, "reward/control": 6.0}),
]


class _BudgetRecorder:
    """An allocation that branches nothing and records the budget the engine gave it (rollouts)."""

    budget_per_step, spend_all = 16, False  # 16 rollouts per step on both ranks together

    def allocate(self, rollouts, items, brancher, budget, delimiters):
        self.given = budget.total
        return [], {}


def _engine_rank(rank: int, port: int, queue) -> None:
    """One rank's rollout engine pieces: the adaptive stop over ``STEPS`` steps, then one
    allocation step of 4 initial rollouts; reports ``(stopped_at, logged stats, budget given)``."""
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        # threshold 0.3: the pooled gap (0.25) is under it, rank 1's own gap (1.0) and the plain mean (0.5) are not
        engine = SimpleNamespace(
            schedule=InterventionSchedule(100, adaptive=True, gap_threshold=0.3, patience=2, smoothing=0.0),
            runs_collectives=True,
        )
        logged = []
        for step in range(STEPS):
            stats, weights = EVIDENCE[rank]
            batch = SimpleNamespace(stats=dict(stats), stat_weights=dict(weights), step=-1)
            intervene = engine.schedule.active(step)
            RolloutEngine._end_step(engine, batch, step, intervene)  # the all-reduce inside, when intervened
            logged.append(batch.stats)
        engine.allocation, engine.step_delimiters = _BudgetRecorder(), ()
        engine._brancher = lambda: SimpleNamespace(metrics=dict)
        RolloutEngine._allocate(engine, [Rollout(group=0, is_control=True, prompt_ids=[1]) for _ in range(4)], [None])
        queue.put((rank, (engine.schedule.stopped_at, logged, engine.allocation.given)))
        dist.destroy_process_group()
    except BaseException:
        queue.put((rank, traceback.format_exc()))


def _two_ranks(target, what: str, timeout: float = 120.0) -> dict:
    """Run ``target(rank, port, queue)`` on two spawned gloo ranks; each puts ``(rank, result)``.
    A rank that reports nothing within ``timeout`` seconds fails the test naming it and ``what``
    (the collective it would be stuck in); a rank's exception fails it with its traceback."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in procs:
            try:
                rank, result = queue.get(timeout=timeout)
            except Exception:
                missing = sorted({0, 1} - set(results))
                pytest.fail(f"rank(s) {missing} hung for {timeout:.0f} s in {what}")
            if isinstance(result, str):
                pytest.fail(f"rank {rank} raised:\n{result}")
            results[rank] = result
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return results


@pytest.fixture(scope="module")
def two_rank_engine():
    """:func:`_engine_rank` on two gloo ranks (spawned once for the tests below)."""
    return _two_ranks(_engine_rank, "the adaptive stop's all_reduce of the reward-gap evidence")


def test_the_adaptive_stop_takes_one_decision_for_all_ranks_from_their_pooled_gap(two_rank_engine):
    results = two_rank_engine
    stops = {rank: stopped for rank, (stopped, _, _) in results.items()}
    # the pooled gap 0.25 < 0.3 at steps 0 and 1 (smoothing 0, patience 2): both stop at step 1
    assert stops == {0: 1, 1: 1}, f"per-rank decisions {stops}"
    for rank, (_, logged, _) in results.items():
        assert [s["rollout/intervention_phase"] for s in logged] == [1.0, 1.0, 0.0, 0.0], rank
        assert [s.get("rollout/gap_smoothed") for s in logged[:2]] == [pytest.approx(0.25)] * 2, rank
        assert logged[1]["rollout/adaptive_stop"] == 1.0 and "rollout/gap_smoothed" not in logged[2], rank
    assert not math.isnan(results[0][1][0]["reward/gap"])  # this rank's own statistics are left as they were


def test_each_rank_branches_within_its_share_of_the_step_budget(two_rank_engine):
    # allocation.budget_per_step=16 counts both ranks' rollouts: each rank's engine may generate 8
    assert {rank: given for rank, (_, _, given) in two_rank_engine.items()} == {0: 8, 1: 8}


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["data.prompts_per_step=6"], "data.prompts_per_step=6"),
        (["method=rail", "data.prompts_per_step=4", "allocation.budget_per_step=30"], "allocation.budget_per_step=30"),
    ],
)
def test_a_global_count_that_does_not_split_over_the_ranks_is_refused_before_any_model_loads(overrides, field):
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    from mintrl.build.config_checks import check_config

    configs = str(Path(__file__).resolve().parents[2] / "configs")
    with initialize_config_dir(config_dir=configs, version_base="1.3"):
        ok = compose("train", overrides=["trainer=ddp", "trainer.devices=4", "data.prompts_per_step=8"])
        bad = compose("train", overrides=["trainer=ddp", "trainer.devices=4", *overrides])
        evaluation = compose("eval", overrides=["trainer=ddp", "trainer.devices=4", "ckpt_path=base"])
    check_config(ok)  # 8 prompts (and RAIL's default 64 rollouts) split 4 ways
    check_config(evaluation)  # mintrl-eval's data.prompts_per_step=1 trains nothing: not split
    with pytest.raises(ValueError, match=rf"{field} .* multiple of 4"):
        check_config(bad)


def _producer_rank(rank: int, port: int, queue) -> None:
    """Two rounds of :func:`agreed_on_all_ranks`: both ranks' producers deliver a batch, then rank
    1's fails (the other delivers); reports what each round gave this rank (its result, or the
    message of the ProducerError it raised)."""
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        rounds = []
        for step, failing in ((0, None), (1, 1)):

            def take(step=step, failing=failing):
                if rank == failing:
                    raise ProducerError(f"rank {rank}'s judge server went away")
                return f"batch {step} of rank {rank}"

            try:
                rounds.append(agreed_on_all_ranks(take, step))
            except ProducerError as error:
                rounds.append(f"ProducerError: {error}")
        queue.put((rank, rounds))
        dist.destroy_process_group()
    except BaseException:
        queue.put((rank, traceback.format_exc()))


def test_a_producer_failure_on_one_rank_stops_every_rank_at_the_same_batch():
    results = _two_ranks(_producer_rank, "the producer-failure all_reduce")
    other = (
        "ProducerError: the rollout producer of 1 other data-parallel rank(s) failed at optimizer step 1 "
        "(rollout.max_staleness): this rank stops with it (its error is in that rank's log)"
    )
    assert results == {
        0: ["batch 0 of rank 0", other],  # its own batch arrived, but rank 1 will not join the step's all-reduce
        1: ["batch 0 of rank 1", "ProducerError: rank 1's judge server went away"],
    }
