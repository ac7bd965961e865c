"""Small helpers every repository uses to run SQL on a psycopg connection.

Rows come back as plain tuples or small dataclasses, in binary format (integers and timestamps load faster).
Hot statements are prepared on the server (`prepare=True`): planned once per connection, then only executed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from psycopg.rows import class_row

from metaservice.db import statements
from metaservice.db.database import Connection

R = TypeVar("R")
Params = Mapping[str, object] | Sequence[object] | None


async def fetch_all(conn: Connection, query: str, params: Params = None, *, prepare: bool | None = None) -> list[Any]:
    """The rows of `query` (psycopg `%(name)s` placeholders) as tuples."""
    statements.count()
    async with conn.cursor(binary=True) as cursor:
        await cursor.execute(query, params, prepare=prepare)
        return await cursor.fetchall()


async def fetch_one(conn: Connection, query: str, params: Params = None, *, prepare: bool | None = None) -> Any:
    """The first row of `query` as a tuple, or None."""
    statements.count()
    async with conn.cursor(binary=True) as cursor:
        await cursor.execute(query, params, prepare=prepare)
        return await cursor.fetchone()


async def fetch_as(conn: Connection, cls: type[R], query: str, params: Params = None) -> list[R]:
    """The rows of `query` as `cls` instances, built from the columns by name."""
    statements.count()
    async with conn.cursor(binary=True, row_factory=class_row(cls)) as cursor:
        await cursor.execute(query, params)
        return await cursor.fetchall()


async def fetch_one_as(conn: Connection, cls: type[R], query: str, params: Params = None) -> R | None:
    """The first row of `query` as a `cls`, or None."""
    rows = await fetch_as(conn, cls, query, params)
    return rows[0] if rows else None


async def fetch_value(conn: Connection, query: str, params: Params = None, *, prepare: bool | None = None) -> Any:
    """The first column of the first row of `query`, or None when there is no row."""
    row = await fetch_one(conn, query, params, prepare=prepare)
    return row[0] if row else None


async def execute(conn: Connection, query: str, params: Params = None) -> int:
    """Run a statement that returns no rows; the number of rows it changed."""
    statements.count()
    async with conn.cursor(binary=True) as cursor:
        await cursor.execute(query, params)
        return cursor.rowcount


def id_array(ids: Iterable[int]) -> str:
    """A `bigint[]` literal for `CAST(%(ids)s AS bigint[])`: thousands of ids are dumped in one join, not one
    Python call per element as a list parameter would be."""
    return "{" + ",".join(map(str, ids)) + "}"
