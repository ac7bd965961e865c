"""Scale-out on one machine: the next + commit cycle with 2 uvicorn workers against 1, and the no-op endpoint.

The goal is ≥ 1.3x, or proof that the machine's cores are the bound. Both halves are measured in the same run. The
cores bound holds when the 2-worker run keeps the whole machine busy (≥ 95 % of its cores, by /proc/stat). In that
case a second worker can only add what the 1-worker run left idle: at most (cores) / (cores the 1-worker run used).
"""

from __future__ import annotations

import psutil

from bench import cycle
from bench.context import Context
from bench.report import Outcome, ms, rps


def run(ctx: Context) -> Outcome:
    outcome = Outcome(
        "workers",
        "2 uvicorn workers vs 1 on the next + commit cycle (100 jobs)",
        {"jobs": cycle.JOBS, "connections": cycle.JOBS, "seconds": ctx.seconds, "workers": [1, 2]},
    )
    noop1, one, _ = cycle.measure(ctx, workers=1, database="bench_workers1", count=False)
    noop2, two, _ = cycle.measure(ctx, workers=2, database="bench_workers2", count=False)
    outcome.figures = {
        "w1": {"noop": noop1.as_json(), "cycle": one.as_json()},
        "w2": {"noop": noop2.as_json(), "cycle": two.as_json()},
    }
    scale = two.load.rps / one.load.rps
    noop_scale = noop2.load.rps / noop1.load.rps
    cores = psutil.cpu_count() or 1
    busy_one, busy_two = one.load.cpu_share().get("machine", 0.0), two.load.cpu_share().get("machine", 0.0)
    saturated = busy_two >= 0.95 * cores
    outcome.row(
        "cycle req/s, 2 workers vs 1",
        rps(two.load.rps),
        rps(one.load.rps),
        scale,
        "≥ 1.3, or the cores bound",
        scale >= 1.3 or saturated,
    )
    outcome.row(
        "cores busy (machine): 2 workers / 1 worker",
        f"{busy_two:.2f} of {cores}",
        f"{busy_one:.2f} of {cores}",
        None,
        f"cores bound: 2 workers ≥ {0.95 * cores:.2f}",
        None if scale >= 1.3 else saturated,  # decides only when the scale-out goal itself is missed
    )
    if busy_one > 0:
        outcome.row("most a second worker could add on these cores (cores / 1-worker use)", f"{cores / busy_one:.2f}x")
    outcome.row("cycle p99, 2 workers", ms(two.load.p99_ms), f"1 worker {ms(one.load.p99_ms)}")
    outcome.row("no-op req/s, 2 workers vs 1", rps(noop2.load.rps), rps(noop1.load.rps), noop_scale)
    outcome.notes.append(
        f"CPU cores used by the cycle: 1 worker {one.load.cpu_share()}; 2 workers {two.load.cpu_share()}."
    )
    outcome.notes.append(
        f"database connections by state (mean count): 1 worker {one.backends}; 2 workers {two.backends}."
    )
    return outcome
