"""SQL for lineage through time: which run produced a snapshot (recursively), the lineage changes, and the
barrier a point in time stands for.

Snapshot lineage is one recursive statement: a snapshot's producing run is found through the range that first
held it (`ix_snapshot_ranges_table_snapshot`), the run through `uq_job_runs_job_first`, and the run's recorded
input snapshots (`job_runs.inputs`) are the next level.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from metaservice.db.database import Connection
from metaservice.repositories.driver import fetch_all, fetch_one


class SnapshotNode(NamedTuple):
    """A snapshot of a table and what produced it: the range kind that first held it and, for a committed range,
    the writer's run (its inputs: {table name: {"snapshot_id", "previous_snapshot_id"}})."""

    level: int
    table_id: int
    table: str
    snapshot_id: int
    barrier: int | None
    range_kind: str | None
    job: str | None
    run_barrier: int | None
    run_status: str | None
    inputs_ready_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    inputs: dict[str, Any]


class Change(NamedTuple):
    """One lineage change: an edge added or removed, the newest barrier issued when it committed, and the first
    barrier issued after it (where it took effect; None: none yet)."""

    at: datetime
    edge_id: int
    change: str
    job: str
    table: str
    role: str
    barrier: int
    effective_barrier: int | None


# The range that first held the snapshot, preferring the one a run committed (a restore or an idle stretch holds
# a snapshot some run produced before).
_PRODUCER = """
    SELECT s.first_barrier, s.kind, s.job_id FROM snapshot_ranges s
     WHERE s.table_id = {node}.table_id AND s.snapshot_id = {node}.snapshot_id
     ORDER BY s.kind = 'committed' DESC, s.first_barrier
     LIMIT 1
"""
_RUN = """
    SELECT q.barrier, q.status, q.inputs, q.inputs_ready_at, q.started_at, q.finished_at FROM job_runs q
     WHERE q.job_id = r.job_id AND q.first_barrier <= r.first_barrier
     ORDER BY q.first_barrier DESC
     LIMIT 1
"""
# Level by level from the snapshot asked about; a node reached at several levels comes once per level (the
# caller keeps the shallowest). Inputs of nodes at %(depth)s are not followed.
_SNAPSHOT_LINEAGE = f"""
    WITH RECURSIVE node(level, table_id, name, snapshot_id) AS (
        SELECT 0, t.id, t.name, CAST(%(snapshot)s AS bigint) FROM tables t WHERE t.id = %(table)s
        UNION
        SELECT node.level + 1, t.id, t.name, CAST(i.value ->> 'snapshot_id' AS bigint)
          FROM node
          CROSS JOIN LATERAL ({_PRODUCER.format(node="node")}) r
          CROSS JOIN LATERAL ({_RUN}) x
          CROSS JOIN LATERAL jsonb_each(x.inputs) i
          JOIN tables t ON t.name = i.key
         WHERE node.level < %(depth)s AND r.kind = 'committed' AND x.status = 'committed'
           AND x.barrier >= r.first_barrier AND i.value ->> 'snapshot_id' IS NOT NULL
    )
    SELECT DISTINCT ON (n.table_id, n.snapshot_id)
           n.level, n.table_id, n.name, n.snapshot_id, r.first_barrier, r.kind,
           CASE WHEN r.kind = 'committed' THEN j.name END,
           x.barrier, x.status, x.inputs_ready_at, x.started_at, x.finished_at, x.inputs
      FROM node n
      LEFT JOIN LATERAL ({_PRODUCER.format(node="n")}) r ON true
      LEFT JOIN jobs j ON j.id = r.job_id
      LEFT JOIN LATERAL ({_RUN}) x ON r.kind = 'committed'
     ORDER BY n.table_id, n.snapshot_id, n.level
"""


async def snapshot_lineage(conn: Connection, *, table_id: int, snapshot_id: int, depth: int) -> list[SnapshotNode]:
    """The snapshot and every input snapshot its producing runs read, recursively for `depth` levels; each
    (table, snapshot) once, at the shallowest level it was reached."""
    params = {"table": table_id, "snapshot": snapshot_id, "depth": depth}
    nodes = []
    for row in await fetch_all(conn, _SNAPSHOT_LINEAGE, params):
        (level, tid, name, snap, first, kind, job, run_barrier, status, ready, started, finished, inputs) = row
        committed = kind == "committed" and status == "committed" and run_barrier is not None
        nodes.append(
            SnapshotNode(
                level=int(level),
                table_id=int(tid),
                table=str(name),
                snapshot_id=int(snap),
                barrier=None if first is None else int(first),
                range_kind=kind,
                job=job if committed else None,
                run_barrier=int(run_barrier) if committed else None,
                run_status=status if committed else None,
                inputs_ready_at=ready if committed else None,
                started_at=started if committed else None,
                finished_at=finished if committed else None,
                inputs=dict(inputs) if committed and inputs else {},
            )
        )
    return nodes


_CHANGES = """
    WITH changes AS (
        SELECT e.created_at AS at, e.id, 0 AS rank, 'added' AS change, e.job_id, e.table_id, e.role,
               e.added_after AS barrier
          FROM lineage_edges e
         WHERE (%(since_time)s::timestamptz IS NULL OR e.created_at >= %(since_time)s)
           AND (%(until_time)s::timestamptz IS NULL OR e.created_at < %(until_time)s)
           AND (%(since_barrier)s::bigint IS NULL OR e.added_after >= %(since_barrier)s)
           AND (%(until_barrier)s::bigint IS NULL OR e.added_after < %(until_barrier)s)
        UNION ALL
        SELECT e.removed_at, e.id, 1, 'removed', e.job_id, e.table_id, e.role, e.removed_after
          FROM lineage_edges e
         WHERE e.removed_at IS NOT NULL
           AND (%(since_time)s::timestamptz IS NULL OR e.removed_at >= %(since_time)s)
           AND (%(until_time)s::timestamptz IS NULL OR e.removed_at < %(until_time)s)
           AND (%(since_barrier)s::bigint IS NULL OR e.removed_after >= %(since_barrier)s)
           AND (%(until_barrier)s::bigint IS NULL OR e.removed_after < %(until_barrier)s)
    )
    SELECT c.at, c.id, c.rank, c.change, j.name, t.name, c.role, c.barrier,
           (SELECT b.barrier FROM barriers b WHERE b.barrier > c.barrier ORDER BY b.barrier LIMIT 1)
      FROM changes c
      JOIN jobs j ON j.id = c.job_id
      JOIN tables t ON t.id = c.table_id
     WHERE (%(job)s::text IS NULL OR j.name = %(job)s)
       AND (%(table)s::text IS NULL OR t.name = %(table)s)
       AND (%(after_at)s::timestamptz IS NULL
            OR (c.at, c.id, c.rank) < (%(after_at)s::timestamptz, %(after_id)s::bigint, %(after_rank)s::int))
     ORDER BY c.at DESC, c.id DESC, c.rank DESC
     LIMIT %(limit)s
"""


class ChangeFilter(NamedTuple):
    job: str | None = None
    table: str | None = None
    since_time: datetime | None = None
    until_time: datetime | None = None
    since_barrier: int | None = None
    until_barrier: int | None = None


async def changes(
    conn: Connection, *, where: ChangeFilter, after: tuple[datetime, int, int] | None, limit: int
) -> list[tuple[Change, tuple[datetime, int, int]]]:
    """Lineage changes newest first (by commit time, then edge, a removal before its addition), after the
    position `after` (at, edge id, rank); each with its position."""
    params: dict[str, Any] = where._asdict() | {"limit": limit}
    params |= dict(zip(("after_at", "after_id", "after_rank"), after or (None, None, None), strict=True))
    out = []
    for at, edge_id, rank, change, job, table, role, barrier, effective in await fetch_all(conn, _CHANGES, params):
        out.append(
            (
                Change(at, int(edge_id), str(change), str(job), str(table), str(role), int(barrier), effective),
                (at, int(edge_id), int(rank)),
            )
        )
    return out


_BARRIER_AT = """
    SELECT barrier FROM barriers
     WHERE barrier <= CAST(extract(epoch FROM CAST(%(t)s AS timestamptz)) * 1000000 AS bigint) + 60000000
       AND issued_at <= %(t)s
     ORDER BY barrier DESC LIMIT 1
"""


async def barrier_issued_at(conn: Connection, *, barrier: int) -> datetime | None:
    """When `barrier` was issued (None: never)."""
    row = await fetch_one(conn, "SELECT issued_at FROM barriers WHERE barrier = %(b)s", {"b": barrier})
    return None if row is None else row[0]


async def barrier_at(conn: Connection, *, time: datetime) -> int | None:
    """The newest barrier issued at or before `time` (None: none was).

    Barriers grow with their issue time and are at least its microseconds since the epoch (one more than the
    previous when issued faster than that, or after the clock stepped back), so the search walks the primary key
    down from `time` + 60 s: no index on `issued_at` is kept for it (POST /barriers would pay for it).
    """
    row = await fetch_one(conn, _BARRIER_AT, {"t": time})
    return None if row is None else int(row[0])
