"""SQL for admin insight: lineage walks, table freshness, critical-path steps and metric figures.

A lineage walk is one recursive statement that returns every edge of the jobs within the depth, level by level,
until a row budget (the caller replays the breadth-first walk with its visited sets and node cap, and asks again
only if it needs more), so diamond lattices cost one row per edge and level, never one per path. The graph's node
states come back as plain rows in two set-based statements, already in answer order; thousands of ids are sent as
one array literal. Every function takes and returns ids; names are resolved in batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from metaservice.db.database import Connection
from metaservice.repositories.driver import fetch_all, fetch_value, id_array


class AsOf(NamedTuple):
    """A past lineage: edges in effect at `barrier` (rule 1), or, with `by_time`, edges that existed at `time`
    (added at or before it, not removed by then); node states as of `barrier` (None: before the first barrier)."""

    barrier: int | None
    time: datetime
    by_time: bool

    def params(self) -> dict[str, object]:
        return {"as_of_barrier": self.barrier, "as_of_time": self.time}


def _alive(alias: str, mode: str) -> str:
    """The SQL condition for an edge `alias` of the lineage `mode` ("now", "barrier" or "time")."""
    if mode == "barrier":
        # In effect at the barrier, or used to settle it: a job that came back settles the barriers it missed,
        # issued before its new edges were added (a run made while the edge existed, covering the barrier).
        return (
            f"(({alias}.added_after < %(as_of_barrier)s"
            f" AND ({alias}.removed_after IS NULL OR {alias}.removed_after >= %(as_of_barrier)s))"
            f" OR EXISTS (SELECT 1 FROM job_runs u WHERE u.job_id = {alias}.job_id"
            f" AND u.first_barrier <= %(as_of_barrier)s AND u.barrier >= %(as_of_barrier)s"
            f" AND u.status IN ('committed', 'idle') AND u.started_at >= {alias}.created_at"
            f" AND ({alias}.removed_at IS NULL OR u.started_at < {alias}.removed_at)))"
        )
    if mode == "time":
        return (
            f"{alias}.created_at <= %(as_of_time)s"
            f" AND ({alias}.removed_at IS NULL OR {alias}.removed_at > %(as_of_time)s)"
        )
    return f"{alias}.removed_at IS NULL"


MODES = ("now", "barrier", "time")


def _mode(at: AsOf | None) -> str:
    return "now" if at is None else ("time" if at.by_time else "barrier")


def _params(at: AsOf | None, params: dict[str, object] | None = None) -> dict[str, object]:
    return (params or {}) | ({} if at is None else at.params())


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


# Lineage graph rows are plain tuples: an answer holds tens of thousands of them, and exact tuples of scalars are
# the one container the garbage collector stops tracking (named tuples stay tracked and make every full
# collection walk them).
WalkRow = tuple[str, int, int, int, int]
"""(role, table, job, level, rows up to that level): one edge of a job a walk reached at that level."""
EdgeTuple = tuple[int, int, str]
"""(job, table, role)."""
TableNodeRow = tuple[int, str, "str | None", bool, "int | None", "int | None", "int | None", "datetime | None"]
"""(id, name, format, has_writer, latest_snapshot_id, newest complete barrier, its snapshot, its issue time)."""
JobNodeRow = tuple[
    int, str, bool, "int | None", "float | None",
    "int | None", "int | None", "str | None", "datetime | None", "datetime | None", "datetime | None",
]  # fmt: skip
"""(id, name, is_active, last_barrier, lag seconds, then one recent run or Nones: first_barrier, barrier, status,
inputs_ready_at, started_at, finished_at). `lag` is the issue time of the newest barrier minus that of the job's last
barrier, computed exactly as a numeric and rounded once to a double (the value `float(Decimal)` gives)."""


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
           EXISTS (SELECT 1 FROM lineage_edges e WHERE e.table_id = t.id AND e.role = 'sink'
                               AND e.removed_at IS NULL) AS has_writer,
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
_TABLE_STATES_OF = _TABLE_STATES + " WHERE t.id = ANY(CAST(%(ids)s AS bigint[]))"
_ALL_TABLE_STATES = _TABLE_STATES + " WHERE t.retired_at IS NULL"
# Lineage graph statements. Their id sets run from a few to tens of thousands, drawn from catalogs of any size.
# Ids come as one array matched by `= ANY` on an index: one scan reads each leaf page once, where a lookup per id
# descends the tree again (10,000 tables: 35 → 21 ms of PostgreSQL CPU). The statements are prepared, so they
# run on the server's generic plan, made for any number of ids (it counts on a few): a plan made for one large
# array would hash whole tables, a cost that grows with the catalog instead of the answer; rows a node needs one
# of (its newest range, its newest runs) are one lookup per node. Nodes come back in answer order: by name, in
# code point order like Python's sort (C collation).

# A breadth-first walk from the tables %(starts)s, level by level for up to %(depth)s levels: level 1 holds every
# edge of the jobs reading (downstream) or writing (upstream) a start table, level L + 1 every edge of the jobs
# reading (writing) a table on the far side of a level L job. `UNION` keeps one row per edge and level, so a
# diamond lattice costs one row per edge and level, never one per path. `total` counts the rows of the levels so
# far; once it passes %(budget)s no further level is computed (the caller asks again from where it needs to go
# on). Level 1 holds at most %(first)s jobs, the first by id (NULL: all); when that cuts it short, no further
# level is computed either (its rows count as past the budget). Level 1 is computed apart, its jobs going to the
# index as one array (one scan, not one descent per job: a root read by 10,000 jobs is one level), and the
# recursion starts from its far tables only, and only within the budget: carried through the recursion's
# duplicate check, a 20,000-row first level cost as much again as computing it (30 -> 17 ms). Rows come
# unordered: sorting 20,000 of them here cost more than the caller's sort of rows mostly in id order already.
_WALK = """
    WITH RECURSIVE first_jobs(ids, jobs) AS MATERIALIZED (
        SELECT a.ids, cardinality(a.ids)
          FROM (SELECT ARRAY(SELECT DISTINCT here.job_id
                               FROM unnest(CAST(%(starts)s AS bigint[])) AS s(id)
                               JOIN lineage_edges here
                                 ON here.table_id = s.id AND here.role = '{near}' AND {alive_here}
                              ORDER BY here.job_id LIMIT %(first)s) AS ids OFFSET 0) a
    ), first_level(level, total, job_id, table_id, role) AS MATERIALIZED (
        SELECT 1, CASE WHEN f.jobs >= %(first)s THEN %(budget)s + 1 ELSE count(*) OVER () END,
               x.job_id, x.table_id, x.role
          FROM first_jobs f
          JOIN lineage_edges x ON x.job_id = ANY(f.ids) AND {alive_x}
         WHERE %(depth)s > 0
    ), walk(level, total, job_id, table_id, role) AS (
        SELECT level, total, job_id, table_id, role FROM first_level
         WHERE role = '{far}' AND level < %(depth)s AND total <= %(budget)s
        UNION
        SELECT walk.level + 1, walk.total + count(*) OVER (), e.job_id, e.table_id, e.role
          FROM walk
          CROSS JOIN LATERAL (
                SELECT x.job_id, x.table_id, x.role
                  FROM lineage_edges here
                  JOIN lineage_edges x ON x.job_id = here.job_id AND {alive_x}
                 WHERE here.table_id = walk.table_id AND here.role = '{near}' AND {alive_here}
                OFFSET 0) e
         WHERE walk.role = '{far}' AND walk.level < %(depth)s AND walk.total <= %(budget)s
    )
    SELECT role, table_id, job_id, level, total FROM first_level
    UNION ALL
    SELECT role, table_id, job_id, level, total FROM walk WHERE level > 1
    """
_WALKS = {
    (mode, upstream): _WALK.format(
        near="sink" if upstream else "source",
        far="source" if upstream else "sink",
        alive_here=_alive("here", mode),
        alive_x=_alive("x", mode),
    )
    for mode in MODES
    for upstream in (True, False)
}
_WALK_DOWN, _WALK_UP = _WALKS["now", False], _WALKS["now", True]  # the current lineage (bench EXPLAINs name them)
_CLOCK_AND_TABLE = "SELECT now(), (SELECT id FROM tables WHERE name = %(name)s)"

# Newest range holding a snapshot; an open range (roots) holds through the newest barrier issued.
_TABLE_NODES_OF = """
    WITH head AS (SELECT max(barrier) AS barrier FROM barriers)
    SELECT t.id, t.name, t.format,
           EXISTS (SELECT 1 FROM lineage_edges e WHERE e.table_id = t.id AND e.role = 'sink' AND e.removed_at IS NULL),
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
      LEFT JOIN LATERAL (SELECT x.issued_at FROM barriers x WHERE x.barrier = c.barrier OFFSET 0) b ON true
     WHERE t.id = ANY(CAST(%(ids)s AS bigint[]))
     ORDER BY t.name COLLATE "C"
    """
_ALL_TABLE_NODES = _TABLE_STATES + ' WHERE t.retired_at IS NULL ORDER BY t.name COLLATE "C"'

_JOB_EDGES = """
    SELECT x.job_id, x.table_id, x.role FROM lineage_edges x
     WHERE x.job_id = ANY(CAST(%(ids)s AS bigint[])) AND x.removed_at IS NULL
     ORDER BY x.role COLLATE "C", x.table_id, x.job_id
    """

# Jobs by name, each with its newest runs that did something (idle stretches carry no timings), newest first.
_JOB_NODES = """
    SELECT j.id, j.name, j.is_active, j.last_barrier,
           CAST(extract(epoch FROM (SELECT issued_at FROM barriers ORDER BY barrier DESC LIMIT 1) - b.issued_at)
                AS float8) AS lag,
           r.first_barrier, r.barrier, r.status, r.inputs_ready_at, r.started_at, r.finished_at
      FROM jobs j
      LEFT JOIN LATERAL (SELECT x.issued_at FROM barriers x WHERE x.barrier = j.last_barrier OFFSET 0) b ON true
      LEFT JOIN LATERAL (
            SELECT x.first_barrier, x.barrier, x.status, x.inputs_ready_at, x.started_at, x.finished_at
              FROM job_runs x
             WHERE x.job_id = j.id AND x.status <> 'idle'
             ORDER BY x.first_barrier DESC LIMIT %(per_job)s) r ON true
     WHERE j.id = ANY(CAST(%(ids)s AS bigint[]))
     ORDER BY j.name COLLATE "C", r.first_barrier DESC
    """

# As of a past lineage (`AsOf`): the newest barrier each table completed at or before %(as_of_barrier)s (an open
# range holds through it), whether it had a writer then; the newest known snapshot is not kept through time (NULL).
_TABLE_NODES_AS_OF = """
    SELECT t.id, t.name, t.format,
           EXISTS (SELECT 1 FROM lineage_edges e WHERE e.table_id = t.id AND e.role = 'sink' AND {alive_e}),
           CAST(NULL AS bigint), c.barrier, r.snapshot_id, b.issued_at
      FROM tables t
      LEFT JOIN LATERAL (
            SELECT s.snapshot_id, {last_barrier} AS last_barrier FROM snapshot_ranges s
             WHERE s.table_id = t.id AND s.snapshot_id IS NOT NULL
               AND s.first_barrier <= CAST(%(as_of_barrier)s AS bigint){made_by}
             ORDER BY s.first_barrier DESC LIMIT 1) r ON true
      CROSS JOIN LATERAL (
            SELECT CASE WHEN r.snapshot_id IS NULL THEN NULL
                        ELSE least(coalesce(r.last_barrier, %(as_of_barrier)s), %(as_of_barrier)s) END AS barrier) c
      LEFT JOIN LATERAL (SELECT x.issued_at FROM barriers x WHERE x.barrier = c.barrier OFFSET 0) b ON true
     WHERE t.id = ANY(CAST(%(ids)s AS bigint[]))
     ORDER BY t.name COLLATE "C"
    """
# As of a time t, only what was true at t: completions made by then (a range created after t did not exist yet;
# a job's range extended after t, by idle completions, counts only its first barrier, the one it surely held).
_AS_OF_TIME_RANGES = {
    "last_barrier": "CASE WHEN s.kind = 'sealed' OR s.updated_at <= %(as_of_time)s THEN s.last_barrier"
    " ELSE s.first_barrier END",
    "made_by": " AND s.created_at <= %(as_of_time)s",
}
_AS_OF_BARRIER_RANGES = {"last_barrier": "s.last_barrier", "made_by": ""}
_TABLE_NODES_AS_OF_BY_MODE = {
    "barrier": _TABLE_NODES_AS_OF.format(alive_e=_alive("e", "barrier"), **_AS_OF_BARRIER_RANGES),
    "time": _TABLE_NODES_AS_OF.format(alive_e=_alive("e", "time"), **_AS_OF_TIME_RANGES),
}
_LIVE_TABLE_IDS = "SELECT id FROM tables WHERE retired_at IS NULL ORDER BY name"
_TABLE_IDS_AS_OF = """
    SELECT id FROM tables WHERE created_at <= %(as_of_time)s AND (retired_at IS NULL OR retired_at > %(as_of_time)s)
     ORDER BY name COLLATE "C"
"""

_JOB_EDGES_BY_MODE = {m: _JOB_EDGES.replace("x.removed_at IS NULL", _alive("x", m)) for m in MODES}
_ALL_EDGES_BY_MODE = {
    m: f"SELECT job_id, table_id, role FROM lineage_edges x WHERE {_alive('x', m)}"
    ' ORDER BY role COLLATE "C", table_id, job_id'
    for m in MODES
}

# Jobs as of %(as_of_barrier)s: the newest barrier each had settled then, its lag behind that barrier, and its
# runs up to it. A job of a past lineage had edges then: active.
_JOB_NODES_AS_OF = """
    SELECT j.id, j.name, true, l.barrier,
           CAST(extract(epoch FROM (SELECT issued_at FROM barriers WHERE barrier = %(as_of_barrier)s) - b.issued_at)
                AS float8) AS lag,
           r.first_barrier, r.barrier, r.status, r.inputs_ready_at, r.started_at, r.finished_at
      FROM jobs j
      LEFT JOIN LATERAL (
            SELECT least(x.barrier, %(as_of_barrier)s) AS barrier FROM job_runs x
             WHERE x.job_id = j.id AND x.first_barrier <= CAST(%(as_of_barrier)s AS bigint)
               AND x.status <> 'in_flight'
             ORDER BY x.first_barrier DESC LIMIT 1) l ON true
      LEFT JOIN LATERAL (SELECT x.issued_at FROM barriers x WHERE x.barrier = l.barrier OFFSET 0) b ON true
      LEFT JOIN LATERAL (
            SELECT x.first_barrier, x.barrier, x.status, x.inputs_ready_at, x.started_at, x.finished_at
              FROM job_runs x
             WHERE x.job_id = j.id AND x.status <> 'idle' AND x.barrier <= CAST(%(as_of_barrier)s AS bigint)
             ORDER BY x.first_barrier DESC LIMIT %(per_job)s) r ON true
     WHERE j.id = ANY(CAST(%(ids)s AS bigint[]))
     ORDER BY j.name COLLATE "C", r.first_barrier DESC
    """

# For each (table, barrier): the range holding the table's state there and the run of that range's job
# covering the barrier, with the input names the run recorded (idle runs record none).
_STEPS = """
    SELECT p.table_id, p.barrier, r.kind, r.job_id, j.name,
           x.job_id AS run_job_id, x.first_barrier, x.barrier AS run_barrier, x.status,
           x.inputs_ready_at, x.started_at, x.finished_at,
           coalesce(ARRAY(SELECT jsonb_object_keys(x.inputs)), ARRAY[]::text[]) AS input_names
      FROM unnest(CAST(%(table_ids)s AS bigint[]), CAST(%(barriers)s AS bigint[])) AS p(table_id, barrier)
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

_JOB_FIGURES = """
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

_RUN_COUNTS = """
    SELECT j.name,
           count(*) FILTER (WHERE r.status = 'committed') AS commits,
           count(*) FILTER (WHERE r.status = 'aborted' AND coalesce(r.reason, '') NOT LIKE 'skipped:%%') AS aborts,
           count(*) FILTER (WHERE r.status = 'aborted' AND r.reason LIKE 'skipped:%%') AS skips
      FROM jobs j JOIN job_runs r ON r.job_id = j.id
     WHERE j.is_active
     GROUP BY j.name
     ORDER BY j.name
    """


async def db_now(conn: Connection) -> datetime:
    """The database clock at the start of the transaction: every delay is measured against it."""
    value = await fetch_value(conn, "SELECT now()")
    assert isinstance(value, datetime)
    return value


async def clock_and_table(conn: Connection, *, name: str | None) -> tuple[datetime, int | None]:
    """The database clock at the start of the transaction (every delay is measured against it) and the id of the
    table called `name` (None: not registered), in one round trip."""
    ((now, table_id),) = await fetch_all(conn, _CLOCK_AND_TABLE, {"name": name})
    assert isinstance(now, datetime)
    return now, table_id


async def walk(
    conn: Connection,
    *,
    starts: Iterable[int],
    upstream: bool,
    depth: int,
    budget: int,
    first: int | None,
    at: AsOf | None = None,
) -> list[WalkRow]:
    """Every edge of the jobs a breadth-first walk from `starts` reaches, level by level, for up to `depth` levels;
    no level is computed past the one where the rows so far exceed `budget`. Level 1 holds at most `first` jobs
    (the first by id; None: all), and its rows count as past the budget when that cut it short. An edge reachable
    at several levels comes once per level. With `at`, over the lineage of that moment."""
    params = _params(at, {"starts": id_array(starts), "depth": depth, "budget": budget, "first": first})
    return await fetch_all(conn, _WALKS[_mode(at), upstream], params, prepare=True)


async def edges_of_jobs(conn: Connection, *, job_ids: Iterable[int], at: AsOf | None = None) -> list[EdgeTuple]:
    """Every edge of the given jobs (current, or of the lineage `at`), by role, table and job."""
    return await fetch_all(conn, _JOB_EDGES_BY_MODE[_mode(at)], _params(at, {"ids": id_array(job_ids)}), prepare=True)


async def all_edges(conn: Connection, *, at: AsOf | None = None) -> list[EdgeTuple]:
    """Every edge (current, or of the lineage `at`), by role, table and job."""
    return await fetch_all(conn, _ALL_EDGES_BY_MODE[_mode(at)], _params(at))


async def all_table_ids(conn: Connection, *, at: AsOf | None = None) -> list[int]:
    """Every table (registered by `at`'s time, when given), by name."""
    if at is None:
        return [int(r[0]) for r in await fetch_all(conn, _LIVE_TABLE_IDS)]
    return [int(r[0]) for r in await fetch_all(conn, _TABLE_IDS_AS_OF, at.params())]


async def table_nodes(
    conn: Connection, *, table_ids: Iterable[int] | None, at: AsOf | None = None
) -> list[TableNodeRow]:
    """The tables (all when `table_ids` is None) with their newest complete barrier and snapshot, by name; with
    `at`, as of its barrier (and no newest known snapshot: it is not kept through time)."""
    if at is not None:
        ids = await all_table_ids(conn, at=at) if table_ids is None else table_ids
        params = _params(at, {"ids": id_array(ids)})
        return await fetch_all(conn, _TABLE_NODES_AS_OF_BY_MODE[_mode(at)], params, prepare=True)
    if table_ids is None:
        return await fetch_all(conn, _ALL_TABLE_NODES)
    return await fetch_all(conn, _TABLE_NODES_OF, {"ids": id_array(table_ids)}, prepare=True)


async def job_nodes(
    conn: Connection, *, job_ids: Iterable[int], per_job: int, at: AsOf | None = None
) -> list[JobNodeRow]:
    """The jobs by name, each with up to `per_job` newest non-idle runs (newest first; one row per run, or one
    row with empty run fields for a job without any); with `at`, as of its barrier."""
    params = {"ids": id_array(job_ids), "per_job": per_job}
    if at is not None:
        return await fetch_all(conn, _JOB_NODES_AS_OF, _params(at, params), prepare=True)
    return await fetch_all(conn, _JOB_NODES, params, prepare=True)


async def table_ids_by_name(conn: Connection, *, names: Sequence[str]) -> dict[str, int]:
    if not names:
        return {}
    rows = await fetch_all(conn, "SELECT name, id FROM tables WHERE name = ANY(%(names)s)", {"names": list(set(names))})
    return {str(r[0]): int(r[1]) for r in rows}


async def source_ids_of_jobs(conn: Connection, *, job_ids: Sequence[int]) -> dict[int, list[int]]:
    """The tables each job currently reads."""
    if not job_ids:
        return {}
    rows = await fetch_all(
        conn,
        "SELECT job_id, table_id FROM lineage_edges WHERE role = 'source' AND removed_at IS NULL"
        " AND job_id = ANY(CAST(%(ids)s AS bigint[]))",
        {"ids": list(job_ids)},
    )
    out: dict[int, list[int]] = {}
    for r in rows:
        out.setdefault(int(r[0]), []).append(int(r[1]))
    return out


def _table_state(r: Any) -> TableState:
    table_id, name, format_, has_writer, latest, barrier, snapshot, issued_at = r
    return TableState(
        id=int(table_id),
        name=str(name),
        format=format_,
        has_writer=bool(has_writer),
        latest_snapshot_id=latest,
        barrier=None if barrier is None else int(barrier),
        snapshot_id=None if snapshot is None else int(snapshot),
        issued_at=issued_at,
    )


async def table_states(conn: Connection, *, table_ids: Sequence[int] | None = None) -> list[TableState]:
    """Each table (all of them when `table_ids` is None) with its newest complete barrier and snapshot."""
    if table_ids is None:
        rows = await fetch_all(conn, _ALL_TABLE_STATES)
    else:
        rows = await fetch_all(conn, _TABLE_STATES_OF, {"ids": list(table_ids)})
    return [_table_state(r) for r in rows]


async def steps_at(conn: Connection, *, pairs: Sequence[tuple[int, int]]) -> list[Step]:
    """For each (table id, barrier) that the table completed: the range kind, its job and that job's run there.

    Pairs where the table holds no range are left out.
    """
    if not pairs:
        return []
    params = {"table_ids": [p[0] for p in pairs], "barriers": [p[1] for p in pairs]}
    steps = []
    for r in await fetch_all(conn, _STEPS, params):
        (table_id, barrier, kind, job_id, job_name, run_job, run_first, run_barrier, status, ready, started, finished,
         input_names) = r  # fmt: skip
        run = None
        if run_job is not None:
            run = RunRow(int(run_job), int(run_first), int(run_barrier), str(status), ready, started, finished)
        steps.append(
            Step(
                table_id=int(table_id),
                barrier=int(barrier),
                range_kind=str(kind),
                job_id=None if job_id is None else int(job_id),
                job_name=job_name,
                run=run,
                input_names=[str(n) for n in input_names],
            )
        )
    return steps


async def barrier_count(conn: Connection) -> int:
    return int(await fetch_value(conn, "SELECT count(*) FROM barriers") or 0)


async def job_figures(conn: Connection) -> list[JobFigures]:
    """Per active job: last barrier, lag behind the newest barrier, timings of its last committed run."""

    def num(value: Any) -> float | None:
        return None if value is None else float(value)

    return [
        JobFigures(str(name), last, None if lag is None else int(lag), num(lag_s), num(duration), num(waiting))
        for name, last, lag, lag_s, duration, waiting in await fetch_all(conn, _JOB_FIGURES)
    ]


async def run_counts(conn: Connection) -> list[tuple[str, int, int, int]]:
    """(job, committed, aborted, skipped) barrier counts of every active job that ran at least once."""
    return [(str(n), int(c), int(a), int(k)) for n, c, a, k in await fetch_all(conn, _RUN_COUNTS)]


# Lag (services/lag.py). The upstream closure of some tables over the current lineage: per table, its writer
# (NULL: none, a root) and each table that writer reads (NULL: none, an ingestion step).
_UPSTREAM_LINKS = """
    WITH RECURSIVE up(table_id) AS (
        SELECT unnest(CAST(%(ids)s AS bigint[]))
        UNION
        SELECT src.table_id
          FROM up
          JOIN lineage_edges w ON w.table_id = up.table_id AND w.role = 'sink' AND w.removed_at IS NULL
          JOIN lineage_edges src ON src.job_id = w.job_id AND src.role = 'source' AND src.removed_at IS NULL
    )
    SELECT up.table_id, w.job_id, src.table_id
      FROM up
      LEFT JOIN lineage_edges w ON w.table_id = up.table_id AND w.role = 'sink' AND w.removed_at IS NULL
      LEFT JOIN lineage_edges src ON src.job_id = w.job_id AND src.role = 'source' AND src.removed_at IS NULL
"""
_ALL_UPSTREAM_LINKS = """
    SELECT t.id, w.job_id, src.table_id
      FROM tables t
      LEFT JOIN lineage_edges w ON w.table_id = t.id AND w.role = 'sink' AND w.removed_at IS NULL
      LEFT JOIN lineage_edges src ON src.job_id = w.job_id AND src.role = 'source' AND src.removed_at IS NULL
"""
# New data of data origins after barrier %(after)s: each range whose snapshot differs from the one before it
# (the newest range at or before %(after)s is read too, to compare the first one with), with its issue time.
_NEW_DATA = """
    SELECT n.table_id, n.first_barrier, b.issued_at
      FROM (SELECT s.table_id, s.first_barrier, s.snapshot_id,
                   lag(s.snapshot_id) OVER (PARTITION BY s.table_id ORDER BY s.first_barrier) AS before
              FROM unnest(CAST(%(ids)s AS bigint[])) AS o(id)
              CROSS JOIN LATERAL (
                    SELECT x.table_id, x.first_barrier, x.snapshot_id FROM snapshot_ranges x
                     WHERE x.table_id = o.id AND x.snapshot_id IS NOT NULL
                       AND x.first_barrier >= coalesce(
                             (SELECT p.first_barrier FROM snapshot_ranges p
                               WHERE p.table_id = o.id AND p.snapshot_id IS NOT NULL AND p.first_barrier <= %(after)s
                               ORDER BY p.first_barrier DESC LIMIT 1), -1)) s) n
      JOIN barriers b ON b.barrier = n.first_barrier
     WHERE n.first_barrier > %(after)s AND n.snapshot_id IS DISTINCT FROM n.before
"""


async def head_barrier(conn: Connection) -> int | None:
    """The newest barrier issued (None: none yet)."""
    value = await fetch_value(conn, "SELECT max(barrier) FROM barriers")
    return None if value is None else int(value)


async def upstream_links(
    conn: Connection, *, table_ids: Iterable[int] | None
) -> list[tuple[int, int | None, int | None]]:
    """(table, writer job or None, a table the writer reads or None) over the upstream closure of `table_ids`
    (None: every table) in the current lineage."""
    if table_ids is None:
        return await fetch_all(conn, _ALL_UPSTREAM_LINKS)
    return await fetch_all(conn, _UPSTREAM_LINKS, {"ids": id_array(table_ids)})


async def new_data(conn: Connection, *, origin_ids: Iterable[int], after: int) -> list[tuple[int, int, datetime]]:
    """(table, barrier, issue time) of each new snapshot the data origins got at a barrier after `after`."""
    return await fetch_all(conn, _NEW_DATA, {"ids": id_array(origin_ids), "after": after})
