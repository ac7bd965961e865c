"""Consistent versions for queries: one barrier and one snapshot per table (weak or strong).

Weak: the newest barrier at which every requested table holds a snapshot. Strong: the newest barrier b at which
every requested table holds a snapshot and so does every table with a writer at b in their lineage components at
b (rule 9 of docs/design.md: roots and orphans never hold a strong read back, and the component is the one in
effect at b, so registering a job or a late commit never moves a strong answer back). A hot read path: the usual
answer is one statement (`repositories/versions.py`) in a REPEATABLE READ read-only transaction.

A freshness bound (`min_barrier` / `max_staleness_seconds`) does not change which version is consistent, only
whether it is answered: when it is not met the request waits for a change notification (`db/listener.py`) and
checks again, until the bound is met or `wait_seconds` ran out (docs/design.md, "Freshness-bounded reads").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import anyio

from metaservice.db.database import Connection
from metaservice.db.transaction import in_transaction
from metaservice.errors import InvalidRequest, NoConsistentVersion, NotFound, NotFreshEnough, Unavailable
from metaservice.repositories import versions as version_rows
from metaservice.repositories.versions import Frontier
from metaservice.schemas import Consistency, ConsistentVersions, FreshnessBound
from metaservice.services import barriers

if TYPE_CHECKING:
    from metaservice.runtime import Runtime  # built in the lifespan and passed in; never built here

# Each step back (past an aborted barrier or a lineage change) costs one query; pathological storms stop here.
MAX_STEPS_BACK = 1024
# A read lets at most this many writers complete barriers idle before it answers (rule 12).
MAX_IDLE_WRITERS = 64
# Idle writers are settled concurrently; one settled after its downstream writer tried lets that one settle in the
# next round. A round that settles nobody ends the loop, so this only bounds a long chain.
SETTLE_ROUNDS = 4
# A freshness waiter whose check met an outage (503) looks again this often while its wait lasts.
UNAVAILABLE_RECHECK_SECONDS = 1.0


async def consistent_versions(
    rt: Runtime, *, tables: Sequence[str], consistency: Consistency, bound: FreshnessBound | None = None
) -> ConsistentVersions:
    """Newest barrier complete in every requested table (weak) or in their whole lineage components (strong);
    with a freshness bound, one that meets it (waiting up to `bound.wait_seconds` for one), else 409."""
    names = list(dict.fromkeys(tables))
    if bound is not None:
        _check_wait(rt, bound)
        if bound.bounded:
            fresh = await _fresh_versions(rt, names=names, consistency=consistency, bound=bound)
            rt.allocator.handed(fresh.barrier)  # never issued again (repositories/allocator.py)
            return fresh
    found = await _read_settled(rt, names=names, consistency=consistency)
    if isinstance(found, ConsistentVersions):
        rt.allocator.handed(found.barrier)
        return found
    raise _none_yet(names, consistency, found)


@dataclass(frozen=True)
class _Read:
    """A read's answer (None: no barrier complete in every table that must hold one), the writers that hold it
    back but may complete barriers idle (rule 12), and, with no answer, the tables that hold it back."""

    versions: ConsistentVersions | None
    idle_writers: list[str]
    holding: list[dict[str, str | None]]
    head: int | None = None  # the newest barrier when it was read


async def _read_settled(
    rt: Runtime, *, names: list[str], consistency: Consistency
) -> ConsistentVersions | list[dict[str, str | None]]:
    """The consistent version, after letting writers that hold it back complete the barriers at which their inputs
    did not change (rule 12: an idle job that does not poll never holds a read back). With no answer, the tables
    (and their writers) that hold every barrier back."""

    async def work(conn: Connection) -> _Read:
        return await _newest(conn, names=names, consistency=consistency)

    read = await in_transaction(rt.database, work, isolation="REPEATABLE READ", read_only=True)
    # The read settles up to the newest barrier it saw first, and does not chase barriers issued since: under a
    # stream of barriers every re-read finds a newer one, and reads then kept settling and re-reading, contending
    # with the writers' own `next` for their rows.
    target = read.head
    for _ in range(SETTLE_ROUNDS):  # each round settled someone: a writer settled first unblocks one downstream
        if read.versions is not None and target is not None and read.versions.barrier >= target:
            break
        if not (read.idle_writers and await barriers.settle_idle(rt, job_names=read.idle_writers)):
            break
        read = await in_transaction(rt.database, work, isolation="REPEATABLE READ", read_only=True)
    return read.versions if read.versions is not None else read.holding


def _none_yet(names: list[str], consistency: Consistency, holding: list[dict[str, str | None]]) -> NoConsistentVersion:
    """404 naming what holds every barrier back: tables that never completed one, and their writers."""
    held = "; ".join(_holder(h) for h in holding)
    return NoConsistentVersion(
        f"no barrier is complete in every table of {names} ({consistency}) yet" + (f": {held}" if held else ""),
        tables=names,
        consistency=consistency,
        held_back_by=holding,
    )


def _holder(h: dict[str, str | None]) -> str:
    writer = f", written by job {h['writer']!r}, which has committed none" if h["writer"] else ""
    return f"{h['table']} has completed no barrier yet{writer}"


async def _newest(conn: Connection, *, names: list[str], consistency: Consistency) -> _Read:
    """The consistent version now, in the caller's (REPEATABLE READ) transaction."""
    strong = consistency == "strong"

    async def at(bound: int | None) -> Frontier:
        return await version_rows.frontier(conn, names=names, strong=strong, bound=bound)

    first = await at(None)
    asked = {t.name for t in first.tables if t.name is not None}
    if len(asked) < len(names):
        registered = await version_rows.registered(conn, names=names)
        missing = [n for n in names if n not in registered]
        if missing:
            raise NotFound(f"tables not registered (or retired): {', '.join(missing)}", tables=missing)
    found = await newest_complete(first, at, strong=strong)
    idle: list[str] = []
    if first.bound is not None and (found is None or found[0] < first.bound):
        ids = [t.table_id for t in first.tables]
        idle = await version_rows.idle_writers(conn, table_ids=ids, head=first.bound, limit=MAX_IDLE_WRITERS)
    if found is None:
        holding = await version_rows.holding(conn, table_ids=[t.table_id for t in first.tables])
        return _Read(None, idle, holding, first.bound)
    barrier, frontier = found
    snapshots = {t.name: t.snapshot_id for t in frontier.tables if t.name is not None}
    versions = ConsistentVersions(
        consistency=consistency,
        barrier=barrier,
        versions={n: s for n in names if (s := snapshots.get(n)) is not None},
    )
    return _Read(versions, idle, [], first.bound)


@dataclass(frozen=True)
class Standing:
    """The consistent version now (None: no barrier complete in every table yet), when its barrier was issued,
    and the database clock when it was read."""

    versions: ConsistentVersions | None
    issued_at: datetime | None
    now: datetime
    holding: list[dict[str, str | None]] = field(default_factory=list)  # with no version: what holds it back

    @property
    def staleness_seconds(self) -> float | None:
        if self.issued_at is None:
            return None
        return max(0.0, (self.now - self.issued_at).total_seconds())

    def meets(self, bound: FreshnessBound) -> bool:
        if self.versions is None:
            return False
        if bound.min_barrier is not None:
            return self.versions.barrier >= bound.min_barrier
        staleness = self.staleness_seconds
        return bound.max_staleness_seconds is None or (
            staleness is not None and staleness <= bound.max_staleness_seconds
        )


async def standing(rt: Runtime, *, names: list[str], consistency: Consistency) -> Standing:
    """The consistent version and its staleness by the database clock, in one read-only snapshot (after idle
    writers completed what they could, rule 12)."""

    async def work(conn: Connection) -> tuple[_Read, datetime | None, datetime]:
        read = await _newest(conn, names=names, consistency=consistency)
        barrier = None if read.versions is None else read.versions.barrier
        issued, now = await version_rows.issued_at(conn, barrier=barrier)
        return read, issued, now

    read, issued, now = await in_transaction(rt.database, work, isolation="REPEATABLE READ", read_only=True)
    for _ in range(SETTLE_ROUNDS):
        if not (read.idle_writers and await barriers.settle_idle(rt, job_names=read.idle_writers)):
            break
        read, issued, now = await in_transaction(rt.database, work, isolation="REPEATABLE READ", read_only=True)
    return Standing(read.versions, issued, now, read.holding)


def _check_wait(rt: Runtime, bound: FreshnessBound) -> None:
    """The configured maximum is not in the wire model (it is a setting); the OpenAPI document publishes it."""
    wait, limit = bound.wait_seconds or 0.0, rt.settings.max_wait_seconds
    if wait > limit:
        raise InvalidRequest(
            f"wait_seconds must be at most {limit:g} (the server's max_wait_seconds), not {wait:g}",
            errors=[{"loc": ["wait_seconds"], "msg": f"must be at most {limit:g}"}],
        )


async def _fresh_versions(
    rt: Runtime, *, names: list[str], consistency: Consistency, bound: FreshnessBound
) -> ConsistentVersions:
    """Check; while the bound is not met and time is left, sleep until a write that may complete a newer version
    is notified (db/listener.py: no pooled connection is held and nothing polls), then check again. The check
    at the deadline decides: 409 `not_fresh_enough` with the best version's figures, or 404 when there is none."""
    wait = bound.wait_seconds or 0.0
    started = anyio.current_time()
    deadline = started + wait
    listener = rt.listener
    generation = await listener.ready() if wait > 0 else 0
    key = (tuple(names), consistency)

    async def check() -> Standing:
        return await standing(rt, names=names, consistency=consistency)

    while True:
        try:
            now = await listener.shared(key, generation, check) if wait > 0 else await check()
        except Unavailable:
            # Nothing happened, and the wait is not over: a failover or a dead pooled connection must not cut a
            # waiter short. Look again when the listener reconnects (it bumps the generation) or a moment later;
            # at the deadline the outage is the answer.
            remaining = deadline - anyio.current_time()
            if remaining <= 0 or listener.closed:
                raise
            listener.outage_rechecks += 1
            generation = await listener.wait(generation, timeout=min(remaining, UNAVAILABLE_RECHECK_SECONDS))
            continue
        if now.meets(bound):
            assert now.versions is not None
            return now.versions
        remaining = deadline - anyio.current_time()
        if remaining <= 0:
            break
        generation = await listener.wait(generation, timeout=remaining)
    if now.versions is None:
        raise _none_yet(names, consistency, now.holding)
    asked = (
        f"barrier {bound.min_barrier} or later"
        if bound.min_barrier is not None
        else f"at most {bound.max_staleness_seconds:g} s stale"
    )
    staleness = now.staleness_seconds
    rt.allocator.handed(now.versions.barrier)  # the answer names it
    raise NotFreshEnough(
        f"the newest {consistency} version of {names} is barrier {now.versions.barrier}, "
        f"{staleness if staleness is not None else float('nan'):.3f} s stale; asked for {asked} "
        f"and waited {wait:g} s",
        tables=names,
        consistency=consistency,
        best_barrier=now.versions.barrier,
        best_issued_at=now.issued_at,
        staleness_seconds=None if staleness is None else round(staleness, 3),
        min_barrier=bound.min_barrier,
        max_staleness_seconds=bound.max_staleness_seconds,
        wait_seconds=wait,
    )


async def newest_complete(
    frontier: Frontier, at: Callable[[int | None], Awaitable[Frontier]], *, strong: bool
) -> tuple[int, Frontier] | None:
    """Step back from the candidate until every table that must hold a snapshot holds one there.

    Within one lineage (between two changes) a candidate some table skipped (an aborted range covers it) moves to
    just before the earliest start among those ranges; a table that has no range covering the candidate (it
    started later) rules out the whole stretch, and so does a candidate at or before the newest lineage change:
    then the bound moves to that change's barrier, where the lineage (and so the components) was another.
    """
    for _ in range(MAX_STEPS_BACK):
        if frontier.bound is None:
            return None
        lower = frontier.lower if strong else None
        candidate = frontier.candidate
        if candidate is None or (lower is not None and candidate <= lower):
            if lower is None or lower <= 0:
                return None
            frontier = await at(lower)
            continue
        if any(t.first_barrier is None or not t.holds for t in frontier.tables):
            if lower is None or lower <= 0:
                return None  # before some table's first completion: nothing older is complete either
            frontier = await at(lower)
            continue
        starts = [t.first_barrier for t in frontier.tables if t.snapshot_id is None and t.first_barrier is not None]
        if not starts:
            return candidate, frontier
        target = min(starts) - 1
        frontier = await at(lower if lower is not None and target <= lower else target)
    # Out of steps is not "none is complete": answering 404 here would send a strong read back (503: retry).
    raise Unavailable(
        f"the newest complete version lies behind more than {MAX_STEPS_BACK} lineage changes or aborted stretches; "
        "retry shortly",
        retry_after=5,
    )


async def snapshot_at_strong(conn: Connection, *, table_id: int) -> tuple[int, int] | None:
    """(barrier, snapshot) of the table at its current strong version, if there is one (in the caller's transaction)."""

    async def at(bound: int | None) -> Frontier:
        return await version_rows.frontier_of_ids(conn, table_ids=[table_id], strong=True, bound=bound)

    found = await newest_complete(await at(None), at, strong=True)
    if found is None:
        return None
    barrier, frontier = found
    snapshot = next((t.snapshot_id for t in frontier.tables if t.table_id == table_id), None)
    return None if snapshot is None else (barrier, int(snapshot))
