"""End-to-end delay, critical paths and bottleneck jobs, plus the figures `/metrics` reports.

Definitions (PRODUCT.md "What admins see"):
- a table's *delay* is now (database clock) minus the issue time of the newest barrier it completed;
- the *critical path* of table X at barrier B starts at the run of X's writer that completed B and steps to the
  input whose readiness at B was latest, until a root; it is listed from the roots to X;
- an input's *readiness* at B: a root is ready when B is issued (B seals it); a committed run's sink when the run
  finished; an idle run's sink (inputs unchanged, no work) when the job settled B if the idle stretch ends at B,
  else no earlier than its inputs — idle steps process nothing and only wait;
- the *bottleneck* is the step with the largest waiting + processing time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from metaservice.db.database import Connection, Database
from metaservice.db.transaction import in_transaction
from metaservice.errors import NoConsistentVersion, NotFound
from metaservice.repositories import barriers as barrier_rows
from metaservice.repositories import lineage as lineage_rows
from metaservice.repositories import tables as table_rows
from metaservice.repositories import versions as version_rows
from metaservice.repositories.lineage import JobFigures, Step, TableState
from metaservice.schemas import CriticalStep, DelayList, DelaySummary, TableDelay
from metaservice.services import barriers
from metaservice.services import lag as lag_figures

if TYPE_CHECKING:
    from metaservice.runtime import Runtime  # built in the lifespan and passed in; never built here

# Walk bounds: a critical path longer than this, or a closure bigger than this, is reported cut short.
MAX_LEVELS = 1000
MAX_PAIRS = 200_000
# Writers a delay figure lets complete barriers idle first, at most (each is one plan and one write, shared with
# concurrent steps); the rest follow at the next read.
SETTLE_LIMIT = 256

Pair = tuple[int, int]  # (table id, barrier)


async def table_delay(rt: Runtime, *, table: str, barrier: int | None = None) -> TableDelay:
    """Delay of one table and the critical path of its newest complete barrier (or of `barrier`), after idle writers
    upstream completed the barriers their unchanged inputs allow (rule 12)."""
    if barrier is None:
        await barriers.settle_lagging(rt, tables=[table], limit=SETTLE_LIMIT)

    async def work(s: Connection) -> TableDelay:
        row = await table_rows.get(s, name=table)
        if row is None:
            raise NotFound(f"table {table!r} is not registered", table=table)
        state = (await lineage_rows.table_states(s, table_ids=[row.id]))[0]
        now = await lineage_rows.db_now(s)
        target, issued_at = state.barrier, state.issued_at
        if barrier is not None:
            issued = await barrier_rows.get(s, barrier=barrier)
            if issued is None:
                raise NotFound(f"barrier {barrier} was never issued", barrier=barrier)
            steps = await lineage_rows.steps_at(s, pairs=[(row.id, barrier)])
            if not steps or steps[0].range_kind == "aborted":
                raise NoConsistentVersion(
                    f"table {table!r} did not complete barrier {barrier}", table=table, barrier=barrier
                )
            target, issued_at = barrier, issued.issued_at
        kind = _kind(state)
        if target is None or issued_at is None:
            holders = await version_rows.holding(s, table_ids=[row.id])
            return TableDelay(
                table=table,
                table_kind=kind,
                as_of=now,
                barrier=None,
                issued_at=None,
                delay_seconds=None,
                freshness_seconds=None,
                lag_seconds=None,
                completed_at=None,
                end_to_end_seconds=None,
                critical_path=[],
                bottleneck_job=holders[0]["writer"] if holders else None,  # the writer that has to run first
                bottleneck_seconds=None,
            )
        paths = _CriticalPaths({target: issued_at})
        await paths.load(s, [(row.id, target)])
        names = await paths.table_names(s)
        path, truncated = paths.path((row.id, target), names)
        completed = paths.readiness((row.id, target))
        bottleneck = _bottleneck(path)
        lag = (await lag_figures.lags(s, [(row.id, state.barrier)], now=now)).get(row.id)
        return TableDelay(
            table=table,
            table_kind=kind,
            as_of=now,
            barrier=target,
            issued_at=issued_at,
            delay_seconds=_seconds(now, issued_at),
            freshness_seconds=_seconds(now, issued_at),
            lag_seconds=lag,
            completed_at=completed,
            end_to_end_seconds=None if completed is None else _seconds(completed, issued_at),
            critical_path=path,
            bottleneck_job=bottleneck[0] if bottleneck else None,
            bottleneck_seconds=bottleneck[1] if bottleneck else None,
            path_truncated=truncated,
        )

    return await in_transaction(rt.database, work, isolation="REPEATABLE READ", read_only=True)


async def all_delays(rt: Runtime) -> DelayList:
    """Every table's delay with its bottleneck job, worst first (tables that completed nothing lead), after idle
    writers completed the barriers their unchanged inputs allow (rule 12)."""
    await barriers.settle_lagging(rt, tables=None, limit=SETTLE_LIMIT)

    async def work(s: Connection) -> DelayList:
        states = await lineage_rows.table_states(s)
        now = await lineage_rows.db_now(s)
        complete = [t for t in states if t.barrier is not None and t.issued_at is not None]
        paths = _CriticalPaths({t.barrier: t.issued_at for t in complete if t.barrier and t.issued_at})
        await paths.load(s, [(t.id, t.barrier) for t in complete if t.barrier is not None])
        names = await paths.table_names(s)
        lags = await lag_figures.lags(s, [(t.id, t.barrier) for t in states], now=now, every_table=True)
        never = [t.id for t in states if t.barrier is None and t.has_writer]
        holders = {h["table"]: h["writer"] for h in await version_rows.holding(s, table_ids=never)} if never else {}
        summaries = []
        for t in states:
            bottleneck: tuple[str, float | None] | None = None
            if t.barrier is not None:
                bottleneck = _bottleneck(paths.path((t.id, t.barrier), names)[0])
            elif holders.get(t.name):
                bottleneck = (str(holders[t.name]), None)  # it completed nothing: its writer has to run first
            summaries.append(
                DelaySummary(
                    table=t.name,
                    table_kind=_kind(t),
                    barrier=t.barrier,
                    issued_at=t.issued_at,
                    delay_seconds=None if t.issued_at is None else _seconds(now, t.issued_at),
                    freshness_seconds=None if t.issued_at is None else _seconds(now, t.issued_at),
                    lag_seconds=lags.get(t.id),
                    bottleneck_job=bottleneck[0] if bottleneck else None,
                    bottleneck_seconds=bottleneck[1] if bottleneck else None,
                )
            )
        summaries.sort(key=lambda d: (d.delay_seconds is not None, -(d.delay_seconds or 0.0), d.table))
        return DelayList(as_of=now, delays=summaries)

    return await in_transaction(rt.database, work, isolation="REPEATABLE READ", read_only=True)


class TableFigure(NamedTuple):
    """One table's line of /metrics (a tuple, as `JobFigures`)."""

    name: str
    kind: str
    barrier: int | None
    delay_seconds: float | None
    lag_seconds: float | None = None


@dataclass(frozen=True)
class MetricFigures:
    """Everything `/metrics` reports from the database: the same answer from every server process (lists by name)."""

    tables: list[TableFigure]
    jobs: list[JobFigures]
    runs: list[tuple[str, int, int, int]]
    barriers_issued: int


async def metric_figures(db: Database) -> MetricFigures:
    """Per-table delay, per-job lag and last run timings, barrier and commit/abort counts (one read snapshot). A
    background read: it completes nothing idle (rule 12), so its delays count what was stored. Reads the whole
    catalog: the server's refresh reads only what changed since its previous read (services/metric_state.py), and
    this is what its figures must equal."""
    return await in_transaction(db, metric_figures_in, isolation="REPEATABLE READ", read_only=True)


async def metric_figures_in(s: Connection) -> MetricFigures:
    """`metric_figures` in the caller's transaction. Tables and jobs are listed by name (code point order)."""
    states = await lineage_rows.table_states(s)
    now = await lineage_rows.db_now(s)
    lags = await lag_figures.lags(s, [(t.id, t.barrier) for t in states], now=now, every_table=True)
    tables = [
        TableFigure(
            t.name,
            _kind(t),
            t.barrier,
            None if t.issued_at is None else _seconds(now, t.issued_at),
            lags.get(t.id),
        )
        for t in states
    ]
    return MetricFigures(
        tables=sorted(tables, key=lambda t: t.name),
        jobs=sorted(await lineage_rows.job_figures(s), key=lambda j: j.name),
        runs=sorted(await lineage_rows.run_counts(s), key=lambda r: r[0]),
        barriers_issued=await lineage_rows.barrier_count(s),
    )


def delay_of(state: TableState, now: datetime) -> float | None:
    """Now minus the issue time of the table's newest complete barrier (None: it completed none)."""
    return None if state.issued_at is None else _seconds(now, state.issued_at)


# --- internals -------------------------------------------------------------------------------------------------


def _kind(state: TableState) -> str:
    return "intermediate" if state.has_writer else "root"


def _seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def _bottleneck(path: Sequence[CriticalStep]) -> tuple[str, float] | None:
    best: tuple[str, float] | None = None
    for step in path:
        spent = step.waiting_seconds + step.processing_seconds
        if spent > 0 and (best is None or spent > best[1]):
            best = (step.job_id, spent)
    return best


@dataclass
class _CriticalPaths:
    """Resolves (table, barrier) pairs and their upstream closure level by level, then walks critical paths."""

    issued_at: dict[int, datetime]
    steps: dict[Pair, Step | None] = field(default_factory=dict)
    inputs: dict[Pair, list[Pair]] = field(default_factory=dict)
    ready: dict[Pair, datetime | None] = field(default_factory=dict)
    inputs_ready: dict[Pair, datetime | None] = field(default_factory=dict)
    critical: dict[Pair, Pair | None] = field(default_factory=dict)

    async def load(self, s: Connection, pairs: Iterable[Pair]) -> None:
        """Fetch the steps of `pairs` and of everything upstream of them at the same barriers (one query a level)."""
        pending = set(pairs) - self.steps.keys()
        for _ in range(MAX_LEVELS):
            if not pending or len(self.steps) >= MAX_PAIRS:
                return
            found = {(st.table_id, st.barrier): st for st in await lineage_rows.steps_at(s, pairs=sorted(pending))}
            for pair in pending:
                self.steps[pair] = found.get(pair)
            names = {n for st in found.values() if st.run and st.run.status == "committed" for n in st.input_names}
            idle_jobs = {st.job_id for st in found.values() if st.run and st.run.status == "idle" and st.job_id}
            ids = await lineage_rows.table_ids_by_name(s, names=sorted(names))
            sources = await lineage_rows.source_ids_of_jobs(s, job_ids=sorted(idle_jobs))
            following: set[Pair] = set()
            for pair, st in found.items():
                if st.run is None or st.job_id is None:
                    continue
                if st.run.status == "committed":
                    input_ids = [ids[n] for n in st.input_names if n in ids]
                elif st.run.status == "idle":
                    input_ids = sources.get(st.job_id, [])
                else:
                    continue
                self.inputs[pair] = [(t, st.barrier) for t in sorted(set(input_ids))]
                following.update(self.inputs[pair])
            pending = following - self.steps.keys()

    async def table_names(self, s: Connection) -> dict[int, str]:
        tables = await table_rows.by_ids(s, ids=sorted({p[0] for p in self.steps}))
        return {t.id: t.name for t in tables.values()}

    def readiness(self, start: Pair) -> datetime | None:
        """When the table of `start` completed its barrier; fills in the critical input of every pair on the way."""
        stack: list[tuple[Pair, bool]] = [(start, False)]
        while stack:
            pair, expanded = stack.pop()
            if pair in self.ready:
                continue
            inputs = self.inputs.get(pair, [])
            if not expanded and inputs:
                stack.append((pair, True))
                stack.extend((i, False) for i in inputs if i not in self.ready)
                continue
            self._settle(pair, inputs)
        return self.ready[start]

    def _settle(self, pair: Pair, inputs: Sequence[Pair]) -> None:
        st = self.steps.get(pair)
        issued = self.issued_at.get(pair[1])
        known: list[tuple[datetime, Pair]] = []
        for i in inputs:
            at = self.ready.get(i)
            if at is not None:
                known.append((at, i))
        latest = max(known, key=lambda k: (k[0], -k[1][0]), default=None)
        self.critical[pair] = latest[1] if latest else None
        self.inputs_ready[pair] = latest[0] if latest else issued
        if st is None:
            self.ready[pair] = None
        elif st.run is None:
            self.ready[pair] = issued if st.job_id is None else None  # a root: sealed (or restored) at issue
        elif st.run.status == "committed":
            self.ready[pair] = st.run.finished_at
        elif st.run.status == "idle":
            if st.run.barrier == pair[1] or latest is None:
                self.ready[pair] = st.run.finished_at
            else:
                self.ready[pair] = max(st.run.started_at, latest[0])
        else:
            self.ready[pair] = None

    def path(self, start: Pair, names: dict[int, str]) -> tuple[list[CriticalStep], bool]:
        """The critical path to `start`, from the roots; True when the walk was cut short by the bounds."""
        self.readiness(start)
        steps: list[CriticalStep] = []
        pair: Pair | None = start
        while pair is not None:
            st = self.steps.get(pair)
            if st is None:
                return list(reversed(steps)), pair not in self.steps
            step = self._step(pair, st, names)
            if step is None:
                break
            steps.append(step)
            pair = self.critical.get(pair)
        return list(reversed(steps)), False

    def _step(self, pair: Pair, st: Step, names: dict[int, str]) -> CriticalStep | None:
        run = st.run
        if run is None or st.job_name is None or run.status not in ("committed", "idle"):
            return None
        if run.status == "committed":
            assert run.finished_at is not None
            waiting = 0.0 if run.inputs_ready_at is None else _seconds(run.started_at, run.inputs_ready_at)
            return CriticalStep(
                job_id=st.job_name,
                table=names.get(pair[0], str(pair[0])),
                barrier=pair[1],
                status="committed",
                inputs_ready_at=run.inputs_ready_at,
                started_at=run.started_at,
                finished_at=run.finished_at,
                waiting_seconds=waiting,
                processing_seconds=_seconds(run.finished_at, run.started_at),
            )
        ready, inputs_ready = self.ready.get(pair), self.inputs_ready.get(pair)
        waiting = max(0.0, _seconds(ready, inputs_ready)) if ready and inputs_ready else 0.0
        return CriticalStep(
            job_id=st.job_name,
            table=names.get(pair[0], str(pair[0])),
            barrier=pair[1],
            status="idle",
            inputs_ready_at=inputs_ready,
            started_at=run.started_at,
            finished_at=run.finished_at,
            waiting_seconds=waiting,
            processing_seconds=0.0,
        )
