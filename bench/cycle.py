"""The full job cycle: 100 jobs at once, each `next` (reporting its root's new snapshot) then `commit`.

The pipeline has 100 independent jobs, job<i> reading root bench.root.t<i> and writing bench.sink.t<i>.
Each wrk connection plays one job (bench/wrk.lua `cycle`): its `next` reports a new root snapshot, which makes
the server issue and seal a barrier (or find it sealed by another job's barrier), and answers "process";
the job commits its sink at that snapshot and starts over. Requests/s count both calls.
"""

from __future__ import annotations

import time

from bench import openloop, seed
from bench.context import Context
from bench.measure import Phase, drive
from bench.report import Outcome, ms, rps
from bench.server import serving

JOBS = 100
OPEN_LOOP_RATE = 100.0  # cycles per second
NEXT, COMMIT = "/jobs/{job_id}/barriers/next", "/jobs/{job_id}/barriers/{barrier}/commit"


def cycle_args() -> list[str]:
    """wrk.lua arguments; snapshots start at the current time in ms, above those of any earlier phase."""
    return ["cycle", seed.JOB_PREFIX, seed.ROOT_PREFIX, seed.SINK_PREFIX, str(time.time_ns() // 1_000_000)]


def measure(
    ctx: Context, *, workers: int, database: str, count: bool = True, open_loop: bool = False
) -> tuple[Phase, Phase, openloop.OpenLoopResult | None]:
    """(no-op phase, cycle phase, open-loop phase if asked) on a fresh database and server with `workers` workers."""
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
        cycle = drive(
            ctx,
            server,
            database=database,
            connections=JOBS,
            threads=JOBS,
            path="/",
            script_args=cycle_args,
            count=count,
        )
        if open_loop:
            fixed_rate = openloop.run(
                server.base_url,
                jobs=JOBS,
                rate=OPEN_LOOP_RATE,
                seconds=ctx.pick(20, 5),
                first_snapshot=time.time_ns() // 1_000_000,
                prefixes=(seed.JOB_PREFIX, seed.ROOT_PREFIX, seed.SINK_PREFIX),
            )
    return noop, cycle, fixed_rate


def run(ctx: Context) -> Outcome:
    outcome = Outcome(
        "cycle",
        "next + commit, 100 concurrent jobs on a 100-job pipeline, vs the no-op endpoint",
        {"jobs": JOBS, "connections": JOBS, "seconds": ctx.seconds, "server_workers": 1},
    )
    noop, cycle, fixed = measure(ctx, workers=1, database="bench_cycle", open_loop=True)
    assert fixed is not None
    c, n = cycle.load, noop.load
    outcome.figures = {
        "noop": noop.as_json(),
        "cycle": cycle.as_json(),
        "cycles_per_second": c.cycles / c.seconds,
        "open_loop": fixed.as_json(),
    }
    ratio = c.rps / n.rps
    outcome.row("next+commit req/s vs no-op", rps(c.rps), rps(n.rps), ratio, "≥ 0.20", ratio >= 0.20)
    outcome.row("cycles/s (one next + one commit)", f"{c.cycles / c.seconds:,.0f}/s", f"{c.waits} non-process answers")
    outcome.row("request p50", ms(c.p50_ms), f"no-op {ms(n.p50_ms)}")
    outcome.row("request p99", ms(c.p99_ms), f"no-op {ms(n.p99_ms)}", goal="≤ 150 ms", passed=c.p99_ms <= 150)
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
    outcome.row(
        f"open loop: request p99 at a fixed {OPEN_LOOP_RATE:.0f} cycles/s",
        ms(fixed.p99_ms),
        f"p50 {ms(fixed.p50_ms)}, {fixed.cycles} cycles at {fixed.achieved_rate}/s, {fixed.errors} errors",
        goal="≤ 25 ms",
        passed=fixed.p99_ms <= 25 and fixed.errors == 0,
    )
    outcome.row(
        "CPU per request: server / postgres",
        f"{cycle.cpu_ms_per_request('server'):.2f} / {cycle.cpu_ms_per_request('postgres'):.2f} ms",
        f"no-op {noop.cpu_ms_per_request('server'):.2f} / {noop.cpu_ms_per_request('postgres'):.2f} ms",
    )
    outcome.row("errors (non-2xx, socket)", str(c.failed))
    outcome.notes.append(f"CPU cores used during the cycle: {c.cpu_share()}.")
    outcome.notes.append(f"server's database connections during the cycle (mean count): {cycle.backends}.")
    if cycle.statements:
        top = "; ".join(f"{n_ / max(1, cycle.served):.2f}x {q[:80]}" for n_, q in cycle.statements.by_query[:12])
        outcome.notes.append(f"statements per cycle request: {top}")
    return outcome
