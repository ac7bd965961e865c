"""Lag: how far a table is behind the newest root data (issue 17 "Two delay figures").

Freshness (the age of a table's newest complete barrier) keeps growing while no barrier is issued, even when the
table already holds everything there is. Lag does not: it is 0 when the table's newest complete barrier includes
the newest snapshot of every *data origin* upstream of it, else now minus the time the oldest origin data it
lacks arrived. Data origins are the tables new data enters through: roots (no writer; the table itself when it is
one) and the sinks of ingestion steps (jobs without sources). An origin's data arrives when a barrier first holds
a new snapshot of it (a seal for a root, a commit for an ingestion step: the barrier's issue time); a root's
report that no barrier sealed yet arrived at its newest report (`latest_snapshot_at`, the only time kept for it).

The newest complete barrier b of table T holds, for every origin O upstream, O's snapshot at b (barriers are
aligned), so T lacks exactly O's new snapshots at barriers after b; the earliest of them is the oldest data it
lacks. A table that completed the newest barrier lacks nothing (one primary-key lookup decides it); for the
others, two statements over the current lineage: the upstream closure (one recursive walk) and the origins' new
snapshots after the oldest b among them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from metaservice.db.database import Connection
from metaservice.repositories import lineage as lineage_rows


async def lags(
    s: Connection, tables: Sequence[tuple[int, int | None]], *, now: datetime, every_table: bool = False
) -> dict[int, float | None]:
    """Lag in seconds of each (table id, newest complete barrier or None); None for a table that completed
    nothing. `every_table`: `tables` lists every table (the closure needs no walk)."""
    out: dict[int, float | None] = {t: (None if b is None else 0.0) for t, b in tables}
    head = await lineage_rows.head_barrier(s)
    # a table that completed the newest barrier lacks nothing: no barrier sealed anything after it
    behind = [(t, b) for t, b in tables if b is not None and head is not None and b < head]
    if not behind:
        return out
    links = await lineage_rows.upstream_links(s, table_ids=None if every_table else [t for t, _ in behind])
    writer: dict[int, bool] = {}
    sources: dict[int, list[int]] = {}
    for table_id, job_id, source_id in links:
        writer[table_id] = job_id is not None
        if source_id is not None:
            sources.setdefault(table_id, []).append(source_id)
    origins = _origins(writer, sources, [t for t, _ in behind])
    every_origin: set[int] = set().union(*origins.values())
    seals: dict[int, list[tuple[int, datetime]]] = {}
    after = min(b for _, b in behind)
    for origin, barrier, at in await lineage_rows.new_data(s, origin_ids=sorted(every_origin), after=after):
        seals.setdefault(origin, []).append((barrier, at))
    for listed in seals.values():
        listed.sort()
    for table_id, barrier in behind:
        out[table_id] = lag_seconds(oldest_lacking(barrier, origins[table_id], seals), now)
    return out


def oldest_lacking(
    barrier: int, origins: Iterable[int], seals: Mapping[int, Sequence[tuple[int, datetime]]]
) -> datetime | None:
    """When the oldest origin data a table that completed `barrier` lacks arrived (None: it lacks none), from each
    origin's new snapshots (`seals`: (barrier, issue time), oldest first; those up to `barrier` may be left out)."""
    oldest: datetime | None = None
    for origin in origins:
        found = seals.get(origin)
        if not found:
            continue
        i = bisect.bisect_right(found, (barrier, _LATEST))
        if i < len(found) and (oldest is None or found[i][1] < oldest):
            oldest = found[i][1]
    return oldest


def lag_seconds(oldest: datetime | None, now: datetime) -> float:
    """The lag of a table behind the newest barrier whose oldest lacking data arrived at `oldest`."""
    return 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())


def origins_of(
    writer: dict[int, bool], sources: dict[int, list[int]], asked: Sequence[int]
) -> dict[int, frozenset[int]]:
    """The data origins upstream of each table of `asked` (see `_origins`; the /metrics refresh derives them from
    the lineage it keeps, services/metric_state.py)."""
    return _origins(writer, sources, asked)


_LATEST = datetime.max.replace(tzinfo=UTC)


def _origins(writer: dict[int, bool], sources: dict[int, list[int]], asked: Sequence[int]) -> dict[int, frozenset[int]]:
    """The data origins upstream of each table (itself included when it is one), iteratively (chains run to
    thousands of tables); a table with one input shares that input's set."""
    done: dict[int, frozenset[int]] = {}
    for start in asked:
        stack = [start]
        entered: set[int] = set()
        while stack:
            table = stack[-1]
            if table in done:
                stack.pop()
                continue
            inputs = sources.get(table, [])
            if not writer.get(table, False) or not inputs:
                done[table] = frozenset((table,))
                stack.pop()
                continue
            pending = [i for i in inputs if i not in done and i not in entered]
            if pending and table not in entered:
                entered.add(table)
                stack.extend(pending)
                continue
            stack.pop()
            inputs = [i for i in inputs if i in done]  # the lineage is acyclic; never loop if it were not
            if len(inputs) == 1:
                done[table] = done[inputs[0]]
            else:
                done[table] = frozenset().union(*(done[i] for i in inputs))
    return done
