"""Lineage registration: idempotent edges, one writer per table, no cycles, ownership; removing edges and jobs.

Every change is one transaction under a transaction-scoped advisory lock (registrations are rare and the cycle and
writer checks read the whole graph). It locks the job's row, then every tables row it will write or reference (the
tables it names, and the job's sinks, to which an aborted barrier's ranges refer), and takes the barrier clock row
in share mode last (docs/design.md, "Lock order": a row locked after the clock deadlocked with barrier allocations,
which lock tables rows and then queue for the clock). So it commits entirely between two barriers and is recorded
with the newest barrier issued before it (`added_after` / `removed_after`): it takes effect at the next one
(docs/design.md, "Rules for a changing lineage"). A change to a job with a barrier in flight aborts that barrier
(rule 7), and every change bumps the job's version, so a step planned on the old lineage writes nothing and is
planned again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Literal

from metaservice import failpoints
from metaservice.db.database import Connection, Database
from metaservice.db.transaction import in_transaction
from metaservice.errors import (
    CycleError,
    Forbidden,
    NotFound,
    RootGroupConflict,
    TableHasWriter,
    TableInUse,
    TableMetadataConflict,
    TableNameConflict,
    TableRetired,
    UnknownSource,
)
from metaservice.repositories import barriers as barrier_rows
from metaservice.repositories import edges as edge_rows
from metaservice.repositories import jobs as job_rows
from metaservice.repositories import snapshots as snapshot_rows
from metaservice.repositories import tables as table_rows
from metaservice.repositories.jobs import JobRow
from metaservice.repositories.tables import TableRow
from metaservice.schemas import (
    EdgeRemoval,
    JobRegistration,
    RegisterJobRequest,
    Registration,
    RootGroup,
    RootGroupList,
    TableDeclaration,
    TableRetirement,
    Unregistration,
)
from metaservice.services.barriers import abort_in_flight
from metaservice.services.tokens import ANONYMOUS_ADMIN, Principal

# Registrations are rare and must see each other (cycle and writer checks read the whole graph), so they are
# serialized by one transaction-scoped advisory lock.
REGISTRY_LOCK_KEY = 0x72656769  # "regi"

Role = Literal["source", "sink"]


async def lock_registry(conn: Connection) -> None:
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", [REGISTRY_LOCK_KEY])


async def lock_change(conn: Connection, *, job_id: str, tables: Sequence[str]) -> JobRow:
    """The locks of a registration, before the clock: the registry, the job (created on first sight or
    reactivated), then in id order `tables` (created on first sight) and the job's current sinks. A transaction
    registering several edges takes them for all its tables first: a table locked after an edge took the clock
    would wait, holding the clock, for an allocation that waits for the clock."""
    await lock_registry(conn)
    job = await job_rows.upsert_active(conn, name=job_id)
    await table_rows.lock_for_change(conn, names=tables, writer_id=job.id, create=True)
    return job


async def _share_clock(conn: Connection) -> int:
    """The newest barrier issued, the clock row held in share mode until the transaction ends (the last lock a
    change takes: docs/design.md, "Lock order")."""
    clock = await barrier_rows.clock_share(conn)
    await failpoints.pause("lineage_clock_held")
    return clock


async def register(
    db: Database,
    *,
    job_id: str,
    table: str,
    role: Role,
    format: str | None = None,
    location: str | None = None,
    principal: Principal = ANONYMOUS_ADMIN,
) -> Registration:
    """Add `job_id` reads/writes `table`; creates both on first sight. Re-registering is a no-op."""

    async def work(conn: Connection) -> Registration:
        return await register_in(
            conn, job_id=job_id, table=table, role=role, format=format, location=location, principal=principal
        )

    return await in_transaction(db, work)


async def register_in(
    conn: Connection,
    *,
    job_id: str,
    table: str,
    role: Role,
    format: str | None = None,
    location: str | None = None,
    principal: Principal = ANONYMOUS_ADMIN,
) -> Registration:
    """`register` inside the caller's transaction: an OpenLineage event registers all its edges in one, so that a
    4xx for one of them leaves none registered. A caller registering several edges takes `lock_change` for all
    their tables first (this edge's locks are then held already)."""
    job = await lock_change(conn, job_id=job_id, tables=[table])
    row = await table_rows.get_folded(conn, name=table)
    assert row is not None
    if row.name != table:
        raise TableNameConflict(
            f"table {table!r} differs only in case from the registered table {row.name!r}; table names are "
            "unique regardless of case",
            table=table,
            registered=row.name,
        )
    if row.retired_at is not None:
        raise TableRetired(
            f"table {table!r} was retired by an admin; revive it first (POST /tables/…/revive) to use it again",
            table=table,
        )
    _check_metadata(row, format=format, location=location)
    clock = await _share_clock(conn)
    existing = await edge_rows.role_of(conn, job_id=job.id, table_id=row.id)
    if existing == role:
        await table_rows.set_metadata(conn, table_id=row.id, format=format, location=location)
        return Registration(job_id=job_id, table=table, role=role, created=False)
    if existing is not None:
        raise CycleError(f"job {job_id!r} cannot both read and write {table!r}", cycle=[table, job_id, table])
    if role == "sink":
        writer = await edge_rows.writer_of(conn, table_id=row.id)
        if writer is not None and writer[0] != job.id:
            raise TableHasWriter(
                f"table {table!r} is already written by job {writer[1]!r}", writer=writer[1], table=table
            )
        await _check_may_write(conn, principal, row)
        path = await _path_from_table_to_job(conn, start_table=row.id, target_job=job.id)
        if path is not None:
            raise CycleError(f"{job_id!r} writing {table!r} would close a cycle", cycle=[table, *path, table])
        await snapshot_rows.close_open(conn, table_id=row.id, through=clock)  # a root stops following seals
        await table_rows.mark_written(conn, table_id=row.id)
    else:
        sinks = (await edge_rows.tables_of_jobs(conn, job_ids=[job.id]))[job.id]["sink"]
        for sink in sinks:
            path = await _path_from_table_to_table(conn, start_table=sink.id, target_table=row.id)
            if path is not None:
                loop = [table, job_id, sink.name, *path]
                raise CycleError(f"{job_id!r} reading {table!r} would close a cycle", cycle=loop)
    await table_rows.set_metadata(conn, table_id=row.id, format=format, location=location)
    verb = "reads" if role == "source" else "writes"
    await abort_in_flight(conn, job_id, f"lineage changed: {job_id} now {verb} {table}")
    await edge_rows.insert_edge(conn, job_id=job.id, table_id=row.id, role=role, after=clock)
    await job_rows.bump(conn, job_id=job.id)
    return Registration(job_id=job_id, table=table, role=role, created=True)


async def register_job(
    db: Database, *, job_id: str, request: RegisterJobRequest, principal: Principal = ANONYMOUS_ADMIN
) -> JobRegistration:
    """Register every source and sink of a job in one transaction: a 4xx for any edge leaves none registered.

    A source MetaService has never seen is refused (409 `unknown_source`, naming each) unless the request lists it
    in `new_roots`: a misspelt name would otherwise become an empty root the job waits on forever."""

    async def work(conn: Connection) -> JobRegistration:
        await lock_registry(conn)
        declared = set(request.new_roots)
        unknown = [
            d.table
            for d in request.sources
            if d.table not in declared and await table_rows.get_folded(conn, name=d.table) is None
        ]
        if unknown:
            raise UnknownSource(
                f"job {job_id!r} reads tables MetaService does not know: {', '.join(unknown)}; check the names, "
                "or declare roots that an outside writer will create as new roots (new_roots; EtlJob(future_roots=…))",
                tables=unknown,
                job_id=job_id,
            )
        await lock_change(conn, job_id=job_id, tables=[d.table for _, declared in _roles_of(request) for d in declared])
        edges = [
            await register_in(
                conn,
                job_id=job_id,
                table=d.table,
                role=role,
                format=d.format,
                location=d.location,
                principal=principal,
            )
            for role, declarations in _roles_of(request)
            for d in declarations
        ]
        return JobRegistration(job_id=job_id, edges=edges, created=any(e.created for e in edges))

    return await in_transaction(db, work)


def _roles_of(request: RegisterJobRequest) -> list[tuple[Role, list[TableDeclaration]]]:
    return [("source", request.sources), ("sink", request.sinks)]


async def retire_table(db: Database, *, table: str) -> TableRetirement:
    """Retire a table no job uses: it leaves lists, delays and reads; registrations naming it are refused."""

    async def work(conn: Connection) -> TableRetirement:
        await lock_registry(conn)
        await table_rows.lock_for_change(conn, names=[table])  # before the clock
        row = await table_rows.get(conn, name=table)
        if row is None:
            raise NotFound(f"table {table!r} is not registered", table=table)
        if row.retired_at is not None:
            return TableRetirement(table=table, retired=True, retired_at=row.retired_at, changed=False)
        writer = await edge_rows.writer_of(conn, table_id=row.id)
        readers = (await edge_rows.readers_of(conn, table_ids=[row.id])).get(row.id, [])
        jobs = sorted({*readers, *([writer[1]] if writer else [])})
        if jobs:
            raise TableInUse(
                f"table {table!r} is used by {', '.join(jobs)}; remove those edges or unregister the jobs first",
                table=table,
                jobs=jobs,
            )
        clock = await _share_clock(conn)
        await snapshot_rows.close_open(conn, table_id=row.id, through=clock)
        await table_rows.retire(conn, table_id=row.id)
        retired = await table_rows.get(conn, name=table)
        assert retired is not None
        return TableRetirement(table=table, retired=True, retired_at=retired.retired_at, changed=True)

    return await in_transaction(db, work)


async def revive_table(db: Database, *, table: str) -> TableRetirement:
    """Undo a retirement: the table can be registered, reported and read again (its history is intact)."""

    async def work(conn: Connection) -> TableRetirement:
        await lock_registry(conn)
        row = await table_rows.get(conn, name=table)
        if row is None:
            raise NotFound(f"table {table!r} is not registered", table=table)
        if row.retired_at is None:
            return TableRetirement(table=table, retired=False, retired_at=None, changed=False)
        await table_rows.revive(conn, table_id=row.id)
        return TableRetirement(table=table, retired=False, retired_at=None, changed=True)

    return await in_transaction(db, work)


async def set_root_group(db: Database, *, group: str, tables: list[str]) -> RootGroup:
    """Declare the roots one ingestion writes together: a barrier seals all of them or none (a job's report of one
    of them records nothing; `POST /barriers` names them all). Creates tables on first sight; idempotent."""

    async def work(conn: Connection) -> RootGroup:
        await lock_registry(conn)
        names = sorted(set(tables))
        # in id order, as allocations lock them: the tables named and those leaving the group
        await table_rows.lock_for_change(conn, names=names, group=group, create=True)
        rows: list[TableRow] = []
        for name in names:
            row = await table_rows.get_folded(conn, name=name)
            assert row is not None
            rows.append(row)
            if row.name != name:
                raise TableNameConflict(
                    f"table {name!r} differs only in case from the registered table {row.name!r}",
                    table=name,
                    registered=row.name,
                )
            if row.retired_at is not None:
                raise TableRetired(f"table {name!r} was retired by an admin; revive it first", table=name)
            if row.root_group is not None and row.root_group != group:
                raise RootGroupConflict(
                    f"table {name!r} belongs to root group {row.root_group!r}; a root is in one group at most",
                    table=name,
                    root_group=row.root_group,
                )
            writer = await edge_rows.writer_of(conn, table_id=row.id)
            if writer is not None:
                raise RootGroupConflict(
                    f"table {name!r} is written by job {writer[1]!r}: only roots form groups (a job's sinks are "
                    "already committed together)",
                    table=name,
                    writer=writer[1],
                )
        await table_rows.set_group(conn, group=group, table_ids=[r.id for r in rows])
        return RootGroup(group=group, tables=names)

    return await in_transaction(db, work)


async def root_groups(db: Database) -> RootGroupList:
    """Every root group with its tables."""

    async def work(conn: Connection) -> RootGroupList:
        groups = await table_rows.all_groups(conn)
        return RootGroupList(groups=[RootGroup(group=g, tables=t) for g, t in groups.items()])

    return await in_transaction(db, work, read_only=True)


async def remove_edge(db: Database, *, job_id: str, table: str, role: Role) -> EdgeRemoval:
    """The job stops reading/writing `table`. A table that loses its writer becomes an orphan (rule 2)."""

    async def work(conn: Connection) -> EdgeRemoval:
        await lock_registry(conn)
        job = await job_rows.lock(conn, name=job_id)
        if job is None:
            raise NotFound(f"job {job_id!r} is not registered", job_id=job_id)
        await table_rows.lock_for_change(conn, names=[table], writer_id=job.id)  # before the clock
        row = await table_rows.get(conn, name=table)
        if row is None:
            raise NotFound(f"table {table!r} is not registered", table=table)
        if await edge_rows.role_of(conn, job_id=job.id, table_id=row.id) != role:
            return EdgeRemoval(job_id=job_id, table=table, role=role, removed=False)
        clock = await _share_clock(conn)
        verb = "reads" if role == "source" else "writes"
        await abort_in_flight(conn, job_id, f"lineage changed: {job_id} no longer {verb} {table}")
        await edge_rows.remove_edges(conn, job_id=job.id, table_id=row.id, role=role, after=clock)
        await job_rows.bump(conn, job_id=job.id)
        return EdgeRemoval(job_id=job_id, table=table, role=role, removed=True)

    return await in_transaction(db, work)


async def unregister(db: Database, *, job_id: str) -> Unregistration:
    """Drop the job's edges and writer claims; its history stays. An in-flight barrier is aborted."""

    async def work(conn: Connection) -> Unregistration:
        await lock_registry(conn)
        job = await job_rows.lock(conn, name=job_id)
        if job is None:
            raise NotFound(f"job {job_id!r} is not registered", job_id=job_id)
        await table_rows.lock_for_change(conn, names=[], writer_id=job.id)  # its sinks, before the clock
        clock = await _share_clock(conn)
        await abort_in_flight(conn, job_id, "job unregistered")
        await edge_rows.remove_edges(conn, job_id=job.id, after=clock)
        await job_rows.deactivate(conn, job_id=job.id)
        return Unregistration(job_id=job_id)

    return await in_transaction(db, work)


async def _check_may_write(conn: Connection, principal: Principal, row: TableRow) -> None:
    """A job token writes only inside its table namespaces, and never takes over a root that jobs outside its own
    job patterns read (another team's input)."""
    if principal.role == "admin":
        return
    if not principal.may_write_table(row.name):
        raise Forbidden(
            f"token {principal.name!r} may not register sinks on {row.name!r}: outside its table namespaces "
            f"{list(principal.table_patterns)}",
            tables=[row.name],
        )
    if await edge_rows.writer_of(conn, table_id=row.id) is None:
        readers = (await edge_rows.readers_of(conn, table_ids=[row.id])).get(row.id, [])
        foreign = sorted(r for r in readers if not principal.may_act_for(r))
        if foreign:
            raise Forbidden(
                f"token {principal.name!r} may not take over {row.name!r}: it is a root read by jobs outside its "
                f"scope ({', '.join(foreign)})",
                tables=[row.name],
                readers=foreign,
            )


def _check_metadata(row: TableRow, *, format: str | None, location: str | None) -> None:
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


async def _path_from_table_to_job(conn: Connection, *, start_table: int, target_job: int) -> list[str] | None:
    """Names along a downstream path start_table → … → target_job (excluding start), or None."""
    parents: dict[int, tuple[int, str, str]] = {}  # table id -> (previous table, job name, table name)
    frontier, seen = deque([start_table]), {start_table}
    while frontier:
        level = list(frontier)
        frontier.clear()
        for hop in await edge_rows.downstream_hops(conn, table_ids=level):
            if hop.to_table not in seen:
                seen.add(hop.to_table)
                parents[hop.to_table] = (hop.from_table, hop.job_name, hop.to_table_name)
                frontier.append(hop.to_table)
        for table_id, reader_id, reader_name in await edge_rows.reader_jobs(conn, table_ids=level):
            if reader_id == target_job:  # also catches readers that write nothing yet
                return [*_trace(parents, table_id), reader_name]
    return None


async def _path_from_table_to_table(conn: Connection, *, start_table: int, target_table: int) -> list[str] | None:
    """Names along a downstream path start_table → … → target_table (excluding start), or None."""
    if start_table == target_table:
        return []
    parents: dict[int, tuple[int, str, str]] = {}
    frontier, seen = deque([start_table]), {start_table}
    while frontier:
        level = list(frontier)
        frontier.clear()
        for hop in await edge_rows.downstream_hops(conn, table_ids=level):
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
