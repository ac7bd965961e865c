"""`POST /versions` strong for 10 tables on a big catalog against the same call on a 100-table service.

Both catalogs are seeded with SQL (bench/seed.py `chains`): chains of 10 tables (a root and 9 jobs), every
table with 100 snapshots spread over 100,000 issued barriers. The big one has 1,000 chains (10,000 tables,
a million snapshot ranges), the small one 10 chains (100 tables). The call asks for the 10 tables of one
chain, so its lineage component is those 10 tables on both services: only the catalog size differs.
One connection, closed loop, for a fixed time: p50/p99 of single calls. The full run adds a catalog of 10,000
chains (100,000 tables, 90,000 jobs) with 10 snapshots per table, against 100 tables with 10 snapshots each.

On the big catalog it also times the /metrics refresh (services/metric_state.py) in this process, on one
connection, each read in its own REPEATABLE READ transaction as the server's: with nothing changed, and after one
change made through the server (a root reports a snapshot, a barrier seals it, the root's first job commits it),
against the whole-catalog read the refresh did before (`delays.metric_figures_in`) and against its own full read.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import psycopg

from bench import cluster, load, seed
from bench.context import Context
from bench.report import Outcome, ms
from bench.server import serving
from metaservice.db.database import Connection
from metaservice.repositories import versions as version_sql
from metaservice.services.delays import metric_figures_in
from metaservice.services.metric_state import MetricState

LENGTH = 10
SNAPSHOTS = 100
HUGE_SNAPSHOTS = 10  # 100,000 tables times 10: a million snapshot ranges, as the 10,000-table catalog has


REFRESH_IDLE, REFRESH_CHANGED, REFRESH_FULL = 20, 5, 3


async def _refresh(url: str, base_url: str, *, chains: int) -> dict[str, Any]:
    """Seconds per /metrics refresh: full reads (before and now), with nothing changed, after one change."""
    state = MetricState(full_every=10**9)
    root, sink = seed.chain_tables(0, LENGTH)[:2]
    job = "job-c00000-p1"  # reads the root of chain 0, writes its second table (bench/seed.py `chains`)
    generic = "-c plan_cache_mode=force_generic_plan"  # as the server's connections (db/database.py)
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, options=generic) as conn:

        async def timed(work: Callable[[Connection], Awaitable[object]]) -> float:
            await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            started = time.perf_counter()
            await work(conn)
            spent = time.perf_counter() - started
            await conn.execute("COMMIT")
            return spent

        before = [await timed(metric_figures_in) for _ in range(REFRESH_FULL)]
        full, full_rows = [], 0
        for _ in range(REFRESH_FULL):
            state.invalidate()
            full.append(await timed(state.refresh))
            full_rows = state.rows_read
        idle = [await timed(state.refresh) for _ in range(REFRESH_IDLE)]
        idle_rows = state.rows_read
        changed, changed_rows, actions = [], [], []
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
            for i in range(REFRESH_CHANGED):
                snapshot = SNAPSHOTS + i
                path = root.replace(".", "/")
                (await http.post(f"/tables/{path}/snapshots", json={"snapshot_id": snapshot})).raise_for_status()
                (await http.post("/barriers", json={})).raise_for_status()
                decision = (await http.post(f"/jobs/{job}/barriers/next", json={"root_snapshots": {}})).json()
                actions.append(decision["action"])
                if decision["action"] == "process":
                    commit = {"snapshots": {sink: snapshot}}
                    answer = await http.post(f"/jobs/{job}/barriers/{decision['barrier']}/commit", json=commit)
                    answer.raise_for_status()
                changed.append(await timed(state.refresh))
                changed_rows.append(state.rows_read)
                assert state.full_reason is None, state.full_reason
    return {
        "tables": chains * LENGTH,
        "full_before_s": before,
        "full_s": full,
        "full_rows": full_rows,
        "idle_s": idle,
        "idle_rows": idle_rows,
        "changed_s": changed,
        "changed_rows": changed_rows,
        "changed_actions": actions,
    }


def _measure(
    ctx: Context, *, database: str, chains: int, barrier_count: int, snapshots: int = SNAPSHOTS
) -> dict[str, Any]:
    url = ctx.cluster.fresh_database(database)
    seed.chains(url, chains=chains, length=LENGTH, snapshots=snapshots, barrier_count=barrier_count)
    tables = seed.chain_tables(chains // 2, LENGTH)
    body = json.dumps({"tables": tables, "consistency": "strong"})
    with serving(url) as server:
        answer = httpx.post(
            f"{server.base_url}/versions", content=body, headers={"Content-Type": "application/json"}, timeout=30
        )
        answer.raise_for_status()
        assert server.process is not None
        meter = load.CpuMeter({"server": server.process.pid, "postgres": ctx.cluster.server.get_pid()})
        result = load.run_wrk(
            f"{server.base_url}/versions",
            ["static", "POST", body],
            connections=1,
            threads=1,
            seconds=ctx.seconds,
            meter=meter,
        )
        refresh = asyncio.run(_refresh(url, server.base_url, chains=chains)) if chains > 10 else None
    # the one statement of a strong answer with no aborted barrier to step back over (names as an array literal)
    plans = {
        "frontier": cluster.explain(
            url, version_sql._BY_NAME, {"names": "{" + ",".join(tables) + "}", "strong": True, "bound": None}
        ),
    }
    sizes = cluster.sizes(url, ["snapshot_ranges", "barriers"])
    ctx.cluster.drop_database(database)
    return {
        "tables": chains * LENGTH,
        "jobs": chains * (LENGTH - 1),
        "snapshot_ranges": chains * LENGTH * snapshots,
        "barriers": barrier_count,
        "answer": answer.json(),
        "load": result.as_json(),
        "explain": plans,
        "sizes_bytes": sizes,
        "metrics_refresh": refresh,
    }


def run(ctx: Context) -> Outcome:
    chains = ctx.pick(1000, 100)
    barrier_count = ctx.pick(100_000, 10_000)
    outcome = Outcome(
        "versions",
        "POST /versions strong, 10 tables: big catalog vs 100-table service",
        {
            "big_tables": chains * LENGTH,
            "small_tables": 10 * LENGTH,
            "snapshots_per_table": SNAPSHOTS,
            "barriers": barrier_count,
            "requested_tables": LENGTH,
            "connections": 1,
            "seconds": ctx.seconds,
        },
    )
    small = _measure(ctx, database="bench_versions_small", chains=10, barrier_count=barrier_count)
    big = _measure(ctx, database="bench_versions_big", chains=chains, barrier_count=barrier_count)
    outcome.figures = {"big": big, "small": small}
    b, s = big["load"], small["load"]
    ratio = b["p99_ms"] / s["p99_ms"]
    outcome.row(
        f"p50, {big['tables']:,} tables", ms(b["p50_ms"]), f"100 tables {ms(s['p50_ms'])}", b["p50_ms"] / s["p50_ms"]
    )
    outcome.row(
        f"p99, {big['tables']:,} tables",
        ms(b["p99_ms"]),
        f"100 tables {ms(s['p99_ms'])}",
        ratio,
        "≤ 10 ms, ≤ 2x",
        b["p99_ms"] <= 10 and ratio <= 2,
    )
    if not ctx.quick:  # the catalog of the failover issue's scale goal: 100,000 tables, 90,000 jobs
        huge = _measure(
            ctx, database="bench_versions_huge", chains=10_000, barrier_count=barrier_count, snapshots=HUGE_SNAPSHOTS
        )
        tiny = _measure(
            ctx, database="bench_versions_small", chains=10, barrier_count=barrier_count, snapshots=HUGE_SNAPSHOTS
        )
        outcome.figures |= {"huge": huge, "small_for_huge": tiny}
        h, t = huge["load"], tiny["load"]
        outcome.row(
            f"p99, {huge['tables']:,} tables and {huge['jobs']:,} jobs ({HUGE_SNAPSHOTS} snapshots each)",
            ms(h["p99_ms"]),
            f"100 tables {ms(t['p99_ms'])} (p50 {ms(h['p50_ms'])} / {ms(t['p50_ms'])})",
            h["p99_ms"] / t["p99_ms"],
            "≤ 2x",
            h["p99_ms"] <= 2 * t["p99_ms"],
        )
    outcome.row("requests measured (big / small)", f"{b['requests']:,} / {s['requests']:,}")
    outcome.row("p90 (big / small)", f"{ms(b['p90_ms'])} / {ms(s['p90_ms'])}")
    refresh = big["metrics_refresh"]
    before, full = statistics.median(refresh["full_before_s"]), statistics.median(refresh["full_s"])
    idle, changed = statistics.median(refresh["idle_s"]), statistics.median(refresh["changed_s"])
    outcome.row(
        f"/metrics refresh, nothing changed, {big['tables']:,} tables",
        ms(idle * 1000),
        f"whole-catalog read {ms(before * 1000)}",
        idle / before,
    )
    outcome.row(
        f"/metrics refresh after one change, {big['tables']:,} tables",
        ms(changed * 1000),
        f"whole-catalog read {ms(before * 1000)}",
        changed / before,
    )
    outcome.row("/metrics refresh, its own full read", ms(full * 1000), f"whole-catalog read {ms(before * 1000)}")
    outcome.row(
        "/metrics refresh rows returned (nothing changed / one change / full)",
        f"{refresh['idle_rows']} / {max(refresh['changed_rows'])} / {refresh['full_rows']:,}",
    )
    outcome.notes.append(
        "/metrics refresh: medians of "
        f"{REFRESH_IDLE} refreshes with nothing changed, {REFRESH_CHANGED} after one change each (a root report, a "
        f"barrier, a commit: next answered {refresh['changed_actions']}), {REFRESH_FULL} full reads of each kind;"
        " in the bench process, one connection, the server idle."
    )
    outcome.notes.append(
        f"CPU cores used while measuring: big {b['cpu_cores']}, small {s['cpu_cores']} "
        "('others': processes outside the benchmark)."
    )
    for name, lines in big["explain"].items():
        timing = next((ln for ln in lines if ln.startswith("Execution Time")), "")
        outcome.notes.append(
            f"EXPLAIN (ANALYZE, BUFFERS) of _{name.upper()} on {big['tables']:,} tables ({timing}):\n  "
            + "\n  ".join(lines)
        )
    return outcome
