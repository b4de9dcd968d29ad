"""Single-process pieces of "every data-parallel rank runs the same collectives"
(tests/integration/test_uneven_ranks.py runs them on 2 ranks): the mini-batch plan gives every rank
``module.minibatches`` updates and refuses only what no rank can do; the zero-loss padding row and
the rank maximum are no-ops on one process; ``sampler.score_with=trainer`` is refused under FSDP."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

from mintrl.build.config import CONFIG_DIR
from mintrl.build.config_checks import check_config
from mintrl.training.module import minibatch_rows, padding_row, ranks_max


def test_a_rank_with_fewer_rows_than_minibatches_gets_empty_minibatches():
    # rank 1 of a RAIL step holds 3 rows, the ranks together 8, module.minibatches=4
    parts = minibatch_rows(3, 4, None, all_ranks_rows=8)
    assert [p.tolist() for p in parts] == [[0], [1], [2], []]
    shuffled = minibatch_rows(3, 4, torch.Generator().manual_seed(0), all_ranks_rows=8)
    assert len(shuffled) == 4 and sorted(torch.cat(shuffled).tolist()) == [0, 1, 2]


def test_more_minibatches_than_the_rows_of_all_ranks_is_refused():
    with pytest.raises(ValueError, match=r"module.minibatches=4 exceeds the 3 rollouts of the batch"):
        minibatch_rows(2, 4, None, all_ranks_rows=3)
    with pytest.raises(ValueError, match=r"module.minibatches=4 exceeds the 3 rollouts"):
        minibatch_rows(3, 4, None)  # one process: its own rows


def test_the_padding_row_has_one_target_and_one_process_pads_nothing():
    ids, attention, target = padding_row("cpu")
    assert ids.tolist() == [[0, 0]] and attention.tolist() == [[1, 1]] and target.tolist() == [[False, True]]
    assert ranks_max(3, 1) == 3  # no collective without data parallelism


def composed(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose("train", overrides=["paths.output_dir=/tmp/mintrl-test", *overrides])


def test_trainer_scoring_under_fsdp_is_refused_with_the_reason():
    with pytest.raises(
        ValueError, match=r"sampler.score_with=trainer is refused under trainer=fsdp: .*per-rank number"
    ):
        check_config(composed("trainer=fsdp", "sampler=vllm", "sampler.score_with=trainer"))
    check_config(composed("trainer=fsdp", "sampler=vllm", "sampler.score_with=auto"))
    check_config(composed("sampler=vllm", "sampler.score_with=trainer"))  # one process: the trainer's own forward
