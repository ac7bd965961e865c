"""SQL about the database itself (readiness)."""

from __future__ import annotations

from metaservice.db.database import Connection
from metaservice.repositories.driver import fetch_value

_REVISION = """
    SELECT CASE WHEN to_regclass('alembic_version') IS NULL THEN NULL
                ELSE (SELECT version_num FROM alembic_version LIMIT 1) END
"""


async def schema_revision(conn: Connection) -> str | None:
    """The Alembic revision the database is at, or None before the first migration."""
    value = await fetch_value(conn, _REVISION, prepare=True)
    return None if value is None else str(value)
