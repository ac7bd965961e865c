"""The FLIP-276 barrier protocol: issue and seal barriers; next / commit / abort for jobs.

A job's step is decided under its row lock. Table states are read from snapshot ranges:
- complete(snapshot): a range with a snapshot covers the barrier;
- aborted: a range without snapshot covers it (the writer aborted or skipped it) — readers skip the barrier;
- absent: the table has no range there and never will (before its first completion) — readers wait;
- pending: the barrier is past the table's frontier (its writer has not got there yet) — readers wait.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from metaservice import failpoints
from metaservice.db.transaction import in_autocommit, in_transaction
from metaservice.errors import (
    AlreadyCommitted,
    InvalidRequest,
    JobInactive,
    NotFound,
    NotInFlight,
    NotRoot,
    SnapshotConflict,
    SnapshotRegressed,
)
from metaservice.repositories import barriers as barrier_rows
from metaservice.repositories import edges as edge_rows
from metaservice.repositories import jobs as job_rows
from metaservice.repositories import runs as run_rows
from metaservice.repositories import snapshots as snapshot_rows
from metaservice.repositories import tables as table_rows
from metaservice.repositories.edges import TableRef
from metaservice.repositories.jobs import JobRow
from metaservice.repositories.runs import RunRow
from metaservice.repositories.snapshots import RangeRow
from metaservice.schemas import AbortResult, BarrierDecision, CommitResult, InputSnapshot, IssuedBarrier

logger = logging.getLogger("metaservice.barriers")

# How many barriers one `next` call may settle (idle or skipped) before answering; the next call goes on.
MAX_STEPS_PER_CALL = 1000


async def issue_barrier(
    session: AsyncSession,
    *,
    root_snapshots: Mapping[str, int],
    request_key: str | None = None,
    issued_by: str | None = "api",
) -> IssuedBarrier:
    """Issue a barrier now, sealing every root table's newest known snapshot (after `root_snapshots`).

    One autocommit statement (see `barrier_rows.issue`). With `request_key`, a repeated call returns the first
    call's barrier instead of issuing another.
    """
    roots = await in_autocommit(session, lambda c: _root_ids(c, root_snapshots), writes=False) if root_snapshots else {}

    async def allocate(c: AsyncConnection) -> barrier_rows.Issued | None:
        issued = await barrier_rows.issue(
            c,
            issued_by=issued_by,
            request_key=request_key,
            root_snapshots={roots[name]: snap for name, snap in root_snapshots.items()},
        )
        failpoints.hit("barrier_allocated")
        return issued

    issued = await in_autocommit(session, allocate)
    assert issued is not None and issued.barrier is not None and issued.issued_at is not None
    if not issued.replayed:
        logger.info("issued barrier %d sealing %d root snapshot(s)", issued.barrier, len(issued.sealed))
    return IssuedBarrier(barrier=issued.barrier, issued_at=issued.issued_at, sealed=issued.sealed)


async def report_snapshot(session: AsyncSession, *, table: str, snapshot_id: int, committed_at: datetime | None) -> int:
    """Record a new snapshot of a root table written outside MetaService; it is sealed by the next barrier."""

    async def work(s: AsyncSession) -> int:
        row = await table_rows.get(s, name=table)
        if row is None:
            raise NotFound(f"table {table!r} is not registered", table=table)
        if await table_rows.root_ids(s, ids=[row.id]) != {row.id}:
            writer = await edge_rows.writer_of(s, table_id=row.id)
            raise NotRoot(
                f"table {table!r} is written by job {writer.name if writer else '?'!r}; its writer commits snapshots",
                table=table,
                writer=writer.name if writer else None,
            )
        return await table_rows.raise_latest(s, table_id=row.id, snapshot_id=snapshot_id, at=committed_at)

    return await in_transaction(session, work)


async def next_barrier(
    session: AsyncSession, *, job_id: str, root_snapshots: Mapping[str, int], min_interval: float
) -> BarrierDecision:
    """Decide the job's next step. Idempotent: an in-flight barrier is offered again, with the same inputs.

    Two steps. First, outside the job's transaction, report the root snapshots and issue a barrier if one of
    the job's root inputs has a snapshot no barrier sealed yet (one autocommit statement, so the global clock
    lock is never held while the job is planned). Then, under the job's row lock, plan. A crash between the
    two leaves a barrier that the next call plans: barriers may be issued at any time by anyone.
    """
    retry_after = await _issue_for_job(session, job_id=job_id, root_snapshots=root_snapshots, min_interval=min_interval)

    async def work(s: AsyncSession) -> BarrierDecision:
        job = _usable(await job_rows.lock_and_touch(s, name=job_id), job_id)
        run = await run_rows.in_flight(s, job_id=job.id)
        if run is not None:
            return _process(job.name, run)
        sources, sinks = await edge_rows.sources_and_sinks(s, job_id=job.id)
        decision = await _Planner(s, job, sources, sinks).decide()
        if decision.action != "process" and retry_after is not None:
            decision.retry_after_seconds = retry_after
        return decision

    return await in_transaction(session, work)


async def _issue_for_job(
    session: AsyncSession, *, job_id: str, root_snapshots: Mapping[str, int], min_interval: float
) -> float | None:
    """Report the job's root snapshots and issue the barrier that seals them, when needed. Returns the seconds to
    wait when throttled by `min_interval`. An unknown or inactive job is left to the planning step to refuse."""

    async def look(c: AsyncConnection) -> tuple[job_rows.IssueContext | None, dict[str, int]]:
        context = await job_rows.issue_context(c, name=job_id)
        if context is None or not context.is_active:
            return None, {}
        return context, (await _root_ids(c, root_snapshots) if root_snapshots else {})

    context, roots = await in_autocommit(session, look, writes=False)
    if context is None or not (roots or (context.unsealed_sources and not context.in_flight)):
        return None

    async def allocate(c: AsyncConnection) -> barrier_rows.Issued | None:
        issued = await barrier_rows.issue(
            c,
            issued_by=f"job:{job_id}",
            root_snapshots={roots[name]: snap for name, snap in root_snapshots.items()},
            # a job with a barrier in flight only reports: it is offered that barrier again
            when_unsealed=[] if context.in_flight else context.source_ids,
            min_interval=min_interval,
        )
        if issued is not None and issued.barrier is not None:
            failpoints.hit("barrier_allocated")
        return issued

    issued = await in_autocommit(session, allocate)
    if issued is not None and issued.barrier is not None:
        logger.info("issued barrier %d sealing %d root snapshot(s)", issued.barrier, len(issued.sealed))
    if issued is None or issued.wait_seconds is None:
        return None
    return round(max(0.0, issued.wait_seconds), 3)


async def commit_barrier(
    session: AsyncSession, *, job_id: str, barrier: int, snapshots: Mapping[str, int]
) -> CommitResult:
    """Record the job's output snapshots for `barrier`. Exactly once: a repeat with the same snapshots is a no-op."""

    async def work(s: AsyncSession) -> CommitResult:
        job = await _locked_job(s, job_id, allow_inactive=True)
        run = await run_rows.at(s, job_id=job.id, barrier=barrier)
        if run is None or run.first_barrier != barrier or run.status in ("idle",):
            raise NotInFlight(
                f"barrier {barrier} is not in flight for job {job_id!r}: never handed out, or undone by a rollback",
                job_id=job_id,
                barrier=barrier,
            )
        if run.status == "aborted":
            raise NotInFlight(f"barrier {barrier} was aborted for job {job_id!r}", job_id=job_id, barrier=barrier)
        if run.status == "committed":
            if dict(run.outputs) == dict(snapshots):
                return CommitResult(job_id=job_id, barrier=barrier, snapshots=dict(run.outputs))
            raise SnapshotConflict(
                f"barrier {barrier} of job {job_id!r} was committed with other snapshots",
                job_id=job_id,
                barrier=barrier,
                committed=dict(run.outputs),
            )
        sinks = await edge_rows.tables_of(s, job_id=job.id, role="sink")
        _check_sinks(job_id, sinks, snapshots)
        for sink in sinks:
            newest = await snapshot_rows.last_snapshot(s, table_id=sink.id)
            if newest is not None and snapshots[sink.name] < newest:
                raise SnapshotRegressed(
                    f"snapshot {snapshots[sink.name]} of {sink.name!r} is lower than {newest}, committed earlier",
                    table=sink.name,
                    snapshot_id=snapshots[sink.name],
                    previous_snapshot_id=newest,
                )
        for sink in sinks:
            snapshot = snapshots[sink.name]
            await _record(s, table_id=sink.id, barrier=barrier, snapshot_id=snapshot, kind="committed", job=job)
            await table_rows.raise_latest(s, table_id=sink.id, snapshot_id=snapshot, at=None)
        await run_rows.finish(s, run_id=run.id, status="committed", outputs=dict(snapshots))
        await job_rows.set_last_barrier(s, job_id=job.id, barrier=barrier)
        return CommitResult(job_id=job_id, barrier=barrier, snapshots=dict(snapshots))

    return await in_transaction(session, work)


async def abort_barrier(session: AsyncSession, *, job_id: str, barrier: int, reason: str | None) -> AbortResult:
    """Give up `barrier`: it never completes in the job's sinks and downstream jobs skip it. Idempotent."""

    async def work(s: AsyncSession) -> AbortResult:
        job = await _locked_job(s, job_id, allow_inactive=True)
        run = await run_rows.at(s, job_id=job.id, barrier=barrier)
        if run is None or run.first_barrier != barrier or run.status == "idle":
            raise NotInFlight(
                f"barrier {barrier} is not in flight for job {job_id!r}: never handed out, or undone by a rollback",
                job_id=job_id,
                barrier=barrier,
            )
        if run.status == "committed":
            raise AlreadyCommitted(
                f"barrier {barrier} of job {job_id!r} is already committed", job_id=job_id, barrier=barrier
            )
        if run.status == "in_flight":
            sinks = await edge_rows.tables_of(s, job_id=job.id, role="sink")
            await abort_run(s, job=job, run=run, sinks=sinks, reason=reason or "aborted by the job")
        return AbortResult(job_id=job_id, barrier=barrier)

    return await in_transaction(session, work)


async def abort_run(s: AsyncSession, *, job: JobRow, run: RunRow, sinks: Sequence[TableRef], reason: str) -> None:
    """Mark an in-flight run aborted and its barrier never-complete in the job's sinks (caller holds the job lock)."""
    for sink in sinks:
        await _record(s, table_id=sink.id, barrier=run.barrier, snapshot_id=None, kind="aborted", job=job)
    await run_rows.finish(s, run_id=run.id, status="aborted", reason=reason)
    await job_rows.set_last_barrier(s, job_id=job.id, barrier=run.barrier)


# --- internals -------------------------------------------------------------------------------------------------


async def _locked_job(s: AsyncSession, job_id: str, *, allow_inactive: bool = False) -> JobRow:
    return _usable(await job_rows.lock(s, name=job_id), job_id, allow_inactive=allow_inactive)


def _usable(job: JobRow | None, job_id: str, *, allow_inactive: bool = False) -> JobRow:
    if job is None:
        raise NotFound(f"job {job_id!r} is not registered", job_id=job_id)
    if not job.is_active and not allow_inactive:
        raise JobInactive(f"job {job_id!r} was unregistered; register it again to resume", job_id=job_id)
    return job


async def _root_ids(c: AsyncConnection, root_snapshots: Mapping[str, int]) -> dict[str, int]:
    """{name: table id} of the reported root tables; refuses unknown tables and tables a job writes."""
    tables = await table_rows.roots_by_name(c, names=list(root_snapshots))
    missing = sorted(set(root_snapshots) - set(tables))
    if missing:
        raise NotFound(f"tables not registered: {', '.join(missing)}", tables=missing)
    written = sorted(name for name, (_, is_root) in tables.items() if not is_root)
    if written:
        raise NotRoot(f"tables written by a job cannot be reported as roots: {', '.join(written)}", tables=written)
    return {name: table_id for name, (table_id, _) in tables.items()}


def _process(job_name: str, run: RunRow, skipped: Sequence[int] = ()) -> BarrierDecision:
    inputs = {name: InputSnapshot(**value) for name, value in run.inputs.items()}
    return BarrierDecision(job_id=job_name, action="process", barrier=run.barrier, inputs=inputs, skipped=list(skipped))


def _check_sinks(job_id: str, sinks: Sequence[TableRef], snapshots: Mapping[str, int]) -> None:
    expected = {t.name for t in sinks}
    missing, extra = sorted(expected - set(snapshots)), sorted(set(snapshots) - expected)
    if missing or extra:
        errors = [{"loc": ["body", "snapshots", name], "msg": "missing sink of the job"} for name in missing]
        errors += [{"loc": ["body", "snapshots", name], "msg": "not a sink of the job"} for name in extra]
        raise InvalidRequest(
            f"snapshots must name exactly the sinks of job {job_id!r}: {sorted(expected)}",
            errors=errors,
            missing=missing,
            unexpected=extra,
        )


async def _record(
    s: AsyncSession, *, table_id: int, barrier: int, snapshot_id: int | None, kind: str, job: JobRow
) -> None:
    """Make `table_id` hold `snapshot_id` (None: never complete) at `barrier`, keeping its ranges contiguous."""
    last = (await snapshot_rows.last(s, table_ids=[table_id])).get(table_id)
    before = await barrier_rows.before(s, barrier=barrier)
    if last is not None and (last.last_barrier is None or last.last_barrier >= barrier):
        raise SnapshotConflict(
            f"table already holds a snapshot for barrier {barrier} (it was written by another job)",
            barrier=barrier,
        )
    if last is not None and last.snapshot_id == snapshot_id and last.kind != "sealed":
        await snapshot_rows.extend(s, range_id=last.id, through=barrier)
        return
    if last is not None and before is not None and last.last_barrier is not None and last.last_barrier < before:
        await snapshot_rows.extend(s, range_id=last.id, through=before)  # unchanged up to this barrier
    await snapshot_rows.insert_range(
        s, table_id=table_id, first=barrier, last=barrier, snapshot_id=snapshot_id, kind=kind, job_id=job.id
    )


@dataclass
class _State:
    """One input's state at one barrier."""

    kind: str  # complete | aborted | absent
    snapshot_id: int | None
    range: RangeRow | None


class _Planner:
    """Walks one job forward from its last barrier: settles idle and skipped barriers, finds the next to process.

    Before deciding, it settles the writers of inputs that lag behind: a writer whose inputs did not change
    completes those barriers without being asked (PRODUCT.md "Completion"), so independent branches stay
    alignable even when a job runs rarely. Locks are taken downstream before upstream; the lineage is acyclic,
    so two planners never wait on each other in a cycle. `settle_only` planners never start a barrier.
    """

    def __init__(
        self,
        s: AsyncSession,
        job: JobRow,
        sources: Sequence[TableRef],
        sinks: Sequence[TableRef],
        *,
        settle_only: bool = False,
        visited: set[int] | None = None,
    ) -> None:
        self.s, self.job, self.sources, self.sinks = s, job, list(sources), list(sinks)
        self.source_ids = [t.id for t in self.sources]
        self.skipped: list[int] = []
        self.settle_only = settle_only
        self.visited = visited if visited is not None else {job.id}

    async def decide(self) -> BarrierDecision:
        head = await barrier_rows.head(self.s)
        if head is None or not self.sources:
            return self._answer("idle", None)
        roots = {t.id for t in self.sources if t.is_root}
        lasts = await self._settle_upstream(head.barrier, roots)
        for _ in range(MAX_STEPS_PER_CALL):
            last = self.job.last_barrier
            frontier = self._frontier(head.barrier, roots, lasts)
            if frontier is None:
                return await self._wait_after(last, fallback=head.barrier)
            if last is None:
                target = frontier
            else:
                if frontier <= last:
                    return await self._wait_after(last)
                change = await self._next_change(last)
                if change is None or change >= frontier:
                    await self._idle_through(frontier)
                    return await self._wait_after(frontier)
                if change > last:
                    await self._idle_through(change)
                following = await barrier_rows.after(self.s, barrier=change)
                assert following is not None and following <= frontier
                target = following
            states = await self._states(target)
            absent = sorted(name for name, st in states.items() if st.kind == "absent")
            if absent:
                return self._answer("wait", target)
            aborted = sorted(name for name, st in states.items() if st.kind == "aborted")
            if aborted:
                await self._skip(target, f"skipped: input {', '.join(aborted)} aborted barrier {target}")
                continue
            previous = await run_rows.last_committed(self.s, job_id=self.job.id)
            snapshots = {name: st.snapshot_id for name, st in states.items()}
            before = {name: value["snapshot_id"] for name, value in (previous.inputs if previous else {}).items()}
            if previous is not None and snapshots == before and await self._sinks_have_data():
                await self._idle_through(target, restore=True)
                continue
            if self.settle_only:
                return self._answer("process", target)
            return await self._start(target, states, previous)
        return self._answer("wait", None)

    async def _settle_upstream(self, head: int, roots: set[int]) -> dict[int, RangeRow]:
        """Let the writers of lagging intermediate inputs complete the barriers where their inputs did not change.

        Returns the inputs' newest ranges after settling. They stay current while this job is planned: planning
        writes only the job's sinks, and a job never reads what it writes."""
        lasts = await snapshot_rows.last(self.s, table_ids=self.source_ids)
        settled = False
        for table_id in self.source_ids:
            last = lasts.get(table_id)
            if table_id in roots or last is None or last.last_barrier is None or last.last_barrier >= head:
                continue
            writer = await edge_rows.writer_of(self.s, table_id=table_id)
            if writer is None or writer.id in self.visited:
                continue
            self.visited.add(writer.id)
            locked = await job_rows.lock(self.s, name=writer.name)
            if locked is None or not locked.is_active or await run_rows.in_flight(self.s, job_id=locked.id):
                continue
            upstream = _Planner(
                self.s,
                locked,
                *await edge_rows.sources_and_sinks(self.s, job_id=locked.id),
                settle_only=True,
                visited=self.visited,
            )
            await upstream.decide()
            settled = True
        return await snapshot_rows.last(self.s, table_ids=self.source_ids) if settled else lasts

    def _frontier(self, head: int, roots: set[int], lasts: Mapping[int, RangeRow]) -> int | None:
        """The newest barrier every input has settled (completed or aborted); None if one has settled none."""
        values: list[int] = []
        for table_id in self.source_ids:
            last = lasts.get(table_id)
            if last is None:
                if table_id not in roots:
                    return None
                values.append(head)  # a root without snapshot: absent everywhere (handled as "wait")
            else:
                values.append(head if last.last_barrier is None else last.last_barrier)
        return min(values)

    async def _next_change(self, last: int) -> int | None:
        """The newest barrier up to which no input changes after `last` (None: no change up to the head)."""
        covering = await snapshot_rows.covering(self.s, table_ids=self.source_ids, barrier=last)
        ends: list[int] = []
        for table_id in self.source_ids:
            row = covering.get(table_id)
            if row is None:
                ends.append(last)
            elif row.last_barrier is not None:
                ends.append(row.last_barrier)
        return min(ends) if ends else None

    async def _states(self, barrier: int) -> dict[str, _State]:
        covering = await snapshot_rows.covering(self.s, table_ids=self.source_ids, barrier=barrier)
        states: dict[str, _State] = {}
        for table in self.sources:
            row = covering.get(table.id)
            if row is None:
                states[table.name] = _State("absent", None, None)
            elif row.snapshot_id is None:
                states[table.name] = _State("aborted", None, row)
            else:
                states[table.name] = _State("complete", row.snapshot_id, row)
        return states

    async def _sinks_have_data(self) -> bool:
        for sink in self.sinks:
            if await snapshot_rows.last_snapshot(self.s, table_id=sink.id) is None:
                return False
        return True

    async def _idle_through(self, barrier: int, *, restore: bool = False) -> None:
        """Inputs did not change up to `barrier`: sinks keep their state, the job moves on without work.

        With `restore`, the inputs equal those of the last committed barrier, so sinks hold that barrier's
        snapshots again (even after a stretch of skipped barriers).
        """
        last = self.job.last_barrier
        if last is not None and barrier <= last:
            return
        for sink in self.sinks:
            if restore:
                snapshot = await snapshot_rows.last_snapshot(self.s, table_id=sink.id)
                await _record(
                    self.s, table_id=sink.id, barrier=barrier, snapshot_id=snapshot, kind="idle", job=self.job
                )
                continue
            row = (await snapshot_rows.last(self.s, table_ids=[sink.id])).get(sink.id)
            if row is not None and row.last_barrier is not None and row.last_barrier < barrier:
                await snapshot_rows.extend(self.s, range_id=row.id, through=barrier)
        previous = await run_rows.last(self.s, job_id=self.job.id)
        if previous is not None and previous.status == "idle" and previous.barrier == last:
            await run_rows.extend(self.s, run_id=previous.id, through=barrier)
        else:
            first = barrier if last is None else await barrier_rows.after(self.s, barrier=last)
            await run_rows.insert_run(
                self.s,
                job_id=self.job.id,
                first=first or barrier,
                barrier=barrier,
                status="idle",
                inputs={},
                reason="inputs unchanged",
                finished=True,
            )
        await self._advance(barrier)

    async def _skip(self, barrier: int, reason: str) -> None:
        for sink in self.sinks:
            await _record(self.s, table_id=sink.id, barrier=barrier, snapshot_id=None, kind="aborted", job=self.job)
        await run_rows.insert_run(
            self.s,
            job_id=self.job.id,
            first=barrier,
            barrier=barrier,
            status="aborted",
            inputs={},
            reason=reason,
            finished=True,
        )
        self.skipped.append(barrier)
        await self._advance(barrier)

    async def _advance(self, barrier: int) -> None:
        await job_rows.set_last_barrier(self.s, job_id=self.job.id, barrier=barrier)
        self.job.last_barrier = barrier

    async def _start(self, barrier: int, states: Mapping[str, _State], previous: RunRow | None) -> BarrierDecision:
        before = previous.inputs if previous is not None else {}
        inputs: dict[str, Any] = {
            name: {
                "snapshot_id": st.snapshot_id,
                "previous_snapshot_id": before.get(name, {}).get("snapshot_id"),
            }
            for name, st in states.items()
        }
        issued = await barrier_rows.get(self.s, barrier=barrier)
        ready = [issued.issued_at] if issued is not None else []
        ready += [
            st.range.created_at if st.range.first_barrier == barrier else st.range.updated_at
            for st in states.values()
            if st.range is not None and st.range.kind != "sealed"
        ]
        run = await run_rows.insert_run(
            self.s,
            job_id=self.job.id,
            first=barrier,
            barrier=barrier,
            status="in_flight",
            inputs=inputs,
            inputs_ready_at=max(ready) if ready else None,
        )
        return _process(self.job.name, run, self.skipped)

    async def _wait_after(self, last: int | None, *, fallback: int | None = None) -> BarrierDecision:
        pending = await barrier_rows.after(self.s, barrier=last) if last is not None else fallback
        if pending is None:
            return self._answer("idle", None)
        return self._answer("wait", pending)

    def _answer(self, action: str, barrier: int | None) -> BarrierDecision:
        return BarrierDecision(
            job_id=self.job.name,
            action=action,
            barrier=barrier,
            skipped=list(self.skipped),
        )
