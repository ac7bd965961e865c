"""SQL of the incremental /metrics refresh (services/metric_state.py): the rows written since a snapshot, and the
figures' inputs of some tables and jobs (or of all of them, for a full read).

A row's `changed_xid` is the transaction that last changed what the figures show of it (a trigger sets it,
migration 2026-11-27-1730). A transaction committed after snapshot S exactly when S cannot see its id: the rows
written since S are those whose marker S does not see and the reading snapshot does. Every id S cannot see is at or
above S's xmax or in S's list of transactions in progress, so the markers are found by an index range scan from the
xmax and index lookups of that list (not from S's xmin: a transaction open anywhere in the cluster holds xmin back,
and the scan would read every row written since). The bounds are written into the statement as literals: the
server's connections force generic plans, and a generic plan of `changed_xid >= $1` guesses a third of the table
and scans it all. A marker the reading snapshot cannot see (a row restored from another cluster's
dump with a higher id) is not read as a change.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from metaservice.db.database import Connection
from metaservice.repositories.driver import fetch_all, fetch_one, id_array

# (now, snapshot as text, its xmin, postmaster start, newest barrier)
Probe = tuple[datetime, str, int, datetime, "int | None"]
# (id, name, live, newest range holding a snapshot: found, its last barrier (None: open), that barrier's issue time)
TableRow = tuple[int, str, bool, bool, "int | None", "datetime | None"]
# (id, name, active, last barrier, its issue time, last committed run's duration and waiting (exact seconds as a
# numeric: the value /metrics showed before), runs, commits, aborts, skips)
JobRow = tuple[int, str, bool, "int | None", "datetime | None", Any, Any, int, int, int, int]

_PROBE = """
    SELECT now(), CAST(pg_current_snapshot() AS text),
           CAST(CAST(pg_snapshot_xmin(pg_current_snapshot()) AS text) AS bigint),
           pg_postmaster_start_time(), (SELECT max(barrier) FROM barriers)
"""


async def probe(conn: Connection) -> Probe:
    """The transaction's clock and snapshot, the server's start time (a restart or failover is another server) and
    the newest barrier issued."""
    row = await fetch_one(conn, _PROBE)
    assert row is not None
    now, snapshot, xmin, started, head = row
    return now, str(snapshot), int(xmin), started, None if head is None else int(head)


# Rows changed since snapshot S are those written by a transaction S could not see: one that started after it (an
# id at or above S's xmax) or one in progress then (S's xip list). Both are index lookups; bounding the scan below by
# S's xmin instead would read every row written since the oldest transaction running anywhere in the cluster.
_NEW = (
    "(x.changed_xid >= {xmax} OR x.changed_xid = ANY(CAST('{{{xip}}}' AS bigint[])))"
    " AND NOT pg_visible_in_snapshot(CAST(CAST(x.changed_xid AS text) AS xid8), CAST(%(since)s AS pg_snapshot))"
    " AND pg_visible_in_snapshot(CAST(CAST(x.changed_xid AS text) AS xid8), pg_current_snapshot())"
)
# What changed since a snapshot, one row per changed table or job and kind: 'table' (its row, or its ranges: then
# the least first barrier of a changed range holding a snapshot), 'lineage' (a job whose current edges changed),
# 'job' (its row or its runs), 'removed' (ranges or runs deleted; neither id: a catalog table was truncated).
_CHANGES = f"""
    SELECT 'table', x.id, NULL::bigint FROM tables x WHERE {_NEW}
    UNION ALL
    SELECT 'range', x.table_id, min(x.first_barrier) FILTER (WHERE x.snapshot_id IS NOT NULL)
      FROM snapshot_ranges x WHERE {_NEW} GROUP BY x.table_id
    UNION ALL
    SELECT DISTINCT 'lineage', x.job_id, NULL::bigint FROM lineage_edges x WHERE {_NEW}
    UNION ALL
    SELECT 'job', x.id, NULL::bigint FROM jobs x WHERE {_NEW}
    UNION ALL
    SELECT DISTINCT 'run', x.job_id, NULL::bigint FROM job_runs x WHERE {_NEW}
    UNION ALL
    SELECT DISTINCT 'removed', coalesce(x.table_id, x.job_id),
           CASE WHEN x.table_id IS NOT NULL THEN 0 WHEN x.job_id IS NOT NULL THEN 1 END
      FROM metric_removals x WHERE {_NEW}
"""


async def changes(conn: Connection, *, since: str) -> list[tuple[str, int | None, int | None]]:
    """(kind, id, detail) of what was written since the snapshot `since` (`pg_snapshot` text, `xmin:xmax:xip,…`);
    see `_CHANGES`. 'removed' rows carry 0 (a table) or 1 (a job) as detail, or None for a truncation."""
    _, xmax, xip = since.split(":")
    in_progress = ",".join(str(int(x)) for x in xip.split(",") if x)
    rows = await fetch_all(conn, _CHANGES.format(xmax=int(xmax), xip=in_progress), {"since": since})
    return [(str(k), None if i is None else int(i), None if d is None else int(d)) for k, i, d in rows]


_BARRIERS_AFTER = "SELECT barrier, issued_at FROM barriers WHERE barrier > %(after)s ORDER BY barrier"
_BARRIER_COUNT = "SELECT count(*) FROM barriers"


async def barriers_after(conn: Connection, *, after: int) -> list[tuple[int, datetime]]:
    """(barrier, issue time) of every barrier issued after `after`, oldest first."""
    return [(int(b), at) for b, at in await fetch_all(conn, _BARRIERS_AFTER, {"after": after})]


async def barrier_count(conn: Connection) -> int:
    row = await fetch_one(conn, _BARRIER_COUNT)
    return int(row[0]) if row else 0


# A table's newest range holding a snapshot (the barrier it completed: its end, or the newest barrier while open).
_TABLE_COLUMNS = """
    SELECT t.id, t.name, t.retired_at IS NULL, r.id IS NOT NULL, r.last_barrier, b.issued_at
      FROM {tables}
      LEFT JOIN LATERAL (
            SELECT s.id, s.last_barrier FROM snapshot_ranges s
             WHERE s.table_id = t.id AND s.snapshot_id IS NOT NULL
             ORDER BY s.first_barrier DESC LIMIT 1) r ON true
      LEFT JOIN LATERAL (SELECT x.issued_at FROM barriers x WHERE x.barrier = r.last_barrier OFFSET 0) b ON true
"""
_TABLES_OF = _TABLE_COLUMNS.format(
    tables="unnest(CAST(%(ids)s AS bigint[])) AS i(id)"
    " CROSS JOIN LATERAL (SELECT x.id, x.name, x.retired_at FROM tables x WHERE x.id = i.id OFFSET 0) t"
)
_LIVE_TABLES = _TABLE_COLUMNS.format(tables="tables t") + " WHERE t.retired_at IS NULL"


async def tables(conn: Connection, *, ids: Iterable[int] | None) -> list[TableRow]:
    """The figures' inputs of the tables `ids` (None: every live table)."""
    if ids is None:
        return await fetch_all(conn, _LIVE_TABLES)
    return await fetch_all(conn, _TABLES_OF, {"ids": id_array(ids)})


_EDGES_OF = """
    SELECT e.job_id, e.table_id, e.role
      FROM unnest(CAST(%(ids)s AS bigint[])) AS i(id)
      CROSS JOIN LATERAL (
            SELECT x.job_id, x.table_id, x.role FROM lineage_edges x
             WHERE x.job_id = i.id AND x.removed_at IS NULL OFFSET 0) e
"""
_ALL_EDGES = "SELECT job_id, table_id, role FROM lineage_edges WHERE removed_at IS NULL"


async def current_edges(conn: Connection, *, job_ids: Iterable[int] | None) -> list[tuple[int, int, str]]:
    """(job, table, role) of the current edges of `job_ids` (None: of every job)."""
    if job_ids is None:
        return await fetch_all(conn, _ALL_EDGES)
    return await fetch_all(conn, _EDGES_OF, {"ids": id_array(job_ids)})


# As delays' `_JOB_FIGURES` and `_RUN_COUNTS` compute them (the same expressions, so the same values).
_JOB_COLUMNS = """
    SELECT j.id, j.name, j.is_active, j.last_barrier, lb.issued_at,
           extract(epoch FROM c.finished_at - c.started_at), extract(epoch FROM c.started_at - c.inputs_ready_at),
           n.runs, n.commits, n.aborts, n.skips
      FROM {jobs}
      LEFT JOIN LATERAL (SELECT x.issued_at FROM barriers x WHERE x.barrier = j.last_barrier OFFSET 0) lb ON true
      LEFT JOIN LATERAL (
            SELECT started_at, finished_at, inputs_ready_at FROM job_runs x
             WHERE x.job_id = j.id AND x.status = 'committed'
             ORDER BY x.first_barrier DESC LIMIT 1) c ON true
      CROSS JOIN LATERAL (
            SELECT count(*) AS runs,
                   count(*) FILTER (WHERE r.status = 'committed') AS commits,
                   count(*) FILTER (WHERE r.status = 'aborted' AND coalesce(r.reason, '') NOT LIKE 'skipped:%%')
                       AS aborts,
                   count(*) FILTER (WHERE r.status = 'aborted' AND r.reason LIKE 'skipped:%%') AS skips
              FROM job_runs r WHERE r.job_id = j.id) n
"""
_JOBS_OF = _JOB_COLUMNS.format(
    jobs="unnest(CAST(%(ids)s AS bigint[])) AS i(id)"
    " CROSS JOIN LATERAL (SELECT x.id, x.name, x.is_active, x.last_barrier FROM jobs x WHERE x.id = i.id OFFSET 0) j"
)
_ACTIVE_JOBS = _JOB_COLUMNS.format(jobs="jobs j") + " WHERE j.is_active"


async def jobs(conn: Connection, *, ids: Iterable[int] | None) -> list[JobRow]:
    """The figures' inputs of the jobs `ids` (None: every active job)."""
    if ids is None:
        return await fetch_all(conn, _ACTIVE_JOBS)
    return await fetch_all(conn, _JOBS_OF, {"ids": id_array(ids)})


# New data of data origins (services/lag.py), each after its own barrier: as lineage's `_NEW_DATA`, per origin.
_NEW_DATA_EACH = """
    SELECT n.table_id, n.first_barrier, b.issued_at
      FROM (SELECT s.table_id, s.first_barrier, s.snapshot_id, o.after,
                   lag(s.snapshot_id) OVER (PARTITION BY s.table_id ORDER BY s.first_barrier) AS before
              FROM unnest(CAST(%(ids)s AS bigint[]), CAST(%(afters)s AS bigint[])) AS o(id, after)
              CROSS JOIN LATERAL (
                    SELECT x.table_id, x.first_barrier, x.snapshot_id FROM snapshot_ranges x
                     WHERE x.table_id = o.id AND x.snapshot_id IS NOT NULL
                       AND x.first_barrier >= coalesce(
                             (SELECT p.first_barrier FROM snapshot_ranges p
                               WHERE p.table_id = o.id AND p.snapshot_id IS NOT NULL AND p.first_barrier <= o.after
                               ORDER BY p.first_barrier DESC LIMIT 1), -1)) s) n
      JOIN barriers b ON b.barrier = n.first_barrier
     WHERE n.first_barrier > n.after AND n.snapshot_id IS DISTINCT FROM n.before
"""


async def new_data(conn: Connection, *, after: Sequence[tuple[int, int]]) -> list[tuple[int, int, datetime]]:
    """(origin, barrier, issue time) of each new snapshot each (origin, after) got at a barrier after its `after`."""
    if not after:
        return []
    params = {"ids": id_array(o for o, _ in after), "afters": id_array(a for _, a in after)}
    return [(int(t), int(b), at) for t, b, at in await fetch_all(conn, _NEW_DATA_EACH, params)]
