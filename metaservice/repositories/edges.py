"""SQL for lineage edges: who reads and who writes which table, now and (with their history) at any barrier.

An edge is current while `removed_at` is NULL. `added_after` / `removed_after` hold the newest barrier issued
when it was added / removed; the lineage at barrier b is the edges added before b and not removed before b.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from metaservice.db.database import Connection
from metaservice.repositories.driver import execute, fetch_all, fetch_one, id_array


class TableRef(NamedTuple):
    id: int
    name: str


class Hop(NamedTuple):
    """One job step through the graph: `from_table` is read by `job`, which writes `to_table`."""

    from_table: int
    job_id: int
    job_name: str
    to_table: int
    to_table_name: str


_ROLE_OF = """
    SELECT role FROM lineage_edges WHERE job_id = %(job)s AND table_id = %(table)s AND removed_at IS NULL
"""
_INSERT = """
    INSERT INTO lineage_edges (job_id, table_id, role, added_after) VALUES (%(job)s, %(table)s, %(role)s, %(after)s)
"""
_REMOVE = """
    UPDATE lineage_edges e SET removed_after = %(after)s, removed_at = now()
      FROM tables t
     WHERE t.id = e.table_id AND e.job_id = %(job)s AND e.removed_at IS NULL
       AND (%(table)s::bigint IS NULL OR e.table_id = %(table)s) AND (%(role)s::text IS NULL OR e.role = %(role)s)
    RETURNING e.table_id, t.name, e.role
"""
_WRITER_OF = """
    SELECT j.id, j.name FROM lineage_edges e JOIN jobs j ON j.id = e.job_id
     WHERE e.table_id = %(table)s AND e.role = 'sink' AND e.removed_at IS NULL
"""
_WRITERS_OF = """
    SELECT e.table_id, j.name FROM lineage_edges e JOIN jobs j ON j.id = e.job_id
     WHERE e.table_id = ANY(CAST(%(ids)s AS bigint[])) AND e.role = 'sink' AND e.removed_at IS NULL
"""
_READERS_OF = """
    SELECT e.table_id, j.id, j.name FROM lineage_edges e JOIN jobs j ON j.id = e.job_id
     WHERE e.table_id = ANY(CAST(%(ids)s AS bigint[])) AND e.role = 'source' AND e.removed_at IS NULL
     ORDER BY j.name
"""
_TABLES_OF = """
    SELECT e.job_id, e.role, t.id, t.name FROM lineage_edges e JOIN tables t ON t.id = e.table_id
     WHERE e.job_id = ANY(CAST(%(ids)s AS bigint[])) AND e.removed_at IS NULL
     ORDER BY t.name
"""
_DOWNSTREAM_HOPS = """
    SELECT src.table_id, j.id, j.name, dst.table_id, t.name
      FROM lineage_edges src
      JOIN jobs j ON j.id = src.job_id
      JOIN lineage_edges dst ON dst.job_id = src.job_id AND dst.role = 'sink' AND dst.removed_at IS NULL
      JOIN tables t ON t.id = dst.table_id
     WHERE src.role = 'source' AND src.removed_at IS NULL AND src.table_id = ANY(CAST(%(ids)s AS bigint[]))
"""


# Downstream of the tables through every edge in effect at some barrier after %(b)s (current edges, and edges
# removed after it): what may have read the tables' data of those barriers.
_DOWNSTREAM_SINCE = """
    WITH RECURSIVE down(table_id) AS (
        SELECT unnest(CAST(%(ids)s AS bigint[]))
        UNION
        SELECT w.table_id
          FROM down
          JOIN lineage_edges r ON r.table_id = down.table_id AND r.role = 'source'
                              AND (r.removed_after IS NULL OR r.removed_after > %(b)s)
          JOIN lineage_edges w ON w.job_id = r.job_id AND w.role = 'sink'
                              AND (w.removed_after IS NULL OR w.removed_after > %(b)s)
    )
    SELECT t.id, t.name FROM down JOIN tables t ON t.id = down.table_id
"""


async def downstream_since(conn: Connection, *, table_ids: Sequence[int], barrier: int) -> dict[int, str]:
    """Every table downstream of `table_ids` (them included) through the lineage in effect at any barrier after
    `barrier`: also through edges removed since."""
    rows = await fetch_all(conn, _DOWNSTREAM_SINCE, {"ids": id_array(table_ids), "b": barrier})
    return {int(t): str(n) for t, n in rows}


async def role_of(conn: Connection, *, job_id: int, table_id: int) -> str | None:
    row = await fetch_one(conn, _ROLE_OF, {"job": job_id, "table": table_id})
    return None if row is None else str(row[0])


async def insert_edge(conn: Connection, *, job_id: int, table_id: int, role: str, after: int) -> None:
    """Add a current edge, taking effect at the first barrier issued after `after`."""
    await execute(conn, _INSERT, {"job": job_id, "table": table_id, "role": role, "after": after})


async def remove_edges(
    conn: Connection, *, job_id: int, after: int, table_id: int | None = None, role: str | None = None
) -> list[tuple[int, str, str]]:
    """End the job's current edges (all, or the one to `table_id` with `role`); returns (table id, name, role)."""
    rows = await fetch_all(conn, _REMOVE, {"job": job_id, "table": table_id, "role": role, "after": after})
    return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]


async def writer_of(conn: Connection, *, table_id: int) -> tuple[int, str] | None:
    """(job id, name) of the table's current writer."""
    row = await fetch_one(conn, _WRITER_OF, {"table": table_id})
    return None if row is None else (int(row[0]), str(row[1]))


async def writers_of(conn: Connection, *, table_ids: Sequence[int]) -> dict[int, str]:
    return {int(t): str(n) for t, n in await fetch_all(conn, _WRITERS_OF, {"ids": id_array(table_ids)})}


async def readers_of(conn: Connection, *, table_ids: Sequence[int]) -> dict[int, list[str]]:
    readers: dict[int, list[str]] = {}
    for table_id, _job_id, name in await fetch_all(conn, _READERS_OF, {"ids": id_array(table_ids)}):
        readers.setdefault(int(table_id), []).append(str(name))
    return readers


async def reader_jobs(conn: Connection, *, table_ids: Sequence[int]) -> list[tuple[int, int, str]]:
    """(table id, job id, job name) for every job reading one of `table_ids` now."""
    rows = await fetch_all(conn, _READERS_OF, {"ids": id_array(table_ids)})
    return [(int(t), int(j), str(n)) for t, j, n in rows]


async def tables_of_jobs(conn: Connection, *, job_ids: Sequence[int]) -> dict[int, dict[str, list[TableRef]]]:
    """For each job: {"source": [tables], "sink": [tables]}, by name."""
    out: dict[int, dict[str, list[TableRef]]] = {j: {"source": [], "sink": []} for j in job_ids}
    for job_id, role, table_id, name in await fetch_all(conn, _TABLES_OF, {"ids": id_array(job_ids)}):
        out[int(job_id)][str(role)].append(TableRef(int(table_id), str(name)))
    return out


async def downstream_hops(conn: Connection, *, table_ids: Sequence[int]) -> list[Hop]:
    """Every (table → job → table) step leaving `table_ids` now: one level of a breadth-first walk."""
    rows = await fetch_all(conn, _DOWNSTREAM_HOPS, {"ids": id_array(table_ids)})
    return [Hop(int(r[0]), int(r[1]), str(r[2]), int(r[3]), str(r[4])) for r in rows]
