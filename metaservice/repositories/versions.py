"""SQL for consistent versions: the requested tables, their lineage components at a barrier, and where each stands.

`POST /versions` is a hot read path: the usual answer costs one statement. For a bound B (the newest barrier, at
first), it walks the components of the requested tables through the edges in effect at B (strong), marks which
tables have a writer at B, and returns the candidate barrier (the oldest newest-completion at or before B among
the tables that must hold a snapshot) with the range covering it in each, plus the newest lineage change before
B. Only aborted ranges and lineage changes cost one more statement per step back. Statements go straight
through the driver and rows are plain tuples.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from metaservice.db.database import Connection
from metaservice.repositories.driver import fetch_all, fetch_one


class Standing(NamedTuple):
    """A table that must hold a snapshot at the candidate barrier, and the range covering it there.

    `name` is set for requested tables only. `first_barrier`/`snapshot_id` describe the newest range starting at
    or before the candidate; `holds` says whether it still holds there (None: no such range).
    """

    table_id: int
    name: str | None
    first_barrier: int | None
    snapshot_id: int | None
    holds: bool | None


class Frontier(NamedTuple):
    """At bound `bound` (None: no barrier issued): the candidate barrier (None: a table that must hold one has
    no range up to the bound), the newest lineage change before the bound, and the tables that must hold one."""

    bound: int | None
    candidate: int | None
    lower: int | None
    tables: list[Standing]


# Edges in effect at barrier b: added before b, not removed before b.
_AT_B = "{e}.added_after < bound.b AND ({e}.removed_after IS NULL OR {e}.removed_after >= bound.b)"

_FRONTIER = f"""
    WITH RECURSIVE
    asked AS ({{asked}}),
    bound AS (SELECT max(barrier) AS b FROM barriers WHERE %(bound)s::bigint IS NULL OR barrier <= %(bound)s),
    scope(table_id) AS (
        SELECT id FROM asked
        UNION
        SELECT linked.table_id
          FROM scope
          CROSS JOIN bound
          CROSS JOIN LATERAL (
                SELECT other.table_id
                  FROM lineage_edges mine
                  JOIN lineage_edges other ON other.job_id = mine.job_id
                 WHERE mine.table_id = scope.table_id AND %(strong)s
                   AND {_AT_B.format(e="mine")} AND {_AT_B.format(e="other")}
                OFFSET 0) linked
    ),
    members AS (
        SELECT s.table_id, a.name
          FROM scope s
          CROSS JOIN bound
          LEFT JOIN asked a ON a.id = s.table_id
         WHERE a.id IS NOT NULL
            OR EXISTS (SELECT 1 FROM lineage_edges w
                        WHERE w.table_id = s.table_id AND w.role = 'sink' AND {_AT_B.format(e="w")})
    ),
    newest AS (
        SELECT m.table_id, r.first_barrier, r.last_barrier
          FROM members m
          CROSS JOIN bound
          LEFT JOIN LATERAL (
                SELECT s.first_barrier, s.last_barrier FROM snapshot_ranges s
                 WHERE s.table_id = m.table_id AND s.first_barrier <= bound.b
                 ORDER BY s.first_barrier DESC LIMIT 1) r ON true
    ),
    candidate AS (
        SELECT CASE WHEN bool_and(n.first_barrier IS NOT NULL)
                    THEN min(least(coalesce(n.last_barrier, bound.b), bound.b)) END AS c
          FROM newest n CROSS JOIN bound
         GROUP BY bound.b
    ),
    -- The newest lineage change before the bound that can make the component another one: a change of an edge
    -- on a table of the scope, or of an edge of a job of the component (changes elsewhere in the catalog never
    -- cost a strong read a step back: a busy catalog made reads run out of steps, docs/design.md rule 9).
    -- Index lookups per scope table and per job (the fences keep the planner from scanning every edge of the
    -- catalog: bench `versions`, 11 of a read's 12 ms at 18,000 edges).
    scope_tables AS (SELECT DISTINCT table_id FROM scope),
    scope_jobs AS (
        SELECT DISTINCT w.job_id
          FROM scope_tables s
          CROSS JOIN bound
          CROSS JOIN LATERAL (
                SELECT w.job_id FROM lineage_edges w
                 WHERE w.table_id = s.table_id AND {_AT_B.format(e="w")} OFFSET 0) w
    ),
    touched(e_id, added_after, removed_after) AS (
        SELECT e.id, e.added_after, e.removed_after
          FROM scope_tables s
          CROSS JOIN LATERAL (
                SELECT e.id, e.added_after, e.removed_after FROM lineage_edges e
                 WHERE e.table_id = s.table_id OFFSET 0) e
        UNION
        SELECT e.id, e.added_after, e.removed_after
          FROM scope_jobs j
          CROSS JOIN LATERAL (
                SELECT e.id, e.added_after, e.removed_after FROM lineage_edges e
                 WHERE e.job_id = j.job_id OFFSET 0) e
    ),
    lower AS (
        SELECT greatest(
                   (SELECT max(t.added_after) FROM touched t WHERE t.added_after < bound.b),
                   (SELECT max(t.removed_after) FROM touched t WHERE t.removed_after < bound.b)) AS l
          FROM bound
    )
    SELECT bound.b, candidate.c, lower.l, m.table_id, m.name, c.first_barrier, c.snapshot_id, c.holds
      FROM bound
      CROSS JOIN lower
      LEFT JOIN candidate ON true
      LEFT JOIN members m ON true
      LEFT JOIN LATERAL (
            SELECT s.first_barrier, s.snapshot_id,
                   s.last_barrier IS NULL OR s.last_barrier >= candidate.c AS holds
              FROM snapshot_ranges s
             WHERE s.table_id = m.table_id AND s.first_barrier <= candidate.c
             ORDER BY s.first_barrier DESC LIMIT 1) c ON true
"""

_BY_NAME = _FRONTIER.format(
    asked="SELECT t.id, t.name FROM unnest(CAST(%(names)s AS text[])) AS a(name)"
    " JOIN tables t ON t.name = a.name AND t.retired_at IS NULL"
)
_BY_ID = _FRONTIER.format(
    asked="SELECT t.id, t.name FROM unnest(CAST(%(ids)s AS bigint[])) AS a(id) JOIN tables t ON t.id = a.id"
)
_REGISTERED = "SELECT name FROM tables WHERE name = ANY(CAST(%(names)s AS text[])) AND retired_at IS NULL"

# Writers that may complete barriers idle for a reader (rule 12): of the given tables (all, when NULL), the current
# writers that settled no barrier at or after `head`, are registered, have nothing in flight, read something and
# committed before (an idle completion repeats a committed output). The planner decides; this only narrows.
_IDLE_WRITERS = """
    SELECT DISTINCT j.name
      FROM lineage_edges w
      JOIN jobs j ON j.id = w.job_id
     WHERE w.role = 'sink' AND w.removed_at IS NULL {tables}
       AND j.is_active AND (j.last_barrier IS NULL OR j.last_barrier < %(head)s)
       AND NOT EXISTS (SELECT 1 FROM job_runs r WHERE r.job_id = j.id AND r.status = 'in_flight')
       AND EXISTS (SELECT 1 FROM job_runs r WHERE r.job_id = j.id AND r.status = 'committed')
       AND EXISTS (SELECT 1 FROM lineage_edges s
                    WHERE s.job_id = j.id AND s.role = 'source' AND s.removed_at IS NULL)
     ORDER BY j.name
     LIMIT %(limit)s
"""
# Of the given tables, those that never completed a barrier, with their current writer (None: a root or orphan).
_HOLDING = """
    SELECT t.name, (SELECT j.name FROM lineage_edges w JOIN jobs j ON j.id = w.job_id
                     WHERE w.table_id = t.id AND w.role = 'sink' AND w.removed_at IS NULL)
      FROM tables t
     WHERE t.id = ANY(CAST(%(ids)s AS bigint[]))
       AND NOT EXISTS (SELECT 1 FROM snapshot_ranges r WHERE r.table_id = t.id AND r.snapshot_id IS NOT NULL)
     ORDER BY t.name
"""
_IDLE_WRITERS_OF = _IDLE_WRITERS.format(tables="AND w.table_id = ANY(CAST(%(ids)s AS bigint[]))")
_IDLE_WRITERS_NAMED = _IDLE_WRITERS.format(
    tables="AND w.table_id IN (SELECT id FROM tables WHERE name = ANY(CAST(%(names)s AS text[])))"
)
_IDLE_WRITERS_ALL = _IDLE_WRITERS.format(tables="")
_HEAD = "SELECT max(barrier) FROM barriers"

_ISSUED = "SELECT (SELECT issued_at FROM barriers WHERE barrier = %(barrier)s), now()"


def _frontier(rows: Sequence[Any]) -> Frontier:
    if not rows or rows[0][0] is None:
        return Frontier(None, None, None, [])
    bound, candidate, lower = rows[0][0], rows[0][1], rows[0][2]
    tables = [Standing(r[3], r[4], r[5], r[6], r[7]) for r in rows if r[3] is not None]
    return Frontier(bound, candidate, lower, tables)


async def frontier(conn: Connection, *, names: Sequence[str], strong: bool, bound: int | None) -> Frontier:
    """The tables called `names` and, when `strong`, every table with a writer at the bound in their components."""
    params = {"names": list(names), "strong": strong, "bound": bound}
    return _frontier(await fetch_all(conn, _BY_NAME, params, prepare=True))


async def frontier_of_ids(conn: Connection, *, table_ids: Sequence[int], strong: bool, bound: int | None) -> Frontier:
    """Like `frontier`, for tables known by id."""
    return _frontier(await fetch_all(conn, _BY_ID, {"ids": list(table_ids), "strong": strong, "bound": bound}))


async def issued_at(conn: Connection, *, barrier: int | None) -> tuple[datetime | None, datetime]:
    """When `barrier` was issued (None: no such barrier), and the database's clock now (the transaction's start)."""
    row = await fetch_one(conn, _ISSUED, {"barrier": barrier}, prepare=True)
    assert row is not None
    return row[0], row[1]


async def registered(conn: Connection, *, names: Sequence[str]) -> set[str]:
    return {str(r[0]) for r in await fetch_all(conn, _REGISTERED, {"names": list(names)})}


async def idle_writers(conn: Connection, *, table_ids: Sequence[int] | None, head: int, limit: int) -> list[str]:
    """Names of the writers of `table_ids` (None: of every table) that may complete barriers idle up to `head`."""
    if table_ids is None:
        rows = await fetch_all(conn, _IDLE_WRITERS_ALL, {"head": head, "limit": limit}, prepare=True)
    else:
        params = {"ids": list(table_ids), "head": head, "limit": limit}
        rows = await fetch_all(conn, _IDLE_WRITERS_OF, params, prepare=True)
    return [str(r[0]) for r in rows]


async def holding(conn: Connection, *, table_ids: Sequence[int]) -> list[dict[str, str | None]]:
    """Of `table_ids`, the tables that never completed a barrier, each with its current writer's name."""
    rows = await fetch_all(conn, _HOLDING, {"ids": list(table_ids)})
    return [{"table": str(r[0]), "writer": None if r[1] is None else str(r[1])} for r in rows]


async def lagging_idle_writers(conn: Connection, *, tables: Sequence[str] | None, limit: int) -> list[str]:
    """`idle_writers` of the tables called `tables` (None: every table) up to the newest barrier."""
    row = await fetch_one(conn, _HEAD, {}, prepare=True)
    head = None if row is None else row[0]
    if head is None:
        return []
    if tables is None:
        rows = await fetch_all(conn, _IDLE_WRITERS_ALL, {"head": head, "limit": limit}, prepare=True)
    else:
        params = {"names": list(tables), "head": head, "limit": limit}
        rows = await fetch_all(conn, _IDLE_WRITERS_NAMED, params, prepare=True)
    return [str(r[0]) for r in rows]
