"""Crowds: 200 connections mixing consistent reads and the job cycle, and a flood of /metrics scrapes.

- Mixed: 100 wrk connections read `GET /version/strong/…` while 100 others play the next → commit cycle (one job
  each), for 30 s, against one server process with its default pool (20 connections, 512 waiters). Reported:
  p99 of each half and every non-2xx answer (a 503 after the pool timeout or a 429 from the wait bound would
  show here).
- Metrics flood: one job cycles sequentially (next, commit) while 50 connections scrape `/metrics` as fast as
  they can; its `next` latency against the same job cycling with no scrapes, in the same run. /metrics answers
  from memory (figures read in the background), so the flood should cost the job CPU only, no database work.
"""

from __future__ import annotations

import statistics
import threading
import time

import httpx

from bench import load, seed
from bench.context import Context
from bench.cycle import cycle_args
from bench.report import Outcome, ms, rps
from bench.server import serving

JOBS = 100
READERS = 100
SCRAPERS = 50


def _sequential_cycles(base_url: str, job: int, *, seconds: float, first_snapshot: int) -> list[float]:
    """`next` latencies (ms) of one job cycling next → commit back to back for `seconds`."""
    latencies: list[float] = []
    snapshot = first_snapshot
    root, sink = f"{seed.ROOT_PREFIX}{job}", f"{seed.SINK_PREFIX}{job}"
    started = time.perf_counter()
    with httpx.Client(base_url=base_url, timeout=30) as http:
        while time.perf_counter() - started < seconds:
            snapshot += 1
            t0 = time.perf_counter()
            plan = http.post(f"/jobs/{seed.JOB_PREFIX}{job}/barriers/next", json={"root_snapshots": {root: snapshot}})
            latencies.append((time.perf_counter() - t0) * 1000)
            plan.raise_for_status()
            body = plan.json()
            if body["action"] == "process":
                done = http.post(
                    f"/jobs/{seed.JOB_PREFIX}{job}/barriers/{body['barrier']}/commit",
                    json={"snapshots": {sink: body["inputs"][root]["snapshot_id"]}},
                )
                done.raise_for_status()
    return latencies


def _p(latencies: list[float], q: int) -> float:
    return statistics.quantiles(latencies, n=100, method="inclusive")[q - 1]


def run(ctx: Context) -> Outcome:
    seconds = ctx.pick(30, 5)
    outcome = Outcome(
        "overload",
        "200 connections mixing reads and the cycle; next under a flood of /metrics scrapes",
        {"jobs": JOBS, "readers": READERS, "scrapers": SCRAPERS, "seconds": seconds, "server_workers": 1},
    )
    url = ctx.cluster.fresh_database("bench_overload")
    seed.register_rows(url, seed.one_root_per_job(JOBS))
    with serving(url) as server:
        assert server.process is not None
        first = time.time_ns() // 1_000_000
        quiet = _sequential_cycles(server.base_url, 0, seconds=ctx.pick(10, 3), first_snapshot=first)
        flood: dict[str, load.LoadResult] = {}

        def scrape() -> None:
            flood["metrics"] = load.run_wrk(
                f"{server.base_url}/metrics", ["static", "GET"], connections=SCRAPERS, seconds=ctx.pick(10, 3)
            )

        scraper = threading.Thread(target=scrape)
        scraper.start()
        during = _sequential_cycles(server.base_url, 0, seconds=ctx.pick(8, 2), first_snapshot=first + 100_000)
        scraper.join()

        meter = load.CpuMeter({"server": server.process.pid, "postgres": ctx.cluster.server.get_pid()})
        halves: dict[str, load.LoadResult] = {}
        readers_url = f"{server.base_url}/version/strong/{seed.SINK_PREFIX.replace('.', '/')}0"  # job0 has committed

        def reads() -> None:
            halves["reads"] = load.run_wrk(readers_url, ["static", "GET"], connections=READERS, seconds=seconds)

        reader = threading.Thread(target=reads)
        reader.start()
        halves["cycle"] = load.run_wrk(
            f"{server.base_url}/", cycle_args(), connections=JOBS, threads=JOBS, seconds=seconds, meter=meter
        )
        reader.join()

    r, c, m = halves["reads"], halves["cycle"], flood["metrics"]
    outcome.figures = {
        "mixed": {"reads": r.as_json(), "cycle": c.as_json()},
        "metrics_flood": {"scrapes": m.as_json(), "next_quiet_ms": quiet, "next_during_flood_ms": during},
    }
    outcome.row(
        "mixed 200 connections: GET /version p99",
        ms(r.p99_ms),
        f"p50 {ms(r.p50_ms)}, {rps(r.rps)}",
    )
    outcome.row(
        "mixed 200 connections: next/commit p99",
        ms(c.p99_ms),
        f"p50 {ms(c.p50_ms)}, {rps(c.rps)}, {c.cycles} cycles",
    )
    shed = r.overloaded + c.overloaded
    failed = r.failed + c.failed - shed  # every answer must be 2xx or 429
    outcome.row(
        "mixed 200 connections: answers neither 2xx nor 429",
        str(failed),
        f"{shed} answered 429 (shed); reads {r.errors or 0}, cycle {c.errors or 0}",
        goal="0",
        passed=failed == 0,
    )
    worst = max(r.p99_ms, c.p99_ms)
    outcome.row("mixed 200 connections: worst p99", ms(worst), goal="≤ 1 s", passed=worst <= 1000)
    ratio = _p(during, 99) / _p(quiet, 99)
    outcome.row(
        f"next p99 during {SCRAPERS} connections scraping /metrics",
        ms(_p(during, 99)),
        f"no scrapes {ms(_p(quiet, 99))}",
        ratio,
        "≤ 1.5",
        ratio <= 1.5,
    )
    outcome.row(
        "next p50 during the flood",
        ms(_p(during, 50)),
        f"no scrapes {ms(_p(quiet, 50))}; {rps(m.rps)} scrapes",
    )
    outcome.notes.append(f"CPU cores used during the mixed phase: {c.cpu_share()}.")
    return outcome
