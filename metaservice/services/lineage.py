"""The lineage graph for admins: around one table (upstream, downstream or both, depth-limited) or whole.

Walks are breadth-first over jobs with visited sets, so a diamond lattice costs one row per edge instead of one per
path. One recursive statement per direction returns the links level by level (a second one only when the first
stopped on its row budget before the walk was done), and the walk is replayed here level by level, so the node cap
cuts it exactly where a level-at-a-time walk would. A capped answer says `truncated`. Answers run to tens of
thousands of nodes, so they are built as plain JSON-ready data (the `LineageGraph` wire shape) from plain rows,
never as validated models.
"""

from __future__ import annotations

import gc
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, TypedDict

from metaservice.db.database import Connection, Database
from metaservice.db.transaction import in_transaction
from metaservice.errors import NotFound
from metaservice.repositories import lineage as lineage_rows
from metaservice.repositories.lineage import AsOf, EdgeTuple, JobNodeRow, WalkRow
from metaservice.schemas import LineageDirection
from metaservice.services import lag as lag_figures
from metaservice.services.as_of import AsOfSpec, resolve_as_of

DEFAULT_DEPTH, MAX_DEPTH = 10, 100
DEFAULT_MAX_NODES, MAX_NODES = 5000, 20_000
RECENT_RUNS_PER_JOB = 5


# The wire shape of `schemas.LineageGraph`, key for key and in field order (tests check the two agree byte for byte).
class RunTimingData(TypedDict):
    first_barrier: int
    barrier: int
    status: str
    inputs_ready_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    waiting_seconds: float | None
    processing_seconds: float | None


class TableNodeData(TypedDict):
    id: str
    kind: Literal["table"]
    name: str
    table_kind: Literal["root", "intermediate"]
    format: str | None
    latest_snapshot_id: int | None
    newest_complete_barrier: int | None
    newest_complete_snapshot_id: int | None
    newest_complete_issued_at: datetime | None
    delay_seconds: float | None
    freshness_seconds: float | None
    lag_seconds: float | None


class JobNodeData(TypedDict):
    id: str
    kind: Literal["job"]
    name: str
    is_active: bool
    last_barrier: int | None
    lag_seconds: float | None
    recent_runs: list[RunTimingData]


EdgeData = TypedDict("EdgeData", {"from": str, "to": str})


class AsOfData(TypedDict):
    barrier: int | None
    time: datetime


class LineageGraphData(TypedDict):
    table: str | None
    direction: LineageDirection
    depth: int | None
    nodes: list[TableNodeData | JobNodeData]
    edges: list[EdgeData]
    truncated: bool
    as_of: AsOfData | None


async def lineage_graph(
    db: Database,
    *,
    table: str | None,
    direction: LineageDirection = "both",
    depth: int = DEFAULT_DEPTH,
    max_nodes: int = DEFAULT_MAX_NODES,
    as_of: AsOfSpec | None = None,
) -> LineageGraphData:
    """Tables, jobs and current edges around `table` within `depth` job hops, or the whole graph (table None);
    with `as_of`, the lineage of that barrier or time (docs/design.md "Lineage through time")."""

    async def work(s: Connection) -> LineageGraphData:
        now, start = await lineage_rows.clock_and_table(s, name=table)
        at = None if as_of is None else await resolve_as_of(s, as_of)
        if table is None:
            picked = await _whole(s, max_nodes=max_nodes, at=at)
        elif start is None:
            raise NotFound(f"table {table!r} is not registered", table=table)
        else:
            picked = await _around(s, start=start, direction=direction, depth=depth, max_nodes=max_nodes, at=at)
        return await _annotate(
            s, picked, now=now, table=table, direction=direction, depth=None if table is None else depth, at=at
        )

    with collection_paused():
        return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)


@contextmanager
def collection_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while an answer is built (and, around this, serialised and dropped).

    An answer is tens of thousands of short-lived containers (rows, nodes) that reference counting frees when the
    request ends. Collections while they are alive only promote them to the oldest generation, which then brings
    collections of the whole heap, tens of milliseconds each: the slowest percentiles of this endpoint; resumed
    while the answer is still alive, the collector's first pass walks it once more. Paused only when it was
    running (a concurrent build may have paused it already).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@dataclass
class _Picked:
    """Nodes chosen so far, in discovery order, and whether the cap stopped the walk.

    `all_tables`: every table was picked (the whole graph under the cap), so node states need no id list.
    """

    max_nodes: int
    tables: dict[int, None] = field(default_factory=dict)
    jobs: dict[int, None] = field(default_factory=dict)
    truncated: bool = False
    edges: list[EdgeTuple] | None = None
    all_tables: bool = False

    def room(self) -> bool:
        if len(self.tables) + len(self.jobs) < self.max_nodes:
            return True
        self.truncated = True
        return False


@dataclass
class _Links:
    """One direction of the walk: the jobs each table leads to, each job's tables on the far side, and every edge
    of the jobs reached.

    `known` is how many levels from the walk's start the links are complete for. Sets are dicts of ids, which the
    garbage collector does not track (answers hold tens of thousands of them). `rows` holds what each fetch
    returned.
    """

    upstream: bool
    at: AsOf | None = None
    known: int = 0
    jobs_of: dict[int, dict[int, None]] = field(default_factory=dict)
    far_of: dict[int, dict[int, None]] = field(default_factory=dict)
    rows: list[list[WalkRow]] = field(default_factory=list)

    async def fetch(
        self, s: Connection, *, frontier: Sequence[int], level: int, depth: int, max_nodes: int, first: int | None
    ) -> None:
        """Add the links of up to `depth` - `level` levels beyond `frontier` (the tables reached at `level`), with at
        most `first` jobs on the first of them (the first by id)."""
        near_role = "sink" if self.upstream else "source"
        jobs_of, far_of = self.jobs_of, self.far_of
        rows = await lineage_rows.walk(
            s, starts=frontier, upstream=self.upstream, depth=depth - level, budget=max_nodes, first=first, at=self.at
        )
        self.rows.append(rows)
        deepest = total = 0
        for role, table, job, row_level, rows_so_far in rows:
            if row_level > deepest:
                deepest, total = row_level, rows_so_far
            tables = far_of.get(job)
            if tables is None:
                far_of[job] = tables = {}
            if role == near_role:
                jobs = jobs_of.get(table)
                if jobs is None:
                    jobs_of[table] = jobs = {}
                jobs[job] = None
            else:
                tables[table] = None
        # past the budget, no level after the deepest one returned was computed
        self.known = level + deepest if total > max_nodes else depth

    def fills(self, picked: _Picked, start: int) -> bool:
        """Whether the jobs at hand around `start` bring more new nodes than `picked` has room for."""
        jobs = self.jobs_of.get(start, {})
        beyond = {t for job in jobs for t in self.far_of[job] if t not in picked.tables}
        return len(jobs) + len(beyond) > picked.max_nodes - len(picked.tables) - len(picked.jobs)


async def _links_from(
    s: Connection, picked: _Picked, *, start: int, upstream: bool, depth: int, at: AsOf | None
) -> _Links:
    """The walk's links from `start`, with its first level cut short when that level alone fills the answer.

    Every job of the first level takes a place, so past the first `room` + 1 (by id) none can be in the answer;
    most jobs also write (read) a table of their own, so the first half of those usually fills it already. If it
    does not, the first level is fetched again up to `room` + 1 jobs, and the walk goes on from there.
    """
    room = picked.max_nodes - len(picked.tables) - len(picked.jobs)
    links = _Links(upstream, at)
    await links.fetch(s, frontier=[start], level=0, depth=depth, max_nodes=picked.max_nodes, first=room // 2 + 1)
    if len(links.jobs_of.get(start, ())) <= room // 2 or links.fills(picked, start):
        return links  # the first level is whole, or the part at hand fills the answer
    links = _Links(upstream, at)
    await links.fetch(s, frontier=[start], level=0, depth=depth, max_nodes=picked.max_nodes, first=room + 1)
    return links


async def _around(s: Connection, *, start: int, direction: str, depth: int, max_nodes: int, at: AsOf | None) -> _Picked:
    picked = _Picked(max_nodes)
    picked.tables[start] = None
    ways = {"upstream": (True,), "downstream": (False,), "both": (True, False)}[direction]
    walked: list[list[WalkRow]] = []
    for upstream in ways:  # upstream first, as the picked sets are shared
        if depth == 0 or picked.truncated:
            break
        links = await _links_from(s, picked, start=start, upstream=upstream, depth=depth, at=at)
        frontier: list[int] = [start]
        for level in range(depth):
            if not frontier or picked.truncated:
                break
            if level >= links.known:
                await links.fetch(s, frontier=frontier, level=level, depth=depth, max_nodes=max_nodes, first=None)
            frontier = _take_level(picked, frontier, links)
        walked += links.rows
    # The walk brought every edge of every job picked; keep those among picked nodes, by role, table and job. Each
    # role apart: ids mostly grow in registration order, so its edges come nearly sorted, which costs the sort little.
    jobs, tables = picked.jobs, picked.tables
    picked.edges = []
    for role in ("sink", "source"):  # code point order, as PostgreSQL's C collation orders them
        among = [(t, j) for rows in walked for r, t, j, _, _ in rows if r == role and j in jobs and t in tables]
        picked.edges += [(job, table, role) for table, job in sorted(dict.fromkeys(among))]
    return picked


def _take_level(picked: _Picked, frontier: Sequence[int], links: _Links) -> list[int]:
    """Add the level's new jobs, each followed by the new tables beyond it, by id; returns those tables (the next
    frontier). Over the cap, marks the walk truncated."""
    jobs_of, far_of, tables, jobs = links.jobs_of, links.far_of, picked.tables, picked.jobs
    level = sorted({job for table in frontier for job in jobs_of.get(table, ())})
    room = picked.max_nodes - len(tables) - len(jobs)
    beyond: list[int] = []
    for job_id in level:
        if job_id in jobs:
            continue
        if room <= 0:
            picked.truncated = True
            return []
        jobs[job_id] = None
        room -= 1
        for table_id in sorted(far_of[job_id]):
            if table_id in tables:
                continue
            if room <= 0:
                picked.truncated = True
                return []
            tables[table_id] = None
            room -= 1
            beyond.append(table_id)
    return beyond


async def _whole(s: Connection, *, max_nodes: int, at: AsOf | None) -> _Picked:
    """Every table and every job with edges; over the cap, the nodes nearest the roots (topological order)."""
    picked = _Picked(max_nodes)
    edges = await lineage_rows.all_edges(s, at=at)
    tables = await lineage_rows.all_table_ids(s, at=at)
    jobs = sorted({job_id for job_id, _, _ in edges})
    if len(tables) + len(jobs) <= max_nodes:
        picked.tables = dict.fromkeys(tables)
        picked.jobs = dict.fromkeys(jobs)
        picked.edges = edges
        picked.all_tables = True
        return picked
    for kind, node in _topological(tables, jobs, edges):
        if not picked.room():
            break
        (picked.tables if kind == "table" else picked.jobs)[node] = None
    return picked


def _topological(tables: Sequence[int], jobs: Sequence[int], edges: Sequence[EdgeTuple]) -> list[tuple[str, int]]:
    """Kahn's order over tables and jobs, level by level, starting with roots and jobs that read nothing."""
    successors: dict[tuple[str, int], list[tuple[str, int]]] = defaultdict(list)
    indegree: dict[tuple[str, int], int] = {("table", t): 0 for t in tables} | {("job", j): 0 for j in jobs}
    for job_id, table_id, role in edges:
        a, b = (("table", table_id), ("job", job_id))
        tail, head = (a, b) if role == "source" else (b, a)
        successors[tail].append(head)
        indegree[head] = indegree.get(head, 0) + 1
        indegree.setdefault(tail, 0)
    queue = deque(sorted(n for n, d in indegree.items() if d == 0))
    order: list[tuple[str, int]] = []
    while queue:
        node = queue.popleft()
        order.append(node)
        for nxt in sorted(successors[node]):
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                queue.append(nxt)
    return order


async def _annotate(
    s: Connection,
    picked: _Picked,
    *,
    now: datetime,
    table: str | None,
    direction: LineageDirection,
    depth: int | None,
    at: AsOf | None,
) -> LineageGraphData:
    """The answer: tables then jobs, each by name, with their states; then the edges among them.

    As of a past moment, delays are measured against that moment and lags are null (they need the newest root
    data of that time, which is not kept)."""
    edges = picked.edges
    if edges is None:
        edges = await lineage_rows.edges_of_jobs(s, job_ids=picked.jobs, at=at) if picked.jobs else []
    states = await lineage_rows.table_nodes(s, table_ids=None if picked.all_tables else picked.tables, at=at)
    jobs = (
        await lineage_rows.job_nodes(s, job_ids=picked.jobs, per_job=RECENT_RUNS_PER_JOB, at=at) if picked.jobs else []
    )
    lags: dict[int, float | None] = {}
    if at is None:
        lags = await lag_figures.lags(s, [(r[0], r[5]) for r in states], now=now, every_table=picked.all_tables)
    else:
        now = at.time
    table_ids: dict[int, str] = {}
    nodes: list[TableNodeData | JobNodeData] = []
    for table_id, name, fmt, has_writer, latest, barrier, snapshot, issued_at in states:
        table_ids[table_id] = node_id = f"table:{name}"
        nodes.append(
            {
                "id": node_id,
                "kind": "table",
                "name": name,
                "table_kind": "intermediate" if has_writer else "root",
                "format": fmt,
                "latest_snapshot_id": latest,
                "newest_complete_barrier": barrier,
                "newest_complete_snapshot_id": snapshot,
                "newest_complete_issued_at": issued_at,
                "delay_seconds": (freshness := None if issued_at is None else (now - issued_at).total_seconds()),
                "freshness_seconds": freshness,
                "lag_seconds": lags.get(table_id),
            }
        )
    job_ids = _job_nodes(jobs, into=nodes)
    wire_edges: list[EdgeData] = []
    for job_id, table_id, role in edges:
        t, j = table_ids.get(table_id), job_ids.get(job_id)
        if t is None or j is None:
            continue
        wire_edges.append({"from": t, "to": j} if role == "source" else {"from": j, "to": t})
    return {
        "table": table,
        "direction": direction,
        "depth": depth,
        "nodes": nodes,
        "edges": wire_edges,
        "truncated": picked.truncated,
        "as_of": None if at is None else {"barrier": at.barrier, "time": at.time},
    }


def _job_nodes(rows: Iterable[JobNodeRow], *, into: list[TableNodeData | JobNodeData]) -> dict[int, str]:
    """Append one node per job (rows come one per recent run, by job name); returns the node id of each job."""
    ids: dict[int, str] = {}
    runs: list[RunTimingData] = []
    for job_id, name, is_active, last_barrier, lag, first, barrier, status, ready, started, finished in rows:
        if job_id not in ids:
            ids[job_id] = node_id = f"job:{name}"
            runs = []
            into.append(
                {
                    "id": node_id,
                    "kind": "job",
                    "name": name,
                    "is_active": is_active,
                    "last_barrier": last_barrier,
                    "lag_seconds": lag,
                    "recent_runs": runs,
                }
            )
        if first is not None and barrier is not None and status is not None:
            runs.append(
                {
                    "first_barrier": first,
                    "barrier": barrier,
                    "status": status,
                    "inputs_ready_at": ready,
                    "started_at": started,
                    "finished_at": finished,
                    "waiting_seconds": None if started is None or ready is None else (started - ready).total_seconds(),
                    "processing_seconds": (
                        None if finished is None or started is None else (finished - started).total_seconds()
                    ),
                }
            )
    return ids
