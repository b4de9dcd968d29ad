"""Field checks: the three checks every component runs on its own arguments.

Each field is checked once, by the component that owns it (its constructor calls
:func:`check_int`, :func:`check_range` or :func:`check_choice` with the field's full config name),
so an error names the field as the user writes it: ``rollout.chunk_size must be an integer >= 1,
got 0``. :func:`check_config` holds only what no single component can see: relations between
groups, checked before any model is loaded (:func:`mintrl.build.config_checks.check_config`).

A leaf module: it imports nothing of mintrl and no config library, so every package may use it.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any


def check_int(field: str, value: Any, low: int = 1, *, none_ok: bool = False) -> None:
    """Require an integer ``>= low`` (``bool`` is not an integer here).

    Args:
        field: the full config name, e.g. ``"rollout.chunk_size"`` (unit in the config's comment).
        value: the value to check.
        low: the smallest value allowed.
        none_ok: accept ``None`` (a field whose ``null`` means "off" or "all").

    Raises:
        ValueError: ``"{field} must be an integer >= {low}, got {value!r}"`` (``or null`` added
            when ``none_ok``).
    """
    if value is None and none_ok:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{field} must be an integer >= {low}{' or null' if none_ok else ''}, got {value!r}")


def check_range(
    field: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    none_ok: bool = False,
) -> None:
    """Require a finite real number in an interval (``low_open``: ``value > low``, else ``>=``; the
    same for ``high``).

    Raises:
        ValueError: ``"{field} must be in (0, 1], got 1.5"`` (or ``"must be > 0"`` when only one
            end is given), naming the field; NaN, infinity and non-numbers are refused.
    """
    if value is None and none_ok:
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    inside = (
        number
        and (low is None or (value > low if low_open else value >= low))
        and (high is None or (value < high if high_open else value <= high))
    )
    if not inside:
        if low is not None and high is not None:
            bounds = f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        elif low is not None:
            bounds = f"{'>' if low_open else '>='} {low}"
        else:
            bounds = f"{'<' if high_open else '<='} {high}"
        raise ValueError(f"{field} must be {bounds}{' or null' if none_ok else ''}, got {value!r}")


def check_choice(field: str, value: Any, choices: Collection) -> None:
    """Require one of ``choices``.

    Raises:
        ValueError: ``"{field} must be one of (...), got 'x'"``.
    """
    if value not in choices:
        raise ValueError(f"{field} must be one of {tuple(choices)}, got {value!r}")
