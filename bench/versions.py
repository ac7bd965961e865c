"""`POST /versions` strong for 10 tables on a big catalog against the same call on a 100-table service.

Both catalogs are seeded with SQL (bench/seed.py `chains`): chains of 10 tables (a root and 9 jobs), every
table with 100 snapshots spread over 100,000 issued barriers. The big one has 1,000 chains (10,000 tables,
a million snapshot ranges), the small one 10 chains (100 tables). The call asks for the 10 tables of one
chain, so its lineage component is those 10 tables on both services: only the catalog size differs.
One connection, closed loop, for a fixed time: p50/p99 of single calls. The full run adds a catalog of 10,000
chains (100,000 tables, 90,000 jobs) with 10 snapshots per table, against 100 tables with 10 snapshots each.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from bench import cluster, load, seed
from bench.context import Context
from bench.report import Outcome, ms
from bench.server import serving
from metaservice.repositories import versions as version_sql

LENGTH = 10
SNAPSHOTS = 100
HUGE_SNAPSHOTS = 10  # 100,000 tables times 10: a million snapshot ranges, as the 10,000-table catalog has


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
