"""The full job cycle: 100 jobs at once, each `next` (reporting its root's new snapshot) then `commit`.

The pipeline has 100 independent jobs, job<i> reading root bench.root.t<i> and writing bench.sink.t<i>.
Each wrk connection plays one job (bench/wrk.lua `cycle`): its `next` reports a new root snapshot, which makes
the server issue and seal a barrier (or find it sealed by another job's barrier), and answers "process";
the job commits its sink at that snapshot and starts over. Requests/s count both calls.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import psutil

from bench import load, openloop, seed
from bench.context import Context
from bench.measure import Phase, drive
from bench.report import Outcome, ms, rps
from bench.server import serving
from tests.support import ServerProcess

T = TypeVar("T")


@dataclass(frozen=True)
class OpenLoop:
    """The open-loop phase as shipped, the same load again with commits that do not wait for the WAL flush
    (measurement only: what the disk's flush costs the tail), and the disk's own fsync latency."""

    durable: openloop.OpenLoopResult
    no_flush_wait: openloop.OpenLoopResult
    fsync_ms: list[float]
    durable_cpu: dict[str, float]  # cores busy (all, and the load generator's), stolen by the hypervisor
    no_flush_cpu: dict[str, float]


def _with_cpu(phase: Callable[[], T]) -> tuple[T, dict[str, float]]:
    """`phase()` and, meanwhile, in cores: the whole machine busy, the load generator (the open-loop client runs
    in this process; its children, the server among them, are not counted) and time stolen by the host."""
    me = psutil.Process()
    meter = load.CpuMeter({})
    mine, t0 = me.cpu_times(), time.perf_counter()
    meter.start()
    result = phase()
    used, wall = meter.stop(), time.perf_counter() - t0
    generator = sum(me.cpu_times()[:2]) - sum(mine[:2])
    return result, {
        "busy_cores": round(used["machine"] / wall, 2),
        "generator_cores": round(generator / wall, 2),
        "stolen_cores": round(used["stolen"] / wall, 3),
    }


JOBS = 100
OPEN_LOOP_RATE = 100.0  # cycles per second
CATALOG = 10_000  # idle jobs registered besides the cycle's in the catalog phase (a tenth under --quick)
NEXT, COMMIT = "/jobs/{job_id}/barriers/next", "/jobs/{job_id}/barriers/{barrier}/commit"


def cycle_args() -> list[str]:
    """wrk.lua arguments; snapshots start at the current time in ms, above those of any earlier phase."""
    return ["cycle", seed.JOB_PREFIX, seed.ROOT_PREFIX, seed.SINK_PREFIX, str(time.time_ns() // 1_000_000)]


def measure_alone(ctx: Context, *, database: str, idle: int = 0, auth: bool = False) -> Phase:
    """The cycle phase alone on a fresh database: with `idle` more jobs (each with a root and a sink) registered
    that never call (what the catalog's size costs each step), or with authentication on (what a server off
    loopback runs: every request carries a job token, which the server looks up)."""
    url = ctx.cluster.fresh_database(database)
    seed.register_rows(url, [*seed.one_root_per_job(JOBS), *seed.idle_jobs(idle)])
    headers = {"Authorization": f"Bearer {seed.job_token(url, jobs=seed.JOB_PREFIX + '*')}"} if auth else None
    with serving(url, env={"METASERVICE_AUTH_ENABLED": "true"} if auth else None) as server:
        return _cycle_phase(ctx, server, database, headers=headers)


def _cycle_phase(
    ctx: Context, server: ServerProcess, database: str, *, count: bool = True, headers: dict[str, str] | None = None
) -> Phase:
    return drive(
        ctx,
        server,
        database=database,
        connections=JOBS,
        threads=JOBS,
        path="/",
        script_args=cycle_args,
        count=count,
        headers=headers,
    )


def measure(
    ctx: Context, *, workers: int, database: str, count: bool = True, open_loop: bool = False
) -> tuple[Phase, Phase, OpenLoop | None]:
    """(no-op phase, cycle phase, open-loop phases if asked) on a fresh database and server with `workers` workers."""
    url = ctx.cluster.fresh_database(database)
    seed.register_rows(url, seed.one_root_per_job(JOBS))
    fixed_rate = None
    with serving(url, workers=workers) as server:
        noop = drive(
            ctx,
            server,
            database=database,
            connections=JOBS,
            threads=JOBS,
            path="/healthz",
            script_args=["static", "GET"],
            count=count,
        )
        cycle = _cycle_phase(ctx, server, database, count=count)
        if open_loop:

            def fixed() -> openloop.OpenLoopResult:
                return openloop.run(
                    server.base_url,
                    jobs=JOBS,
                    rate=OPEN_LOOP_RATE,
                    seconds=ctx.pick(20, 5),
                    first_snapshot=time.time_ns() // 1_000_000,
                    prefixes=(seed.JOB_PREFIX, seed.ROOT_PREFIX, seed.SINK_PREFIX),
                )

            durable, durable_cpu = _with_cpu(fixed)
            with ctx.cluster.reloaded("synchronous_commit", "off"):
                no_flush_wait, no_flush_cpu = _with_cpu(fixed)
            fixed_rate = OpenLoop(durable, no_flush_wait, ctx.cluster.fsync_ms(), durable_cpu, no_flush_cpu)
    return noop, cycle, fixed_rate


def run(ctx: Context) -> Outcome:
    outcome = Outcome(
        "cycle",
        "next + commit, 100 concurrent jobs on a 100-job pipeline, vs the no-op endpoint",
        {"jobs": JOBS, "connections": JOBS, "seconds": ctx.seconds, "server_workers": 1},
    )
    noop, cycle, fixed = measure(ctx, workers=1, database="bench_cycle", open_loop=True)
    assert fixed is not None
    idle = ctx.pick(CATALOG, CATALOG // 10)
    in_catalog = measure_alone(ctx, database="bench_cycle_catalog", idle=idle)
    with_tokens = measure_alone(ctx, database="bench_cycle_tokens", auth=True)
    c, n, k, a = cycle.load, noop.load, in_catalog.load, with_tokens.load
    outcome.figures = {
        "noop": noop.as_json(),
        "cycle": cycle.as_json(),
        "cycles_per_second": c.cycles / c.seconds,
        "open_loop": fixed.durable.as_json(),
        "open_loop_no_flush_wait": fixed.no_flush_wait.as_json(),
        "fsync_ms": [round(x, 3) for x in fixed.fsync_ms],
        "open_loop_cpu": {"durable": fixed.durable_cpu, "no_flush_wait": fixed.no_flush_cpu},
        "in_catalog": {"idle_jobs": idle, **in_catalog.as_json()},
        "with_tokens": with_tokens.as_json(),
    }
    ratio = c.rps / n.rps
    outcome.row("next+commit req/s vs no-op", rps(c.rps), rps(n.rps), ratio, "≥ 0.20", ratio >= 0.20)
    outcome.row("cycles/s (one next + one commit)", f"{c.cycles / c.seconds:,.0f}/s", f"{c.waits} non-process answers")
    outcome.row("request p50", ms(c.p50_ms), f"no-op {ms(n.p50_ms)}")
    outcome.row("request p99", ms(c.p99_ms), f"no-op {ms(n.p99_ms)}", goal="≤ 150 ms", passed=c.p99_ms <= 150)
    outcome.row(
        f"next+commit req/s with {idle:,} more jobs registered (idle) vs the 100-job catalog",
        rps(k.rps),
        rps(c.rps),
        k.rps / c.rps if c.rps else None,
    )
    outcome.row(
        "next+commit req/s with auth on (a job token on every request) vs auth off",
        rps(a.rps),
        f"{rps(c.rps)}; p99 {ms(a.p99_ms)}",
        a.rps / c.rps if c.rps else None,
    )
    server_ms, postgres_ms = (in_catalog.cpu_ms_per_request(g) for g in ("server", "postgres"))
    outcome.notes.append(
        f"The cycle with {idle:,} idle jobs registered besides: p99 {ms(k.p99_ms)}, CPU per request server "
        f"{server_ms:.2f} ms, postgres {postgres_ms:.2f} ms."
    )
    per_request = cycle.statements_per_request or 0.0
    outcome.row("SQL statements per request (pg_stat_statements)", f"{per_request:.2f}", f"{cycle.served} requests")
    for label, route, limit in (("next", NEXT, 4), ("commit", COMMIT, 3)):
        per = cycle.statements_per_route("POST", route)
        outcome.row(
            f"SQL statements per {label} (server tally)",
            "n/a" if per is None else f"{per:.2f}",
            goal=f"≤ {limit}",
            passed=per is not None and per <= limit,
        )
    durable, unsynced = fixed.durable, fixed.no_flush_wait
    outcome.row(
        f"open loop: request p99 at a fixed {OPEN_LOOP_RATE:.0f} cycles/s",
        ms(durable.p99_ms),
        f"p50 {ms(durable.p50_ms)}, {durable.cycles} cycles at {durable.achieved_rate}/s, {durable.errors} errors; "
        f"cores busy {fixed.durable_cpu['busy_cores']} (load generator {fixed.durable_cpu['generator_cores']}), "
        f"stolen {fixed.durable_cpu['stolen_cores']}",
        goal="≤ 25 ms",
        passed=durable.p99_ms <= 25 and durable.errors == 0,
    )
    outcome.row(
        "open loop, commits not waiting for the WAL flush (synchronous_commit=off: measurement only)",
        ms(unsynced.p99_ms),
        f"p50 {ms(unsynced.p50_ms)}, {unsynced.cycles} cycles at {unsynced.achieved_rate}/s, {unsynced.errors} errors; "
        f"cores busy {fixed.no_flush_cpu['busy_cores']} (load generator {fixed.no_flush_cpu['generator_cores']}), "
        f"stolen {fixed.no_flush_cpu['stolen_cores']}",
    )
    quantiles = statistics.quantiles(fixed.fsync_ms, n=100)
    outcome.row(
        "the data disk: write 8 kB + fdatasync, p50 / p99 / max",
        f"{statistics.median(fixed.fsync_ms):.2f} / {quantiles[98]:.2f} / {max(fixed.fsync_ms):.2f} ms",
        f"{len(fixed.fsync_ms)} flushes",
    )
    outcome.row(
        "CPU per request: server / postgres",
        f"{cycle.cpu_ms_per_request('server'):.2f} / {cycle.cpu_ms_per_request('postgres'):.2f} ms",
        f"no-op {noop.cpu_ms_per_request('server'):.2f} / {noop.cpu_ms_per_request('postgres'):.2f} ms",
    )
    on, waiting = c.cpu_share(), c.wait_share()
    outcome.row(
        "server process during the cycle: on a core / runnable, waiting for one (share of the phase)",
        f"{on.get('server', 0.0):.2f} / {waiting.get('server', 0.0):.2f}",
        f"postgres backends: on cores {on.get('postgres', 0.0):.2f}, waiting for one "
        f"{waiting.get('postgres', 0.0):.2f} (core-equivalents)",
    )
    per_request_ms = sum(cycle.cpu_ms_per_request(group) for group in ("server", "postgres", "wrk"))
    cores = psutil.cpu_count() or 1
    ceiling = cores * 1000 / per_request_ms if per_request_ms else 0.0
    outcome.row(
        "most req/s these cores allow at the measured CPU per request (server + postgres + wrk)",
        rps(ceiling),
        rps(n.rps),
        ceiling / n.rps if n.rps else None,
    )
    outcome.row("errors (non-2xx, socket)", str(c.failed))
    outcome.notes.append(
        "One server process runs one event loop: on a core + waiting for one near 1.00 means the loop never idled "
        "(it is the bound) and only the first part of its time was work; the second is time the machine's cores "
        "were taken, mostly by PostgreSQL's backends (the scheduler's own account, /proc/<pid>/task/*/schedstat)."
    )
    outcome.notes.append(f"CPU cores used during the cycle: {c.cpu_share()}; waiting for a core: {waiting}.")
    outcome.notes.append(f"server's database connections during the cycle (mean count): {cycle.backends}.")
    if cycle.statements:
        top = "; ".join(f"{n_ / max(1, cycle.served):.2f}x {q[:80]}" for n_, q in cycle.statements.by_query[:12])
        outcome.notes.append(f"statements per cycle request: {top}")
    return outcome
