"""Readiness: the database answers and carries the schema this code expects."""

from __future__ import annotations

from functools import cache

from alembic.script import ScriptDirectory

from metaservice.db.database import Database
from metaservice.db.migrate import alembic_config
from metaservice.db.transaction import in_autocommit
from metaservice.errors import Unavailable
from metaservice.repositories import meta


@cache
def expected_revision() -> str:
    """The head revision of the migrations shipped with this code."""
    head = ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()
    assert head is not None
    return head


async def readiness(db: Database) -> dict[str, str]:
    """Raise `Unavailable` unless the database is reachable and migrated to this code's head (one statement)."""
    revision = await in_autocommit(db, lambda unit: meta.schema_revision(unit.conn))
    if revision != expected_revision():
        raise Unavailable(f"database schema is at {revision!r}, expected {expected_revision()!r}; run migrations")
    return {"status": "ready", "schema_revision": revision}
