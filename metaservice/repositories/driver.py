"""Statements straight through the psycopg connection under a session, for the hot and the bulk paths.

SQLAlchemy sets up an execution context and result metadata for every statement and wraps every row; the ORM
adds identity-map bookkeeping on top. For a `POST /versions` that was a third of the request, for a lineage graph
of thousands of nodes tens of milliseconds, and for the barrier protocol (a dozen small statements per `next`)
most of the server's CPU. These statements run on the session's own connection, so inside its transaction and
snapshot; rows come back as plain tuples or small dataclasses (binary format: integers and timestamps load
faster). psycopg prepares a statement on a connection after a few executions, so the hot ones are planned once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import psycopg
from psycopg.rows import class_row
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

R = TypeVar("R")
Params = Mapping[str, object] | None


async def _driver(session: AsyncSession) -> psycopg.AsyncConnection[Any]:
    raw = await (await session.connection()).get_raw_connection()
    driver = raw.driver_connection
    assert isinstance(driver, psycopg.AsyncConnection)
    return driver


def _reraised(query: str, params: Params, exc: psycopg.Error) -> DBAPIError:
    """Driver errors as SQLAlchemy's, so that `in_transaction` turns outages and timeouts into 503s and retries
    serialization failures as for every other statement."""
    error = DBAPIError.instance(query, params, exc, psycopg.Error)
    assert isinstance(error, DBAPIError)
    return error


async def fetch_all(session: AsyncSession, query: str, params: Params = None) -> list[Any]:
    """The rows of `query` (psycopg `%(name)s` placeholders) as tuples."""
    driver = await _driver(session)
    try:
        async with driver.cursor(binary=True) as cursor:
            await cursor.execute(query, params)
            return await cursor.fetchall()
    except psycopg.Error as exc:
        raise _reraised(query, params, exc) from exc


async def fetch_as(session: AsyncSession, cls: type[R], query: str, params: Params = None) -> list[R]:
    """The rows of `query` as `cls` instances, built from the columns by name."""
    driver = await _driver(session)
    try:
        async with driver.cursor(binary=True, row_factory=class_row(cls)) as cursor:
            await cursor.execute(query, params)
            return await cursor.fetchall()
    except psycopg.Error as exc:
        raise _reraised(query, params, exc) from exc


async def fetch_one_as(session: AsyncSession, cls: type[R], query: str, params: Params = None) -> R | None:
    """The first row of `query` as a `cls`, or None."""
    rows = await fetch_as(session, cls, query, params)
    return rows[0] if rows else None


async def fetch_value(session: AsyncSession, query: str, params: Params = None) -> Any:
    """The first column of the first row of `query`, or None when there is no row."""
    rows = await fetch_all(session, query, params)
    return rows[0][0] if rows else None


async def execute(session: AsyncSession, query: str, params: Params = None) -> int:
    """Run a statement that returns no rows; the number of rows it changed."""
    driver = await _driver(session)
    try:
        async with driver.cursor(binary=True) as cursor:
            await cursor.execute(query, params)
            return cursor.rowcount
    except psycopg.Error as exc:
        raise _reraised(query, params, exc) from exc


def id_array(ids: Iterable[int]) -> str:
    """A `bigint[]` literal for `CAST(%(ids)s AS bigint[])`: thousands of ids are dumped in one join, not one
    Python call per element as a list parameter would be."""
    return "{" + ",".join(map(str, ids)) + "}"
