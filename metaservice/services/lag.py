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
lacks. Computed from the current lineage in two statements: the upstream closure (one recursive walk) and the
origins' new snapshots after the oldest b asked about.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from datetime import datetime

from metaservice.db.database import Connection
from metaservice.repositories import lineage as lineage_rows


async def lags(
    s: Connection, tables: Sequence[tuple[int, int | None]], *, now: datetime, every_table: bool = False
) -> dict[int, float | None]:
    """Lag in seconds of each (table id, newest complete barrier or None); None for a table that completed
    nothing. `every_table`: `tables` lists every table (the closure needs no walk)."""
    asked = [(t, b) for t, b in tables if b is not None]
    out: dict[int, float | None] = {t: None for t, _ in tables}
    if not asked:
        return out
    links = await lineage_rows.upstream_links(s, table_ids=None if every_table else [t for t, _ in asked])
    writer: dict[int, bool] = {}
    sources: dict[int, list[int]] = {}
    for table_id, job_id, source_id in links:
        writer[table_id] = job_id is not None
        if source_id is not None:
            sources.setdefault(table_id, []).append(source_id)
    origins = _origins(writer, sources, [t for t, _ in asked])
    every_origin = set().union(*origins.values()) if origins else set()
    events: dict[int, list[int]] = {}
    times: dict[int, list[datetime]] = {}
    unsealed: dict[int, datetime] = {}
    after = min(b for _, b in asked if b is not None)
    for origin, barrier, at in await lineage_rows.new_data(s, origin_ids=sorted(every_origin), after=after):
        if at is None:
            continue
        if barrier is None:
            unsealed[origin] = at
        else:
            events.setdefault(origin, []).append(barrier)
            times.setdefault(origin, []).append(at)
    for origin, barriers in events.items():  # in barrier order, issue times with them
        order = sorted(range(len(barriers)), key=barriers.__getitem__)
        events[origin] = [barriers[i] for i in order]
        times[origin] = [times[origin][i] for i in order]
    for table_id, barrier in asked:
        assert barrier is not None
        oldest: datetime | None = None
        for origin in origins[table_id]:
            at = unsealed.get(origin)
            seals = events.get(origin)
            if seals:
                i = bisect.bisect_right(seals, barrier)
                if i < len(seals) and (at is None or times[origin][i] < at):
                    at = times[origin][i]
            if at is not None and (oldest is None or at < oldest):
                oldest = at
        out[table_id] = 0.0 if oldest is None else max(0.0, (now - oldest).total_seconds())
    return out


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
