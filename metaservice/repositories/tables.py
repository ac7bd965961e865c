"""SQL for registered tables."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Text, bindparam, select, text, update
from sqlalchemy.dialects.postgresql import ARRAY, insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from metaservice.db.models import Table
from metaservice.repositories.driver import fetch_all, fetch_value, id_array

_RAISE_LATEST = """
    UPDATE tables
       SET latest_snapshot_id = greatest(coalesce(latest_snapshot_id, -1), %(snapshot_id)s),
           latest_snapshot_at = coalesce(%(at)s, now())
     WHERE id = %(id)s
    RETURNING latest_snapshot_id
"""
_WRITTEN = """
    SELECT DISTINCT table_id FROM lineage_edges WHERE role = 'sink' AND table_id = ANY (CAST(%(ids)s AS bigint[]))
"""


async def get(session: AsyncSession, *, name: str) -> Table | None:
    return await session.scalar(select(Table).where(Table.name == name))


async def get_many(session: AsyncSession, *, names: Sequence[str]) -> dict[str, Table]:
    rows = await session.scalars(select(Table).where(Table.name.in_(list(names))))
    return {row.name: row for row in rows}


async def by_ids(session: AsyncSession, *, ids: Sequence[int]) -> dict[int, Table]:
    rows = await session.scalars(select(Table).where(Table.id.in_(list(ids))))
    return {row.id: row for row in rows}


async def get_or_insert(session: AsyncSession, *, name: str) -> Table:
    """The table called `name`, created on first sight."""
    await session.execute(insert(Table).values(name=name).on_conflict_do_nothing(index_elements=[Table.name]))
    table = await get(session, name=name)
    assert table is not None
    return table


async def set_metadata(session: AsyncSession, *, table_id: int, format: str | None, location: str | None) -> None:
    values = {k: v for k, v in {"format": format, "location": location}.items() if v is not None}
    if values:
        await session.execute(update(Table).where(Table.id == table_id).values(**values))


async def raise_latest(session: AsyncSession, *, table_id: int, snapshot_id: int, at: datetime | None) -> int:
    """Move the newest known snapshot forward (never back); returns the value now stored."""
    stored = await fetch_value(session, _RAISE_LATEST, {"id": table_id, "snapshot_id": snapshot_id, "at": at})
    return int(stored if stored is not None else snapshot_id)


async def list_all(session: AsyncSession, *, limit: int, after_name: str | None = None) -> list[Table]:
    query = select(Table).order_by(Table.name).limit(limit)
    if after_name is not None:
        query = query.where(Table.name > after_name)
    return list(await session.scalars(query))


async def root_ids(session: AsyncSession, *, ids: Sequence[int]) -> set[int]:
    """Those of `ids` that no registered job writes."""
    written = {row[0] for row in await fetch_all(session, _WRITTEN, {"ids": id_array(ids)})}
    return set(ids) - written


_ROOTS_BY_NAME = text(
    """
    SELECT t.name, t.id, NOT EXISTS (SELECT 1 FROM lineage_edges e WHERE e.table_id = t.id AND e.role = 'sink')
      FROM tables t
     WHERE t.name = ANY (:names)
    """
).bindparams(bindparam("names", type_=ARRAY(Text)))


async def roots_by_name(
    connection: AsyncConnection | AsyncSession, *, names: Sequence[str]
) -> dict[str, tuple[int, bool]]:
    """{name: (table id, is a root)} for those of `names` that are registered, in one round trip."""
    result = await connection.execute(_ROOTS_BY_NAME, {"names": list(names)})
    return {str(name): (int(table_id), bool(is_root)) for name, table_id, is_root in result}
