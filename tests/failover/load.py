"""The diamond pipeline under load over HTTP, spread over several server processes, recording what each client was
told so that a failover can be judged afterwards.

Threads: an ingest thread issues barriers sealing new root snapshots (`POST /barriers` with an Idempotency-Key,
repeated with the same key until acknowledged); one worker per job runs `next` then `commit` (a commit is repeated
until acknowledged: it is idempotent); a reader asks strong reads; the `enrich` worker, for each barrier it is
handed, lets a freshness waiter on another server wait for that barrier in its sink (`min_barrier`,
`wait_seconds`). Requests go to the servers in turn. Nothing is retried by time alone: each loop goes on once the
previous request was answered (or failed on the wire).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg

from tests.support import table_path
from tests.support.pipelines import AUDIT, CUSTOMERS, DIAMOND, DIM, ENRICHED, ORDERS, REVENUE, register_jobs

CLIENT_TIMEOUT = 60.0
WAIT_SECONDS = 20
PACE = 0.02  # seconds between a job's steps when it has nothing to do (load shaping, not synchronisation)


@dataclass
class Waiter:
    barrier: int
    asked_at: float
    answered_at: float | None = None
    status: int | None = None
    body: Any = None


@dataclass
class Record:
    statuses: Counter[int] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)  # 500s and other answers no client should get
    wire_errors: Counter[str] = field(default_factory=Counter)
    barriers: list[tuple[float, int, dict[str, int]]] = field(default_factory=list)  # acknowledged POST /barriers
    handed: dict[str, list[int]] = field(default_factory=dict)  # per job, the barriers `next` handed out, in order
    commits: list[tuple[float, str, int, dict[str, int]]] = field(default_factory=list)  # acknowledged commits
    strong: list[int] = field(default_factory=list)  # the barriers of strong reads, in order (one reader)
    waiters: list[Waiter] = field(default_factory=list)
    # (monotonic time, server, barrier) of every barrier POST /barriers acknowledged; a barrier is the database
    # clock's microseconds when issued, so one newer than a moment's wall clock was issued after it (not replayed)
    issued_at: list[tuple[float, int, int]] = field(default_factory=list)


class Load:
    """Drives the diamond against `bases` (server URLs) until `stop()`; `record` holds what clients were told."""

    def __init__(self, bases: list[str]) -> None:
        self.bases = bases
        self.record = Record()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._turn = itertools.count()
        self._clients = [httpx.Client(base_url=base, timeout=CLIENT_TIMEOUT) for base in bases]
        self._threads: list[threading.Thread] = []
        self._waiters = ThreadPoolExecutor(max_workers=6, thread_name_prefix="waiter")
        self._waiting: list[Future[None]] = []
        self._snapshot = itertools.count(1)

    # --- plumbing ---

    def call(self, method: str, path: str, *, server: int | None = None, **kwargs: Any) -> httpx.Response | None:
        index = next(self._turn) % len(self._clients) if server is None else server
        try:
            response = self._clients[index].request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            with self._lock:
                self.record.wire_errors[type(exc).__name__] += 1
            return None
        with self._lock:
            self.record.statuses[response.status_code] += 1
            if response.status_code >= 500 and response.status_code not in (503, 504):
                self.record.errors.append(f"{method} {path} → {response.status_code} {response.text[:300]}")
            if response.status_code in (503, 504) and "problem+json" not in response.headers.get("content-type", ""):
                self.record.errors.append(f"{method} {path} → {response.status_code} without a problem document")
        return response

    # --- the actors ---

    def _ingest(self) -> None:
        for n in itertools.count(1):
            if self._stop.is_set():
                return
            roots = {ORDERS: n, CUSTOMERS: n}
            key = f"ingest-{n}"
            while not self._stop.is_set():
                server = next(self._turn) % len(self._clients)
                response = self.call(
                    "POST", "/barriers", server=server, json={"root_snapshots": roots}, headers={"Idempotency-Key": key}
                )
                if response is not None and response.status_code == 201:
                    body = response.json()
                    with self._lock:
                        self.record.barriers.append((time.monotonic(), int(body["barrier"]), dict(body["sealed"])))
                        self.record.issued_at.append((time.monotonic(), server, int(body["barrier"])))
                    break
                self._stop.wait(PACE)
            self._stop.wait(0.1)

    def _work(self, job: str) -> None:
        sinks = DIAMOND[job][1]
        while not self._stop.is_set():
            response = self.call("POST", f"/jobs/{job}/barriers/next")
            if response is None or response.status_code != 200 or response.json()["action"] != "process":
                self._stop.wait(PACE)
                continue
            barrier = int(response.json()["barrier"])
            with self._lock:
                handed = self.record.handed.setdefault(job, [])
                if not handed or handed[-1] != barrier:
                    handed.append(barrier)
            if job == "enrich":
                self._wait_for(barrier)
            snapshots = {sink: next(self._snapshot) for sink in sinks}
            while not self._stop.is_set():
                server = next(self._turn) % len(self._clients)
                answer = self.call(
                    "POST", f"/jobs/{job}/barriers/{barrier}/commit", server=server, json={"snapshots": snapshots}
                )
                if answer is not None and answer.status_code == 200:
                    with self._lock:
                        self.record.commits.append((time.monotonic(), job, barrier, snapshots))
                    break
                if answer is not None and answer.status_code == 409:
                    with self._lock:
                        self.record.errors.append(f"commit {job}@{barrier} → 409 {answer.text[:300]}")
                    break
                self._stop.wait(PACE)

    def _wait_for(self, barrier: int) -> None:
        self._waiting = [f for f in self._waiting if not f.done()]
        if len(self._waiting) >= 6:
            return
        waiter = Waiter(barrier, time.monotonic())
        with self._lock:
            self.record.waiters.append(waiter)
        self._waiting.append(self._waiters.submit(self._wait, waiter))

    def _wait(self, waiter: Waiter) -> None:
        body = {
            "tables": [ENRICHED],
            "consistency": "weak",
            "min_barrier": waiter.barrier,
            "wait_seconds": WAIT_SECONDS,
        }
        response = self.call("POST", "/versions", json=body)
        waiter.answered_at = time.monotonic()
        if response is not None:
            waiter.status, waiter.body = response.status_code, response.json()

    def _read(self) -> None:
        body = {"tables": [REVENUE, AUDIT], "consistency": "strong"}
        while not self._stop.is_set():
            response = self.call("POST", "/versions", json=body)
            if response is not None and response.status_code == 200:
                with self._lock:
                    self.record.strong.append(int(response.json()["barrier"]))
            self._stop.wait(0.05)

    # --- running ---

    def register(self) -> None:
        register_jobs(self._clients[0], DIAMOND)
        for table in (ENRICHED, AUDIT, DIM, REVENUE):
            assert table_path(table)

    @contextmanager
    def running(self) -> Iterator[Load]:
        actors: list[tuple[str, Any]] = [("ingest", self._ingest), ("reader", self._read)]
        actors += [(job, lambda job=job: self._work(job)) for job in DIAMOND]
        self._threads = [threading.Thread(target=run, name=f"load-{name}", daemon=True) for name, run in actors]
        for thread in self._threads:
            thread.start()
        try:
            yield self
        finally:
            self.stop()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=CLIENT_TIMEOUT + 5)
        self._waiters.shutdown(wait=True)
        for client in self._clients:
            client.close()

    def first_write_after(self, moment: float, wall: float) -> dict[int, float]:
        """Per server, seconds from `moment` (monotonic; `wall`: the same moment by the wall clock) to the first
        barrier it issued after it (a new write committed on the new primary, not the replay of an earlier one)."""
        firsts: dict[int, float] = {}
        with self._lock:
            for at, server, barrier in self.record.issued_at:
                if barrier >= wall * 1_000_000 and server not in firsts:
                    firsts[server] = at - moment
        return firsts


def check(record: Record, database_url: str, *, recovered_at: float) -> list[str]:
    """What went wrong, judged from what clients were told and what the database (the new primary) holds.

    A waiter must be answered within 2 s of the commit that satisfies it, or, when that commit was acknowledged
    before every server could write again (`recovered_at`), within 2 s of that moment: until then a server may
    not even reach the database to re-check (a vanished host), and the NOTIFY of a commit on the old primary
    never reaches listeners of the new one."""
    problems = list(record.errors)
    # 0 barrier regressions: every barrier issued later is newer; each job is handed newer barriers only
    issued = [barrier for _, barrier, _ in record.barriers]
    if issued != sorted(set(issued)):
        problems.append(f"POST /barriers went back: {issued}")
    for job, handed in record.handed.items():
        if handed != sorted(set(handed)):
            problems.append(f"{job} was handed barriers out of order: {handed}")
    if record.strong != sorted(record.strong):
        problems.append(f"a strong read went back: {record.strong}")
    # 0 acknowledged writes lost, and no barrier with two meanings
    with psycopg.connect(database_url, autocommit=True) as conn:
        stored = {int(b) for (b,) in conn.execute("SELECT barrier FROM barriers").fetchall()}
        ranges = conn.execute(
            "SELECT t.name, r.first_barrier, r.last_barrier, r.snapshot_id FROM snapshot_ranges r"
            " JOIN tables t ON t.id = r.table_id"
        ).fetchall()
        runs = {
            (str(job), int(barrier)): (status, outputs)
            for job, barrier, status, outputs in conn.execute(
                "SELECT j.name, r.barrier, r.status, r.outputs FROM job_runs r JOIN jobs j ON j.id = r.job_id"
            ).fetchall()
        }

    def snapshot_at(table: str, barrier: int) -> int | None:
        for name, first, last, snapshot in ranges:
            if name == table and first <= barrier and (last is None or barrier <= last):
                return int(snapshot) if snapshot is not None else None
        return None

    for _, barrier, sealed in record.barriers:
        if barrier not in stored:
            problems.append(f"acknowledged barrier {barrier} was lost")
        for table, snapshot in sealed.items():
            if snapshot_at(table, barrier) != snapshot:
                problems.append(f"barrier {barrier} sealed {table}@{snapshot}, now {snapshot_at(table, barrier)}")
    for _, job, barrier, snapshots in record.commits:
        run = runs.get((job, barrier))
        if run is None or run[0] != "committed":
            problems.append(f"acknowledged commit {job}@{barrier} was lost ({run})")
        elif {k: int(v) for k, v in run[1].items()} != snapshots:
            problems.append(f"commit {job}@{barrier} acknowledged {snapshots}, now {run[1]}")
    # every freshness waiter answered ≤ 2 s after the commit that satisfies it
    committed = {(job, barrier): at for at, job, barrier, _ in record.commits}
    for waiter in record.waiters:
        done = committed.get(("enrich", waiter.barrier))
        if waiter.answered_at is None:
            problems.append(f"waiter for {waiter.barrier} got no answer")
        elif done is not None and waiter.answered_at - max(done, recovered_at) > 2.0:
            problems.append(
                f"waiter for {waiter.barrier} answered {waiter.status} {waiter.answered_at - done:.1f}s after the "
                f"commit that satisfied it ({recovered_at - done:.1f}s before the servers recovered): {waiter.body}"
            )
    return problems
