"""kill -9 of the server (PRODUCT.md guarantees 2, 4, 5 and 8): nothing acknowledged is lost, replay is exact.

Each test has its own database and real `metaservice serve` processes; a crash is SIGKILL of the server's whole
process group (uvicorn supervisor and workers), or a failpoint that SIGKILLs the server inside a transaction.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from metaservice import failpoints
from metaservice.db import migrate
from tests import support
from tests.support import table_path

pytestmark = [pytest.mark.crash, pytest.mark.xdist_group("crash")]

TIMEOUT = 30.0
ROOT, SINK = "lake.raw.events", "lake.mart.event_counts"
JOB = "counter"

StartServer = Callable[..., support.ServerProcess]


@pytest.fixture(name="crash_url")
def fx_crash_url(admin_url: str, worker_id: str) -> str:
    url = support.fresh_database(admin_url, f"ms_crash_{worker_id}")
    migrate.upgrade(url)
    return url


@pytest.fixture(name="start_server")
def fx_start_server(crash_url: str, tmp_path: Path) -> Iterator[StartServer]:
    """Start servers on the test's database (all logging to one file); every one still running is stopped after."""
    started: list[support.ServerProcess] = []

    def start(*, workers: int = 1, env: dict[str, str] | None = None) -> support.ServerProcess:
        server = support.ServerProcess(crash_url, workers=workers, env=env or {}, log_path=tmp_path / "server.log")
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


def call(
    server: support.ServerProcess,
    method: str,
    route: str,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return httpx.request(method, server.base_url + route, json=body, headers=headers, timeout=TIMEOUT)


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def register_job(server: support.ServerProcess) -> None:
    ok(call(server, "POST", f"/register/source/{JOB}/{table_path(ROOT)}"), 201)
    ok(call(server, "POST", f"/register/sink/{JOB}/{table_path(SINK)}"), 201)


def next_barrier(server: support.ServerProcess, root_snapshot: int) -> dict[str, Any]:
    decision: dict[str, Any] = ok(
        call(server, "POST", f"/jobs/{JOB}/barriers/next", {"root_snapshots": {ROOT: root_snapshot}})
    )
    return decision


def commit(server: support.ServerProcess, barrier: int, snapshot: int) -> httpx.Response:
    return call(server, "POST", f"/jobs/{JOB}/barriers/{barrier}/commit", {"snapshots": {SINK: snapshot}})


def paged(server: support.ServerProcess, route: str, key: str, cursor: str) -> list[Any]:
    """Every entry of a newest-first list, paged with `before` (the `cursor` field of the last entry so far)."""
    entries: list[Any] = []
    while True:
        params: dict[str, int] = {"limit": 1000, **({"before": entries[-1][cursor]} if entries else {})}
        page = ok(httpx.get(server.base_url + route, params=params, timeout=TIMEOUT))[key]
        if not page:
            return entries
        entries += page


def all_barriers(server: support.ServerProcess) -> list[int]:
    """Every barrier in the database, newest first."""
    return [b["barrier"] for b in paged(server, "/barriers", "barriers", "barrier")]


def runs_at(server: support.ServerProcess, barrier: int) -> list[dict[str, Any]]:
    """The job's runs that cover `barrier` (exactly one when the history is sound)."""
    runs = paged(server, f"/jobs/{JOB}/barriers", "runs", "first_barrier")
    return [r for r in runs if r["first_barrier"] <= barrier <= r["barrier"]]


def sink_ranges(server: support.ServerProcess) -> list[dict[str, Any]]:
    return paged(server, f"/tables/{table_path(SINK)}/barriers", "ranges", "first_barrier")


def holding(ranges: list[dict[str, Any]], barrier: int) -> list[int | None]:
    """The snapshot ids of the ranges that hold at `barrier` (exactly one when the history is sound)."""
    return [
        r["snapshot_id"]
        for r in ranges
        if r["first_barrier"] <= barrier and (r["last_barrier"] is None or barrier <= r["last_barrier"])
    ]


@dataclass
class Acknowledged:
    """What the server confirmed to the traffic threads before it died."""

    barriers: list[int] = field(default_factory=list)
    commits: dict[int, dict[str, int]] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    cut_off: list[str] = field(default_factory=list)  # threads that stopped because the server went away
    lock: threading.Lock = field(default_factory=threading.Lock)


def issue_barriers(base_url: str, stop: threading.Event, acked: Acknowledged) -> None:
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        while not stop.is_set():
            try:
                response = client.post("/barriers")
            except httpx.TransportError:
                with acked.lock:
                    acked.cut_off.append("barriers")
                return
            with acked.lock:
                if response.status_code == 201:
                    acked.barriers.append(response.json()["barrier"])
                else:
                    acked.unexpected.append(f"POST /barriers: {response.status_code} {response.text}")


def run_job(base_url: str, stop: threading.Event, acked: Acknowledged) -> None:
    """Process every offered barrier, writing snapshot n+1 of the sink for the n-th new root snapshot."""
    snapshot = 0
    with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
        while not stop.is_set():
            snapshot += 1
            try:
                response = client.post(f"/jobs/{JOB}/barriers/next", json={"root_snapshots": {ROOT: snapshot}})
                if response.status_code != 200:
                    with acked.lock:
                        acked.unexpected.append(f"next: {response.status_code} {response.text}")
                    return
                decision = response.json()
                if decision["action"] != "process":
                    continue
                barrier = decision["barrier"]
                with acked.lock:
                    acked.barriers.append(barrier)  # handed out, so it must be durable
                response = client.post(f"/jobs/{JOB}/barriers/{barrier}/commit", json={"snapshots": {SINK: snapshot}})
            except httpx.TransportError:
                with acked.lock:
                    acked.cut_off.append("job")
                return
            with acked.lock:
                if response.status_code == 200:
                    acked.commits[barrier] = {SINK: snapshot}
                else:
                    acked.unexpected.append(f"commit {barrier}: {response.status_code} {response.text}")


def test_nothing_acknowledged_is_lost_when_the_server_is_killed_mid_traffic(start_server: StartServer) -> None:
    server = start_server(workers=2)
    register_job(server)
    acked, stop = Acknowledged(), threading.Event()
    threads = [
        threading.Thread(target=target, args=(server.base_url, stop, acked), name=target.__name__)
        for target in (issue_barriers, issue_barriers, run_job)
    ]
    for thread in threads:
        thread.start()
    try:

        def enough_traffic() -> bool:
            with acked.lock:
                assert not acked.unexpected, acked.unexpected
                return len(acked.commits) >= 10 and len(acked.barriers) >= 40

        support.wait_until(enough_traffic, timeout=30, what="10 acknowledged commits and 40 barriers")
        server.kill()
        for thread in threads:
            thread.join(timeout=TIMEOUT)
            assert not thread.is_alive(), f"{thread.name} still runs after the crash"
    finally:
        stop.set()
    assert not acked.unexpected, acked.unexpected
    assert sorted(acked.cut_off) == ["barriers", "barriers", "job"]  # the crash hit all of them mid-traffic

    restarted = start_server()
    listed = all_barriers(restarted)
    assert listed == sorted(set(listed), reverse=True)
    missing = set(acked.barriers) - set(listed)
    assert not missing, f"{len(missing)} acknowledged barrier(s) lost: {sorted(missing)[:5]}"
    runs = paged(restarted, f"/jobs/{JOB}/barriers", "runs", "first_barrier")
    committed = {r["barrier"]: r["outputs"] for r in runs if r["status"] == "committed"}
    ranges = sink_ranges(restarted)
    for barrier, snapshots in acked.commits.items():
        assert committed.get(barrier) == snapshots, f"acknowledged commit of barrier {barrier} lost"
        assert holding(ranges, barrier) == [snapshots[SINK]]

    after = [ok(call(restarted, "POST", "/barriers"), 201)["barrier"] for _ in range(5)]
    assert after == sorted(after) and after[0] > max(listed)
    assert all_barriers(restarted)[:5] == after[::-1]


def test_barrier_in_flight_is_reoffered_after_a_crash_and_committed_once(start_server: StartServer) -> None:
    server = start_server()
    register_job(server)
    first = next_barrier(server, 3)
    assert first["action"] == "process"
    barrier = first["barrier"]
    assert first["inputs"] == {ROOT: {"snapshot_id": 3, "previous_snapshot_id": None}}
    server.kill()

    restarted = start_server()
    assert next_barrier(restarted, 4) == first  # same barrier, same inputs, though the root moved on
    assert ok(call(restarted, "GET", f"/jobs/{JOB}"))["in_flight_barrier"] == barrier
    committed = ok(commit(restarted, barrier, 1))
    assert committed == {**committed, "barrier": barrier, "status": "committed", "snapshots": {SINK: 1}}
    assert ok(commit(restarted, barrier, 1)) == committed  # a retried commit is a no-op
    conflict = commit(restarted, barrier, 2)
    assert conflict.status_code == 409 and conflict.headers["content-type"].startswith("application/problem+json")
    assert (conflict.json()["code"], conflict.json()["committed"]) == ("snapshot_conflict", {SINK: 1})
    restarted.kill()

    again = start_server()
    assert ok(commit(again, barrier, 1)) == committed  # still a no-op after another crash
    assert [(r["status"], r["outputs"]) for r in runs_at(again, barrier)] == [("committed", {SINK: 1})]
    assert holding(sink_ranges(again), barrier) == [1]
    following = next_barrier(again, 4)
    assert following["action"] == "process" and following["barrier"] > barrier
    assert following["inputs"] == {ROOT: {"snapshot_id": 4, "previous_snapshot_id": 3}}


def crash_at(
    start_server: StartServer,
    failpoint: str,
    method: str,
    route: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> None:
    """Send one request to a server armed to SIGKILL itself at `failpoint`; it dies without answering."""
    armed = start_server(env={failpoints.ENV: failpoint})  # one process: the failpoint kills the whole server
    with pytest.raises(httpx.TransportError):
        call(armed, method, route, body, headers)
    assert armed.process is not None
    assert armed.process.wait(timeout=TIMEOUT) == -signal.SIGKILL


@pytest.mark.parametrize(("failpoint", "durable"), [("before_commit", False), ("after_commit", True)])
def test_commit_retried_after_a_crash_around_the_database_commit_completes_once(
    start_server: StartServer, failpoint: str, durable: bool
) -> None:
    server = start_server()
    register_job(server)
    barrier = next_barrier(server, 1)["barrier"]
    server.stop()

    crash_at(start_server, failpoint, "POST", f"/jobs/{JOB}/barriers/{barrier}/commit", {"snapshots": {SINK: 5}})

    restarted = start_server()
    in_flight = ok(call(restarted, "GET", f"/jobs/{JOB}"))["in_flight_barrier"]
    assert in_flight == (None if durable else barrier)
    assert ok(commit(restarted, barrier, 5))["snapshots"] == {SINK: 5}  # the client's retry succeeds either way
    assert ok(commit(restarted, barrier, 5))["snapshots"] == {SINK: 5}
    assert [(r["status"], r["outputs"]) for r in runs_at(restarted, barrier)] == [("committed", {SINK: 5})]
    assert holding(sink_ranges(restarted), barrier) == [5]


@pytest.mark.parametrize(("failpoint", "durable"), [("before_commit", False), ("barrier_allocated", True)])
def test_post_barriers_retried_with_its_key_after_a_crash_issues_exactly_one(
    start_server: StartServer, failpoint: str, durable: bool
) -> None:
    """The allocation is one autocommit statement: a crash before it leaves nothing, a crash after it leaves the
    barrier, and the retry with the same Idempotency-Key issues it or returns it: one barrier either way."""
    server = start_server()
    before = [ok(call(server, "POST", "/barriers"), 201)["barrier"] for _ in range(3)]
    server.stop()

    key = {"Idempotency-Key": f"crash-{failpoint}"}
    crash_at(start_server, failpoint, "POST", "/barriers", {}, key)

    restarted = start_server()
    listed = all_barriers(restarted)
    assert len(listed) == len(before) + (1 if durable else 0)
    assert listed[len(listed) - len(before) :] == before[::-1]
    retried = ok(call(restarted, "POST", "/barriers", {}, key), 201)["barrier"]
    assert retried > max(before)
    if durable:
        assert listed[0] == retried  # the retry returned the barrier the crashed call committed
    assert all_barriers(restarted) == [retried, *before[::-1]]
    assert ok(call(restarted, "POST", "/barriers", {}, key), 201)["barrier"] == retried  # and again
