"""The FLIP-276 barrier protocol: issue and seal barriers; next / commit / abort for jobs.

Every step is read → decide → compare-and-set write: `repositories/protocol` gathers the job's state in one
statement, `services/planner` decides, and one statement writes the outcome if no other step changed the job
meanwhile (else the step is planned again). Allocations, gathers and writes are each coalesced with the concurrent
steps of other jobs into one statement on the process's own connection (`repositories/allocator.py`,
`db/coalescer.py`; each process builds them in `metaservice/runtime.py`); a step takes a pooled connection only
for what it rarely needs. Requests are validated before anything is written: an answer of 4xx means nothing changed
(docs/design.md, rule 10).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import anyio

from metaservice import failpoints
from metaservice.db.database import Connection, Database
from metaservice.db.transaction import Unit, in_autocommit
from metaservice.domain.world import JobView, RunView
from metaservice.errors import (
    AlreadyCommitted,
    Forbidden,
    InvalidRequest,
    JobInactive,
    MetaServiceError,
    NotFound,
    NotInFlight,
    NotRoot,
    PartialRootGroup,
    SnapshotConflict,
    SnapshotRegressed,
    TableRetired,
    Unavailable,
)
from metaservice.openlineage import runs as openlineage
from metaservice.openlineage.runs import ParentRun
from metaservice.repositories import protocol as protocol_rows
from metaservice.repositories import tables as table_rows
from metaservice.repositories import versions as version_rows
from metaservice.repositories.allocator import Allocation, AllocationRequest
from metaservice.repositories.protocol import Gathered, GatherRequest
from metaservice.repositories.tables import TableRow
from metaservice.schemas import (
    AbortResult,
    BarrierDecision,
    CommitResult,
    InputSnapshot,
    IssuedBarrier,
    SinkSnapshot,
)
from metaservice.services import commit_hints
from metaservice.services.planner import (
    Allocate,
    Idle,
    NeedAfter,
    NeedJobs,
    NeedRanges,
    Outcome,
    Planner,
    Process,
    Wait,
)
from metaservice.services.tokens import ANONYMOUS_ADMIN, Principal

if TYPE_CHECKING:
    from metaservice.runtime import Runtime  # built in the lifespan and passed in; never built here

logger = logging.getLogger("metaservice.barriers")

T = TypeVar("T")

# A step whose job kept changing under it (compare-and-set lost this often) answers 503: retry.
MAX_ATTEMPTS = 8
# Fetches one plan may ask for (upstream writers, more ranges, barrier lookups) before it is cut short.
MAX_FETCHES = 64


async def issue_barrier(
    rt: Runtime, *, root_snapshots: Mapping[str, int], request_key: str | None = None, issued_by: str = "api"
) -> IssuedBarrier:
    """Issue a barrier now, sealing every root table's newest known snapshot (after `root_snapshots`).

    Shares one allocation call with concurrent requests. With `request_key`, a repeated call returns the first
    call's barrier instead of issuing another.
    """
    if root_snapshots:
        await _check_whole_groups(rt, root_snapshots)
    allocation = await _allocate(
        rt, AllocationRequest("barrier", by=issued_by, key=request_key, roots=dict(root_snapshots))
    )
    assert allocation.barrier is not None and allocation.issued_at is not None
    if not allocation.replayed:
        logger.info("issued barrier %d sealing %d root snapshot(s)", allocation.barrier, len(allocation.sealed))
    return IssuedBarrier(barrier=allocation.barrier, issued_at=allocation.issued_at, sealed=allocation.sealed)


async def _check_whole_groups(rt: Runtime, root_snapshots: Mapping[str, int]) -> None:
    """A report naming a root of a group names every root of it: else a barrier would seal a part of the group."""

    async def groups(unit: Unit) -> dict[str, list[str]]:
        return await table_rows.groups_of(await unit.connection(), names=list(root_snapshots))

    for group, members in (await in_autocommit(rt.database, groups)).items():
        missing = [t for t in members if t not in root_snapshots]
        if missing:
            raise PartialRootGroup(
                f"root group {group!r} is reported together: the report lacks {', '.join(missing)}",
                root_group=group,
                tables=members,
                missing=missing,
            )


async def report_snapshot(rt: Runtime, *, table: str, snapshot_id: int, committed_at: datetime | None) -> int:
    """Record a new snapshot of a root table written outside MetaService; the next barrier seals it. An orphan
    (its writer job went) becomes a root again when reported at or above its newest known snapshot."""
    del committed_at  # accepted for the record; the database clock stamps reports

    async def known(unit: Unit) -> TableRow | None:
        return await table_rows.get(await unit.connection(), name=table)

    row = await in_autocommit(rt.database, known)
    if row is not None and row.retired_at is not None:
        raise TableRetired(f"table {table!r} was retired by an admin; revive it to report snapshots", table=table)
    if row is not None and row.root_group is not None:
        await _check_whole_groups(rt, {table: snapshot_id})
    allocation = await _allocate(rt, AllocationRequest("report", by="api", roots={table: snapshot_id}))
    return allocation.latest[table]


async def next_barrier(
    rt: Runtime,
    *,
    job_id: str,
    root_snapshots: Mapping[str, int],
    min_interval: float,
    start: str | int | None = None,
    principal: Principal = ANONYMOUS_ADMIN,
) -> BarrierDecision:
    """Decide the job's next step. Idempotent: an in-flight barrier is offered again, with the same inputs.

    Reported root snapshots go first, in one allocation call that checks them against the job (registered, active,
    each table one of its sources and no job's sink: else 4xx and nothing recorded), records the newer ones and
    seals when a root the job reads is unsealed (nothing while a barrier is in flight). The step then gathers
    once, on the sealed ranges, instead of gathering to decide whether to allocate and again after it.
    """
    reported_wait: float | None = None
    if root_snapshots:
        request = AllocationRequest(
            "seal", by=f"job:{job_id}", job=job_id, roots=dict(root_snapshots), min_interval=min_interval
        )
        reported_wait = _wait(await _allocate(rt, request, principal=principal))
    attempts = 0

    async def step(unit: Unit) -> BarrierDecision | None:
        nonlocal attempts
        attempts += 1
        g = await rt.gathers.submit(GatherRequest(job_id))
        job = _active(g, job_id)
        await failpoints.pause("step_gathered")
        retry_after = reported_wait
        if job.in_flight is None and (attempts > 1 or not root_snapshots):  # else the report just sealed them
            roots = [t for t in job.sources if g.world.tables[t].writer_id is None]
            if any(g.world.tables[t].unsealed for t in roots):
                request = AllocationRequest("seal", by=f"job:{job_id}", when_unsealed=roots, min_interval=min_interval)
                retry_after = _wait(await _allocate(rt, request)) or retry_after
                g = await rt.gathers.submit(GatherRequest(job_id))
                job = _active(g, job_id)
        outcome, planner = await _plan(unit, g, job, start=start)
        if isinstance(outcome, Allocate):
            request = AllocationRequest(
                "seal", by=f"job:{job_id}", unless_after=outcome.unless_after, min_interval=min_interval
            )
            retry_after = _wait(await _allocate(rt, request)) or retry_after
            g = await rt.gathers.submit(GatherRequest(job_id))
            job = _active(g, job_id)
            outcome, planner = await _plan(unit, g, job, start=start)
            if isinstance(outcome, Allocate):
                outcome = Idle()  # a concurrent call issued the barrier and planned it, or the interval holds
        if not await _store(rt, unit, g, planner):
            return None
        rt.commit_hints.keep(job_id, commit_hints.after_next(planner, job.id) if isinstance(outcome, Process) else None)
        decision = _decision(job_id, outcome, retry_after)
        rt.allocator.handed(decision.barrier, *decision.skipped)  # never issued again (repositories/allocator.py)
        return decision

    return await _retrying(rt.database, step, what=f"job {job_id!r}")


async def commit_barrier(
    rt: Runtime, *, job_id: str, barrier: int, snapshots: Mapping[str, int], parent: ParentRun | None = None
) -> CommitResult:
    """Record the job's output snapshots for `barrier`. Exactly once: a repeat with the same snapshots is a no-op.
    `parent`: the OpenLineage run that started the job's run, for its COMPLETE event.

    Right after the job's `next` on this process, the commit plans on what that `next` stored and writes in one
    statement (services/commit_hints.py); when the write finds the job changed, or the plan would not succeed, it
    gathers and plans again like any step.
    """
    hint = rt.commit_hints.take(job_id, barrier)

    async def step(unit: Unit) -> CommitResult | None:
        nonlocal hint
        if hint is not None:
            held, hint = hint.gathered(), None
            try:
                planned = _planned_commit(held, job_id, barrier, snapshots)
            except MetaServiceError:
                return None  # answered from a fresh gather, never from held state
        else:
            g = await rt.gathers.submit(GatherRequest(job_id, barrier, windows=False))
            planned = _planned_commit(g, job_id, barrier, snapshots)
        if isinstance(planned, CommitResult):
            return planned
        g, run, planner = planned
        if not await _store(rt, unit, g, planner):
            return None
        openlineage.run_committed(job_id, run, snapshots, parent=parent)
        return CommitResult(job_id=job_id, barrier=barrier, snapshots=dict(snapshots))

    return await _retrying(rt.database, step, what=f"job {job_id!r}")


def _planned_commit(
    g: Gathered, job_id: str, barrier: int, snapshots: Mapping[str, int]
) -> CommitResult | tuple[Gathered, RunView, Planner]:
    """The commit's plan on `g`, or the answer to a repeated commit; 4xx when the commit cannot be recorded."""
    job = _known(g, job_id)
    run = g.run_at
    if run is None or run.first != barrier or run.status == "idle":
        raise NotInFlight(
            f"barrier {barrier} is not in flight for job {job_id!r}: never handed out (or lost at a failover of an "
            "asynchronously replicated database), or undone by a rollback",
            job_id=job_id,
            barrier=barrier,
        )
    if run.status == "aborted":
        raise NotInFlight(
            f"barrier {barrier} was aborted for job {job_id!r} ({run.reason or 'no reason given'})",
            job_id=job_id,
            barrier=barrier,
            reason=run.reason,
        )
    if run.status == "committed":
        if dict(run.outputs) == dict(snapshots):
            return CommitResult(job_id=job_id, barrier=barrier, snapshots=dict(run.outputs))
        raise SnapshotConflict(
            f"barrier {barrier} of job {job_id!r} was committed with other snapshots",
            job_id=job_id,
            barrier=barrier,
            committed=dict(run.outputs),
        )
    sinks = [g.world.tables[t] for t in job.sinks]
    _check_sinks(job_id, [t.name for t in sinks], snapshots)
    for sink in sinks:
        newest = sink.last_output[0] if sink.last_output else None
        if newest is not None and snapshots[sink.name] < newest:
            raise SnapshotRegressed(
                f"snapshot {snapshots[sink.name]} of {sink.name!r} is lower than {newest}, committed earlier",
                table=sink.name,
                snapshot_id=snapshots[sink.name],
                previous_snapshot_id=newest,
            )
    planner = Planner(g.world)
    planner.commit(job.id, barrier, snapshots, run)
    return g, run, planner


async def abort_barrier(
    rt: Runtime, *, job_id: str, barrier: int, reason: str | None, parent: ParentRun | None = None
) -> AbortResult:
    """Give up `barrier`: it never completes in the job's sinks and downstream jobs skip it. Idempotent.
    `parent`: the OpenLineage run that started the job's run, for its FAIL event."""
    rt.commit_hints.keep(job_id, None)  # a commit of it must not even try the state its `next` stored

    async def step(unit: Unit) -> AbortResult | None:
        g = await rt.gathers.submit(GatherRequest(job_id, barrier, windows=False))
        job = _known(g, job_id)
        run = g.run_at
        if run is None or run.first != barrier or run.status == "idle":
            raise NotInFlight(
                f"barrier {barrier} is not in flight for job {job_id!r}: never handed out (or lost at a failover "
                "of an asynchronously replicated database), or undone by a rollback",
                job_id=job_id,
                barrier=barrier,
            )
        if run.status == "committed":
            raise AlreadyCommitted(
                f"barrier {barrier} of job {job_id!r} is already committed", job_id=job_id, barrier=barrier
            )
        if run.status == "in_flight":
            planner = Planner(g.world)
            planner.abort(job.id, run, reason or "aborted by the job")
            if not await _store(rt, unit, g, planner):
                return None
            openlineage.run_aborted(g.world, job, run, reason or "aborted by the job", by="job", parent=parent)
        return AbortResult(job_id=job_id, barrier=barrier)

    return await _retrying(rt.database, step, what=f"job {job_id!r}")


async def settle_idle(rt: Runtime, *, job_names: Sequence[str]) -> int:
    """For each named job, complete idle the barriers at which its inputs did not change, settling the writers of
    its lagging inputs first (rule 12): an idle job that does not poll never holds reads, delays or the bottleneck
    back. The same plan and compare-and-set write as a `next`; best effort (a job that keeps changing under the
    step is left as it is: its own `next` is under way). Returns how many jobs got barriers completed."""

    async def one(name: str) -> bool:
        # Another read is settling this writer: answer on what is stored rather than wait for it (a settle begun
        # before an outage may hang on a dead connection until its deadline; its write wakes freshness waiters).
        if rt.settles.running(name):
            return False
        return await rt.settles.run(name, lambda: settle(name))

    async def settle(name: str) -> bool:
        async def step(unit: Unit) -> bool | None:
            g = await rt.gathers.submit(GatherRequest(name))
            if g.job_id is None:
                return False
            job = g.world.jobs[g.job_id]
            await failpoints.pause("settle_gathered")
            _, planner = await _planned(unit, g, job, lambda p: p.settle(job.id))
            if not planner.writes:
                return False
            return True if await _store(rt, unit, g, planner) else None

        try:
            return await _retrying(rt.database, step, what=f"job {name!r}")
        except MetaServiceError:  # best effort: the read answers on what is stored (and reports an outage itself)
            return False

    settled = [False] * len(job_names)

    async def run(i: int, name: str) -> None:
        settled[i] = await one(name)

    async with anyio.create_task_group() as tasks:
        for i, name in enumerate(job_names):
            tasks.start_soon(run, i, name)
    return sum(settled)


async def settle_lagging(rt: Runtime, *, tables: Sequence[str] | None, limit: int) -> int:
    """`settle_idle` for the writers of `tables` (None: of every table) that are behind the newest barrier and may
    complete barriers idle: what delays and metrics read first, so that they count an idle table as fresh as the
    inputs it did not need to reprocess (rule 12)."""

    async def work(unit: Unit) -> list[str]:
        return await version_rows.lagging_idle_writers(await unit.connection(), tables=tables, limit=limit)

    names = await in_autocommit(rt.database, work)
    return await settle_idle(rt, job_names=names) if names else 0


async def abort_in_flight(conn: Connection, job_id: str, reason: str, *, after: int | None = None) -> None:
    """Abort the job's in-flight barrier (one after `after`, when given) inside the caller's transaction, which
    holds the job's row lock: a lineage change (rule 7) or a rollback undid what it was planned on."""
    g = await protocol_rows.gather(conn, name=job_id, windows=False)
    if g.job_id is None:
        return
    run = g.world.jobs[g.job_id].in_flight
    if run is None or (after is not None and run.barrier <= after):
        return
    planner = Planner(g.world)
    planner.abort(g.job_id, run, reason)
    stored = await protocol_rows.apply(conn, planner.writes)
    assert stored, "the caller holds the job's row lock"
    openlineage.run_aborted(g.world, g.world.jobs[g.job_id], run, reason, by="server", parent=None)  # once committed


# --- internals -------------------------------------------------------------------------------------------------


async def _retrying(db: Database, step: Callable[[Unit], Awaitable[T | None]], *, what: str) -> T:
    """Run a compare-and-set step until it stores its outcome (None: another step changed the job first)."""
    for _ in range(MAX_ATTEMPTS):
        result = await in_autocommit(db, step, connected=False)
        if result is not None:
            return result
    raise Unavailable(f"{what} kept changing while its step was planned; retry shortly")


async def _plan(unit: Unit, g: Gathered, job: JobView, *, start: str | int | None) -> tuple[Outcome, Planner]:
    """Plan the job's step, fetching what the plan finds missing (each fetch: plan again from scratch)."""
    return await _planned(unit, g, job, lambda planner: planner.next_step(job.id, start=start))


async def _planned(unit: Unit, g: Gathered, job: JobView, decide: Callable[[Planner], T]) -> tuple[T, Planner]:
    """`decide` on a fresh planner over `g`, fetching what the plan finds missing and deciding again from scratch
    after each fetch. Every fetch keeps the world's head: the plan is decided as of its first gather."""
    for _ in range(MAX_FETCHES):
        planner = Planner(g.world.clone())
        try:
            return decide(planner), planner
        except NeedJobs as need:
            await protocol_rows.gather_jobs(await unit.connection(), g.world, job_ids=need.job_ids)
        except NeedRanges as need:
            await protocol_rows.ranges_from(
                await unit.connection(), g.world, table_id=need.table_id, barrier=need.barrier
            )
        except NeedAfter as need:
            await protocol_rows.barrier_after(await unit.connection(), g.world, barrier=need.barrier)
        await failpoints.pause("plan_fetched")
    raise Unavailable(f"job {job.name!r} needs more state than one step may fetch; retry")


async def _store(rt: Runtime, unit: Unit, g: Gathered, planner: Planner) -> bool:
    """Write the plan's outcome (compare-and-set); False when a job it touches changed meanwhile.

    The write shares one statement with the writes of concurrent steps (db/coalescer.py), skipping jobs another
    transaction holds locked: such a plan is then stored alone on the step's own connection, which waits for the
    lock, so one contended job never holds up the others. Once stored, freshness-bounded reads are told (off the
    request path)."""
    if not planner.writes:
        if g.stale and g.job_id is not None:
            await protocol_rows.touch(await unit.connection(), job_id=g.job_id)
        return True
    stored = await rt.writes.submit(planner.writes, on_send=unit.mark_sent)
    if stored == "locked":
        async with unit.writing() as conn:
            stored = "stored" if await protocol_rows.apply(conn, planner.writes, notify=False) else "changed"
    if stored == "stored" and protocol_rows.may_complete_versions(planner.writes):
        rt.notifier.changed()
    return stored == "stored"


async def _allocate(rt: Runtime, request: AllocationRequest, *, principal: Principal = ANONYMOUS_ADMIN) -> Allocation:
    allocation = await rt.allocator.allocate(request)
    error = allocation.error
    if error is None:
        return allocation
    code = error.get("code")
    if code == "job_not_found":
        raise NotFound(f"job {request.job!r} is not registered", job_id=request.job)
    if code == "job_inactive":
        raise JobInactive(f"job {request.job!r} was unregistered; register it again to resume", job_id=request.job)
    if code == "not_source":
        _refuse_unread(str(request.job), list(error.get("tables", [])), principal)
    if code == "not_found":
        tables = list(error.get("tables", []))
        raise NotFound(f"tables not registered: {', '.join(tables)}", tables=tables)
    writers: dict[str, str] = dict(error.get("writers", {}))
    tables = sorted(writers)
    named = ", ".join(f"{t} (written by job {writers[t]!r})" for t in tables)
    extra: dict[str, Any] = {"tables": tables}
    if len(tables) == 1:
        extra |= {"table": tables[0], "writer": writers[tables[0]]}
    raise NotRoot(
        f"tables written by a job cannot be reported as roots: {named}; their writer commits snapshots", **extra
    )


def _wait(allocation: Allocation) -> float | None:
    return None if allocation.wait_seconds is None else round(max(0.0, allocation.wait_seconds), 3)


def _known(g: Gathered, job_id: str) -> JobView:
    if g.job_id is None:
        raise NotFound(f"job {job_id!r} is not registered", job_id=job_id)
    return g.world.jobs[g.job_id]


def _active(g: Gathered, job_id: str) -> JobView:
    job = _known(g, job_id)
    if not job.active:
        raise JobInactive(f"job {job_id!r} was unregistered; register it again to resume", job_id=job_id)
    return job


def _refuse_unread(job_id: str, unread: list[str], principal: Principal) -> NoReturn:
    """`root_snapshots` named tables the job does not read. A job token is refused as forbidden: reporting roots
    is how barriers seal data for every reader, so a job reports only what it reads."""
    if principal.role == "job":
        raise Forbidden(
            f"token {principal.name!r} may report root snapshots only for tables job {job_id!r} reads; "
            f"not its sources: {', '.join(unread)}",
            tables=unread,
        )
    raise InvalidRequest(
        f"root_snapshots may name only root tables job {job_id!r} reads; not its sources: {', '.join(unread)}",
        errors=[
            {"loc": ["body", "root_snapshots", name], "msg": "not a source of the job", "type": "not_a_source"}
            for name in unread
        ],
        tables=unread,
    )


def _check_sinks(job_id: str, sinks: list[str], snapshots: Mapping[str, int]) -> None:
    expected = set(sinks)
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


def _decision(job_id: str, outcome: Outcome, retry_after: float | None) -> BarrierDecision:
    if isinstance(outcome, Process):
        return BarrierDecision(
            job_id=job_id,
            action="process",
            barrier=outcome.barrier,
            inputs={
                name: InputSnapshot(snapshot_id=i.snapshot_id, previous_snapshot_id=i.previous_snapshot_id)
                for name, i in outcome.inputs.items()
            },
            sinks={name: SinkSnapshot(previous_snapshot_id=s) for name, s in outcome.sinks.items()},
            skipped=list(outcome.skipped),
        )
    if isinstance(outcome, Wait):
        return BarrierDecision(
            job_id=job_id,
            action="wait",
            barrier=outcome.barrier,
            skipped=list(outcome.skipped),
            waiting_for=list(outcome.waiting_for),
            retry_after_seconds=retry_after,
        )
    assert isinstance(outcome, Idle | Allocate)
    skipped = list(outcome.skipped) if isinstance(outcome, Idle) else []
    return BarrierDecision(job_id=job_id, action="idle", barrier=None, skipped=skipped, retry_after_seconds=retry_after)
