"""Load generation with `wrk` (C, epoll: not the bottleneck) and CPU accounting of every process involved.

`wrk` runs `bench/wrk.lua`, which either repeats one request or plays one job per connection through the
next → commit cycle, and prints its summary as JSON. While it runs, `CpuMeter` samples the CPU time of the
server processes and the PostgreSQL backends, so each result says where the machine's two cores went.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

SCRIPT = Path(__file__).resolve().parent / "wrk.lua"
_MARK = "WRK_JSON "


@dataclass(frozen=True)
class LoadResult:
    """One wrk run: throughput, latency percentiles (ms), errors, and CPU seconds per process group."""

    connections: int
    seconds: float
    requests: int
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    errors: dict[str, int]
    cycles: int = 0
    waits: int = 0
    overloaded: int = 0  # 429 answers (shed at once), also counted in errors["status"]
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    # seconds the named process trees' threads were runnable but waiting for a core (CpuMeter.waiting)
    cpu_wait_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return sum(self.errors.values())

    def cpu_share(self) -> dict[str, float]:
        """CPU used per group, in cores (CPU seconds / wall seconds)."""
        return {k: round(v / self.seconds, 2) for k, v in self.cpu_seconds.items()}

    def wait_share(self) -> dict[str, float]:
        """Time each group's threads stood runnable waiting for a core, in cores (seconds / wall seconds)."""
        return {k: round(v / self.seconds, 2) for k, v in self.cpu_wait_seconds.items()}

    def as_json(self) -> dict[str, Any]:
        return asdict(self) | {"cpu_cores": self.cpu_share(), "cpu_wait_cores": self.wait_share()}


def ensure_wrk() -> str:
    """The path of `wrk`; installs the Debian package when it is missing and we may (root with apt-get)."""
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print("bench: `wrk` is missing; installing it with `apt-get install -y wrk` ...", file=sys.stderr)
        subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=False, stdout=subprocess.DEVNULL)
        found = shutil.which("wrk")
        if found:
            return found
    raise SystemExit(
        "bench: the load generator `wrk` is not installed and could not be installed here.\n"
        "Install it (Debian/Ubuntu: `sudo apt-get install wrk`, macOS: `brew install wrk`) and run again."
    )


def run_wrk(
    url: str,
    script_args: Sequence[str],
    *,
    connections: int,
    seconds: int,
    threads: int | None = None,
    meter: CpuMeter | None = None,
    headers: Mapping[str, str] | None = None,
) -> LoadResult:
    """Run wrk against `url` for `seconds` with `connections` keep-alive connections; one request in flight each.
    `headers` go with every request (a bearer token, say)."""
    threads = threads or min(connections, 2)
    command = [
        ensure_wrk(),
        f"-t{threads}",
        f"-c{connections}",
        f"-d{seconds}s",
        "--timeout",
        "10s",
        *(arg for name, value in (headers or {}).items() for arg in ("-H", f"{name}: {value}")),
        "-s",
        str(SCRIPT),
        url,
        "--",
        *script_args,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    if meter is not None:
        meter.start()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    cpu = meter.stop() if meter is not None else {}
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu["wrk"] = round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 2)
    if "machine" in cpu:
        ours = sum(v for k, v in cpu.items() if k not in ("machine", "stolen"))
        cpu["others"] = round(max(0.0, cpu["machine"] - ours), 2)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(_MARK)), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{done.stdout}\n{done.stderr}")
    raw = json.loads(line[len(_MARK) :])
    elapsed = raw["duration_us"] / 1e6
    latency = raw["latency_us"]
    return LoadResult(
        connections=connections,
        seconds=round(elapsed, 2),
        requests=raw["requests"],
        rps=round(raw["requests"] / elapsed, 1),
        p50_ms=latency["p50"] / 1000,
        p90_ms=latency["p90"] / 1000,
        p99_ms=latency["p99"] / 1000,
        max_ms=latency["max"] / 1000,
        mean_ms=round(latency["mean"] / 1000, 3),
        errors={k: v for k, v in raw["errors"].items() if v}
        | ({"failures": raw["failures"]} if raw["failures"] else {}),
        cycles=raw["cycles"],
        waits=raw["waits"],
        overloaded=raw.get("overloaded", 0),
        cpu_seconds=cpu,
        cpu_wait_seconds=dict(meter.waiting) if meter is not None else {},
    )


def sequential(
    url: str, *, seconds: float, min_requests: int = 3, max_requests: int = 1000, meter: CpuMeter | None = None
) -> LoadResult:
    """One client, one request at a time, for `seconds` (at least `min_requests`): latency of slow, large answers.

    For answers of megabytes that take seconds, where a fixed-time wrk phase would complete too few requests.
    With `meter`, `cpu_seconds` holds what its process trees used over the requests (the client is not counted).
    """
    latencies: list[float] = []
    errors = 0
    with httpx.Client(timeout=120) as http:
        started = time.perf_counter()
        if meter is not None:
            meter.start()
        while len(latencies) < max_requests and (
            len(latencies) < min_requests or time.perf_counter() - started < seconds
        ):
            t0 = time.perf_counter()
            response = http.get(url)
            latencies.append((time.perf_counter() - t0) * 1000)
            errors += response.status_code >= 400
        cpu = meter.stop() if meter is not None else {}
        elapsed = time.perf_counter() - started
    cuts = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else latencies * 99
    return LoadResult(
        connections=1,
        seconds=round(elapsed, 2),
        requests=len(latencies),
        rps=round(len(latencies) / elapsed, 1),
        p50_ms=round(cuts[49], 3),
        p90_ms=round(cuts[89], 3),
        p99_ms=round(cuts[98], 3),
        max_ms=round(max(latencies), 3),
        mean_ms=round(statistics.fmean(latencies), 3),
        errors={"status": errors} if errors else {},
        cpu_seconds=cpu,
        cpu_wait_seconds=dict(meter.waiting) if meter is not None else {},
    )


def _tree(pid: int) -> list[psutil.Process]:
    """The process `pid` and its descendants now (none when it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


class CpuMeter:
    """CPU seconds used between `start()` and `stop()` by named process trees (each root and its children).

    `machine` is every core's busy time over the same interval, and `others` what processes outside the
    named trees and wrk used: on a shared machine that is the noise the figures carry. `stolen` is time the
    hypervisor gave this VM's vCPUs to someone else: no process of ours could run then, and no process's CPU
    time shows it, so it is kept out of `machine`.
    """

    def __init__(self, roots: Mapping[str, int]) -> None:
        self.roots = dict(roots)
        self._start: dict[str, dict[int, float]] = {}
        self._machine = self._stolen = 0.0
        self._waits: dict[str, dict[tuple[int, int], float]] = {}
        # After `stop()`: seconds each tree's threads were runnable but waiting for a core (summed over threads:
        # 0.3 per second of wall time means a thread of the tree stood in a run queue 30 % of the time).
        self.waiting: dict[str, float] = {}

    def _sample_waits(self) -> dict[str, dict[tuple[int, int], float]]:
        """Per thread of each tree, the seconds it spent runnable in a run queue since it started: the second
        field of /proc/<pid>/task/<tid>/schedstat (the scheduler's own account, not an estimate)."""
        out: dict[str, dict[tuple[int, int], float]] = {}
        for name, pid in self.roots.items():
            waits: dict[tuple[int, int], float] = {}
            for proc in _tree(pid):
                try:
                    tids = os.listdir(f"/proc/{proc.pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    try:
                        with open(f"/proc/{proc.pid}/task/{tid}/schedstat") as f:
                            waits[(proc.pid, int(tid))] = int(f.read().split()[1]) / 1e9
                    except (OSError, IndexError, ValueError):
                        continue
            out[name] = waits
        return out

    def _sample(self) -> dict[str, dict[int, float]]:
        out: dict[str, dict[int, float]] = {}
        for name, pid in self.roots.items():
            times: dict[int, float] = {}
            for proc in _tree(pid):
                try:
                    t = proc.cpu_times()
                    times[proc.pid] = t.user + t.system
                except psutil.NoSuchProcess:
                    continue
            out[name] = times
        return out

    @staticmethod
    def _busy() -> tuple[float, float]:
        """(busy, stolen) CPU seconds of all cores since boot. Linux counts guest time inside user time."""
        t = psutil.cpu_times()
        idle = ("idle", "iowait", "steal", "guest", "guest_nice")
        return float(sum(getattr(t, f) for f in t._fields if f not in idle)), float(getattr(t, "steal", 0.0))

    def start(self) -> None:
        self._start = self._sample()
        self._waits = self._sample_waits()
        self._machine, self._stolen = self._busy()

    def stop(self) -> dict[str, float]:
        end = self._sample()
        used = {
            name: round(sum(v - self._start.get(name, {}).get(pid, 0.0) for pid, v in times.items()), 2)
            for name, times in end.items()
        }
        self.waiting = {
            name: round(sum(v - self._waits.get(name, {}).get(key, 0.0) for key, v in waits.items()), 2)
            for name, waits in self._sample_waits().items()
        }
        busy, stolen = self._busy()
        used["machine"] = round(busy - self._machine, 2)
        used["stolen"] = round(stolen - self._stolen, 3)
        return used
