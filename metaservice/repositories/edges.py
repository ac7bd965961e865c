"""SQL for lineage edges: who reads and who writes which table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sqlalchemy import delete, select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.models import Edge, Job, Table
from metaservice.repositories.driver import fetch_all, fetch_one_as
from metaservice.repositories.jobs import JobRow

_WRITER_OF = """
    SELECT j.id, j.name, j.is_active, j.last_barrier
      FROM lineage_edges e JOIN jobs j ON j.id = e.job_id
     WHERE e.table_id = %(table_id)s AND e.role = 'sink'
"""
_TABLES_OF = """
    SELECT t.id, t.name, e.role,
           NOT EXISTS (SELECT 1 FROM lineage_edges w WHERE w.table_id = t.id AND w.role = 'sink') AS is_root
      FROM lineage_edges e JOIN tables t ON t.id = e.table_id
     WHERE e.job_id = %(job_id)s
     ORDER BY t.name
"""


class TableRef(NamedTuple):
    id: int
    name: str
    is_root: bool = False  # no job writes it (set for a job's sources by `sources_and_sinks`)


class Hop(NamedTuple):
    """One job step through the graph: `from_table` is read by `job`, which writes `to_table`."""

    from_table: int
    job_id: int
    job_name: str
    to_table: int
    to_table_name: str


async def role_of(session: AsyncSession, *, job_id: int, table_id: int) -> str | None:
    return await session.scalar(select(Edge.role).where(Edge.job_id == job_id, Edge.table_id == table_id))


async def insert_edge(session: AsyncSession, *, job_id: int, table_id: int, role: str) -> bool:
    """Add the edge; False when it was already there."""
    result = await session.execute(
        insert(Edge).values(job_id=job_id, table_id=table_id, role=role).on_conflict_do_nothing().returning(Edge.job_id)
    )
    return result.first() is not None


async def writer_of(session: AsyncSession, *, table_id: int) -> JobRow | None:
    return await fetch_one_as(session, JobRow, _WRITER_OF, {"table_id": table_id})


async def writers_of(session: AsyncSession, *, table_ids: Sequence[int]) -> dict[int, str]:
    rows = await session.execute(
        select(Edge.table_id, Job.name)
        .join(Job, Job.id == Edge.job_id)
        .where(Edge.table_id.in_(list(table_ids)), Edge.role == "sink")
    )
    return {int(r.table_id): str(r.name) for r in rows}


async def readers_of(session: AsyncSession, *, table_ids: Sequence[int]) -> dict[int, list[str]]:
    rows = await session.execute(
        select(Edge.table_id, Job.name)
        .join(Job, Job.id == Edge.job_id)
        .where(Edge.table_id.in_(list(table_ids)), Edge.role == "source")
        .order_by(Job.name)
    )
    readers: dict[int, list[str]] = {}
    for r in rows:
        readers.setdefault(int(r.table_id), []).append(str(r.name))
    return readers


async def reader_jobs(session: AsyncSession, *, table_ids: Sequence[int]) -> list[tuple[int, int, str]]:
    """(table id, job id, job name) for every job reading one of `table_ids`."""
    rows = await session.execute(
        select(Edge.table_id, Job.id, Job.name)
        .join(Job, Job.id == Edge.job_id)
        .where(Edge.table_id.in_(list(table_ids)), Edge.role == "source")
    )
    return [(int(r[0]), int(r[1]), str(r[2])) for r in rows]


async def tables_of(session: AsyncSession, *, job_id: int, role: str) -> list[TableRef]:
    sources, sinks = await sources_and_sinks(session, job_id=job_id)
    return sources if role == "source" else sinks


async def sources_and_sinks(session: AsyncSession, *, job_id: int) -> tuple[list[TableRef], list[TableRef]]:
    """The job's (sources, sinks), each sorted by name, in one round trip; sources say whether they are roots."""
    sources: list[TableRef] = []
    sinks: list[TableRef] = []
    for table_id, name, role, is_root in await fetch_all(session, _TABLES_OF, {"job_id": job_id}):
        (sources if role == "source" else sinks).append(TableRef(table_id, name, is_root))
    return sources, sinks


async def tables_of_jobs(session: AsyncSession, *, job_ids: Sequence[int]) -> dict[int, dict[str, list[str]]]:
    """For each job: {"source": [names], "sink": [names]}."""
    rows = await session.execute(
        select(Edge.job_id, Edge.role, Table.name)
        .join(Table, Table.id == Edge.table_id)
        .where(Edge.job_id.in_(list(job_ids)))
        .order_by(Table.name)
    )
    out: dict[int, dict[str, list[str]]] = {j: {"source": [], "sink": []} for j in job_ids}
    for r in rows:
        out[int(r.job_id)][str(r.role)].append(str(r.name))
    return out


async def downstream_hops(session: AsyncSession, *, table_ids: Sequence[int]) -> list[Hop]:
    """Every (table → job → table) step leaving `table_ids`: one level of a breadth-first walk."""
    source, sink = Edge.__table__.alias("src"), Edge.__table__.alias("dst")
    rows = await session.execute(
        select(source.c.table_id, Job.id, Job.name, sink.c.table_id, Table.name)
        .select_from(source)
        .join(Job, Job.id == source.c.job_id)
        .join(sink, (sink.c.job_id == source.c.job_id) & (sink.c.role == "sink"))
        .join(Table, Table.id == sink.c.table_id)
        .where(source.c.role == "source", source.c.table_id.in_(list(table_ids)))
    )
    return [Hop(int(r[0]), int(r[1]), str(r[2]), int(r[3]), str(r[4])) for r in rows]


async def upstream_hops(session: AsyncSession, *, table_ids: Sequence[int]) -> list[Hop]:
    """Every (table ← job ← table) step arriving at `table_ids`, as hops read forwards."""
    source, sink = Edge.__table__.alias("src"), Edge.__table__.alias("dst")
    rows = await session.execute(
        select(source.c.table_id, Job.id, Job.name, sink.c.table_id, Table.name)
        .select_from(sink)
        .join(Job, Job.id == sink.c.job_id)
        .join(source, (source.c.job_id == sink.c.job_id) & (source.c.role == "source"))
        .join(Table, Table.id == sink.c.table_id)
        .where(sink.c.role == "sink", sink.c.table_id.in_(list(table_ids)))
    )
    return [Hop(int(r[0]), int(r[1]), str(r[2]), int(r[3]), str(r[4])) for r in rows]


async def neighbours(session: AsyncSession, *, table_ids: Sequence[int]) -> set[int]:
    """Tables one job away from `table_ids` in either direction (for lineage components)."""
    mine = Edge.__table__.alias("mine")
    other = Edge.__table__.alias("other")
    rows = await session.scalars(
        select(other.c.table_id)
        .select_from(mine)
        .join(other, other.c.job_id == mine.c.job_id)
        .where(mine.c.table_id.in_(list(table_ids)))
        .distinct()
    )
    return {int(t) for t in rows}


async def delete_for_job(session: AsyncSession, *, job_id: int) -> None:
    await session.execute(delete(Edge).where(Edge.job_id == job_id))


async def all_edges(session: AsyncSession) -> list[tuple[int, int, str]]:
    rows = await session.execute(select(Edge.job_id, Edge.table_id, Edge.role))
    return [(int(r[0]), int(r[1]), str(r[2])) for r in rows]
