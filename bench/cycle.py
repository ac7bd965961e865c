"""The full job cycle: 100 jobs at once, each `next` (reporting its root's new snapshot) then `commit`.

The pipeline has 100 independent jobs, job<i> reading root bench.root.t<i> and writing bench.sink.t<i>.
Each wrk connection plays one job (bench/wrk.lua `cycle`): its `next` reports a new root snapshot, which makes
the server issue and seal a barrier (or find it sealed by another job's barrier), and answers "process";
the job commits its sink at that snapshot and starts over. Requests/s count both calls.
"""

from __future__ import annotations

import time

from bench import seed
from bench.context import Context
from bench.measure import Phase, drive
from bench.report import Outcome, ms, rps
from bench.server import serving

JOBS = 100


def cycle_args() -> list[str]:
    """wrk.lua arguments; snapshots start at the current time in ms, above those of any earlier phase."""
    return ["cycle", seed.JOB_PREFIX, seed.ROOT_PREFIX, seed.SINK_PREFIX, str(time.time_ns() // 1_000_000)]


def measure(ctx: Context, *, workers: int, database: str, count: bool = True) -> tuple[Phase, Phase]:
    """(no-op phase, cycle phase) on a fresh database and server with `workers` uvicorn workers."""
    url = ctx.cluster.fresh_database(database)
    seed.register_rows(url, seed.one_root_per_job(JOBS))
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
    return noop, cycle


def run(ctx: Context) -> Outcome:
    outcome = Outcome(
        "cycle",
        "next + commit, 100 concurrent jobs on a 100-job pipeline, vs the no-op endpoint",
        {"jobs": JOBS, "connections": JOBS, "seconds": ctx.seconds, "server_workers": 1},
    )
    noop, cycle = measure(ctx, workers=1, database="bench_cycle")
    c, n = cycle.load, noop.load
    outcome.figures = {"noop": noop.as_json(), "cycle": cycle.as_json(), "cycles_per_second": c.cycles / c.seconds}
    ratio = c.rps / n.rps
    outcome.row("next+commit req/s vs no-op", rps(c.rps), rps(n.rps), ratio, "≥ 0.25", ratio >= 0.25)
    outcome.row("cycles/s (one next + one commit)", f"{c.cycles / c.seconds:,.0f}/s", f"{c.waits} non-process answers")
    outcome.row("request p50", ms(c.p50_ms), f"no-op {ms(n.p50_ms)}")
    outcome.row("request p99", ms(c.p99_ms), f"no-op {ms(n.p99_ms)}", goal="≤ 100 ms", passed=c.p99_ms <= 100)
    per_request = cycle.statements_per_request or 0.0
    outcome.row("SQL statements per request", f"{per_request:.1f}", f"{cycle.served} requests")
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
