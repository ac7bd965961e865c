"""An idle pipeline of 1,000 tables under one barrier per second for an hour, simulated in seconds.

100 chains: root → j1 (3 tables) → j2 (3 tables) → j3 (3 tables), i.e. 1,000 tables and 300 jobs. Every job
processes one barrier with data; then 3,600 barriers are issued through `POST /barriers` (16 at a time) while
no root changes. After every 600 barriers the jobs call `next` (they idle through the barriers), except in 20
chains: in 10 no job calls `next` for the whole hour, in 10 others only j3 does not. At the end each lagging
j3 asks `next` once, 3,600 barriers behind (for the first 10 its idle upstream is settled in the same call).
Database and table sizes are read before and after the hour, and again after a plain VACUUM: the burst
compresses an hour into half a minute, during which autovacuum (1-minute naptime) has had no chance to prune the
dead row versions of the updated rows (barrier clock, job runs, ranges) nor to truncate pages that 16
concurrent inserters pre-extended; in a real hour it would run many times. So each simulated ten minutes end
with one plain VACUUM (autovacuum's minimum cadence). Both figures are reported; the goal is judged on the
second.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import httpx

from bench import cluster, seed
from bench.context import Context
from bench.report import Outcome, mib, ms
from bench.seed import JobSpec
from bench.server import serving

CHAINS, WIDTH = 100, 3
LAGGING_CHAINS, LAGGING_LAST_JOB = range(0, 10), range(10, 20)
CONCURRENCY = 16
TABLES = ["barriers", "snapshot_ranges", "job_runs", "jobs", "tables", "barrier_clock"]


def _root(c: int) -> str:
    return f"idle.c{c:03d}.root"


def _layer(c: int, level: int) -> list[str]:
    return [f"idle.c{c:03d}.l{level}_{i}" for i in range(WIDTH)]


def _job(c: int, level: int) -> str:
    return f"idle-c{c:03d}-j{level}"


def pipeline() -> list[JobSpec]:
    jobs = []
    for c in range(CHAINS):
        inputs = [_root(c)]
        for level in (1, 2, 3):
            jobs.append(JobSpec(_job(c, level), tuple(inputs), tuple(_layer(c, level))))
            inputs = _layer(c, level)
    return jobs


async def _post(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await http.post(path, json=body)
    response.raise_for_status()
    result: dict[str, Any] = response.json()
    return result


async def _first_round(http: httpx.AsyncClient, limit: asyncio.Semaphore) -> None:
    """Every job processes the barrier that sealed its chain's root at snapshot 1, in chain order."""

    async def chain(c: int) -> None:
        async with limit:
            for level in (1, 2, 3):
                decision = await _post(http, f"/jobs/{_job(c, level)}/barriers/next", {})
                assert decision["action"] == "process", decision
                snapshots = dict.fromkeys(_layer(c, level), 1)
                await _post(
                    http, f"/jobs/{_job(c, level)}/barriers/{decision['barrier']}/commit", {"snapshots": snapshots}
                )

    await asyncio.gather(*(chain(c) for c in range(CHAINS)))


async def _issue(http: httpx.AsyncClient, limit: asyncio.Semaphore, count: int) -> None:
    async def one() -> None:
        async with limit:
            await _post(http, "/barriers", {})

    await asyncio.gather(*(one() for _ in range(count)))


async def _catch_up(http: httpx.AsyncClient, limit: asyncio.Semaphore) -> None:
    """Every job that is not lagging asks `next` once (it idles through the new barriers)."""

    async def ask(job: str) -> None:
        async with limit:
            await _post(http, f"/jobs/{job}/barriers/next", {})

    jobs = [
        _job(c, level)
        for c in range(CHAINS)
        if c not in LAGGING_CHAINS
        for level in (1, 2, 3)
        if not (c in LAGGING_LAST_JOB and level == 3)
    ]
    for level in (1, 2, 3):  # upstream first, as a real schedule would have it
        await asyncio.gather(*(ask(j) for j in jobs if j.endswith(f"j{level}")))


def _vacuum(url: str) -> None:
    with cluster.connect(url) as conn:
        conn.execute("VACUUM")


async def _simulate(base_url: str, url: str, *, barrier_count: int, rounds: int) -> dict[str, Any]:
    """Each round is 600 simulated seconds: its barriers, then every non-lagging job's `next`, then one plain
    VACUUM, i.e. what autovacuum (1-minute naptime) does at least once in ten real minutes."""
    limit = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        started = time.monotonic()
        for _ in range(rounds):
            await _issue(http, limit, barrier_count // rounds)
            await _catch_up(http, limit)
            await asyncio.to_thread(_vacuum, url)
        return {"seconds": round(time.monotonic() - started, 1)}


def _lagging_next(base_url: str, chains: range) -> list[dict[str, Any]]:
    """Each chain's j3 asks `next` once; single client, one call at a time."""
    out = []
    with httpx.Client(base_url=base_url, timeout=60) as http:
        for c in chains:
            t0 = time.perf_counter()
            response = http.post(f"/jobs/{_job(c, 3)}/barriers/next", json={})
            elapsed = (time.perf_counter() - t0) * 1000
            response.raise_for_status()
            out.append({"job": _job(c, 3), "ms": round(elapsed, 2), "action": response.json()["action"]})
    return out


def run(ctx: Context) -> Outcome:
    barrier_count = ctx.pick(3600, 600)
    rounds = ctx.pick(6, 2)
    outcome = Outcome(
        "idle",
        "idle 1,000-table pipeline, one barrier per second for an hour (simulated)",
        {
            "tables": CHAINS * (1 + 3 * WIDTH),
            "jobs": CHAINS * 3,
            "barriers": barrier_count,
            "next_rounds": rounds,
            "concurrency": CONCURRENCY,
        },
    )
    database = "bench_idle"
    url = ctx.cluster.fresh_database(database)
    seed.register_rows(url, pipeline())
    with serving(url) as server:
        roots = {_root(c): 1 for c in range(CHAINS)}
        httpx.post(f"{server.base_url}/barriers", json={"root_snapshots": roots}, timeout=60).raise_for_status()
        asyncio.run(_first_round_main(server.base_url))
        before = cluster.sizes(url, TABLES)
        simulated = asyncio.run(_simulate(server.base_url, url, barrier_count=barrier_count, rounds=rounds))
        after = cluster.sizes(url, TABLES)
        _vacuum(url)
        vacuumed = cluster.sizes(url, TABLES)
        behind_all = _lagging_next(server.base_url, LAGGING_CHAINS)
        behind_last = _lagging_next(server.base_url, LAGGING_LAST_JOB)
    with cluster.connect(url) as conn:
        rows = {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}  # type: ignore[index]
    growth = {k: vacuumed[k] - before[k] for k in before}
    outcome.figures = {
        "sizes_before": before,
        "sizes_after": after,
        "sizes_after_vacuum": vacuumed,
        "growth_bytes_before_vacuum": {k: after[k] - before[k] for k in before},
        "growth_bytes": growth,
        "rows_after": rows,
        "simulation": simulated,
        "next_whole_chain_behind": behind_all,
        "next_last_job_behind": behind_last,
    }
    worst = max(x["ms"] for x in behind_all + behind_last)
    outcome.row(
        f"database growth over {barrier_count:,} barriers, right after",
        mib(after["database"] - before["database"]),
        f"{mib(before['database'])} before",
    )
    outcome.row(
        "database growth, after a plain VACUUM",
        mib(growth["database"]),
        f"{mib(before['database'])} before",
        goal="< 1 MB",
        passed=growth["database"] < 1_000_000,
    )
    for table in ("barriers", "snapshot_ranges", "job_runs", "barrier_clock"):
        outcome.row(f"  {table} growth, after VACUUM", mib(growth[table]), f"{rows[table]:,} rows")
    outcome.row(
        f"next, {barrier_count:,} behind (chain idle: settles upstream)",
        f"max {ms(max(x['ms'] for x in behind_all))}",
        f"median {ms(statistics.median(x['ms'] for x in behind_all))}",
        goal="≤ 50 ms",
        passed=max(x["ms"] for x in behind_all) <= 50,
    )
    outcome.row(
        f"next, {barrier_count:,} behind (upstream current)",
        f"max {ms(max(x['ms'] for x in behind_last))}",
        f"median {ms(statistics.median(x['ms'] for x in behind_last))}",
        goal="≤ 50 ms",
        passed=max(x["ms"] for x in behind_last) <= 50,
    )
    outcome.notes.append(
        f"{barrier_count:,} barriers and {rounds} rounds of next took {simulated['seconds']} s; worst lagging next "
        f"{worst:.1f} ms; answers: {sorted({x['action'] for x in behind_all + behind_last})}."
    )
    return outcome


async def _first_round_main(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        await _first_round(http, asyncio.Semaphore(CONCURRENCY))
