"""SQL for registered tables."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from metaservice.db.database import Connection
from metaservice.repositories.driver import execute, fetch_all, fetch_as, fetch_one_as

_COLUMNS = (
    "id, name, format, location, latest_snapshot_id, latest_snapshot_at, sealable, created_at, retired_at, root_group"
)


@dataclass(slots=True)
class TableRow:
    id: int
    name: str
    format: str | None
    location: str | None
    latest_snapshot_id: int | None
    latest_snapshot_at: datetime | None
    sealable: bool
    created_at: datetime
    retired_at: datetime | None = None
    root_group: str | None = None


_GET = f"SELECT {_COLUMNS} FROM tables WHERE name = %(name)s"
_GET_FOLDED = f"SELECT {_COLUMNS} FROM tables WHERE lower(name) = lower(%(name)s)"
_GET_MANY = f"SELECT {_COLUMNS} FROM tables WHERE name = ANY(CAST(%(names)s AS text[]))"
_BY_IDS = f"SELECT {_COLUMNS} FROM tables WHERE id = ANY(CAST(%(ids)s AS bigint[]))"
# Tables rows are locked FOR NO KEY UPDATE, the lock an UPDATE of their columns takes (none is a key a foreign key
# refers to): a foreign key check's KEY SHARE never waits for them (docs/design.md, "Lock order").
_INSERT_MISSING = "INSERT INTO tables (name) SELECT n FROM unnest(CAST(%(names)s AS text[])) n ON CONFLICT DO NOTHING"
# Each part an index probe (a generic plan of one OR over them scans the catalog).
_LOCK_FOR_CHANGE = """
    SELECT id FROM tables
     WHERE id = ANY(ARRAY(
               SELECT t.id FROM tables t
                WHERE lower(t.name) = ANY(ARRAY(SELECT lower(n) FROM unnest(CAST(%(names)s AS text[])) n))
               UNION
               SELECT e.table_id FROM lineage_edges e
                WHERE e.job_id = %(writer)s AND e.role = 'sink' AND e.removed_at IS NULL
               UNION
               SELECT g.id FROM tables g WHERE g.root_group = %(group)s))
     ORDER BY id FOR NO KEY UPDATE
"""
_SET_METADATA = """
    UPDATE tables SET format = coalesce(%(format)s, format), location = coalesce(%(location)s, location)
     WHERE id = %(id)s
"""
_WRITTEN = "UPDATE tables SET sealable = false WHERE id = %(id)s"
_LIST = f"""
    SELECT {_COLUMNS} FROM tables
     WHERE (%(after)s::text IS NULL OR name > %(after)s) AND (%(retired)s OR retired_at IS NULL)
     ORDER BY name LIMIT %(limit)s
"""
# Retiring closes nothing by itself: the service closes the open snapshot range (a root stops following seals).
_RETIRE = "UPDATE tables SET retired_at = now(), sealable = false, seal_candidate = false WHERE id = %(id)s"
# A revived root follows seals again; a table a job ever wrote stays unsealable until a report (an orphan).
_REVIVE = """
    UPDATE tables SET retired_at = NULL, seal_candidate = true,
           sealable = NOT EXISTS (SELECT 1 FROM lineage_edges e WHERE e.table_id = tables.id AND e.role = 'sink')
     WHERE id = %(id)s
"""


async def get(conn: Connection, *, name: str) -> TableRow | None:
    return await fetch_one_as(conn, TableRow, _GET, {"name": name})


async def get_folded(conn: Connection, *, name: str) -> TableRow | None:
    """The table whose name equals `name` regardless of case."""
    return await fetch_one_as(conn, TableRow, _GET_FOLDED, {"name": name})


async def get_many(conn: Connection, *, names: Sequence[str]) -> dict[str, TableRow]:
    rows = await fetch_as(conn, TableRow, _GET_MANY, {"names": list(names)})
    return {row.name: row for row in rows}


async def by_ids(conn: Connection, *, ids: Sequence[int]) -> dict[int, TableRow]:
    rows = await fetch_as(conn, TableRow, _BY_IDS, {"ids": list(ids)})
    return {row.id: row for row in rows}


async def lock_for_change(
    conn: Connection,
    *,
    names: Sequence[str],
    writer_id: int | None = None,
    group: str | None = None,
    create: bool = False,
) -> None:
    """Lock, in one statement and in id order, the tables whose names equal `names` regardless of case (with
    `create`: created on first sight), the current sinks of job `writer_id` and the tables of root group `group`:
    every tables row a registry change writes or references (an aborted barrier's ranges refer to the job's
    sinks). Taken before the barrier clock, in the order the allocation function locks tables rows
    (docs/design.md, "Lock order")."""
    if create and names:
        await execute(conn, _INSERT_MISSING, {"names": list(names)})
    await fetch_all(conn, _LOCK_FOR_CHANGE, {"names": list(names), "writer": writer_id, "group": group})


async def set_metadata(conn: Connection, *, table_id: int, format: str | None, location: str | None) -> None:
    if format is not None or location is not None:
        await execute(conn, _SET_METADATA, {"id": table_id, "format": format, "location": location})


async def mark_written(conn: Connection, *, table_id: int) -> None:
    """A job writes the table: barriers stop sealing it (also after the job goes: rule 2, orphans)."""
    await execute(conn, _WRITTEN, {"id": table_id})


async def list_all(
    conn: Connection, *, limit: int, after_name: str | None = None, include_retired: bool = False
) -> list[TableRow]:
    return await fetch_as(conn, TableRow, _LIST, {"limit": limit, "after": after_name, "retired": include_retired})


async def retire(conn: Connection, *, table_id: int) -> None:
    """The table leaves lists and reads; barriers stop sealing it."""
    await execute(conn, _RETIRE, {"id": table_id})


async def revive(conn: Connection, *, table_id: int) -> None:
    """A retired table is usable again: a root follows seals from its newest reported snapshot."""
    await execute(conn, _REVIVE, {"id": table_id})


_GROUPS_OF = """
    SELECT g.root_group, array_agg(g.name ORDER BY g.name)
      FROM tables g
     WHERE g.root_group IN (SELECT root_group FROM tables WHERE name = ANY(CAST(%(names)s AS text[])))
     GROUP BY g.root_group
"""
_ALL_GROUPS = (
    "SELECT root_group, array_agg(name ORDER BY name) FROM tables WHERE root_group IS NOT NULL GROUP BY 1 ORDER BY 1"
)
_SET_GROUP = """
    UPDATE tables SET root_group = CASE WHEN id = ANY(CAST(%(ids)s AS bigint[])) THEN %(group)s END
     WHERE id = ANY(CAST(%(ids)s AS bigint[])) OR root_group = %(group)s
"""


async def groups_of(conn: Connection, *, names: Sequence[str]) -> dict[str, list[str]]:
    """Each root group holding any of `names`, with all its tables."""
    rows = await fetch_all(conn, _GROUPS_OF, {"names": list(names)})
    return {str(r[0]): [str(n) for n in r[1]] for r in rows}


async def all_groups(conn: Connection) -> dict[str, list[str]]:
    return {str(r[0]): [str(n) for n in r[1]] for r in await fetch_all(conn, _ALL_GROUPS)}


async def set_group(conn: Connection, *, group: str, table_ids: Sequence[int]) -> None:
    """The group holds exactly `table_ids` (its other tables leave it)."""
    await execute(conn, _SET_GROUP, {"group": group, "ids": list(table_ids)})
