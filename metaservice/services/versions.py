"""Consistent versions for queries: one barrier and one snapshot per table (weak or strong).

A hot read path: the usual answer is one statement (`repositories/versions.py`) inside a REPEATABLE READ
read-only transaction, so every step sees one snapshot of the catalog while writers go on.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.transaction import in_transaction
from metaservice.errors import NoConsistentVersion, NotFound
from metaservice.repositories import versions as version_rows
from metaservice.repositories.versions import Frontier, Standing
from metaservice.schemas import Consistency, ConsistentVersions

# Each step back past an aborted barrier costs one query; pathological abort storms stop here with a 404.
MAX_STEPS_BACK = 256


async def consistent_versions(
    session: AsyncSession, *, tables: Sequence[str], consistency: Consistency
) -> ConsistentVersions:
    """Newest barrier complete in every requested table (weak) or in their whole lineage components (strong)."""

    async def work(s: AsyncSession) -> ConsistentVersions:
        names = list(dict.fromkeys(tables))
        scope = await version_rows.frontier(s, names=names, strong=consistency == "strong")
        requested = {t.name: t for t in scope.tables if t.name is not None}
        missing = [n for n in names if n not in requested]
        if missing:
            raise NotFound(f"tables not registered: {', '.join(missing)}", tables=missing)
        found = await _newest_complete(s, scope, requested=[requested[n].table_id for n in names])
        if found is None:
            raise NoConsistentVersion(
                f"no barrier is complete in every table of {names} ({consistency}) yet",
                tables=names,
                consistency=consistency,
            )
        barrier, covering = found
        versions = {n: covering[requested[n].table_id].snapshot_id for n in names}
        return ConsistentVersions(
            consistency=consistency,
            barrier=barrier,
            versions={k: int(v) for k, v in versions.items() if v is not None},
        )

    return await in_transaction(session, work, isolation="REPEATABLE READ", read_only=True)


async def _newest_complete(
    s: AsyncSession, scope: Frontier, *, requested: Sequence[int]
) -> tuple[int, dict[int, Standing]] | None:
    """The newest barrier at which every table of `scope` holds a snapshot, with the range covering it in each.

    Tables of a strong scope that never completed anything (a job registered but not run yet) are left out, so
    that registering a job does not hide the pipeline's consistent versions; requested tables never are. The
    first candidate is the oldest newest-completion among the members; a candidate some member skipped (an
    aborted range covers it) moves to just before the earliest start among those aborted ranges.
    """
    if scope.head is None or scope.candidate is None:
        return None
    completed = {t.table_id for t in scope.tables if t.completed}
    if any(t not in completed for t in requested):
        return None
    members = [t for t in scope.tables if t.completed]
    candidate: int = scope.candidate
    covering = {t.table_id: t for t in members}
    for _ in range(MAX_STEPS_BACK):
        if any(t.first_barrier is None or not t.holds for t in covering.values()):
            return None  # before some table's first completion: nothing older can be complete either
        starts = [t.first_barrier for t in covering.values() if t.snapshot_id is None and t.first_barrier is not None]
        if not starts:
            return candidate, covering
        previous, covering = await version_rows.step_back(s, table_ids=sorted(completed), before=min(starts))
        if previous is None:
            return None
        candidate = previous
    return None


async def snapshot_at_strong(s: AsyncSession, *, table_id: int) -> tuple[int, int] | None:
    """(barrier, snapshot) of the table at its current strong version, if there is one (in the caller's transaction)."""
    scope = await version_rows.frontier_of_ids(s, table_ids=[table_id], strong=True)
    found = await _newest_complete(s, scope, requested=[table_id])
    if found is None:
        return None
    barrier, covering = found
    snapshot = covering[table_id].snapshot_id
    return None if snapshot is None else (barrier, int(snapshot))
