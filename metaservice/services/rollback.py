"""Rollback of a table and everything downstream of it to a barrier B (PRODUCT.md "Revision and rollback").

Plan (`POST /rollbacks`): the scope is the table, every table downstream of it along the current lineage, and
the jobs that recompute them: every job reading a table of the scope and, when the table has a writer, that
writer (and then all of the writer's sinks, since the writer recomputes all of them). Each table of the scope
must hold a snapshot at B (else 409 `rollback_conflict`); that snapshot is what storage is restored to. The
plan is stored; while it is planned its restore snapshots are reported as protected by the retention endpoint.

Complete (`POST /rollbacks/{id}/complete`, after the client restored storage), one transaction:
- lock the rollback row, then the affected jobs, the scope's tables and the barrier clock, in the lock order
  every writer uses (jobs by id, tables by id, the clock): no seal moves a root's ranges meanwhile, and no
  protocol step of those jobs lands (their versions are bumped, so a step planned before plans again);
- recompute the plan under those locks. If the lineage changed (a reader registered, a job unregistered) or a
  restore snapshot differs (another rollback completed first), the plan is stale: 409 `rollback_stale`, nothing
  changes, and the caller plans again. Commits, aborts and idle steps after B since the plan are not staleness:
  they lie after B and are forgotten with the rest;
- abort the affected jobs' in-flight runs after B (`barriers.abort_run`): their commit gets 409 `not_in_flight`;
- forget everything after B: snapshot ranges of the scope's tables starting after B are deleted and the range
  covering B ends at B; runs of the affected jobs after B are deleted and idle stretches end at B; jobs past B
  go back to B, so `next` offers the barriers after B again. What was removed is kept in `rollbacks.forgotten`
  rather than marked in `job_runs`: a marked run would keep (job, barrier) taken in the unique index the
  recomputation needs, and every reader of the history would have to skip it;
- a root table (no writer) cannot be recomputed; it was restored in storage to its snapshot at B. Keeping its
  ranges after B would make the jobs recompute those barriers from the bad snapshots again, so instead the root
  holds its restore snapshot at every barrier after B (one open range of kind `restored`): the jobs settle
  those barriers idle, their sinks keep their snapshots at B, and the corrected data enters through a new
  snapshot report that the next barrier seals. The root's newest known snapshot is reset to the restore
  snapshot (or to `root_snapshots` from the request: the version the restore wrote, which also keeps a stale
  report of a bad snapshot from being sealed again). Intermediate tables' newest known snapshot goes back to
  their restore snapshot too.

Consequences: consistent versions may go back to B after completion (strong included, the one exception to
"never goes back in time"), and move forward again as the jobs recompute. Completing twice returns the same
body; a cancelled rollback cannot be completed, nor a completed one cancelled.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from metaservice.db.database import Connection, Database
from metaservice.db.transaction import in_transaction
from metaservice.errors import (
    InvalidRequest,
    NotFound,
    RollbackConflict,
    RollbackNotPlanned,
    RollbackStale,
    SnapshotRegressed,
)
from metaservice.repositories import barriers as barrier_rows
from metaservice.repositories import edges as edge_rows
from metaservice.repositories import jobs as job_rows
from metaservice.repositories import rollbacks as rollback_rows
from metaservice.repositories import snapshots as snapshot_rows
from metaservice.repositories import tables as table_rows
from metaservice.repositories.jobs import JobRow
from metaservice.repositories.rollbacks import RollbackRow
from metaservice.repositories.tables import TableRow
from metaservice.schemas import RestorePoint, ResumePoint, Rollback
from metaservice.services.barriers import abort_in_flight


@dataclass
class _Scope:
    """The tables a rollback of `table` restores and the jobs that recompute them."""

    table: TableRow
    is_root: bool
    tables: dict[int, str] = field(default_factory=dict)
    jobs: dict[int, str] = field(default_factory=dict)


async def plan_rollback(db: Database, *, table: str, barrier: int) -> Rollback:
    """Plan restoring `table` and everything downstream of it to their snapshots at `barrier`."""

    async def work(s: Connection) -> Rollback:
        row = await table_rows.get(s, name=table)
        if row is None:
            raise NotFound(f"table {table!r} is not registered", table=table)
        if await barrier_rows.get(s, barrier=barrier) is None:
            raise NotFound(f"barrier {barrier} was never issued", barrier=barrier)
        scope = await _scope(s, row)
        await _check_lineage_since(s, scope, barrier)
        restore = await _restore_points(s, scope, barrier)
        missing = sorted(name for name, snapshot in restore.items() if snapshot is None)
        if missing:
            raise RollbackConflict(
                f"tables without a snapshot at barrier {barrier} (not completed yet, or aborted): "
                f"{', '.join(missing)}; choose an earlier barrier",
                tables=missing,
                barrier=barrier,
            )
        plan = {
            "table": row.name,
            **_wire_plan(scope, restore, barrier),
        }
        created = await rollback_rows.insert(
            s, rollback_id=str(uuid.uuid4()), table_id=row.id, barrier=barrier, plan=plan
        )
        return _rollback(created)

    return await in_transaction(db, work, isolation="REPEATABLE READ")


async def get_rollback(db: Database, *, rollback_id: str) -> Rollback:
    async def work(s: Connection) -> Rollback:
        return _rollback(_existing(await rollback_rows.get(s, rollback_id=rollback_id), rollback_id))

    return await in_transaction(db, work, read_only=True)


async def cancel_rollback(db: Database, *, rollback_id: str) -> Rollback:
    """Drop a planned rollback (its restore snapshots stop being protected). Idempotent."""

    async def work(s: Connection) -> Rollback:
        row = _existing(await rollback_rows.lock(s, rollback_id=rollback_id), rollback_id)
        if row.status == "completed":
            raise RollbackNotPlanned(
                f"rollback {rollback_id!r} is already completed", rollback_id=rollback_id, rollback_status=row.status
            )
        if row.status == "planned":
            row = await rollback_rows.finish(s, rollback_id=rollback_id, status="cancelled")
        return _rollback(row)

    return await in_transaction(db, work)


async def complete_rollback(db: Database, *, rollback_id: str, root_snapshots: Mapping[str, int]) -> Rollback:
    """Forget everything after the barrier for the planned tables and rewind their jobs. Idempotent."""

    async def work(s: Connection) -> Rollback:
        row = _existing(await rollback_rows.lock(s, rollback_id=rollback_id), rollback_id)
        if row.status == "completed":
            return _rollback(row)
        if row.status == "cancelled":
            raise RollbackNotPlanned(
                f"rollback {rollback_id!r} was cancelled; plan a new one",
                rollback_id=rollback_id,
                rollback_status=row.status,
            )
        # lock order: jobs (by id), tables (by id), then the clock, as the protocol's write and the allocator do
        locked = {job.name: job for job in await job_rows.lock_many(s, names=list(row.plan["jobs"]))}
        table = (await table_rows.by_ids(s, ids=[row.table_id]))[row.table_id]
        planned = await table_rows.get_many(s, names=list(row.plan["tables"]))
        await rollback_rows.lock_tables(s, table_ids=sorted({row.table_id, *(t.id for t in planned.values())}))
        await barrier_rows.lock_clock(s)
        scope = await _scope(s, table)
        await _check_lineage_since(s, scope, row.barrier)
        restore = await _restore_points(s, scope, row.barrier)
        _check_fresh(row, _wire_plan(scope, restore, row.barrier))
        _check_root_snapshots(scope, row, root_snapshots)
        forgotten = await _forget_after(s, row, scope, locked, root_snapshots)
        return _rollback(
            await rollback_rows.finish(s, rollback_id=rollback_id, status="completed", forgotten=forgotten)
        )

    return await in_transaction(db, work)


# --- internals -------------------------------------------------------------------------------------------------


def _existing(row: RollbackRow | None, rollback_id: str) -> RollbackRow:
    if row is None:
        raise NotFound(f"rollback {rollback_id!r} does not exist", rollback_id=rollback_id)
    return row


async def _scope(s: Connection, table: TableRow) -> _Scope:
    """Walk the current lineage downstream of `table`, breadth first, one query pair per level."""
    writer = await edge_rows.writer_of(s, table_id=table.id)
    scope = _Scope(table=table, is_root=writer is None, tables={table.id: table.name})
    frontier = {table.id}
    if writer is not None:
        writer_id, writer_name = writer
        scope.jobs[writer_id] = writer_name
        for sink in (await edge_rows.tables_of_jobs(s, job_ids=[writer_id]))[writer_id]["sink"]:
            scope.tables[sink.id] = sink.name
            frontier.add(sink.id)
    while frontier:
        level = sorted(frontier)
        frontier = set()
        for _table_id, job_id, job_name in await edge_rows.reader_jobs(s, table_ids=level):
            scope.jobs[job_id] = job_name
        for hop in await edge_rows.downstream_hops(s, table_ids=level):
            if hop.to_table not in scope.tables:
                scope.tables[hop.to_table] = hop.to_table_name
                frontier.add(hop.to_table)
    return scope


async def _check_lineage_since(s: Connection, scope: _Scope, barrier: int) -> None:
    """A table that depended on the scope at a barrier after B, and no longer does, holds data built from what
    the rollback forgets, where no job of the scope will recompute it: refuse (choose a barrier after the lineage
    change, or roll that table back too)."""
    since = await edge_rows.downstream_since(s, table_ids=sorted(scope.tables), barrier=barrier)
    outside = sorted(name for table_id, name in since.items() if table_id not in scope.tables)
    if outside:
        raise RollbackConflict(
            f"the lineage downstream of {scope.table.name!r} changed after barrier {barrier}: "
            f"{', '.join(outside)} read data of the rolled-back tables then, and would keep it; roll back to a "
            "barrier after the change, or roll those tables back too",
            tables=outside,
            barrier=barrier,
        )


async def _restore_points(s: Connection, scope: _Scope, barrier: int) -> dict[str, int | None]:
    """Each table's snapshot at `barrier` (None: it has none there)."""
    covering = await snapshot_rows.covering(s, table_ids=sorted(scope.tables), barrier=barrier)
    points: dict[str, int | None] = {}
    for table_id, name in scope.tables.items():
        found = covering.get(table_id)
        points[name] = found.snapshot_id if found is not None else None
    return points


def _wire_plan(scope: _Scope, restore: Mapping[str, int | None], barrier: int) -> dict[str, Any]:
    return {
        "tables": {name: {"restore_snapshot_id": snapshot} for name, snapshot in sorted(restore.items())},
        "jobs": {name: {"resume_after_barrier": barrier} for name in sorted(scope.jobs.values())},
    }


def _check_fresh(row: RollbackRow, now: Mapping[str, Any]) -> None:
    """The plan must still describe the lineage and the snapshots at B, else completing it would miss tables."""
    planned_tables, now_tables = dict(row.plan["tables"]), dict(now["tables"])
    planned_jobs, now_jobs = set(row.plan["jobs"]), set(now["jobs"])
    if planned_tables == now_tables and planned_jobs == now_jobs:
        return
    changed = sorted(t for t in set(planned_tables) & set(now_tables) if planned_tables[t] != now_tables[t])
    raise RollbackStale(
        f"rollback {row.id!r} no longer matches the lineage or the snapshots at barrier {row.barrier}; "
        "cancel it and plan again",
        rollback_id=row.id,
        tables_added=sorted(set(now_tables) - set(planned_tables)),
        tables_removed=sorted(set(planned_tables) - set(now_tables)),
        tables_changed=changed,
        jobs_added=sorted(now_jobs - planned_jobs),
        jobs_removed=sorted(planned_jobs - now_jobs),
    )


def _check_root_snapshots(scope: _Scope, row: RollbackRow, root_snapshots: Mapping[str, int]) -> None:
    allowed = {scope.table.name} if scope.is_root else set()
    unexpected = sorted(set(root_snapshots) - allowed)
    if unexpected:
        raise InvalidRequest(
            f"root_snapshots may only name the rolled-back root table ({sorted(allowed)})",
            errors=[{"loc": ["body", "root_snapshots", n], "msg": "not the rolled-back root"} for n in unexpected],
        )
    for name, snapshot in root_snapshots.items():
        restore = int(row.plan["tables"][name]["restore_snapshot_id"])
        if snapshot < restore:
            raise SnapshotRegressed(
                f"snapshot {snapshot} of {name!r} is lower than its restore snapshot {restore}",
                table=name,
                snapshot_id=snapshot,
                previous_snapshot_id=restore,
            )


async def _forget_after(
    s: Connection, row: RollbackRow, scope: _Scope, locked: Mapping[str, JobRow], root_snapshots: Mapping[str, int]
) -> dict[str, Any]:
    barrier, table_ids, job_ids = row.barrier, sorted(scope.tables), sorted(scope.jobs)
    for name in sorted(locked):
        await abort_in_flight(s, name, f"rolled back to barrier {barrier} by rollback {row.id}", after=barrier)
    ranges = await rollback_rows.delete_ranges_after(s, table_ids=table_ids, barrier=barrier)
    cut_ranges = await rollback_rows.cut_ranges_at(s, table_ids=table_ids, barrier=barrier)
    runs = await rollback_rows.delete_runs_after(s, job_ids=job_ids, barrier=barrier)
    cut_runs = await rollback_rows.cut_runs_at(s, job_ids=job_ids, barrier=barrier)
    await rollback_rows.rewind_jobs(s, job_ids=job_ids, barrier=barrier)
    for table_id, name in scope.tables.items():
        restore = int(row.plan["tables"][name]["restore_snapshot_id"])
        await rollback_rows.reset_latest(s, table_id=table_id, snapshot_id=root_snapshots.get(name, restore))
    if scope.is_root:
        await _hold_restored(s, table_id=scope.table.id, barrier=barrier)
    return {"snapshot_ranges": ranges, "cut_ranges": cut_ranges, "job_runs": runs, "cut_runs": cut_runs}


async def _hold_restored(s: Connection, *, table_id: int, barrier: int) -> None:
    """The root holds its restore snapshot at every barrier after B: one open `restored` range, or B's reopened.

    Unless that snapshot is a job's output (the table had a writer at B, which left since): holding it after B
    would pair it with newer snapshots of the inputs it was built from (rule 2, orphans). The table then holds
    it at B only and settles nothing after, until a writer or an external report takes over."""
    covering = (await snapshot_rows.covering(s, table_ids=[table_id], barrier=barrier))[table_id]
    if covering.job_id is not None:
        await table_rows.mark_written(s, table_id=table_id)
        return
    following = await barrier_rows.after(s, barrier=barrier)
    if following is None:
        await snapshot_rows.extend(s, range_id=covering.id, through=None)
        return
    await snapshot_rows.insert_range(
        s, table_id=table_id, first=following, last=None, snapshot_id=covering.snapshot_id, kind="restored", job_id=None
    )


def _rollback(row: RollbackRow) -> Rollback:
    plan = row.plan
    return Rollback(
        rollback_id=row.id,
        table=str(plan["table"]),
        barrier=row.barrier,
        tables={name: RestorePoint(**value) for name, value in plan["tables"].items()},
        jobs={name: ResumePoint(**value) for name, value in plan["jobs"].items()},
        status=row.status,
        created_at=row.created_at,
        completed_at=row.completed_at,
        cancelled_at=row.cancelled_at,
    )
