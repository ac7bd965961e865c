"""The hot path's statements reach the rows they need by index, whatever the catalog's size.

On the server's connections every statement runs on its generic plan (`plan_cache_mode = force_generic_plan`,
db/database.py), which cannot count what a `jsonb` parameter holds: it expects 100 rows from
`jsonb_to_recordset` or `jsonb_array_elements`, and 100 keys in each object. Given that, PostgreSQL prefers hashing
a whole table to probing it a hundred times, so a statement that should touch one job's rows grows with the
catalog. Two such classes were found with `auto_explain` on the cycle over 10,100 jobs and are pinned here:
- the protocol's compare-and-set write took its jobs from `jsonb_to_recordset` and scanned every job twice
  (to lock and to bump); it takes typed arrays now (repositories/protocol.py);
- the allocation function's per-request `EXISTS` tests became hashes of every source edge, every keyed barrier
  and every run in flight, and its seal test scanned every table (migration 2026-11-25-1000).

Each test reads the plans the way the server runs the statements (prepared, generic, nested statements included)
through `auto_explain`, with thousands of jobs, tables and edges added in a transaction that is rolled back.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import psycopg
from psycopg.types.json import Jsonb

from metaservice.repositories import protocol as protocol_rows
from metaservice.repositories.allocator import AllocationRequest
from metaservice.services.planner import Planner

EXTRA = 5000  # jobs, each with a root it reads and a sink it writes


def _register_and_take_a_barrier(api: httpx.Client) -> int:
    for path in ("/register/source/up/lake/raw/r", "/register/sink/up/lake/mid/m"):
        assert api.post(path).status_code == 201
    decision = api.post("/jobs/up/barriers/next", json={"root_snapshots": {"lake.raw.r": 1}})
    assert decision.status_code == 200 and decision.json()["action"] == "process", decision.text
    return int(decision.json()["barrier"])


def _plans_in_a_large_catalog(
    database_url: str, barrier: int, run: Callable[[psycopg.AsyncConnection[Any]], Awaitable[None]]
) -> list[str]:
    """The plans `auto_explain` logs while `run` runs on a connection like the server's, after EXTRA more jobs
    (each with a source and a sink, in flight at `barrier`) and EXTRA keyed barriers were added; all rolled back."""

    async def main() -> list[str]:
        options = "-c plan_cache_mode=force_generic_plan"
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True, options=options) as conn:
            notices: list[str] = []
            conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
            await conn.execute("BEGIN")
            await conn.execute(
                "INSERT INTO jobs (name, version, is_active) "
                "SELECT 'other' || g, 0, true FROM generate_series(1, %s) g",
                [EXTRA],
            )
            await conn.execute(
                "INSERT INTO tables (name, seal_candidate) "  # no snapshot known yet: nothing to seal
                "SELECT 'other.' || k || g, false FROM generate_series(1, %s) g, (VALUES ('r'), ('s')) AS k(k)",
                [EXTRA],
            )
            await conn.execute(
                """INSERT INTO lineage_edges (job_id, table_id, role, added_after)
                   SELECT j.id, t.id, CASE WHEN t.name LIKE 'other.r%%' THEN 'source' ELSE 'sink' END, 0
                     FROM jobs j
                     JOIN tables t ON t.name IN ('other.r' || substr(j.name, 6), 'other.s' || substr(j.name, 6))
                    WHERE j.name LIKE 'other%%'"""
            )
            await conn.execute(
                """INSERT INTO job_runs (job_id, first_barrier, barrier, status, inputs, outputs)
                   SELECT id, %s, %s, 'in_flight', '{}', '{}' FROM jobs WHERE name LIKE 'other%%'""",
                [barrier, barrier],
            )
            await conn.execute(  # keyed barriers of POST /barriers calls long ago (below every barrier issued)
                "INSERT INTO barriers (barrier, request_key) SELECT g, 'old-' || g FROM generate_series(1, %s) g",
                [EXTRA],
            )
            await conn.execute("ANALYZE jobs, tables, lineage_edges, job_runs, barriers")
            await conn.execute("LOAD 'auto_explain'")
            await conn.execute("SET auto_explain.log_min_duration = 0")
            await conn.execute("SET auto_explain.log_nested_statements = on")
            await conn.execute("SET client_min_messages = log")
            notices.clear()
            await run(conn)
            await conn.execute("ROLLBACK")
            return list(notices)

    return anyio.run(main)


def _full_scans(plan: str, tables: tuple[str, ...]) -> list[str]:
    return [line.strip() for line in plan.splitlines() if re.search(rf"Seq Scan on ({'|'.join(tables)})\b", line)]


def test_the_write_of_a_commit_probes_jobs_and_tables_by_key(api: httpx.Client, database_url: str) -> None:
    barrier = _register_and_take_a_barrier(api)
    stored: list[bool] = []

    async def commit_write(conn: psycopg.AsyncConnection[Any]) -> None:
        g = await protocol_rows.gather(conn, name="up", barrier=barrier, windows=False)
        assert g.job_id is not None and g.run_at is not None
        job = g.world.jobs[g.job_id]
        planner = Planner(g.world)
        planner.commit(job.id, barrier, {g.world.tables[t].name: 10 for t in job.sinks}, g.run_at)
        stored.append(await protocol_rows.apply(conn, planner.writes, notify=False))

    plans = [p for p in _plans_in_a_large_catalog(database_url, barrier, commit_write) if "UPDATE jobs" in p]
    assert stored == [True], "the write's version check passes: nothing changed the job"
    assert len(plans) == 1, plans
    plan = plans[0]
    assert not _full_scans(plan, ("jobs", "tables")), plan
    assert plan.count("using pk_jobs on jobs") == 2, plan  # the lock and the bump
    assert "using pk_tables on tables" in plan, plan  # the sink's newest snapshot
    commit = api.post(f"/jobs/up/barriers/{barrier}/commit", json={"snapshots": {"lake.mid.m": 10}})
    assert commit.status_code == 200, "the rolled-back write left the barrier in flight: " + commit.text


def test_the_allocation_probes_what_it_checks_by_key(api: httpx.Client, database_url: str) -> None:
    barrier = _register_and_take_a_barrier(api)
    assert api.post(f"/jobs/up/barriers/{barrier}/commit", json={"snapshots": {"lake.mid.m": 10}}).status_code == 200
    answers: list[Any] = []

    async def allocate(conn: psycopg.AsyncConnection[Any]) -> None:
        # What the allocator sends for a `next` reporting its root, a keyed POST /barriers and a report.
        batch = [
            AllocationRequest("seal", by="job:up", job="up", roots={"lake.raw.r": 2}, min_interval=0.0).wire(),
            AllocationRequest("barrier", by="api", key="once", roots={"other.r7": 3}).wire(),
            AllocationRequest("report", by="api", roots={"other.r8": 4}).wire(),
        ]
        cursor = await conn.execute("SELECT metaservice_issue_barriers(%s)", [Jsonb(batch)], prepare=True)
        answers.append((await cursor.fetchone() or [None])[0])

    plans = _plans_in_a_large_catalog(database_url, barrier, allocate)
    [answer] = answers
    assert [a["error"] for a in answer] == [None, None, None], answer
    assert answer[0]["barrier"] is not None, "the job's new root snapshot was sealed by a new barrier"
    statements = [p for p in plans if "Query Text" in p and "metaservice_issue_barriers" not in p.split("\n")[1]]
    assert len(statements) >= 5, "auto_explain logged the function's statements"
    for plan in statements:
        assert not _full_scans(plan, ("jobs", "tables", "lineage_edges", "job_runs", "barriers")), plan
        # A scan of the runs in flight reads one job's, not every job's (a hash of all of them).
        for match in re.finditer(r"Scan using uq_job_runs_one_in_flight on job_runs \w+[^\n]*\n(?P<next>[^\n]*)", plan):
            assert "Index Cond" in match.group("next"), plan
