"""SQL for jobs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from metaservice.db.database import Connection
from metaservice.repositories.driver import execute, fetch_as, fetch_one_as

_COLUMNS = "id, name, is_active, last_barrier, version, registered_at, last_seen_at"


@dataclass(slots=True)
class JobRow:
    """A job. `last_barrier`: the newest barrier it settled; `version`: grows with every change of its state."""

    id: int
    name: str
    is_active: bool
    last_barrier: int | None
    version: int
    registered_at: datetime
    last_seen_at: datetime


_GET = f"SELECT {_COLUMNS} FROM jobs WHERE name = %(name)s"
_LOCK = f"SELECT {_COLUMNS} FROM jobs WHERE name = %(name)s FOR UPDATE"
_LOCK_MANY = f"SELECT {_COLUMNS} FROM jobs WHERE name = ANY(%(names)s) ORDER BY id FOR UPDATE"
_UPSERT_ACTIVE = f"""
    INSERT INTO jobs (name) VALUES (%(name)s)
    ON CONFLICT (name) DO UPDATE SET is_active = true, unregistered_at = NULL, last_seen_at = now()
    RETURNING {_COLUMNS}
"""
_BUMP = "UPDATE jobs SET version = version + 1, last_seen_at = now() WHERE id = %(id)s"
_DEACTIVATE = "UPDATE jobs SET is_active = false, unregistered_at = now(), version = version + 1 WHERE id = %(id)s"
_LIST = f"""
    SELECT {_COLUMNS} FROM jobs WHERE %(after)s::text IS NULL OR name > %(after)s ORDER BY name LIMIT %(limit)s
"""


async def get(conn: Connection, *, name: str) -> JobRow | None:
    return await fetch_one_as(conn, JobRow, _GET, {"name": name})


async def lock(conn: Connection, *, name: str) -> JobRow | None:
    """Load a job and hold its row lock until the transaction ends."""
    return await fetch_one_as(conn, JobRow, _LOCK, {"name": name})


async def lock_many(conn: Connection, *, names: list[str]) -> list[JobRow]:
    """Lock the jobs called `names` (those that exist), in id order: the order every multi-job write locks in."""
    return await fetch_as(conn, JobRow, _LOCK_MANY, {"names": names})


async def upsert_active(conn: Connection, *, name: str) -> JobRow:
    """Create the job on first sight or reactivate it; its row stays locked by this transaction."""
    row = await fetch_one_as(conn, JobRow, _UPSERT_ACTIVE, {"name": name})
    assert row is not None
    return row


async def bump(conn: Connection, *, job_id: int) -> None:
    """The job's planning state changed (its lineage): steps planned on the old state must plan again."""
    await execute(conn, _BUMP, {"id": job_id})


async def deactivate(conn: Connection, *, job_id: int) -> None:
    await execute(conn, _DEACTIVATE, {"id": job_id})


async def list_all(conn: Connection, *, limit: int, after_name: str | None = None) -> list[JobRow]:
    return await fetch_as(conn, JobRow, _LIST, {"limit": limit, "after": after_name})
