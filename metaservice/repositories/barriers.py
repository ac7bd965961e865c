"""SQL for the global barrier sequence."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.dialects.postgresql import ARRAY, BIGINT
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from metaservice.db.models import Barrier, BarrierClock
from metaservice.repositories.driver import fetch_one_as, fetch_value


@dataclass(slots=True)
class BarrierRow:
    barrier: int
    issued_at: datetime
    issued_by: str | None


_HEAD = "SELECT barrier, issued_at, issued_by FROM barriers ORDER BY barrier DESC LIMIT 1"
_GET = "SELECT barrier, issued_at, issued_by FROM barriers WHERE barrier = %(barrier)s"
_AFTER = "SELECT min(barrier) FROM barriers WHERE barrier > %(barrier)s"
_BEFORE = "SELECT max(barrier) FROM barriers WHERE barrier < %(barrier)s"

# Report root snapshots, issue a barrier and seal it, as one call: see the migration that defines the function
# (2026-11-23-1000) for why allocation lives in the database. Autocommit callers hold the clock lock only
# while PostgreSQL runs it.
_ISSUE = text(
    """
    SELECT barrier, issued_at, replayed, sealed, wait_seconds
      FROM metaservice_issue_barrier(:issued_by, :request_key, :root_ids, :root_snapshots, :when_unsealed,
                                     :min_interval)
    """
).bindparams(
    bindparam("root_ids", type_=ARRAY(BIGINT)),
    bindparam("root_snapshots", type_=ARRAY(BIGINT)),
    bindparam("when_unsealed", type_=ARRAY(BIGINT)),
)


class Issued(NamedTuple):
    """What one allocation call did: a barrier (new, or `replayed` for a repeated key) or a wait."""

    barrier: int | None
    issued_at: datetime | None
    replayed: bool
    sealed: dict[str, int]  # table name → snapshot id newly sealed by the barrier
    wait_seconds: float | None  # throttled: the newest barrier is younger than the minimum interval


async def issue(
    connection: AsyncConnection | AsyncSession,
    *,
    issued_by: str | None,
    request_key: str | None = None,
    root_snapshots: Mapping[int, int] | None = None,
    when_unsealed: Sequence[int] | None = None,
    min_interval: float = 0.0,
) -> Issued | None:
    """Report `root_snapshots` ({table id: snapshot}), then issue the next barrier, strictly greater than every
    earlier one. None: `when_unsealed` named tables with nothing new to seal, so nothing was issued."""
    roots = sorted((root_snapshots or {}).items())
    result = await connection.execute(
        _ISSUE,
        {
            "issued_by": issued_by,
            "request_key": request_key,
            "root_ids": [t for t, _ in roots],
            "root_snapshots": [snap for _, snap in roots],
            "when_unsealed": None if when_unsealed is None else list(when_unsealed),
            "min_interval": float(min_interval),
        },
    )
    row = result.one_or_none()
    if row is None:
        return None
    sealed = {str(k): int(v) for k, v in (row.sealed or {}).items()}
    barrier = None if row.barrier is None else int(row.barrier)
    return Issued(barrier, row.issued_at, bool(row.replayed), sealed, row.wait_seconds)


async def lock_clock(session: AsyncSession) -> int:
    """Hold the clock row until the transaction ends; returns the newest barrier issued so far (0: none)."""
    value = await session.scalar(select(BarrierClock.last_barrier).where(BarrierClock.id == 1).with_for_update())
    return int(value or 0)


async def head(session: AsyncSession) -> BarrierRow | None:
    """The newest barrier issued, or None."""
    return await fetch_one_as(session, BarrierRow, _HEAD)


async def get(session: AsyncSession, *, barrier: int) -> BarrierRow | None:
    return await fetch_one_as(session, BarrierRow, _GET, {"barrier": barrier})


async def after(session: AsyncSession, *, barrier: int) -> int | None:
    """The first barrier issued after `barrier`."""
    value = await fetch_value(session, _AFTER, {"barrier": barrier})
    return None if value is None else int(value)


async def before(session: AsyncSession, *, barrier: int) -> int | None:
    """The last barrier issued before `barrier`."""
    value = await fetch_value(session, _BEFORE, {"barrier": barrier})
    return None if value is None else int(value)


async def newest(session: AsyncSession, *, limit: int, before_barrier: int | None = None) -> list[Barrier]:
    query = select(Barrier).order_by(Barrier.barrier.desc()).limit(limit)
    if before_barrier is not None:
        query = query.where(Barrier.barrier < before_barrier)
    return list(await session.scalars(query))


async def count_between(session: AsyncSession, *, after_barrier: int, through: int) -> int:
    """How many barriers lie in (after_barrier, through]."""
    value = await session.scalar(
        select(func.count()).where(Barrier.barrier > after_barrier, Barrier.barrier <= through)
    )
    return int(value or 0)
