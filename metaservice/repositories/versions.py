"""SQL for consistent versions: the requested tables, their lineage components and where each one stands.

`POST /versions` is a hot read path, so the common answer costs one statement: the component walk (recursive
CTE), every table's newest range, the candidate barrier and the range covering it come back together. Only
barriers blocked by aborted ranges cost one more statement per step back. Statements go straight through the
driver (`repositories/driver.py`) and rows are plain tuples, never ORM objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from sqlalchemy.ext.asyncio import AsyncSession

from metaservice.repositories.driver import fetch_all


class Standing(NamedTuple):
    """A table of the scope (requested or in their components) and the range holding it at a barrier.

    `name` is set for requested tables only. `completed` is False for a table that never held a range.
    `first_barrier`/`snapshot_id` describe the newest range starting at or before the barrier, and `holds`
    says whether that range still holds at the barrier (None: no such range).
    """

    table_id: int
    name: str | None
    completed: bool
    first_barrier: int | None
    snapshot_id: int | None
    holds: bool | None


class Frontier(NamedTuple):
    """The newest barrier issued (None: none yet), the first candidate barrier, and every table of the scope."""

    head: int | None
    candidate: int | None
    tables: list[Standing]


# The scope grows through jobs in both directions (tables sharing a job are one component) when strong;
# `UNION` gives set semantics, so a diamond costs one row per table, not one per path. A range covers the
# candidate when it is the newest one starting at or before it and is open or ends at or after it.
_FRONTIER = """
    WITH RECURSIVE
    asked AS ({asked}),
    scope(table_id) AS (
        SELECT id FROM asked
        UNION
        SELECT linked.table_id
          FROM scope
          CROSS JOIN LATERAL (
                SELECT other.table_id
                  FROM lineage_edges mine
                  JOIN lineage_edges other ON other.job_id = mine.job_id
                 WHERE mine.table_id = scope.table_id AND %(strong)s
                OFFSET 0) linked
    ),
    head AS (SELECT max(barrier) AS barrier FROM barriers),
    newest AS (
        SELECT scope.table_id, r.last_barrier, r.first_barrier IS NOT NULL AS completed
          FROM scope
          LEFT JOIN LATERAL (
                SELECT s.first_barrier, s.last_barrier FROM snapshot_ranges s
                 WHERE s.table_id = scope.table_id
                 ORDER BY s.first_barrier DESC LIMIT 1) r ON true
    ),
    candidate AS (
        SELECT min(coalesce(n.last_barrier, head.barrier)) AS barrier
          FROM newest n CROSS JOIN head
         WHERE n.completed
    )
    SELECT n.table_id, asked.name, n.completed, head.barrier AS head, candidate.barrier AS candidate,
           c.first_barrier, c.snapshot_id, c.holds
      FROM newest n
      CROSS JOIN head
      CROSS JOIN candidate
      LEFT JOIN asked ON asked.id = n.table_id
      LEFT JOIN LATERAL (
            SELECT s.first_barrier, s.snapshot_id,
                   s.last_barrier IS NULL OR s.last_barrier >= candidate.barrier AS holds
              FROM snapshot_ranges s
             WHERE n.completed AND s.table_id = n.table_id AND s.first_barrier <= candidate.barrier
             ORDER BY s.first_barrier DESC LIMIT 1) c ON true
    """

_BY_NAME = _FRONTIER.format(
    asked="SELECT t.id, t.name FROM unnest(CAST(%(names)s AS text[])) AS a(name) JOIN tables t ON t.name = a.name"
)

_BY_ID = _FRONTIER.format(
    asked="SELECT t.id, t.name FROM unnest(CAST(%(ids)s AS bigint[])) AS a(id) JOIN tables t ON t.id = a.id"
)

# One step back past aborted ranges: the last barrier issued before %(before)s, and what covers it in each table.
_STEP_BACK = """
    WITH previous AS (SELECT max(barrier) AS barrier FROM barriers WHERE barrier < %(before)s)
    SELECT t.table_id, previous.barrier, c.first_barrier, c.snapshot_id, c.holds
      FROM previous
      CROSS JOIN unnest(CAST(%(table_ids)s AS bigint[])) AS t(table_id)
      LEFT JOIN LATERAL (
            SELECT s.first_barrier, s.snapshot_id,
                   s.last_barrier IS NULL OR s.last_barrier >= previous.barrier AS holds
              FROM snapshot_ranges s
             WHERE s.table_id = t.table_id AND s.first_barrier <= previous.barrier
             ORDER BY s.first_barrier DESC LIMIT 1) c ON true
    """


def _frontier(rows: Sequence[Any]) -> Frontier:
    if not rows:
        return Frontier(None, None, [])
    return Frontier(rows[0][3], rows[0][4], [Standing(r[0], r[1], r[2], r[5], r[6], r[7]) for r in rows])


async def frontier(session: AsyncSession, *, names: Sequence[str], strong: bool) -> Frontier:
    """The tables called `names` (those registered) and, when `strong`, every table of their components."""
    return _frontier(await fetch_all(session, _BY_NAME, {"names": list(names), "strong": strong}))


async def frontier_of_ids(session: AsyncSession, *, table_ids: Sequence[int], strong: bool) -> Frontier:
    """Like `frontier`, for tables known by id."""
    return _frontier(await fetch_all(session, _BY_ID, {"ids": list(table_ids), "strong": strong}))


async def step_back(
    session: AsyncSession, *, table_ids: Sequence[int], before: int
) -> tuple[int | None, dict[int, Standing]]:
    """The last barrier issued before `before` (None: none) and, for each table, the range covering it."""
    rows = await fetch_all(session, _STEP_BACK, {"table_ids": list(table_ids), "before": before})
    barrier = rows[0][1] if rows else None
    if barrier is None:
        return None, {}
    return barrier, {r[0]: Standing(r[0], None, True, r[2], r[3], r[4]) for r in rows}
