"""SQL for admin insight: lineage walks, table freshness, critical-path steps and metric figures.

Walks are breadth-first with one query per level (the caller keeps the visited sets), so diamond lattices cost
one row per edge, never one per path. Every function takes and returns ids; names are resolved in batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY, BIGINT
from sqlalchemy.ext.asyncio import AsyncSession

_IDS = ARRAY(BIGINT)


class Link(NamedTuple):
    """A job reached by one walk step and the table on its far side (None: the job has none)."""

    job_id: int
    table_id: int | None


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


class JobState(NamedTuple):
    id: int
    name: str
    is_active: bool
    last_barrier: int | None
    lag_seconds: float | None


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


_DOWNSTREAM = text(
    """
    SELECT DISTINCT src.job_id, dst.table_id
      FROM lineage_edges src
      LEFT JOIN lineage_edges dst ON dst.job_id = src.job_id AND dst.role = 'sink'
     WHERE src.role = 'source' AND src.table_id = ANY(:ids)
    """
).bindparams(bindparam("ids", type_=_IDS))

_UPSTREAM = text(
    """
    SELECT DISTINCT dst.job_id, src.table_id
      FROM lineage_edges dst
      LEFT JOIN lineage_edges src ON src.job_id = dst.job_id AND src.role = 'source'
     WHERE dst.role = 'sink' AND dst.table_id = ANY(:ids)
    """
).bindparams(bindparam("ids", type_=_IDS))

_EDGES_AMONG = text(
    """
    SELECT job_id, table_id, role FROM lineage_edges
     WHERE job_id = ANY(:job_ids) AND table_id = ANY(:table_ids)
    """
).bindparams(bindparam("job_ids", type_=_IDS), bindparam("table_ids", type_=_IDS))

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

_JOB_STATES = text(
    """
    SELECT j.id, j.name, j.is_active, j.last_barrier,
           extract(epoch FROM (SELECT issued_at FROM barriers ORDER BY barrier DESC LIMIT 1) - b.issued_at) AS lag
      FROM jobs j
      LEFT JOIN barriers b ON b.barrier = j.last_barrier
     WHERE j.id = ANY(:ids)
    """
).bindparams(bindparam("ids", type_=_IDS))

# The newest runs of each job that did something (idle stretches carry no timings).
_RECENT_RUNS = text(
    """
    SELECT r.job_id, r.first_barrier, r.barrier, r.status, r.inputs_ready_at, r.started_at, r.finished_at
      FROM unnest(:ids) AS j(id)
      JOIN LATERAL (
            SELECT * FROM job_runs x WHERE x.job_id = j.id AND x.status <> 'idle'
             ORDER BY x.first_barrier DESC LIMIT :per_job) r ON true
     ORDER BY r.job_id, r.first_barrier DESC
    """
).bindparams(bindparam("ids", type_=_IDS))

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


async def downstream_links(session: AsyncSession, *, table_ids: Sequence[int]) -> list[Link]:
    """Jobs reading any of `table_ids`, each with every table it writes: one level of a downstream walk."""
    rows = await session.execute(_DOWNSTREAM, {"ids": list(table_ids)})
    return [Link(int(r[0]), None if r[1] is None else int(r[1])) for r in rows]


async def upstream_links(session: AsyncSession, *, table_ids: Sequence[int]) -> list[Link]:
    """Writers of any of `table_ids`, each with every table it reads: one level of an upstream walk."""
    rows = await session.execute(_UPSTREAM, {"ids": list(table_ids)})
    return [Link(int(r[0]), None if r[1] is None else int(r[1])) for r in rows]


async def edges_among(session: AsyncSession, *, job_ids: Sequence[int], table_ids: Sequence[int]) -> list[EdgeRow]:
    """Current edges whose job and table are both in the given sets."""
    if not job_ids or not table_ids:
        return []
    rows = await session.execute(_EDGES_AMONG, {"job_ids": list(job_ids), "table_ids": list(table_ids)})
    return [EdgeRow(int(r[0]), int(r[1]), str(r[2])) for r in rows]


async def all_edges(session: AsyncSession) -> list[EdgeRow]:
    rows = await session.execute(text("SELECT job_id, table_id, role FROM lineage_edges"))
    return [EdgeRow(int(r[0]), int(r[1]), str(r[2])) for r in rows]


async def all_table_ids(session: AsyncSession) -> list[int]:
    return [int(t) for t in await session.scalars(text("SELECT id FROM tables ORDER BY name"))]


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


async def job_states(session: AsyncSession, *, job_ids: Sequence[int]) -> list[JobState]:
    """Jobs with their last barrier and how far (seconds of barrier issue time) it lies behind the newest one."""
    rows = await session.execute(_JOB_STATES, {"ids": list(job_ids)})
    return [
        JobState(int(r.id), str(r.name), bool(r.is_active), r.last_barrier, None if r.lag is None else float(r.lag))
        for r in rows
    ]


async def recent_runs(session: AsyncSession, *, job_ids: Sequence[int], per_job: int) -> dict[int, list[RunRow]]:
    """Up to `per_job` newest non-idle runs of each job, newest first."""
    rows = await session.execute(_RECENT_RUNS, {"ids": list(job_ids), "per_job": per_job})
    out: dict[int, list[RunRow]] = {}
    for r in rows:
        out.setdefault(int(r.job_id), []).append(
            RunRow(
                int(r.job_id),
                int(r.first_barrier),
                int(r.barrier),
                str(r.status),
                r.inputs_ready_at,
                r.started_at,
                r.finished_at,
            )
        )
    return out


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
