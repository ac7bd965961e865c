"""Open-loop load: requests start on a fixed schedule, whatever the server's answers (not closed-loop like wrk).

A closed loop slows down with the server and so hides queueing (coordinated omission). Here cycle k of the
next → commit cycle is due at `k / rate` seconds, played by job `k mod jobs`; its `next` latency counts from the
moment it was due, so a late start (the job's previous cycle still running, the client's own queue) is charged to
the latency as a user would see it. The commit follows the answer at once and counts from when it was sent.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class OpenLoopResult:
    rate: float  # cycles per second asked for
    seconds: float
    cycles: int
    requests: int
    achieved_rate: float  # cycles completed per second
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    non_process: int

    def as_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _cuts(latencies: list[float]) -> list[float]:
    return statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else latencies * 99


async def _run(
    base_url: str, *, jobs: int, rate: float, seconds: float, first_snapshot: int, prefixes: tuple[str, str, str]
) -> OpenLoopResult:
    job_prefix, root_prefix, sink_prefix = prefixes
    latencies: list[float] = []
    errors = non_process = cycles = 0
    locks = [asyncio.Lock() for _ in range(jobs)]
    snapshots = [first_snapshot] * jobs
    # uvicorn closes a connection idle for 5 s (its default keep-alive); the client drops its own idle ones sooner,
    # or it may send a request on a connection the server is closing at that moment (httpx.ReadError)
    limits = httpx.Limits(max_connections=jobs, max_keepalive_connections=jobs, keepalive_expiry=2.0)
    async with httpx.AsyncClient(base_url=base_url, timeout=30, limits=limits) as http:

        async def cycle(k: int, due: float) -> None:
            nonlocal errors, non_process, cycles
            i = k % jobs
            async with locks[i]:  # one cycle of a job at a time, as a real job runs
                snapshots[i] += 1
                body = {"root_snapshots": {f"{root_prefix}{i}": snapshots[i]}}
                answer = await http.post(f"/jobs/{job_prefix}{i}/barriers/next", json=body)
                latencies.append((time.perf_counter() - due) * 1000)
                if answer.status_code != 200:
                    errors += 1
                    return
                plan = answer.json()
                if plan["action"] != "process":
                    non_process += 1
                    return
                # the sink is written from the input snapshot the barrier was planned with, as a real job does
                snapshot = plan["inputs"][f"{root_prefix}{i}"]["snapshot_id"]
                sent = time.perf_counter()
                done = await http.post(
                    f"/jobs/{job_prefix}{i}/barriers/{plan['barrier']}/commit",
                    json={"snapshots": {f"{sink_prefix}{i}": snapshot}},
                )
                latencies.append((time.perf_counter() - sent) * 1000)
                if done.status_code != 200:
                    errors += 1
                    return
                cycles += 1

        started = time.perf_counter()
        total = int(rate * seconds)
        tasks = []
        for k in range(total):
            due = started + k / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule itself, not synchronisation
            tasks.append(asyncio.create_task(cycle(k, due)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - started
    cuts = _cuts(latencies)
    return OpenLoopResult(
        rate=rate,
        seconds=round(elapsed, 2),
        cycles=cycles,
        requests=len(latencies),
        achieved_rate=round(cycles / elapsed, 1),
        p50_ms=round(cuts[49], 3),
        p90_ms=round(cuts[89], 3),
        p99_ms=round(cuts[98], 3),
        max_ms=round(max(latencies), 3),
        errors=errors,
        non_process=non_process,
    )


def run(
    base_url: str, *, jobs: int, rate: float, seconds: float, first_snapshot: int, prefixes: tuple[str, str, str]
) -> OpenLoopResult:
    """Play `rate` cycles per second for `seconds` over `jobs` jobs; latency of every request (ms)."""
    return asyncio.run(
        _run(base_url, jobs=jobs, rate=rate, seconds=seconds, first_snapshot=first_snapshot, prefixes=prefixes)
    )
