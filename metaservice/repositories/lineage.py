"""SQL for admin insight: lineage walks, table freshness, critical-path steps and metric figures.

A lineage walk is one recursive statement that returns every link within the depth (the caller replays the
breadth-first walk with its visited sets and node cap), so diamond lattices cost one row per edge and level, never
one per path. The graph's node states come back as plain rows in a few set-based statements, already in answer
order; thousands of ids are sent as one array literal. Every function takes and returns ids; names are resolved in
batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, BIGINT
from sqlalchemy.ext.asyncio import AsyncSession

_IDS = ARRAY(BIGINT)


class EdgeRow(NamedTuple):
    job_id: int
    table_id: int
    role: str


class TableState(NamedTuple):
    """A table with its newest complete barrier (None: it completed none) and that barrier's issue time."""

    id: int
    name: str
    format: str | None
    has_writer: bool
    latest_snapshot_id: int | None
    barrier: int | None
    snapshot_id: int | None
    issued_at: datetime | None


class JobNodeRow(NamedTuple):
    """A job of a lineage graph with one of its newest non-idle runs (run fields None: it has none).

    `lag` is the issue time of the newest barrier minus that of the job's last barrier, in seconds.
    """

    id: int
    name: str
    is_active: bool
    last_barrier: int | None
    lag: Decimal | None
    first_barrier: int | None
    barrier: int | None
    status: str | None
    inputs_ready_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None


class RunRow(NamedTuple):
    job_id: int
    first_barrier: int
    barrier: int
    status: str
    inputs_ready_at: datetime | None
    started_at: datetime
    finished_at: datetime | None


class Step(NamedTuple):
    """What produced table `table_id`'s state at `barrier`: its covering range and the writer's run there."""

    table_id: int
    barrier: int
    range_kind: str
    job_id: int | None
    job_name: str | None
    run: RunRow | None
    input_names: list[str]


class JobFigures(NamedTuple):
    name: str
    last_barrier: int | None
    lag_barriers: int | None
    lag_seconds: float | None
    last_duration_seconds: float | None
    last_waiting_seconds: float | None


# Newest range holding a snapshot; an open range (roots) holds through the newest barrier issued.
_TABLE_STATES = """
    WITH head AS (SELECT max(barrier) AS barrier FROM barriers)
    SELECT t.id, t.name, t.format,
           EXISTS (SELECT 1 FROM lineage_edges e WHERE e.table_id = t.id AND e.role = 'sink') AS has_writer,
           t.latest_snapshot_id, c.barrier, r.snapshot_id, b.issued_at
      FROM tables t
      CROSS JOIN head
      LEFT JOIN LATERAL (
            SELECT s.snapshot_id, s.last_barrier FROM snapshot_ranges s
             WHERE s.table_id = t.id AND s.snapshot_id IS NOT NULL
             ORDER BY s.first_barrier DESC LIMIT 1) r ON true
      CROSS JOIN LATERAL (
            SELECT CASE WHEN r.snapshot_id IS NULL THEN NULL
                        ELSE coalesce(r.last_barrier, head.barrier) END AS barrier) c
      LEFT JOIN barriers b ON b.barrier = c.barrier
    """
_TABLE_STATES_OF = text(_TABLE_STATES + " WHERE t.id = ANY(:ids)").bindparams(bindparam("ids", type_=_IDS))
_ALL_TABLE_STATES = text(_TABLE_STATES)
# Graph nodes come back in answer order: by name, in code point order like Python's sort (C collation).
_TABLE_NODES_OF = text(_TABLE_STATES + ' WHERE t.id = ANY(CAST(:ids AS bigint[])) ORDER BY t.name COLLATE "C"')
_ALL_TABLE_NODES = text(_TABLE_STATES + ' ORDER BY t.name COLLATE "C"')

# Every link a breadth-first walk from :start may take within :depth job hops: the tables within :depth - 1 hops
# (per direction; `UNION` keeps one row per table and level, so a lattice costs one row per table and level,
# never one per path), each with the jobs reading (downstream) or writing (upstream) it and the tables on those
# jobs' far side (NULL: none). OFFSET 0 keeps each step an index lookup: the planner cannot size a recursion.
_WALK = text(
    """
    WITH RECURSIVE
    down(table_id, level) AS (
        SELECT CAST(:start AS bigint), 0 WHERE :down AND :depth > 0
        UNION
        SELECT far.table_id, down.level + 1
          FROM down
          CROSS JOIN LATERAL (
                SELECT dst.table_id
                  FROM lineage_edges src
                  JOIN lineage_edges dst ON dst.job_id = src.job_id AND dst.role = 'sink'
                 WHERE src.table_id = down.table_id AND src.role = 'source'
                OFFSET 0) far
         WHERE down.level + 1 < :depth
    ),
    up(table_id, level) AS (
        SELECT CAST(:start AS bigint), 0 WHERE :up AND :depth > 0
        UNION
        SELECT near.table_id, up.level + 1
          FROM up
          CROSS JOIN LATERAL (
                SELECT src.table_id
                  FROM lineage_edges dst
                  JOIN lineage_edges src ON src.job_id = dst.job_id AND src.role = 'source'
                 WHERE dst.table_id = up.table_id AND dst.role = 'sink'
                OFFSET 0) near
         WHERE up.level + 1 < :depth
    )
    SELECT false AS upstream, src.table_id AS near, src.job_id, dst.table_id AS far
      FROM (SELECT DISTINCT table_id FROM down) d
      JOIN lineage_edges src ON src.table_id = d.table_id AND src.role = 'source'
      LEFT JOIN lineage_edges dst ON dst.job_id = src.job_id AND dst.role = 'sink'
    UNION ALL
    SELECT true, dst.table_id, dst.job_id, src.table_id
      FROM (SELECT DISTINCT table_id FROM up) u
      JOIN lineage_edges dst ON dst.table_id = u.table_id AND dst.role = 'sink'
      LEFT JOIN lineage_edges src ON src.job_id = dst.job_id AND src.role = 'source'
    """
)

_EDGES_AMONG = text(
    """
    SELECT job_id, table_id, role FROM lineage_edges
     WHERE job_id = ANY(CAST(:job_ids AS bigint[])) AND table_id = ANY(CAST(:table_ids AS bigint[]))
     ORDER BY role COLLATE "C", table_id, job_id
    """
)
_ALL_EDGES = text('SELECT job_id, table_id, role FROM lineage_edges ORDER BY role COLLATE "C", table_id, job_id')

# Jobs by name, each with its newest runs that did something (idle stretches carry no timings), newest first.
_JOB_NODES = text(
    """
    SELECT j.id, j.name, j.is_active, j.last_barrier,
           extract(epoch FROM (SELECT issued_at FROM barriers ORDER BY barrier DESC LIMIT 1) - b.issued_at) AS lag,
           r.first_barrier, r.barrier, r.status, r.inputs_ready_at, r.started_at, r.finished_at
      FROM jobs j
      LEFT JOIN barriers b ON b.barrier = j.last_barrier
      LEFT JOIN LATERAL (
            SELECT x.first_barrier, x.barrier, x.status, x.inputs_ready_at, x.started_at, x.finished_at
              FROM job_runs x
             WHERE x.job_id = j.id AND x.status <> 'idle'
             ORDER BY x.first_barrier DESC LIMIT :per_job) r ON true
     WHERE j.id = ANY(CAST(:ids AS bigint[]))
     ORDER BY j.name COLLATE "C", r.first_barrier DESC
    """
)

# For each (table, barrier): the range holding the table's state there and the run of that range's job
# covering the barrier, with the input names the run recorded (idle runs record none).
_STEPS = text(
    """
    SELECT p.table_id, p.barrier, r.kind, r.job_id, j.name,
           x.job_id AS run_job_id, x.first_barrier, x.barrier AS run_barrier, x.status,
           x.inputs_ready_at, x.started_at, x.finished_at,
           coalesce(ARRAY(SELECT jsonb_object_keys(x.inputs)), ARRAY[]::text[]) AS input_names
      FROM unnest(:table_ids, :barriers) AS p(table_id, barrier)
      JOIN LATERAL (
            SELECT s.kind, s.job_id, s.last_barrier FROM snapshot_ranges s
             WHERE s.table_id = p.table_id AND s.first_barrier <= p.barrier
             ORDER BY s.first_barrier DESC LIMIT 1) r ON r.last_barrier IS NULL OR r.last_barrier >= p.barrier
      LEFT JOIN jobs j ON j.id = r.job_id
      LEFT JOIN LATERAL (
            SELECT * FROM job_runs q
             WHERE q.job_id = r.job_id AND q.first_barrier <= p.barrier
             ORDER BY q.first_barrier DESC LIMIT 1) x ON x.barrier >= p.barrier
    """
).bindparams(bindparam("table_ids", type_=_IDS), bindparam("barriers", type_=_IDS))

_JOB_FIGURES = text(
    """
    WITH head AS (SELECT barrier, issued_at FROM barriers ORDER BY barrier DESC LIMIT 1)
    SELECT j.name, j.last_barrier,
           CASE WHEN j.last_barrier IS NULL THEN NULL
                ELSE (SELECT count(*) FROM barriers b WHERE b.barrier > j.last_barrier) END AS lag_barriers,
           extract(epoch FROM (SELECT issued_at FROM head) - lb.issued_at) AS lag_seconds,
           extract(epoch FROM c.finished_at - c.started_at) AS duration,
           extract(epoch FROM c.started_at - c.inputs_ready_at) AS waiting
      FROM jobs j
      LEFT JOIN barriers lb ON lb.barrier = j.last_barrier
      LEFT JOIN LATERAL (
            SELECT started_at, finished_at, inputs_ready_at FROM job_runs x
             WHERE x.job_id = j.id AND x.status = 'committed'
             ORDER BY x.first_barrier DESC LIMIT 1) c ON true
     WHERE j.is_active
     ORDER BY j.name
    """
)

_RUN_COUNTS = text(
    """
    SELECT j.name,
           count(*) FILTER (WHERE r.status = 'committed') AS commits,
           count(*) FILTER (WHERE r.status = 'aborted' AND coalesce(r.reason, '') NOT LIKE 'skipped:%') AS aborts,
           count(*) FILTER (WHERE r.status = 'aborted' AND r.reason LIKE 'skipped:%') AS skips
      FROM jobs j JOIN job_runs r ON r.job_id = j.id
     WHERE j.is_active
     GROUP BY j.name
     ORDER BY j.name
    """
)


async def db_now(session: AsyncSession) -> datetime:
    """The database clock at the start of the transaction: every delay is measured against it."""
    value = await session.scalar(text("SELECT now()"))
    assert isinstance(value, datetime)
    return value


def id_array(ids: Iterable[int]) -> str:
    """A `bigint[]` literal for `CAST(:ids AS bigint[])`: thousands of ids are dumped in one join, not one Python
    call per element as a list parameter would be."""
    return "{" + ",".join(map(str, ids)) + "}"


async def walk(
    session: AsyncSession, *, start: int, depth: int, upstream: bool, downstream: bool
) -> list[tuple[bool, int, int, int | None]]:
    """Every link a breadth-first walk from `start` may take within `depth` job hops, per direction asked:
    (upstream?, near table, job reading it downstream or writing it upstream, table on the job's far side or None).
    """
    result = await (await session.connection()).execute(
        _WALK, {"start": start, "depth": depth, "up": upstream, "down": downstream}
    )
    return [(r[0], r[1], r[2], r[3]) for r in result]


async def edges_among(session: AsyncSession, *, job_ids: Iterable[int], table_ids: Iterable[int]) -> list[EdgeRow]:
    """Current edges whose job and table are both in the given sets, by role, table and job."""
    params = {"job_ids": id_array(job_ids), "table_ids": id_array(table_ids)}
    result = await (await session.connection()).execute(_EDGES_AMONG, params)
    return [EdgeRow._make(r) for r in result]


async def all_edges(session: AsyncSession) -> list[EdgeRow]:
    """Every current edge, by role, table and job."""
    return [EdgeRow._make(r) for r in await (await session.connection()).execute(_ALL_EDGES)]


async def all_table_ids(session: AsyncSession) -> list[int]:
    return [int(t) for t in await session.scalars(text("SELECT id FROM tables ORDER BY name"))]


async def table_nodes(session: AsyncSession, *, table_ids: Iterable[int] | None) -> list[TableState]:
    """The tables (all when `table_ids` is None) with their newest complete barrier and snapshot, by name."""
    connection = await session.connection()
    if table_ids is None:
        result = await connection.execute(_ALL_TABLE_NODES)
    else:
        result = await connection.execute(_TABLE_NODES_OF, {"ids": id_array(table_ids)})
    return [TableState._make(r) for r in result]


async def job_nodes(session: AsyncSession, *, job_ids: Iterable[int], per_job: int) -> list[JobNodeRow]:
    """The jobs by name, each with up to `per_job` newest non-idle runs (newest first; one row per run, or one
    row with empty run fields for a job without any)."""
    result = await (await session.connection()).execute(_JOB_NODES, {"ids": id_array(job_ids), "per_job": per_job})
    return [JobNodeRow._make(r) for r in result]


async def table_ids_by_name(session: AsyncSession, *, names: Sequence[str]) -> dict[str, int]:
    if not names:
        return {}
    rows = await session.execute(
        text("SELECT name, id FROM tables WHERE name = ANY(:names)"), {"names": list(set(names))}
    )
    return {str(r[0]): int(r[1]) for r in rows}


async def source_ids_of_jobs(session: AsyncSession, *, job_ids: Sequence[int]) -> dict[int, list[int]]:
    """The tables each job currently reads."""
    if not job_ids:
        return {}
    rows = await session.execute(
        text("SELECT job_id, table_id FROM lineage_edges WHERE role = 'source' AND job_id = ANY(:ids)").bindparams(
            bindparam("ids", type_=_IDS)
        ),
        {"ids": list(job_ids)},
    )
    out: dict[int, list[int]] = {}
    for r in rows:
        out.setdefault(int(r[0]), []).append(int(r[1]))
    return out


def _table_state(r: Any) -> TableState:
    return TableState(
        id=int(r.id),
        name=str(r.name),
        format=r.format,
        has_writer=bool(r.has_writer),
        latest_snapshot_id=r.latest_snapshot_id,
        barrier=None if r.barrier is None else int(r.barrier),
        snapshot_id=None if r.snapshot_id is None else int(r.snapshot_id),
        issued_at=r.issued_at,
    )


async def table_states(session: AsyncSession, *, table_ids: Sequence[int] | None = None) -> list[TableState]:
    """Each table (all of them when `table_ids` is None) with its newest complete barrier and snapshot."""
    if table_ids is None:
        rows = await session.execute(_ALL_TABLE_STATES)
    else:
        rows = await session.execute(_TABLE_STATES_OF, {"ids": list(table_ids)})
    return [_table_state(r) for r in rows]


async def steps_at(session: AsyncSession, *, pairs: Sequence[tuple[int, int]]) -> list[Step]:
    """For each (table id, barrier) that the table completed: the range kind, its job and that job's run there.

    Pairs where the table holds no range are left out.
    """
    if not pairs:
        return []
    rows = await session.execute(_STEPS, {"table_ids": [p[0] for p in pairs], "barriers": [p[1] for p in pairs]})
    steps = []
    for r in rows:
        run = None
        if r.run_job_id is not None:
            run = RunRow(
                int(r.run_job_id),
                int(r.first_barrier),
                int(r.run_barrier),
                str(r.status),
                r.inputs_ready_at,
                r.started_at,
                r.finished_at,
            )
        steps.append(
            Step(
                table_id=int(r.table_id),
                barrier=int(r.barrier),
                range_kind=str(r.kind),
                job_id=None if r.job_id is None else int(r.job_id),
                job_name=r.name,
                run=run,
                input_names=[str(n) for n in r.input_names],
            )
        )
    return steps


async def barrier_count(session: AsyncSession) -> int:
    return int(await session.scalar(text("SELECT count(*) FROM barriers")) or 0)


async def job_figures(session: AsyncSession) -> list[JobFigures]:
    """Per active job: last barrier, lag behind the newest barrier, timings of its last committed run."""
    rows = await session.execute(_JOB_FIGURES)

    def num(value: Any) -> float | None:
        return None if value is None else float(value)

    return [
        JobFigures(
            str(r.name),
            r.last_barrier,
            None if r.lag_barriers is None else int(r.lag_barriers),
            num(r.lag_seconds),
            num(r.duration),
            num(r.waiting),
        )
        for r in rows
    ]


async def run_counts(session: AsyncSession) -> list[tuple[str, int, int, int]]:
    """(job, committed, aborted, skipped) barrier counts of every active job that ran at least once."""
    rows = await session.execute(_RUN_COUNTS)
    return [(str(r.name), int(r.commits), int(r.aborts), int(r.skips)) for r in rows]
