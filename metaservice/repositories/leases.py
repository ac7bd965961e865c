"""SQL for leases. Expiry is judged by the database clock, the same for every server process."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from metaservice.db.database import Connection
from metaservice.repositories.driver import execute, fetch_all, fetch_as, fetch_one_as

_COLUMNS = "id, holder, owner, ttl_seconds, created_at, expires_at, released_at"
_LIVE = "released_at IS NULL AND expires_at > now()"


@dataclass(slots=True)
class LeaseRow:
    id: str
    holder: str
    owner: str | None
    ttl_seconds: float
    created_at: datetime
    expires_at: datetime
    released_at: datetime | None


_INSERT = f"""
    WITH lease AS (
        INSERT INTO leases (id, holder, owner, ttl_seconds, created_at, expires_at)
        VALUES (%(id)s, %(holder)s, %(owner)s, %(ttl)s, now(), now() + make_interval(secs => %(ttl)s))
        RETURNING {_COLUMNS}
    ), held AS (
        INSERT INTO lease_snapshots (lease_id, table_id, snapshot_id)
        SELECT %(id)s, x.table_id, x.snapshot_id
          FROM unnest(CAST(%(tables)s AS bigint[]), CAST(%(snapshots)s AS bigint[])) AS x(table_id, snapshot_id)
    )
    SELECT * FROM lease
"""
_GET_LIVE = f"SELECT {_COLUMNS} FROM leases WHERE id = %(id)s AND {_LIVE}"
_SNAPSHOTS_OF = """
    SELECT s.lease_id, t.name, s.snapshot_id FROM lease_snapshots s JOIN tables t ON t.id = s.table_id
     WHERE s.lease_id = ANY(CAST(%(ids)s AS text[]))
"""
_RENEW = f"""
    UPDATE leases SET expires_at = now() + make_interval(secs => %(ttl)s)
     WHERE id = %(id)s AND {_LIVE}
    RETURNING {_COLUMNS}
"""
_RELEASE = f"UPDATE leases SET released_at = now() WHERE id = %(id)s AND {_LIVE} RETURNING {_COLUMNS}"
_LIVE_FOR_TABLE = f"""
    SELECT s.snapshot_id, l.holder FROM lease_snapshots s JOIN leases l ON l.id = s.lease_id
     WHERE s.table_id = %(table)s AND l.{_LIVE.replace(" AND ", " AND l.")}
"""
_LIST_LIVE = f"""
    SELECT {_COLUMNS} FROM leases
     WHERE {_LIVE} AND (%(owner)s::text IS NULL OR owner = %(owner)s)
     ORDER BY expires_at, id LIMIT %(limit)s
"""
_PURGE = "DELETE FROM leases WHERE expires_at < now() - %(older)s OR released_at < now() - %(older)s"


async def insert(
    conn: Connection,
    *,
    lease_id: str,
    holder: str,
    owner: str | None,
    ttl_seconds: float,
    snapshots: Mapping[int, int],
) -> LeaseRow:
    params: dict[str, object] = {"id": lease_id, "holder": holder, "owner": owner, "ttl": ttl_seconds}
    params |= {"tables": list(snapshots), "snapshots": list(snapshots.values())}
    row = await fetch_one_as(conn, LeaseRow, _INSERT, params)
    assert row is not None
    return row


async def get_live(conn: Connection, *, lease_id: str) -> LeaseRow | None:
    return await fetch_one_as(conn, LeaseRow, _GET_LIVE, {"id": lease_id})


async def snapshots_of(conn: Connection, *, lease_ids: list[str]) -> dict[str, dict[str, int]]:
    """{lease id: {table name: snapshot id}}."""
    out: dict[str, dict[str, int]] = {i: {} for i in lease_ids}
    for lease_id, name, snapshot in await fetch_all(conn, _SNAPSHOTS_OF, {"ids": lease_ids}):
        out[str(lease_id)][str(name)] = int(snapshot)
    return out


async def renew(conn: Connection, *, lease_id: str, ttl_seconds: float) -> LeaseRow | None:
    """Push a live lease's expiry to now + ttl (its own `ttl_seconds` stays the one it was created with)."""
    return await fetch_one_as(conn, LeaseRow, _RENEW, {"id": lease_id, "ttl": ttl_seconds})


async def release(conn: Connection, *, lease_id: str) -> LeaseRow | None:
    """End a live lease; None when it was already gone."""
    return await fetch_one_as(conn, LeaseRow, _RELEASE, {"id": lease_id})


async def live_for_table(conn: Connection, *, table_id: int) -> list[tuple[int, str]]:
    """(snapshot id, holder) of every live lease on the table."""
    return [(int(r[0]), str(r[1])) for r in await fetch_all(conn, _LIVE_FOR_TABLE, {"table": table_id})]


async def list_live(conn: Connection, *, owner: str | None, limit: int) -> list[LeaseRow]:
    """Live leases, soonest to expire first; of one owner only, when given."""
    return await fetch_as(conn, LeaseRow, _LIST_LIVE, {"owner": owner, "limit": limit})


async def purge_ended(conn: Connection, *, older_than: timedelta) -> int:
    """Delete leases that ended more than `older_than` ago (they protect nothing)."""
    return await execute(conn, _PURGE, {"older": older_than})
