"""SQL about the database itself (readiness)."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession


async def schema_revision(session: AsyncSession) -> str | None:
    """The Alembic revision the database is at, or None before the first migration."""
    exists = await session.scalar(text("SELECT to_regclass('alembic_version') IS NOT NULL"))
    if not exists:
        return None
    value = await session.scalar(text("SELECT version_num FROM alembic_version LIMIT 1"))
    return str(value) if value is not None else None
