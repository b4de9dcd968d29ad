"""The field checks every component runs on its arguments (mintrl.core.checks)."""

import math

import pytest

from mintrl.core.checks import check_choice, check_int, check_range


@pytest.mark.parametrize("value", [1, 7, 10**9])
def test_check_int_accepts(value):
    check_int("rollout.chunk_size", value)


@pytest.mark.parametrize("value", [0, -1, 2.0, True, "3", None])
def test_check_int_refuses_naming_the_field(value):
    with pytest.raises(ValueError, match=rf"^rollout.chunk_size must be an integer >= 1, got {value!r}$"):
        check_int("rollout.chunk_size", value)


def test_check_int_bounds_and_null():
    check_int("rollout.n_semi", 0, 0)
    check_int("data.limit", None, none_ok=True)
    with pytest.raises(ValueError, match=r"^rollout.n_semi must be an integer >= 0, got -1$"):
        check_int("rollout.n_semi", -1, 0)
    with pytest.raises(ValueError, match=r"^limit must be an integer >= 1 or null, got 0$"):
        check_int("limit", 0, none_ok=True)


def test_check_range_open_and_closed_ends():
    check_range("rollout.top_p", 1.0, 0, 1, low_open=True)
    check_range("objective.clip_low", 0.0, 0, 1, high_open=True)
    with pytest.raises(ValueError, match=r"^rollout.top_p must be in \(0, 1\], got 0$"):
        check_range("rollout.top_p", 0, 0, 1, low_open=True)
    with pytest.raises(ValueError, match=r"^objective.clip_low must be in \[0, 1\), got 1$"):
        check_range("objective.clip_low", 1, 0, 1, high_open=True)
    with pytest.raises(ValueError, match=r"^objective.kappa must be < 0 or null, got 0.0$"):
        check_range("objective.kappa", 0.0, high=0, high_open=True, none_ok=True)
    with pytest.raises(ValueError, match=r"^objective.beta must be > 0, got -0.5$"):
        check_range("objective.beta", -0.5, 0, low_open=True)


@pytest.mark.parametrize("value", [math.nan, math.inf, "1", None, False])
def test_check_range_refuses_non_numbers(value):
    with pytest.raises(ValueError, match="module.max_grad_norm must be > 0"):
        check_range("module.max_grad_norm", value, 0, low_open=True)


def test_check_choice():
    check_choice("objective.kl_estimator", "k3", ("k1", "k2", "k3"))
    with pytest.raises(ValueError, match=r"^objective.kl_estimator must be one of \('k1', 'k2', 'k3'\), got 'k4'$"):
        check_choice("objective.kl_estimator", "k4", ("k1", "k2", "k3"))
