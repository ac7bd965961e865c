"""Coalesced barrier allocation: concurrent requests share one call of `metaservice_issue_barriers`.

Every barrier is allocated under the `barrier_clock` row lock, so PostgreSQL alone serves at most one allocation
statement at a time (pgbench at 32 clients: ~1,500-2,800 calls/s). A timestamp oracle beats that by batching:
requests that arrive while a call is in flight wait for the next call, which serves them all (one clock lock, one
clock update; every request's root snapshots recorded first, then one barrier for each request that still needs
its own: a batch of seals shares one). At low load a request is sent at once
(after one turn of the event loop, which lets requests that arrived together join); under load the batch grows
with the load and the statement count per request falls below one.

The batches are served by `db/coalescer.py` (as the protocol's gathers and writes are; `metaservice/runtime.py`
builds them all): one dedicated connection
per server process, never one of the request pool's, so a pool exhausted by waiting requests cannot starve the
allocator. Several server processes each run their own allocator; the clock row lock orders them. The call runs
under the database deadline; a connection lost while a call was in flight answers every request of the batch
with `OutcomeUnknown` (it may have committed), and the next batch reconnects.

The floor: the allocator remembers the highest barrier this process has handed to any client (the barriers its
calls answered, and those `next` answers and reads handed out, told through `handed()`) and passes it with every
call; the function issues no barrier at or below it. After a failover of an asynchronously replicated database that
lost the tail (barriers acknowledged on the old primary, unknown to the new one), a lost barrier's number is thus
never issued again with another meaning, whatever the new primary's clock says. It is one more parameter of a call
that is coalesced anyway: nothing else on the hot path. A process started after the failover remembers nothing
(then only the clock keeps barriers apart: docs/failover.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from psycopg.types.json import Jsonb
from psycopg.types.numeric import Int8

from metaservice.db.coalescer import Coalescer

if TYPE_CHECKING:
    from metaservice.db.database import Connection, Database
    from metaservice.db.listener import ChangeNotifier
# An allocation that issued a barrier (sealing root snapshots into new ranges) may make a newer consistent version
# exist: once the call returned (autocommit: committed), freshness-bounded reads are told through the notifier,
# off this connection (a NOTIFY in the call would take PostgreSQL's database-wide notify lock at every commit).
_CALL = "SELECT metaservice_issue_barriers(%s, %s)"


@dataclass(frozen=True)
class AllocationRequest:
    """One caller's request (see the migration 2026-11-24-0900 for the function's contract).

    `barrier`: issue a barrier (POST /barriers; `key` makes it idempotent). `seal`: issue one only when a table
    of `when_unsealed` has an unsealed snapshot, or `unless_after` is set and no barrier followed it (`next`).
    `report`: record root snapshots only. `roots` (table name → snapshot) are reported first in every kind.
    A `seal` naming its `job` is a job's `next` reporting the roots it reads: the function checks them against the
    job's current sources and seals when any root the job reads is unsealed (migration 2026-11-24-2100).
    """

    kind: Literal["barrier", "seal", "report"]
    by: str | None = None
    key: str | None = None
    roots: Mapping[str, int] = field(default_factory=dict)
    when_unsealed: Sequence[int] = ()
    unless_after: int | None = None
    min_interval: float = 0.0
    job: str | None = None

    def wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "by": self.by,
            "key": self.key,
            "roots": dict(self.roots),
            "when_unsealed": list(self.when_unsealed),
            "unless_after": self.unless_after,
            "min_interval": self.min_interval,
            "job": self.job,
        }


@dataclass(frozen=True)
class Allocation:
    """What the call did for one request."""

    barrier: int | None
    issued_at: datetime | None
    replayed: bool
    sealed: dict[str, int]
    wait_seconds: float | None
    latest: dict[str, int]
    error: dict[str, Any] | None

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Allocation:
        issued = data.get("issued_at")
        return cls(
            barrier=None if data.get("barrier") is None else int(data["barrier"]),
            issued_at=datetime.fromisoformat(issued) if isinstance(issued, str) else None,
            replayed=bool(data.get("replayed")),
            sealed={str(k): int(v) for k, v in (data.get("sealed") or {}).items()},
            wait_seconds=None if data.get("wait_seconds") is None else float(data["wait_seconds"]),
            latest={str(k): int(v) for k, v in (data.get("latest") or {}).items()},
            error=data.get("error"),
        )


class Allocator:
    """Queues allocation requests and serves them in batches on one dedicated connection (db/coalescer.py)."""

    def __init__(self, db: Database, notifier: ChangeNotifier) -> None:
        self._notifier = notifier
        self._floor = 0  # the highest barrier this process handed to any client
        self._batches: Coalescer[AllocationRequest, Allocation] = Coalescer(
            db, self._call, name="metaservice-allocator", writes=True, after=("barrier_allocated",), what="allocating"
        )

    @property
    def floor(self) -> int:
        """The highest barrier this process has handed to any client (0: none): no call issues one at or below it."""
        return self._floor

    def handed(self, *barriers: int | None) -> None:
        """`barriers` were (or are about to be) handed to a client: no barrier at or below them is issued again."""
        for barrier in barriers:
            if barrier is not None and barrier > self._floor:
                self._floor = barrier

    @property
    def calls(self) -> int:
        """Batches sent (for tests and benchmarks)."""
        return self._batches.calls

    @property
    def served(self) -> int:
        return self._batches.served

    async def allocate(self, request: AllocationRequest) -> Allocation:
        """Queue `request` and wait for its answer (the caller's deadline bounds the wait)."""
        return await self._batches.submit(request)

    async def close(self) -> None:
        await self._batches.close()

    async def _call(self, conn: Connection, batch: Sequence[AllocationRequest]) -> list[Allocation]:
        cursor = await conn.execute(_CALL, [Jsonb([r.wire() for r in batch]), Int8(self._floor)], prepare=True)
        row = await cursor.fetchone()
        answers = row[0] if row is not None else []
        self.handed(*(answer.get("barrier") for answer in answers))  # before any caller hears of them
        if any(answer.get("barrier") is not None for answer in answers):
            self._notifier.changed()
        return [Allocation.from_wire(answer) for answer in answers]
