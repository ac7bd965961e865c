"""Readiness: the database answers and carries the schema this code expects."""

from __future__ import annotations

from functools import cache

from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.migrate import alembic_config
from metaservice.db.transaction import in_transaction
from metaservice.errors import Unavailable
from metaservice.repositories import meta


@cache
def expected_revision() -> str:
    """The head revision of the migrations shipped with this code."""
    head = ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()
    assert head is not None
    return head


async def readiness(session: AsyncSession) -> dict[str, str]:
    """Raise `Unavailable` unless the database is reachable and migrated to this code's head."""
    revision = await in_transaction(session, meta.schema_revision, read_only=True)
    if revision != expected_revision():
        raise Unavailable(f"database schema is at {revision!r}, expected {expected_revision()!r}; run migrations")
    return {"status": "ready", "schema_revision": revision}
