"""Consistent versions for queries: one barrier and one snapshot per table (weak or strong)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.db.transaction import in_transaction
from metaservice.errors import NoConsistentVersion, NotFound
from metaservice.repositories import barriers as barrier_rows
from metaservice.repositories import edges as edge_rows
from metaservice.repositories import snapshots as snapshot_rows
from metaservice.repositories import tables as table_rows
from metaservice.schemas import Consistency, ConsistentVersions

# Each step back past an aborted barrier costs one query; pathological abort storms stop here with a 404.
MAX_STEPS_BACK = 256


async def consistent_versions(
    session: AsyncSession, *, tables: Sequence[str], consistency: Consistency
) -> ConsistentVersions:
    """Newest barrier complete in every requested table (weak) or in their whole lineage components (strong)."""

    async def work(s: AsyncSession) -> ConsistentVersions:
        names = list(dict.fromkeys(tables))
        rows = await table_rows.get_many(s, names=names)
        missing = [n for n in names if n not in rows]
        if missing:
            raise NotFound(f"tables not registered: {', '.join(missing)}", tables=missing)
        requested = [rows[n].id for n in names]
        scope = await component_of(s, requested) if consistency == "strong" else set(requested)
        barrier = await newest_complete(s, requested=requested, scope=sorted(scope))
        if barrier is None:
            raise NoConsistentVersion(
                f"no barrier is complete in every table of {names} ({consistency}) yet",
                tables=names,
                consistency=consistency,
            )
        covering = await snapshot_rows.covering(s, table_ids=requested, barrier=barrier)
        versions = {n: covering[rows[n].id].snapshot_id for n in names}
        return ConsistentVersions(
            consistency=consistency,
            barrier=barrier,
            versions={k: int(v) for k, v in versions.items() if v is not None},
        )

    return await in_transaction(session, work, isolation="REPEATABLE READ", read_only=True)


async def component_of(s: AsyncSession, table_ids: Sequence[int]) -> set[int]:
    """Every table connected to `table_ids` through jobs, upstream and downstream (the lineage components)."""
    seen, frontier = set(table_ids), set(table_ids)
    while frontier:
        frontier = await edge_rows.neighbours(s, table_ids=sorted(frontier)) - seen
        seen |= frontier
    return seen


async def newest_complete(s: AsyncSession, *, requested: Sequence[int], scope: Sequence[int]) -> int | None:
    """The newest barrier at which every table of `scope` holds a snapshot.

    Tables of a strong scope that never completed anything (a job registered but not run yet) are left out, so
    that registering a job does not hide the pipeline's consistent versions; requested tables never are.
    """
    head = await barrier_rows.head(s)
    if head is None:
        return None
    lasts = await snapshot_rows.last(s, table_ids=scope)
    if any(t not in lasts for t in requested):
        return None
    members = [t for t in scope if t in lasts]
    candidate = min(
        head.barrier if r.last_barrier is None else r.last_barrier for r in lasts.values() if r.table_id in members
    )
    for _ in range(MAX_STEPS_BACK):
        covering = await snapshot_rows.covering(s, table_ids=members, barrier=candidate)
        blockers = [covering.get(t) for t in members]
        if all(r is not None and r.snapshot_id is not None for r in blockers):
            return candidate
        if any(r is None for r in blockers):
            return None  # before some table's first completion: nothing older can be complete either
        # step back to just before the earliest start among the aborted ranges covering the candidate
        starts = [r.first_barrier for r in blockers if r is not None and r.snapshot_id is None]
        previous = await barrier_rows.before(s, barrier=min(starts))
        if previous is None:
            return None
        candidate = previous
    return None


async def snapshot_at_strong(s: AsyncSession, *, table_id: int) -> tuple[int, int] | None:
    """(barrier, snapshot) of the table at its current strong version, if there is one."""
    barrier = await newest_complete(s, requested=[table_id], scope=sorted(await component_of(s, [table_id])))
    if barrier is None:
        return None
    row = (await snapshot_rows.covering(s, table_ids=[table_id], barrier=barrier)).get(table_id)
    return (barrier, int(row.snapshot_id)) if row is not None and row.snapshot_id is not None else None
