"""The list of lineage changes: every edge added or removed, with the barrier and time it took effect.

Edges are never deleted (rule 1), so the list is read straight from `lineage_edges`: an addition per row and a
removal per removed row, newest first by commit time (`ix_lineage_edges_created_at`, `ix_lineage_edges_removed_at`).
Pages are keyset-paginated: `next` is a cursor holding the last change's (time, edge id, kind), so a page never
repeats or skips a change even while new ones are recorded.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal, TypedDict

from metaservice.db.database import Connection, Database
from metaservice.db.transaction import in_transaction
from metaservice.repositories import history
from metaservice.repositories.history import ChangeFilter
from metaservice.services.as_of import MAX_BARRIER, AsOfSpec

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


CURSOR_PATTERN = r"^[0-9]{1,17}-[0-9]{1,18}-[01]$"
"""`<µs since the epoch>-<edge id>-<0: added, 1: removed>`: every value of this form is a position."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def decode_cursor(cursor: str) -> tuple[datetime, int, int]:
    """The position a `next` cursor stands for (the route checked its form)."""
    micros, edge, rank = cursor.split("-")
    return _EPOCH + timedelta(microseconds=int(micros)), int(edge), int(rank)


def _encode_cursor(position: tuple[datetime, int, int]) -> str:
    at, edge, rank = position
    return f"{(at - _EPOCH) // timedelta(microseconds=1)}-{edge}-{rank}"


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
        since_barrier=min(since, MAX_BARRIER) if isinstance(since, int) else None,
        until_barrier=min(until, MAX_BARRIER) if isinstance(until, int) else None,
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
