"""The /metrics refresh reads only what changed.

Every server process's figures process refreshes the database figures of /metrics (metrics_process.py). Reading
them whole (`delays.metric_figures`: every table's newest complete barrier, the lag closure over the whole lineage,
every job's last run and run counts) costs in proportion to the catalog, every few seconds, even when nothing
changed. `MetricState` keeps what it read, the inputs of the figures rather than the figures:

- per live table: name, whether it completed a barrier, the end of its newest range holding a snapshot (None: open,
  it holds through the newest barrier) and that barrier's issue time;
- the current lineage (each job's sources and sinks) and, derived from it, the data origins upstream of each table;
- per data origin, its new snapshots (barrier, issue time) after a floor at or below every lagging table's barrier;
- per active job: name, last barrier and its issue time, its last committed run's timings, its run counts;
- the barriers after a floor at or below every job's last barrier, the newest barrier and the number issued;
- the snapshot of the read (`pg_current_snapshot()`).

A refresh asks which rows were written since that snapshot (repositories/metrics.py: their `changed_xid` markers
and `metric_removals`), reads those tables and jobs again, the new barriers, the current edges of jobs whose
lineage changed and the new snapshots of origins whose ranges changed, and computes the figures from what it keeps.
What depends only on time is computed, not read: a delay is now minus the kept issue time, a lag now minus the kept
arrival time of the oldest data the table lacks, a job's lag the newest barrier's issue time minus its last one's.
With nothing changed a refresh is three statements returning one row and no rows; the figures equal a full read's
exactly (tests/api/test_metric_state.py compares them after changes of every kind).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, NamedTuple

from metaservice.db.database import Connection
from metaservice.repositories import metrics as metric_rows
from metaservice.repositories.lineage import JobFigures
from metaservice.services import lag as lag_figures
from metaservice.services.delays import MetricFigures, TableFigure

# A refresh reads everything again after this many incremental ones (see `MetricState`).
FULL_EVERY = 120

# The lineage is kept as tuples of ids, not sets: 180,000 fewer objects for the cyclic collector to walk at
# 100,000 tables.


class _Table(NamedTuple):
    name: str
    completed: bool  # it holds a range with a snapshot
    last_barrier: int | None  # that range's end; None while open (it holds through the newest barrier)
    issued_at: datetime | None  # the issue time of `last_barrier`


class _Job(NamedTuple):
    name: str
    last_barrier: int | None
    last_issued_at: datetime | None
    duration: float | None
    waiting: float | None
    runs: int
    counts: tuple[int, int, int]  # commits, aborts, skips


@dataclass
class _Kept:
    """What a read left: the inputs of the figures, and the snapshot they are as of."""

    snapshot: str
    xmin: int
    started: datetime  # the server's start: another one (a restart, a failover) is read in full
    head: int | None
    head_at: datetime | None
    barrier_count: int
    barrier_floor: int  # every barrier after it is in `barriers`
    barriers: list[int]
    tables: dict[int, _Table]
    jobs: dict[int, _Job]
    sinks: dict[int, tuple[int, ...]] = field(default_factory=dict)  # job -> tables it writes (current lineage)
    sources: dict[int, tuple[int, ...]] = field(default_factory=dict)  # job -> tables it reads
    writer: dict[int, int] = field(default_factory=dict)  # table -> the job writing it
    origins: dict[int, frozenset[int]] = field(default_factory=dict)  # live table -> its data origins
    seal_floor: int = -1  # every origin's new snapshots after it are in `seals`
    seals: dict[int, list[tuple[int, datetime]]] = field(default_factory=dict)  # origin -> new snapshots
    table_order: list[int] | None = None  # live tables by name (None: to sort again)
    job_order: list[int] | None = None


class MetricState:
    """The figures of /metrics kept between refreshes and brought up to date from what changed (module docstring).

    A refresh reads everything again (`full_reason` says why) when it has nothing kept; when the database it reads
    is another server than the last (its start time changed: a restart, a failover) or went back (the snapshot's
    xmin or the newest barrier is lower: a failover to an asynchronous standby that lost the tail, a restore), since
    transaction ids and barriers it kept may now mean other writes; after a refresh failed (an outage: what it had
    applied of that read is not trusted); when a catalog table was truncated; when a table's barrier or a job's
    last barrier fell below the floor of the history kept (a rollback, a revived table); and every `full_every`
    refreshes anyway. That last one bounds how long a change made without a marker could stay unseen: rows written
    with triggers disabled (`session_replication_role = replica`, a restore with `--disable-triggers`) or by a
    future write path on a table without one; a full read every ten minutes (at 5 s) costs a 120th of reading in
    full every time."""

    def __init__(self, *, full_every: int = FULL_EVERY) -> None:
        self.full_every = full_every
        self._kept: _Kept | None = None
        self._now = datetime.min.replace(tzinfo=UTC)  # the database's clock at the last read
        self._since_full = 0
        self.full_reason: str | None = None  # why the last refresh read everything (None: it read the changes)
        self.rows_read = 0  # rows the last refresh's statements returned (tests, bench)
        self.statements = 0  # statements the last refresh ran

    def invalidate(self) -> None:
        """Forget what was kept: the next refresh reads everything (after a failed refresh, an outage)."""
        self._kept = None

    async def refresh(self, s: Connection) -> MetricFigures:
        """The figures as of the caller's transaction (REPEATABLE READ: one snapshot), read from what changed since
        the previous refresh, or in full (see the class docstring)."""
        await self.read(s)
        return self.figures()

    async def read(self, s: Connection) -> None:
        """Bring what is kept up to the caller's transaction's snapshot (`refresh` without building the figures)."""
        self.rows_read = self.statements = 0
        try:
            now, snapshot, xmin, started, head = self._count([await metric_rows.probe(s)])[0]
            kept = self._kept
            reason = self._full_reason(kept, xmin=xmin, started=started, head=head)
            if reason is None and kept is not None:
                reason = await self._apply(s, kept, head)
            if reason is not None or kept is None:
                kept = await self._load(s, started=started, head=head)
                self._since_full = 0
            else:
                self._since_full += 1
            kept.snapshot, kept.xmin, kept.started = snapshot, xmin, started
            self._kept, self._now, self.full_reason = kept, now, reason
        except BaseException:
            self._kept = None
            raise

    def figures(self) -> MetricFigures:
        """The figures as of the last `read`. Python in proportion to the catalog (about 40 ms per 10,000 tables
        here): the figures process (metrics_process.py) builds them only when a scrape asks, never a server
        process."""
        if self._kept is None:
            raise LookupError("nothing kept: read first")
        return _figures(self._kept, self._now)

    # --- reads ----------------------------------------------------------------------------------------------------

    def _count(self, rows: list[Any]) -> list[Any]:
        self.statements += 1
        self.rows_read += len(rows)
        return rows

    def _full_reason(self, kept: _Kept | None, *, xmin: int, started: datetime, head: int | None) -> str | None:
        if kept is None:
            return "nothing kept"
        if self._since_full >= self.full_every:
            return "periodic"
        if started != kept.started:
            return "another database server"
        if xmin < kept.xmin or (kept.head is not None and (head is None or head < kept.head)):
            return "the database went back"
        return None

    async def _load(self, s: Connection, *, started: datetime, head: int | None) -> _Kept:
        """Read everything (the snapshot is set by the caller)."""
        jobs = {row[0]: _job(row) for row in self._count(await metric_rows.jobs(s, ids=None))}
        lasts = [j.last_barrier for j in jobs.values() if j.last_barrier is not None]
        floor = -1 if head is None else min([*lasts, head - 1])
        barriers = self._count(await metric_rows.barriers_after(s, after=floor))
        kept = _Kept(
            snapshot="",
            xmin=0,
            started=started,
            head=head,
            head_at=barriers[-1][1] if barriers else None,
            barrier_count=self._count([await metric_rows.barrier_count(s)])[0],
            barrier_floor=floor,
            barriers=[b for b, _ in barriers],
            tables={},
            jobs=jobs,
        )
        for table_id, name, _live, completed, last, at in self._count(await metric_rows.tables(s, ids=None)):
            kept.tables[table_id] = _Table(name, completed, last, at)
        _add_edges(kept, self._count(await metric_rows.current_edges(s, job_ids=None)))
        behind = _lagging_floor(kept)
        kept.seal_floor = behind if behind is not None else (-1 if head is None else head)
        _derive_origins(kept)
        needed = set().union(*kept.origins.values()) if kept.origins else set()
        await self._read_seals(s, kept, dict.fromkeys(needed, kept.seal_floor))
        return kept

    async def _apply(self, s: Connection, kept: _Kept, head: int | None) -> str | None:
        """Bring `kept` up to the caller's snapshot from what changed since its own; a reason to read everything
        instead, or None."""
        tables: set[int] = set()
        ranges_from: dict[int, int] = {}
        lineage: set[int] = set()
        jobs: set[int] = set()
        removed: set[int] = set()
        for kind, ident, detail in self._count(await metric_rows.changes(s, since=kept.snapshot)):
            if ident is None:
                return "a catalog table was truncated"
            if kind == "table":
                tables.add(ident)
            elif kind == "range" and detail is not None:  # ranges without a snapshot change no figure
                tables.add(ident)
                ranges_from[ident] = detail
            elif kind == "lineage":
                lineage.add(ident)
            elif kind in ("job", "run"):
                jobs.add(ident)
            elif kind == "removed":
                (tables if detail == 0 else jobs).add(ident)
                if detail == 0:
                    removed.add(ident)

        # Barriers are issued under the clock's row lock, held to commit: they become visible in order, so the new
        # ones are those after the newest kept.
        if head is not None and (kept.head is None or head > kept.head):
            new = self._count(await metric_rows.barriers_after(s, after=-1 if kept.head is None else kept.head))
            kept.barriers.extend(b for b, _ in new)
            kept.barrier_count += len(new)
            kept.head, kept.head_at = new[-1]

        lineage_changed = bool(lineage)
        if lineage:
            for job_id in lineage:
                for table_id in kept.sinks.pop(job_id, ()):
                    if kept.writer.get(table_id) == job_id:
                        del kept.writer[table_id]
                kept.sources.pop(job_id, None)
            _add_edges(kept, self._count(await metric_rows.current_edges(s, job_ids=sorted(lineage))))

        added: set[int] = set()
        if tables:
            for table_id, name, live, completed, last, at in self._count(
                await metric_rows.tables(s, ids=sorted(tables))
            ):
                old = kept.tables.pop(table_id, None)
                if live:
                    kept.tables[table_id] = _Table(name, completed, last, at)
                    if old is None or old.name != name:
                        added.add(table_id)
                        kept.table_order = None
                elif old is not None:
                    kept.table_order = None
                    lineage_changed = True  # the origins of live tables are derived for live tables only

        if jobs:
            for row in self._count(await metric_rows.jobs(s, ids=sorted(jobs))):
                old_job = kept.jobs.pop(row[0], None)
                if row[2]:
                    kept.jobs[row[0]] = _job(row)
                    if old_job is None or old_job.name != row[1]:
                        kept.job_order = None
                elif old_job is not None:
                    kept.job_order = None

        # The history kept must reach back far enough: every job's last barrier, every lagging table's barrier.
        lasts = [j.last_barrier for j in kept.jobs.values() if j.last_barrier is not None]
        if lasts and min(lasts) < kept.barrier_floor:
            return "a job's last barrier went back past the barriers kept"
        if lasts and min(lasts) > kept.barrier_floor:  # forget the barriers no job can count any more
            cut = bisect.bisect_right(kept.barriers, min(lasts))
            del kept.barriers[:cut]
            kept.barrier_floor = min(lasts)
        behind = _lagging_floor(kept)
        if behind is not None and behind < kept.seal_floor:
            return "a table's barrier went back past the new snapshots kept"

        if lineage_changed or added:
            _derive_origins(kept)
        needed = set().union(*kept.origins.values()) if kept.origins else set()
        for origin in kept.seals.keys() - needed:
            del kept.seals[origin]
        if behind is not None and behind > kept.seal_floor:  # forget new snapshots no lagging table can lack
            kept.seal_floor = behind
            for listed in kept.seals.values():
                del listed[: bisect.bisect_right(listed, (behind, _LATEST))]
        reread = dict.fromkeys(needed - kept.seals.keys(), kept.seal_floor)
        for table_id, first in ranges_from.items():
            if table_id in needed and table_id not in reread:
                reread[table_id] = max(first - 1, kept.seal_floor)
        for table_id in removed & needed:
            reread[table_id] = kept.seal_floor
        await self._read_seals(s, kept, reread)
        return None

    async def _read_seals(self, s: Connection, kept: _Kept, after: dict[int, int]) -> None:
        """Replace the new snapshots of each origin of `after` past its barrier by what the database holds."""
        if not after:
            return
        found: dict[int, list[tuple[int, datetime]]] = {}
        for origin, barrier, at in self._count(await metric_rows.new_data(s, after=sorted(after.items()))):
            found.setdefault(origin, []).append((barrier, at))
        for origin, barrier in after.items():
            listed = kept.seals.get(origin, [])
            kept.seals[origin] = listed[: bisect.bisect_right(listed, (barrier, _LATEST))] + sorted(
                found.get(origin, [])
            )


_LATEST = datetime.max.replace(tzinfo=UTC)


def _number(value: Decimal | float | None) -> float | None:
    return None if value is None else float(value)


def _job(row: metric_rows.JobRow) -> _Job:
    _id, name, _active, last, last_at, duration, waiting, runs, commits, aborts, skips = row
    return _Job(
        name=str(name),
        last_barrier=None if last is None else int(last),
        last_issued_at=last_at,
        duration=_number(duration),
        waiting=_number(waiting),
        runs=int(runs),
        counts=(int(commits), int(aborts), int(skips)),
    )


def _add_edges(kept: _Kept, rows: list[Any]) -> None:
    """Set the sources and sinks of the jobs `rows` (job id, table id, role) name to exactly those rows."""
    sinks: dict[int, set[int]] = {}
    sources: dict[int, set[int]] = {}
    for job_id, table_id, role in rows:
        (sinks if role == "sink" else sources).setdefault(job_id, set()).add(table_id)
        if role == "sink":
            kept.writer[table_id] = job_id
    kept.sinks.update((job_id, tuple(sorted(tables))) for job_id, tables in sinks.items())
    kept.sources.update((job_id, tuple(sorted(tables))) for job_id, tables in sources.items())


def _derive_origins(kept: _Kept) -> None:
    """The data origins upstream of every live table, over the kept lineage (as services/lag.py derives them)."""
    writer = dict.fromkeys(kept.writer, True)
    sources = {t: sorted(kept.sources[j]) for t, j in kept.writer.items() if kept.sources.get(j)}
    kept.origins = lag_figures.origins_of(writer, sources, sorted(kept.tables))


def _barrier_of(kept: _Kept, table: _Table) -> tuple[int | None, datetime | None]:
    """The newest barrier the table completed and its issue time (an open range holds through the newest)."""
    if not table.completed:
        return None, None
    if table.last_barrier is None:
        return kept.head, kept.head_at
    return table.last_barrier, table.issued_at


def _lagging_floor(kept: _Kept) -> int | None:
    """The lowest barrier of a table behind the newest barrier (None: none is)."""
    if kept.head is None:
        return None
    barriers = [b for t in kept.tables.values() if (b := _barrier_of(kept, t)[0]) is not None and b < kept.head]
    return min(barriers, default=None)


def _figures(kept: _Kept, now: datetime) -> MetricFigures:
    """The figures from what is kept, as `delays.metric_figures_in` computes them from the database."""
    if kept.table_order is None:
        kept.table_order = sorted(kept.tables, key=lambda t: kept.tables[t].name)
    if kept.job_order is None:
        kept.job_order = sorted(kept.jobs, key=lambda j: kept.jobs[j].name)
    tables = []
    # Tables of one chain share their origins (one frozenset) and mostly their barrier: one lookup each pair.
    lags: dict[tuple[int, frozenset[int]], float] = {}
    for table_id in kept.table_order:
        t = kept.tables[table_id]
        barrier, issued_at = _barrier_of(kept, t)
        lag: float | None = None
        if barrier is not None:
            lag = 0.0
            if kept.head is not None and barrier < kept.head:
                key = (barrier, kept.origins.get(table_id, frozenset()))
                lag = lags.get(key)
                if lag is None:
                    oldest = lag_figures.oldest_lacking(barrier, key[1], kept.seals)
                    lag = lags[key] = lag_figures.lag_seconds(oldest, now)
        tables.append(
            TableFigure(
                t.name,
                "intermediate" if table_id in kept.writer else "root",
                barrier,
                None if issued_at is None else (now - issued_at).total_seconds(),
                lag,
            )
        )
    jobs, runs = [], []
    for job_id in kept.job_order:
        j = kept.jobs[job_id]
        lag_barriers = lag_seconds = None
        if j.last_barrier is not None:
            lag_barriers = len(kept.barriers) - bisect.bisect_right(kept.barriers, j.last_barrier)
            if kept.head_at is not None and j.last_issued_at is not None:
                lag_seconds = (kept.head_at - j.last_issued_at).total_seconds()
        jobs.append(JobFigures(j.name, j.last_barrier, lag_barriers, lag_seconds, j.duration, j.waiting))
        if j.runs:
            runs.append((j.name, *j.counts))
    return MetricFigures(tables=tables, jobs=jobs, runs=runs, barriers_issued=kept.barrier_count)
