"""Lineage registration: idempotent edges, one writer per table, no cycles, and unregistering jobs."""

from __future__ import annotations

from collections import deque
from typing import Literal

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.models import Table
from metaservice.db.transaction import in_transaction
from metaservice.errors import CycleError, NotFound, TableHasWriter, TableMetadataConflict
from metaservice.repositories import barriers as barrier_rows
from metaservice.repositories import edges as edge_rows
from metaservice.repositories import jobs as job_rows
from metaservice.repositories import runs as run_rows
from metaservice.repositories import snapshots as snapshot_rows
from metaservice.repositories import tables as table_rows
from metaservice.schemas import Registration, Unregistration

# Registrations are rare and must see each other (cycle and writer checks read the whole graph), so they are
# serialized by one transaction-scoped advisory lock.
REGISTRY_LOCK_KEY = 0x72656769  # "regi"

Role = Literal["source", "sink"]


async def lock_registry(session: AsyncSession) -> None:
    await session.execute(select(func.pg_advisory_xact_lock(REGISTRY_LOCK_KEY)))


async def register(
    session: AsyncSession,
    *,
    job_id: str,
    table: str,
    role: Role,
    format: str | None = None,
    location: str | None = None,
) -> Registration:
    """Add `job_id` reads/writes `table`; creates both on first sight. Re-registering is a no-op."""

    async def work(s: AsyncSession) -> Registration:
        await lock_registry(s)
        job = await job_rows.upsert_active(s, name=job_id)
        row = await table_rows.get_or_insert(s, name=table)
        _check_metadata(row, format=format, location=location)
        await table_rows.set_metadata(s, table_id=row.id, format=format, location=location)

        existing = await edge_rows.role_of(s, job_id=job.id, table_id=row.id)
        if existing == role:
            return Registration(job_id=job_id, table=table, role=role, created=False)
        if existing is not None:
            loop = [table, job_id, table]
            raise CycleError(f"job {job_id!r} cannot both read and write {table!r}", cycle=loop)

        if role == "sink":
            writer = await edge_rows.writer_of(s, table_id=row.id)
            if writer is not None and writer.id != job.id:
                raise TableHasWriter(
                    f"table {table!r} is already written by job {writer.name!r}",
                    writer=writer.name,
                    table=table,
                )
            path = await _path_from_table_to_job(s, start_table=row.id, target_job=job.id)
            if path is not None:
                loop = [table, *path, table]
                raise CycleError(f"{job_id!r} writing {table!r} would close a cycle", cycle=loop)
            await _close_root_range(s, table_id=row.id)
        else:
            sinks = await edge_rows.tables_of(s, job_id=job.id, role="sink")
            for sink in sinks:
                path = await _path_from_table_to_table(s, start_table=sink.id, target_table=row.id)
                if path is not None:
                    loop = [table, job_id, sink.name, *path]
                    raise CycleError(f"{job_id!r} reading {table!r} would close a cycle", cycle=loop)

        await edge_rows.insert_edge(s, job_id=job.id, table_id=row.id, role=role)
        return Registration(job_id=job_id, table=table, role=role, created=True)

    return await in_transaction(session, work)


async def unregister(session: AsyncSession, *, job_id: str) -> Unregistration:
    """Drop the job's edges and writer claims; its history stays. An in-flight barrier is aborted."""

    async def work(s: AsyncSession) -> Unregistration:
        await lock_registry(s)
        job = await job_rows.lock(s, name=job_id)
        if job is None:
            raise NotFound(f"job {job_id!r} is not registered", job_id=job_id)
        sinks = await edge_rows.tables_of(s, job_id=job.id, role="sink")
        run = await run_rows.in_flight(s, job_id=job.id)
        if run is not None:
            from metaservice.services import barriers as barrier_service

            await barrier_service.abort_run(s, job=job, run=run, sinks=sinks, reason="job unregistered")
        await _reopen_as_roots(s, table_ids=[t.id for t in sinks])
        await edge_rows.delete_for_job(s, job_id=job.id)
        await job_rows.deactivate(s, job_id=job.id)
        return Unregistration(job_id=job_id)

    return await in_transaction(session, work)


def _check_metadata(row: Table, *, format: str | None, location: str | None) -> None:
    if format is not None and row.format is not None and row.format != format:
        raise TableMetadataConflict(
            f"table {row.name!r} is registered with format {row.format!r}, not {format!r}",
            table=row.name,
            field="format",
        )
    if location is not None and row.location is not None and row.location != location:
        raise TableMetadataConflict(
            f"table {row.name!r} is registered at {row.location!r}, not {location!r}",
            table=row.name,
            field="location",
        )


async def _close_root_range(s: AsyncSession, *, table_id: int) -> None:
    """A root table that gets a writer stops following seals: its open range ends at the newest barrier."""
    lasts = await snapshot_rows.last(s, table_ids=[table_id])
    last = lasts.get(table_id)
    if last is not None and last.last_barrier is None:
        head = await barrier_rows.lock_clock(s)  # no seal may extend the range while we close it
        await snapshot_rows.close_open(s, table_id=table_id, through=head)


async def _reopen_as_roots(s: AsyncSession, *, table_ids: list[int]) -> None:
    """Tables that lose their writer become roots holding their last snapshot until a new one is reported."""
    if not table_ids:
        return
    lasts = await snapshot_rows.last(s, table_ids=table_ids)
    tables = await table_rows.by_ids(s, ids=table_ids)
    for table_id, last in lasts.items():
        if last.last_barrier is None:
            continue
        if last.snapshot_id is not None:
            await snapshot_rows.extend(s, range_id=last.id, through=None)
            continue
        latest = tables[table_id].latest_snapshot_id
        start = await barrier_rows.after(s, barrier=last.last_barrier)
        if latest is not None and start is not None:
            await snapshot_rows.insert_range(
                s, table_id=table_id, first=start, last=None, snapshot_id=latest, kind="sealed", job_id=None
            )


async def _path_from_table_to_job(s: AsyncSession, *, start_table: int, target_job: int) -> list[str] | None:
    """Names along a downstream path start_table → … → target_job (excluding start), or None."""
    parents: dict[int, tuple[int, str, str]] = {}  # table id -> (previous table, job name, table name)
    frontier, seen = deque([start_table]), {start_table}
    while frontier:
        level = list(frontier)
        frontier.clear()
        for hop in await edge_rows.downstream_hops(s, table_ids=level):
            if hop.to_table not in seen:
                seen.add(hop.to_table)
                parents[hop.to_table] = (hop.from_table, hop.job_name, hop.to_table_name)
                frontier.append(hop.to_table)
        for table_id, reader_id, reader_name in await edge_rows.reader_jobs(s, table_ids=level):
            if reader_id == target_job:  # also catches readers that write nothing yet
                return [*_trace(parents, table_id), reader_name]
    return None


async def _path_from_table_to_table(s: AsyncSession, *, start_table: int, target_table: int) -> list[str] | None:
    """Names along a downstream path start_table → … → target_table (excluding start), or None."""
    if start_table == target_table:
        return []
    parents: dict[int, tuple[int, str, str]] = {}
    frontier, seen = deque([start_table]), {start_table}
    while frontier:
        level = list(frontier)
        frontier.clear()
        for hop in await edge_rows.downstream_hops(s, table_ids=level):
            if hop.to_table in seen:
                continue
            seen.add(hop.to_table)
            parents[hop.to_table] = (hop.from_table, hop.job_name, hop.to_table_name)
            if hop.to_table == target_table:
                return _trace(parents, hop.to_table)
            frontier.append(hop.to_table)
    return None


def _trace(parents: dict[int, tuple[int, str, str]], table_id: int) -> list[str]:
    names: list[str] = []
    while table_id in parents:
        previous, job_name, table_name = parents[table_id]
        names[:0] = [job_name, table_name]
        table_id = previous
    return names
