"""Consistent versions for queries: one barrier and one snapshot per table (weak or strong).

Weak: the newest barrier at which every requested table holds a snapshot. Strong: the newest barrier b at which
every requested table holds a snapshot and so does every table with a writer at b in their lineage components at
b (rule 9 of docs/design.md: roots and orphans never hold a strong read back, and the component is the one in
effect at b, so registering a job or a late commit never moves a strong answer back). A hot read path: the usual
answer is one statement (`repositories/versions.py`) in a REPEATABLE READ read-only transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from metaservice.db.database import Connection, Database
from metaservice.db.transaction import in_transaction
from metaservice.errors import NoConsistentVersion, NotFound
from metaservice.repositories import versions as version_rows
from metaservice.repositories.versions import Frontier
from metaservice.schemas import Consistency, ConsistentVersions

# Each step back (past an aborted barrier or a lineage change) costs one query; pathological storms stop here.
MAX_STEPS_BACK = 256


async def consistent_versions(db: Database, *, tables: Sequence[str], consistency: Consistency) -> ConsistentVersions:
    """Newest barrier complete in every requested table (weak) or in their whole lineage components (strong)."""

    async def work(conn: Connection) -> ConsistentVersions:
        names = list(dict.fromkeys(tables))
        strong = consistency == "strong"

        async def at(bound: int | None) -> Frontier:
            return await version_rows.frontier(conn, names=names, strong=strong, bound=bound)

        first = await at(None)
        asked = {t.name for t in first.tables if t.name is not None}
        if len(asked) < len(names):
            registered = await version_rows.registered(conn, names=names)
            missing = [n for n in names if n not in registered]
            if missing:
                raise NotFound(f"tables not registered: {', '.join(missing)}", tables=missing)
        found = await newest_complete(first, at, strong=strong)
        if found is None:
            raise NoConsistentVersion(
                f"no barrier is complete in every table of {names} ({consistency}) yet",
                tables=names,
                consistency=consistency,
            )
        barrier, frontier = found
        snapshots = {t.name: t.snapshot_id for t in frontier.tables if t.name is not None}
        return ConsistentVersions(
            consistency=consistency,
            barrier=barrier,
            versions={n: s for n in names if (s := snapshots.get(n)) is not None},
        )

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)


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
    return None


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
