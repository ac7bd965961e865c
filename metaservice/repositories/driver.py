"""Reads straight through the psycopg connection under a session, for the hot and the bulk read paths.

SQLAlchemy sets up an execution context and result metadata for every statement and wraps every row; for a
`POST /versions` that is a third of the request, and for a lineage graph of thousands of nodes it is tens of
milliseconds. These reads run on the session's own connection, so inside its transaction and snapshot, and
rows come back as plain tuples (in binary format: integers and timestamps load faster).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession


async def fetch_all(session: AsyncSession, query: str, params: Mapping[str, object] | None = None) -> list[Any]:
    """The rows of `query` (psycopg `%(name)s` placeholders) as tuples.

    Driver errors are re-raised as SQLAlchemy's, so that `in_transaction` turns outages and timeouts into 503s
    and retries serialization failures as for every other statement.
    """
    raw = await (await session.connection()).get_raw_connection()
    driver = raw.driver_connection
    assert isinstance(driver, psycopg.AsyncConnection)
    try:
        async with driver.cursor(binary=True) as cursor:
            await cursor.execute(query, params)
            return await cursor.fetchall()
    except psycopg.Error as exc:
        raise DBAPIError.instance(query, params, exc, psycopg.Error) from exc
