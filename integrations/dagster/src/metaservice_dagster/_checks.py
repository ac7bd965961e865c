"""Arguments checked where the definitions are built, so that a mistake fails at load time with a clear message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Consistency = Literal["strong", "weak"]


def check_tables(tables: object) -> list[str]:
    """`tables` as a list of `catalog.database.table` names; a clear ValueError otherwise."""
    if isinstance(tables, str) or not isinstance(tables, Sequence) or not tables:
        raise ValueError(f"tables must be a non-empty list of 'catalog.database.table' names, got {tables!r}")
    names: list[str] = []
    for table in tables:
        parts = table.split(".") if isinstance(table, str) else []
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"tables: each name is 'catalog.database.table', got {table!r}")
        names.append(table)
    if len(set(names)) != len(names):
        raise ValueError(f"tables: a table is named twice in {names!r}")
    return names


def check_bound(
    consistency: object, min_barrier: object, max_staleness_seconds: object
) -> tuple[Consistency, int | None, float | None]:
    """The consistency and the freshness bound (one at most), checked; a clear ValueError otherwise."""
    if consistency not in ("strong", "weak"):
        raise ValueError(f"consistency must be 'strong' or 'weak', got {consistency!r}")
    if min_barrier is not None and max_staleness_seconds is not None:
        raise ValueError("give min_barrier or max_staleness_seconds, not both")
    if min_barrier is not None and (
        not isinstance(min_barrier, int) or isinstance(min_barrier, bool) or min_barrier < 0
    ):
        raise ValueError(f"min_barrier must be a barrier (an integer >= 0), got {min_barrier!r}")
    if max_staleness_seconds is not None and (
        not isinstance(max_staleness_seconds, int | float)
        or isinstance(max_staleness_seconds, bool)
        or not max_staleness_seconds > 0
    ):
        raise ValueError(f"max_staleness_seconds must be a number > 0, got {max_staleness_seconds!r}")
    staleness = float(max_staleness_seconds) if max_staleness_seconds is not None else None
    return consistency, min_barrier, staleness
