"""Read-only views for admins: jobs, tables, barriers and their histories."""

from __future__ import annotations

from metaservice.db.database import Connection, Database
from metaservice.db.transaction import in_transaction
from metaservice.errors import NotFound
from metaservice.repositories import barriers as barrier_rows
from metaservice.repositories import edges as edge_rows
from metaservice.repositories import jobs as job_rows
from metaservice.repositories import runs as run_rows
from metaservice.repositories import snapshots as snapshot_rows
from metaservice.repositories import tables as table_rows
from metaservice.repositories.jobs import JobRow
from metaservice.repositories.runs import RunRow
from metaservice.repositories.tables import TableRow
from metaservice.schemas import (
    BarrierDetail,
    BarrierList,
    BarrierSummary,
    JobHistory,
    JobInfo,
    JobList,
    JobRunInfo,
    SnapshotRangeInfo,
    TableAtBarrier,
    TableHistory,
    TableInfo,
    TableList,
)


async def list_jobs(db: Database, *, limit: int, after: str | None) -> JobList:
    async def work(s: Connection) -> JobList:
        jobs = await job_rows.list_all(s, limit=limit, after_name=after)
        return JobList(jobs=await _job_infos(s, jobs))

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)


async def get_job(db: Database, *, job_id: str) -> JobInfo:
    async def work(s: Connection) -> JobInfo:
        job = await job_rows.get(s, name=job_id)
        if job is None:
            raise NotFound(f"job {job_id!r} is not registered", job_id=job_id)
        return (await _job_infos(s, [job]))[0]

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)


async def job_history(db: Database, *, job_id: str, limit: int, before: int | None) -> JobHistory:
    async def work(s: Connection) -> JobHistory:
        job = await job_rows.get(s, name=job_id)
        if job is None:
            raise NotFound(f"job {job_id!r} is not registered", job_id=job_id)
        runs = await run_rows.history(s, job_id=job.id, limit=limit, before_barrier=before)
        return JobHistory(job_id=job_id, runs=[run_info(r) for r in runs])

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)


def run_info(run: RunRow) -> JobRunInfo:
    duration = (run.finished_at - run.started_at).total_seconds() if run.finished_at else None
    return JobRunInfo(
        first_barrier=run.first_barrier,
        barrier=run.barrier,
        status=run.status,
        inputs=dict(run.inputs),
        outputs=dict(run.outputs),
        reason=run.reason,
        inputs_ready_at=run.inputs_ready_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        duration_seconds=duration,
    )


async def list_tables(db: Database, *, limit: int, after: str | None, include_retired: bool = False) -> TableList:
    async def work(s: Connection) -> TableList:
        tables = await table_rows.list_all(s, limit=limit, after_name=after, include_retired=include_retired)
        return TableList(tables=await _table_infos(s, tables))

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)


async def get_table(db: Database, *, table: str) -> TableInfo:
    async def work(s: Connection) -> TableInfo:
        row = await table_rows.get(s, name=table)
        if row is None:
            raise NotFound(f"table {table!r} is not registered", table=table)
        return (await _table_infos(s, [row]))[0]

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)


async def table_history(db: Database, *, table: str, limit: int, before: int | None) -> TableHistory:
    async def work(s: Connection) -> TableHistory:
        row = await table_rows.get(s, name=table)
        if row is None:
            raise NotFound(f"table {table!r} is not registered", table=table)
        ranges = await snapshot_rows.history(s, table_id=row.id, limit=limit, before_barrier=before)
        return TableHistory(
            table=table,
            ranges=[
                SnapshotRangeInfo(
                    first_barrier=r.first_barrier,
                    last_barrier=r.last_barrier,
                    snapshot_id=r.snapshot_id,
                    how=r.kind,
                )
                for r in ranges
            ],
        )

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)


async def list_barriers(db: Database, *, limit: int, before: int | None) -> BarrierList:
    async def work(s: Connection) -> BarrierList:
        rows = await barrier_rows.newest(s, limit=limit, before_barrier=before)
        return BarrierList(
            barriers=[BarrierSummary(barrier=b.barrier, issued_at=b.issued_at, issued_by=b.issued_by) for b in rows]
        )

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)


async def get_barrier(db: Database, *, barrier: int) -> BarrierDetail:
    async def work(s: Connection) -> BarrierDetail:
        row = await barrier_rows.get(s, barrier=barrier)
        if row is None:
            raise NotFound(f"barrier {barrier} was never issued", barrier=barrier)
        tables = await table_rows.list_all(s, limit=1_000_000, include_retired=True)
        ids = [t.id for t in tables]
        covering = await snapshot_rows.covering(s, table_ids=ids, barrier=barrier)
        lasts = await snapshot_rows.last(s, table_ids=ids)
        states: dict[str, TableAtBarrier] = {}
        for t in tables:
            r = covering.get(t.id)
            if r is not None:
                state = "complete" if r.snapshot_id is not None else "aborted"
                states[t.name] = TableAtBarrier(state=state, snapshot_id=r.snapshot_id)
            else:
                last = lasts.get(t.id)
                beyond = last is not None and last.last_barrier is not None and last.last_barrier < barrier
                states[t.name] = TableAtBarrier(state="pending" if beyond else "absent", snapshot_id=None)
        return BarrierDetail(barrier=row.barrier, issued_at=row.issued_at, issued_by=row.issued_by, tables=states)

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)


async def _job_infos(s: Connection, jobs: list[JobRow]) -> list[JobInfo]:
    edges = await edge_rows.tables_of_jobs(s, job_ids=[j.id for j in jobs])
    runs = await run_rows.in_flight_of(s, job_ids=[j.id for j in jobs])
    infos = []
    for job in jobs:
        run = runs.get(job.id)
        infos.append(
            JobInfo(
                job_id=job.name,
                is_active=job.is_active,
                sources=[t.name for t in edges[job.id]["source"]],
                sinks=[t.name for t in edges[job.id]["sink"]],
                last_barrier=job.last_barrier,
                in_flight_barrier=run.barrier if run else None,
                registered_at=job.registered_at,
                last_seen_at=job.last_seen_at,
            )
        )
    return infos


async def _table_infos(s: Connection, tables: list[TableRow]) -> list[TableInfo]:
    ids = [t.id for t in tables]
    writers = await edge_rows.writers_of(s, table_ids=ids)
    readers = await edge_rows.readers_of(s, table_ids=ids)
    head = await barrier_rows.head(s)
    completes = await snapshot_rows.last_complete(s, table_ids=ids)
    infos = []
    for t in tables:
        newest_barrier, newest_snapshot = None, None
        complete = completes.get(t.id)
        if complete is not None:
            newest_snapshot = complete.snapshot_id
            newest_barrier = (
                complete.last_barrier if complete.last_barrier is not None else (head.barrier if head else None)
            )
        infos.append(
            TableInfo(
                table=t.name,
                kind="intermediate" if t.id in writers else "root",
                writer=writers.get(t.id),
                readers=readers.get(t.id, []),
                format=t.format,
                location=t.location,
                latest_snapshot_id=t.latest_snapshot_id,
                newest_complete_barrier=newest_barrier,
                newest_complete_snapshot_id=newest_snapshot,
                retired_at=t.retired_at,
            )
        )
    return infos
