"""The lineage graph for admins: around one table (upstream, downstream or both, depth-limited) or whole.

Walks are breadth-first over jobs with visited sets and one query per level and direction, so a diamond lattice
costs one row per edge instead of one per path. The node count is capped; a capped answer says `truncated`.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.transaction import in_transaction
from metaservice.errors import NotFound
from metaservice.repositories import lineage as lineage_rows
from metaservice.repositories import tables as table_rows
from metaservice.repositories.lineage import EdgeRow, Link, RunRow
from metaservice.schemas import (
    JobNode,
    LineageDirection,
    LineageEdge,
    LineageGraph,
    RunTiming,
    TableNode,
)
from metaservice.services.delays import delay_of

DEFAULT_DEPTH, MAX_DEPTH = 10, 100
DEFAULT_MAX_NODES, MAX_NODES = 5000, 20_000
RECENT_RUNS_PER_JOB = 5


async def lineage_graph(
    session: AsyncSession,
    *,
    table: str | None,
    direction: LineageDirection = "both",
    depth: int = DEFAULT_DEPTH,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> LineageGraph:
    """Tables, jobs and current edges around `table` within `depth` job hops, or the whole graph (table None)."""

    async def work(s: AsyncSession) -> LineageGraph:
        if table is None:
            picked = await _whole(s, max_nodes=max_nodes)
        else:
            row = await table_rows.get(s, name=table)
            if row is None:
                raise NotFound(f"table {table!r} is not registered", table=table)
            picked = await _around(s, start=row.id, direction=direction, depth=depth, max_nodes=max_nodes)
        return await _annotate(s, picked, table=table, direction=direction, depth=None if table is None else depth)

    return await in_transaction(session, work, isolation="REPEATABLE READ", read_only=True)


@dataclass
class _Picked:
    """Nodes chosen so far, in discovery order, and whether the cap stopped the walk."""

    max_nodes: int
    tables: dict[int, None] = field(default_factory=dict)
    jobs: dict[int, None] = field(default_factory=dict)
    truncated: bool = False
    edges: list[EdgeRow] | None = None

    def room(self) -> bool:
        if len(self.tables) + len(self.jobs) < self.max_nodes:
            return True
        self.truncated = True
        return False


async def _around(s: AsyncSession, *, start: int, direction: str, depth: int, max_nodes: int) -> _Picked:
    picked = _Picked(max_nodes)
    picked.tables[start] = None
    walks = {"upstream": ("upstream",), "downstream": ("downstream",), "both": ("upstream", "downstream")}
    for way in walks[direction]:
        frontier = [start]
        for _ in range(depth):
            if not frontier or picked.truncated:
                break
            links = await (
                lineage_rows.upstream_links(s, table_ids=frontier)
                if way == "upstream"
                else lineage_rows.downstream_links(s, table_ids=frontier)
            )
            frontier = _take_level(picked, links)
    return picked


def _take_level(picked: _Picked, links: Sequence[Link]) -> list[int]:
    """Add the level's new jobs and the new tables beyond them; returns those tables (the next frontier)."""
    beyond: dict[int, list[int]] = {}
    for link in links:
        far = beyond.setdefault(link.job_id, [])  # a job with no table on the far side still counts
        if link.table_id is not None:
            far.append(link.table_id)
    frontier: list[int] = []
    for job_id in sorted(beyond):
        if job_id in picked.jobs:
            continue
        if not picked.room():
            return []
        picked.jobs[job_id] = None
        for table_id in sorted(beyond[job_id]):
            if table_id in picked.tables:
                continue
            if not picked.room():
                return []
            picked.tables[table_id] = None
            frontier.append(table_id)
    return frontier


async def _whole(s: AsyncSession, *, max_nodes: int) -> _Picked:
    """Every table and every job with edges; over the cap, the nodes nearest the roots (topological order)."""
    picked = _Picked(max_nodes)
    edges = await lineage_rows.all_edges(s)
    tables = await lineage_rows.all_table_ids(s)
    jobs = sorted({e.job_id for e in edges})
    if len(tables) + len(jobs) <= max_nodes:
        picked.tables = dict.fromkeys(tables)
        picked.jobs = dict.fromkeys(jobs)
        picked.edges = edges
        return picked
    for kind, node in _topological(tables, jobs, edges):
        if not picked.room():
            break
        (picked.tables if kind == "table" else picked.jobs)[node] = None
    return picked


def _topological(tables: Sequence[int], jobs: Sequence[int], edges: Sequence[EdgeRow]) -> list[tuple[str, int]]:
    """Kahn's order over tables and jobs, level by level, starting with roots and jobs that read nothing."""
    successors: dict[tuple[str, int], list[tuple[str, int]]] = defaultdict(list)
    indegree: dict[tuple[str, int], int] = {("table", t): 0 for t in tables} | {("job", j): 0 for j in jobs}
    for e in edges:
        a, b = (("table", e.table_id), ("job", e.job_id))
        tail, head = (a, b) if e.role == "source" else (b, a)
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
    s: AsyncSession, picked: _Picked, *, table: str | None, direction: LineageDirection, depth: int | None
) -> LineageGraph:
    table_ids, job_ids = list(picked.tables), list(picked.jobs)
    edges = picked.edges
    if edges is None:
        edges = await lineage_rows.edges_among(s, job_ids=job_ids, table_ids=table_ids)
    states = await lineage_rows.table_states(s, table_ids=table_ids)
    jobs = await lineage_rows.job_states(s, job_ids=job_ids) if job_ids else []
    runs = await lineage_rows.recent_runs(s, job_ids=job_ids, per_job=RECENT_RUNS_PER_JOB) if job_ids else {}
    now = await lineage_rows.db_now(s)
    table_names = {t.id: t.name for t in states}
    job_names = {j.id: j.name for j in jobs}
    nodes: list[TableNode | JobNode] = [
        TableNode(
            id=f"table:{t.name}",
            name=t.name,
            table_kind="intermediate" if t.has_writer else "root",
            format=t.format,
            latest_snapshot_id=t.latest_snapshot_id,
            newest_complete_barrier=t.barrier,
            newest_complete_snapshot_id=t.snapshot_id,
            newest_complete_issued_at=t.issued_at,
            delay_seconds=delay_of(t, now),
        )
        for t in sorted(states, key=lambda t: t.name)
    ]
    nodes += [
        JobNode(
            id=f"job:{j.name}",
            name=j.name,
            is_active=j.is_active,
            last_barrier=j.last_barrier,
            lag_seconds=j.lag_seconds,
            recent_runs=[_timing(r) for r in runs.get(j.id, [])],
        )
        for j in sorted(jobs, key=lambda j: j.name)
    ]
    wire_edges = []
    for e in sorted(edges, key=lambda e: (e.role, e.table_id, e.job_id)):
        if e.table_id not in table_names or e.job_id not in job_names:
            continue
        t, j = f"table:{table_names[e.table_id]}", f"job:{job_names[e.job_id]}"
        ends = (t, j) if e.role == "source" else (j, t)
        wire_edges.append(LineageEdge(**{"from": ends[0], "to": ends[1]}))
    return LineageGraph(
        table=table, direction=direction, depth=depth, nodes=nodes, edges=wire_edges, truncated=picked.truncated
    )


def _timing(run: RunRow) -> RunTiming:
    def span(later: datetime | None, earlier: datetime | None) -> float | None:
        return None if later is None or earlier is None else (later - earlier).total_seconds()

    return RunTiming(
        first_barrier=run.first_barrier,
        barrier=run.barrier,
        status=run.status,
        inputs_ready_at=run.inputs_ready_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        waiting_seconds=span(run.started_at, run.inputs_ready_at),
        processing_seconds=span(run.finished_at, run.started_at),
    )
