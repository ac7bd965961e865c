"""The list of lineage changes: every edge added or removed, with the barrier and time it took effect.

Edges are never deleted (rule 1), so the list is read straight from `lineage_edges`: an addition per row and a
removal per removed row, newest first by commit time (`ix_lineage_edges_created_at`, `ix_lineage_edges_removed_at`).
Pages are keyset-paginated: `next` is an opaque cursor holding the last change's (time, edge id, kind), so a page
never repeats or skips a change even while new ones are recorded.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Literal, TypedDict

from metaservice.db.database import Connection, Database
from metaservice.db.transaction import in_transaction
from metaservice.errors import InvalidRequest
from metaservice.repositories import history
from metaservice.repositories.history import ChangeFilter
from metaservice.services.as_of import AsOfSpec

DEFAULT_LIMIT, MAX_LIMIT = 100, 1000


class ChangeData(TypedDict):
    job_id: str
    table: str
    role: Literal["source", "sink"]
    change: Literal["added", "removed"]
    barrier: int
    effective_barrier: int | None
    at: datetime


class ChangeListData(TypedDict):
    changes: list[ChangeData]
    next: str | None


def decode_cursor(cursor: str) -> tuple[datetime, int, int]:
    """The position a `next` cursor stands for; 422 for anything this service did not hand out."""
    try:
        at, edge, rank = base64.urlsafe_b64decode(cursor.encode("ascii") + b"==").decode("ascii").split("|")
        position = (datetime.fromisoformat(at), int(edge), int(rank))
    except (ValueError, UnicodeError, binascii.Error):
        raise InvalidRequest("cursor is not one this service handed out", parameter="cursor") from None
    if position[0].tzinfo is None or position[2] not in (0, 1):
        raise InvalidRequest("cursor is not one this service handed out", parameter="cursor")
    return position


def _encode_cursor(position: tuple[datetime, int, int]) -> str:
    at, edge, rank = position
    return base64.urlsafe_b64encode(f"{at.isoformat()}|{edge}|{rank}".encode("ascii")).decode("ascii").rstrip("=")


async def lineage_changes(
    db: Database,
    *,
    table: str | None,
    job: str | None,
    since: AsOfSpec | None,
    until: AsOfSpec | None,
    limit: int,
    cursor: tuple[datetime, int, int] | None,
) -> ChangeListData:
    """Changes newest first. `since` (inclusive) and `until` (exclusive) bound the commit time (a time) or the
    newest barrier issued when the change committed (a barrier number)."""
    where = ChangeFilter(
        job=job,
        table=table,
        since_time=since if isinstance(since, datetime) else None,
        until_time=until if isinstance(until, datetime) else None,
        since_barrier=since if isinstance(since, int) else None,
        until_barrier=until if isinstance(until, int) else None,
    )

    async def work(s: Connection) -> ChangeListData:
        rows = await history.changes(s, where=where, after=cursor, limit=limit + 1)
        page = rows[:limit]
        changes: list[ChangeData] = [
            {
                "job_id": c.job,
                "table": c.table,
                "role": "sink" if c.role == "sink" else "source",
                "change": "removed" if c.change == "removed" else "added",
                "barrier": c.barrier,
                "effective_barrier": c.effective_barrier,
                "at": c.at,
            }
            for c, _ in page
        ]
        return {"changes": changes, "next": _encode_cursor(page[-1][1]) if len(rows) > limit else None}

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)
