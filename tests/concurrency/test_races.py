"""Races between server processes sharing one database (PRODUCT.md guarantees 1-5 and "Scale-out").

Every test talks HTTP to two real `metaservice serve` processes on one fresh database, one of them running two
uvicorn workers, so racing requests land in three processes. Racing requests are released together: each thread
opens its connection first, then waits on one `threading.Barrier` before sending.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest

from metaservice.db import migrate
from tests import support
from tests.support import assert_problem, table_path

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("races")]

TIMEOUT = 30.0
ORDERS, MID, OUT = "lake.raw.orders", "lake.mid.orders_clean", "lake.mart.orders_out"


@dataclass(frozen=True)
class Cluster:
    """Server processes sharing the database at `url`."""

    url: str
    servers: tuple[support.ServerProcess, ...]

    def base_url(self, i: int) -> str:
        """The server for the i-th racer: racers alternate between the processes."""
        return self.servers[i % len(self.servers)].base_url

    def get(self, path: str, **params: Any) -> Any:
        response = httpx.get(self.base_url(0) + path, params=params, timeout=TIMEOUT)
        assert response.status_code == 200, response.text
        return response.json()

    def post(self, path: str, body: dict[str, Any] | None = None, *, server: int = 0) -> httpx.Response:
        return httpx.post(self.base_url(server) + path, json=body, timeout=TIMEOUT)


@dataclass(frozen=True)
class Call:
    base_url: str
    path: str
    body: dict[str, Any] | None = None
    headers: dict[str, str] | None = None


@pytest.fixture(scope="module", name="cluster")
def fx_cluster(admin_url: str, worker_id: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    url = support.fresh_database(admin_url, f"ms_races_{worker_id}")
    migrate.upgrade(url)
    logs = tmp_path_factory.mktemp("races")
    servers: list[support.ServerProcess] = []
    try:
        servers.append(support.ServerProcess(url, workers=2, log_path=logs / "two_workers.log").start())
        servers.append(support.ServerProcess(url, log_path=logs / "one_worker.log").start())
        yield Cluster(url, tuple(servers))
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(autouse=True)
def _empty_database(cluster: Cluster) -> Iterator[None]:
    yield
    support.truncate(cluster.url)


def race(calls: Sequence[Call]) -> list[httpx.Response]:
    """POST all `calls` at the same moment; the answers come back in the order of `calls`."""
    start_line = threading.Barrier(len(calls), timeout=TIMEOUT)

    def send(call: Call) -> httpx.Response:
        with httpx.Client(base_url=call.base_url, timeout=TIMEOUT) as client:
            assert client.get("/healthz").status_code == 200  # the connection is open before the start
            start_line.wait()
            return client.post(call.path, json=call.body, headers=call.headers)

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(send, calls))


def register(cluster: Cluster, job: str, *, sources: Sequence[str], sinks: Sequence[str]) -> None:
    for role, tables in (("source", sources), ("sink", sinks)):
        for table in tables:
            response = cluster.post(f"/register/{role}/{job}/{table_path(table)}")
            assert response.status_code == 201, response.text


def covering(ranges: Sequence[dict[str, Any]], barrier: int) -> list[dict[str, Any]]:
    """The snapshot ranges of a table history that hold at `barrier`."""
    return [
        r
        for r in ranges
        if r["first_barrier"] <= barrier and (r["last_barrier"] is None or barrier <= r["last_barrier"])
    ]


@dataclass(frozen=True)
class Issued:
    server: int
    sent: float
    received: float
    status: int
    barrier: int | None


def test_concurrent_barriers_from_two_servers_are_unique_and_ordered_in_real_time(cluster: Cluster) -> None:
    lanes, per_lane = 24, 10  # 240 requests; each lane is one connection sending one request after the other
    start_line = threading.Barrier(lanes, timeout=TIMEOUT)

    def lane(i: int) -> list[Issued]:
        server = i % len(cluster.servers)
        issued: list[Issued] = []
        with httpx.Client(base_url=cluster.base_url(server), timeout=TIMEOUT) as client:
            assert client.get("/healthz").status_code == 200
            start_line.wait()
            for _ in range(per_lane):
                sent = time.monotonic()
                response = client.post("/barriers")
                received = time.monotonic()
                barrier = response.json().get("barrier") if response.status_code == 201 else None
                issued.append(Issued(server, sent, received, response.status_code, barrier))
        return issued

    wall_before_us = time.time_ns() // 1000
    with ThreadPoolExecutor(max_workers=lanes) as pool:
        records = [record for issued in pool.map(lane, range(lanes)) for record in issued]
    wall_after_us = time.time_ns() // 1000

    assert Counter(r.status for r in records) == {201: lanes * per_lane}
    values = [r.barrier for r in records if r.barrier is not None]
    assert len(set(values)) == len(values) == lanes * per_lane
    assert {r.server for r in records} == set(range(len(cluster.servers)))
    # Barriers are timestamps in microseconds: max(now, previous + 1) on this machine's clock.
    assert wall_before_us - 1_000_000 <= min(values) and max(values) <= wall_after_us + 1_000_000

    listed = [b["barrier"] for b in cluster.get("/barriers", limit=1000)["barriers"]]
    assert listed == sorted(values, reverse=True)

    # Real-time order: if A was answered before B was sent, then barrier(A) < barrier(B).
    by_received = sorted(records, key=lambda r: r.received)
    answered, newest_answered, checked, overlapping = 0, 0, 0, 0
    for b in sorted(records, key=lambda r: r.sent):
        while answered < len(by_received) and by_received[answered].received < b.sent:
            newest_answered = max(newest_answered, by_received[answered].barrier or 0)
            answered += 1
        assert b.barrier is not None and b.barrier > newest_answered, (b, newest_answered)
        checked += answered
        overlapping += len(records) - 1 - answered
    assert checked > 0 and overlapping > 0  # both kinds of pairs really occurred


def test_racing_post_barriers_with_one_idempotency_key_issue_one_barrier(cluster: Cluster) -> None:
    before = len(cluster.get("/barriers")["barriers"])
    racers = 16
    key = {"Idempotency-Key": "one-call-many-retries"}
    responses = race([Call(cluster.base_url(i), "/barriers", {}, key) for i in range(racers)])
    assert [r.status_code for r in responses] == [201] * racers, [r.text for r in responses]
    answers = {r.json()["barrier"] for r in responses}
    assert len(answers) == 1, answers
    assert len(cluster.get("/barriers")["barriers"]) == before + 1


def test_exactly_one_of_many_racing_writers_claims_a_table(cluster: Cluster) -> None:
    racers = 12
    for attempt in range(3):
        table = f"lake.mart.claimed_{attempt}"
        jobs = [f"writer_{attempt}_{i}" for i in range(racers)]
        responses = race(
            [Call(cluster.base_url(i), f"/register/sink/{job}/{table_path(table)}") for i, job in enumerate(jobs)]
        )

        assert sorted(r.status_code for r in responses) == [201] + [409] * (racers - 1), [r.text for r in responses]
        winner = jobs[[r.status_code for r in responses].index(201)]
        for job, response in zip(jobs, responses, strict=True):
            if job != winner:
                body = assert_problem(response, 409, "table_has_writer")
                assert body["writer"] == winner
        info = cluster.get(f"/tables/{table_path(table)}")
        assert info["writer"] == winner and info["kind"] == "intermediate"
        assert cluster.get(f"/jobs/{winner}")["sinks"] == [table]
        for job in jobs:
            if job != winner:  # a rejected registration leaves nothing behind
                assert httpx.get(f"{cluster.base_url(1)}/jobs/{job}", timeout=TIMEOUT).status_code == 404


def assert_acyclic(graph: dict[str, Any]) -> None:
    """Kahn's algorithm over the lineage graph (tables and jobs as nodes)."""
    nodes = {n["id"] for n in graph["nodes"]}
    incoming: Counter[str] = Counter()
    outgoing: dict[str, list[str]] = {n: [] for n in nodes}
    for edge in graph["edges"]:
        outgoing[edge["from"]].append(edge["to"])
        incoming[edge["to"]] += 1
    ready = [n for n in nodes if incoming[n] == 0]
    removed = 0
    while ready:
        node = ready.pop()
        removed += 1
        for target in outgoing[node]:
            incoming[target] -= 1
            if incoming[target] == 0:
                ready.append(target)
    assert removed == len(nodes), f"the lineage graph has a cycle: {graph['edges']}"


def test_racing_registrations_never_close_a_cycle(cluster: Cluster) -> None:
    rng = random.Random(276)
    for attempt in range(8):
        x, y = f"lake.loop.x_{attempt}", f"lake.loop.y_{attempt}"
        a, b = f"loop_a_{attempt}", f"loop_b_{attempt}"
        edges = {
            (a, "source", x): f"/register/source/{a}/{table_path(x)}",
            (a, "sink", y): f"/register/sink/{a}/{table_path(y)}",
            (b, "source", y): f"/register/source/{b}/{table_path(y)}",
            (b, "sink", x): f"/register/sink/{b}/{table_path(x)}",
        }
        # Every edge is sent twice (a client retrying), in a new order each time, spread over the servers.
        order = [edge for edge in edges for _ in range(2)]
        rng.shuffle(order)
        responses = race([Call(cluster.base_url(i), edges[edge]) for i, edge in enumerate(order)])

        outcomes: dict[tuple[str, str, str], list[int]] = {edge: [] for edge in edges}
        for edge, response in zip(order, responses, strict=True):
            outcomes[edge].append(response.status_code)
            if response.status_code == 409:
                cycle = assert_problem(response, 409, "cycle")["cycle"]
                assert cycle[0] == cycle[-1] and {a, b, x, y} <= set(cycle), cycle
        rejected = [edge for edge, statuses in outcomes.items() if sorted(statuses) == [409, 409]]
        assert len(rejected) == 1, outcomes  # three edges fit; the fourth closes the loop, also when retried
        assert all(sorted(s) == [200, 201] for edge, s in outcomes.items() if edge not in rejected), outcomes

        for job in (a, b):
            info = cluster.get(f"/jobs/{job}")
            registered = {(job, "source", t) for t in info["sources"]} | {(job, "sink", t) for t in info["sinks"]}
            assert registered == {edge for edge in edges if edge[0] == job and edge not in rejected}
    assert_acyclic(cluster.get("/lineage"))


def test_racing_commits_with_different_snapshots_keep_exactly_one(cluster: Cluster) -> None:
    register(cluster, "committer", sources=[ORDERS], sinks=[OUT])
    decision = cluster.post("/jobs/committer/barriers/next", {"root_snapshots": {ORDERS: 1}}).json()
    assert decision["action"] == "process"
    barrier = decision["barrier"]

    racers = 10
    commit = f"/jobs/committer/barriers/{barrier}/commit"
    responses = race([Call(cluster.base_url(i), commit, {"snapshots": {OUT: 10 + i}}) for i in range(racers)])

    assert sorted(r.status_code for r in responses) == [200] + [409] * (racers - 1), [r.text for r in responses]
    winner = next(r.json()["snapshots"] for r in responses if r.status_code == 200)
    for response in responses:
        if response.status_code == 409:
            assert assert_problem(response, 409, "snapshot_conflict")["committed"] == winner
    ranges = cluster.get(f"/tables/{table_path(OUT)}/barriers")["ranges"]
    assert ranges == [
        {"first_barrier": barrier, "last_barrier": barrier, "snapshot_id": winner[OUT], "how": "committed"}
    ]
    runs = [r for r in cluster.get("/jobs/committer/barriers")["runs"] if r["barrier"] == barrier]
    assert [(r["status"], r["outputs"]) for r in runs] == [("committed", winner)]
    assert cluster.post(commit, {"snapshots": winner}, server=1).status_code == 200  # the winner may retry


def test_racing_identical_commits_all_succeed_and_store_one_completion(cluster: Cluster) -> None:
    register(cluster, "committer", sources=[ORDERS], sinks=[OUT])
    decision = cluster.post("/jobs/committer/barriers/next", {"root_snapshots": {ORDERS: 1}}).json()
    barrier = decision["barrier"]

    racers = 10
    commit = f"/jobs/committer/barriers/{barrier}/commit"
    responses = race([Call(cluster.base_url(i), commit, {"snapshots": {OUT: 7}}) for i in range(racers)])

    assert [r.status_code for r in responses] == [200] * racers, [r.text for r in responses]
    assert all(r.json() == {**r.json(), "status": "committed", "snapshots": {OUT: 7}} for r in responses)
    ranges = cluster.get(f"/tables/{table_path(OUT)}/barriers")["ranges"]
    assert ranges == [{"first_barrier": barrier, "last_barrier": barrier, "snapshot_id": 7, "how": "committed"}]
    runs = cluster.get("/jobs/committer/barriers")["runs"]
    assert [(r["barrier"], r["status"], r["outputs"]) for r in runs] == [(barrier, "committed", {OUT: 7})]


def test_racing_next_calls_of_one_job_start_one_run(cluster: Cluster) -> None:
    register(cluster, "busy", sources=[ORDERS], sinks=[OUT])
    racers = 16
    previous: int | None = None
    issued_before = 0
    for attempt, reported in enumerate(([5] * racers, list(range(6, 6 + racers)))):
        # First every racer reports the same root snapshot, then each reports a different one.
        calls = [
            Call(cluster.base_url(i), "/jobs/busy/barriers/next", {"root_snapshots": {ORDERS: reported[i]}})
            for i in range(racers)
        ]
        responses = race(calls)

        assert [r.status_code for r in responses] == [200] * racers, [r.text for r in responses]
        decisions = [r.json() for r in responses]
        assert all(d == decisions[0] for d in decisions), decisions
        decision = decisions[0]
        assert decision["action"] == "process"
        (offered,) = decision["inputs"].values()
        assert offered["snapshot_id"] in reported and offered["previous_snapshot_id"] == previous
        barrier = decision["barrier"]
        runs = cluster.get("/jobs/busy/barriers")["runs"]
        assert [r["barrier"] for r in runs if r["status"] == "in_flight"] == [barrier]
        assert cluster.get("/jobs/busy")["in_flight_barrier"] == barrier
        issued = len(cluster.get("/barriers")["barriers"]) - issued_before
        # Round 1 (one snapshot): one barrier, not one per racer. Round 2: a barrier seals a snapshot no barrier
        # sealed yet, so racers with different snapshots may each seal theirs; never more than that.
        assert 1 <= issued <= len(set(reported)), issued
        issued_before += issued

        response = cluster.post(f"/jobs/busy/barriers/{barrier}/commit", {"snapshots": {OUT: attempt}})
        assert response.status_code == 200, response.text
        previous = offered["snapshot_id"]


def test_two_jobs_racing_on_a_new_root_snapshot_share_one_barrier(cluster: Cluster) -> None:
    sinks = {"left": "lake.mart.left", "right": "lake.mart.right"}
    for job, sink in sinks.items():
        register(cluster, job, sources=[ORDERS], sinks=[sink])
    jobs = list(sinks)
    racers, rounds = 8, 5
    issued: dict[int, int] = {}
    for snapshot in range(1, rounds + 1):
        calls = [
            Call(cluster.base_url(i), f"/jobs/{jobs[i % 2]}/barriers/next", {"root_snapshots": {ORDERS: snapshot}})
            for i in range(racers)
        ]
        responses = race(calls)

        assert [r.status_code for r in responses] == [200] * racers, [r.text for r in responses]
        decisions = [r.json() for r in responses]
        assert {d["action"] for d in decisions} == {"process"}
        assert len({d["barrier"] for d in decisions}) == 1, decisions  # the same root snapshot, the same barrier
        expected_inputs = {ORDERS: {"snapshot_id": snapshot, "previous_snapshot_id": snapshot - 1 or None}}
        assert all(d["inputs"] == expected_inputs for d in decisions), decisions
        barrier = decisions[0]["barrier"]
        issued[snapshot] = barrier
        for job, sink in sinks.items():
            response = cluster.post(f"/jobs/{job}/barriers/{barrier}/commit", {"snapshots": {sink: snapshot}})
            assert response.status_code == 200, response.text

    listed = [b["barrier"] for b in cluster.get("/barriers")["barriers"]]
    assert listed == sorted(issued.values(), reverse=True)  # one barrier per new root snapshot, no more
    ranges = cluster.get(f"/tables/{table_path(ORDERS)}/barriers")["ranges"]
    for snapshot, barrier in issued.items():
        (holding,) = covering(ranges, barrier)
        assert holding["snapshot_id"] == snapshot and holding["first_barrier"] == barrier


@dataclass
class RowHold:
    """A transaction holding a job's row (`blocker`), a monitor connection and threads for requests meanwhile."""

    monitor: psycopg.Connection[Any]
    blocker: psycopg.Connection[Any]
    pool: ThreadPoolExecutor

    def wait_for_waiters(self, count: int, *, what: str, unless: Callable[[], bool] = lambda: False) -> None:
        """Until `count` server transactions wait for a lock (or `unless` holds): decided by PostgreSQL's own view."""
        support.wait_until(lambda: unless() or lock_waiters(self.monitor) >= count, timeout=3, what=what)


@contextmanager
def holding_job_row(cluster: Cluster, job: str, *, threads: int) -> Iterator[RowHold]:
    """Hold `job`'s row lock (FOR UPDATE, uncommitted) while the body sends requests: every step of the job plans
    and then waits to write. The body ends the hold with `blocker.commit()` or `blocker.rollback()`."""
    with (
        psycopg.connect(cluster.url, autocommit=True) as monitor,
        psycopg.connect(cluster.url) as blocker,
        ThreadPoolExecutor(max_workers=threads) as pool,
    ):
        blocker.execute("SELECT 1 FROM jobs WHERE name = %s FOR UPDATE", (job,))
        yield RowHold(monitor, blocker, pool)


def lock_waiters(monitor: psycopg.Connection[Any]) -> int:
    """Server transactions on this database that wait for a lock right now."""
    row = monitor.execute(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name = 'metaservice'"
    ).fetchone()
    return int(row[0]) if row else 0


def test_downstream_next_racing_its_upstream_writer_step_succeeds(cluster: Cluster) -> None:
    """`next` of a downstream job settles its lagging upstream writer while the writer itself takes a step. Both
    planned on the same state of the writer; both must succeed, whichever write the database takes first (the
    other one's compare-and-set fails and it plans again on the new state).

    The interleaving is made certain by holding the writer's job row: both steps have planned and wait to write.
    """
    register(cluster, "up", sources=[ORDERS], sinks=[MID])
    register(cluster, "down", sources=[MID], sinks=[OUT])
    first = cluster.post("/jobs/up/barriers/next", {"root_snapshots": {ORDERS: 1}}).json()["barrier"]
    for job, sink in (("up", MID), ("down", OUT)):
        decision = cluster.post(f"/jobs/{job}/barriers/next").json()
        assert (decision["action"], decision["barrier"]) == ("process", first), decision
        response = cluster.post(f"/jobs/{job}/barriers/{first}/commit", {"snapshots": {sink: 1}})
        assert response.status_code == 200, response.text
    newer = cluster.post("/barriers").json()["barrier"]  # the root did not change: nothing to do for either job

    with holding_job_row(cluster, "up", threads=2) as hold:
        up = hold.pool.submit(cluster.post, "/jobs/up/barriers/next", {"root_snapshots": {ORDERS: 1}}, server=0)
        hold.wait_for_waiters(1, what="the writer's step to wait to write")
        down = hold.pool.submit(cluster.post, "/jobs/down/barriers/next", None, server=1)
        hold.wait_for_waiters(2, what="the downstream step to wait to write", unless=down.done)
        hold.blocker.rollback()
        responses = {"up": up.result(timeout=TIMEOUT), "down": down.result(timeout=TIMEOUT)}

    for job, response in responses.items():
        assert response.status_code == 200, f"{job}: {response.text}"
        assert response.json()["action"] == "idle", response.json()
        info = cluster.get(f"/jobs/{job}")
        assert (info["last_barrier"], info["in_flight_barrier"]) == (newer, None)
    for job in responses:  # one idle step through the new barrier, after the committed first one
        runs = cluster.get(f"/jobs/{job}/barriers")["runs"]
        assert [(r["first_barrier"], r["barrier"], r["status"]) for r in runs] == [
            (newer, newer, "idle"),
            (first, first, "committed"),
        ]


def test_a_next_that_plans_again_seals_a_root_reported_while_it_waited(cluster: Cluster) -> None:
    """`next` with `root_snapshots` seals them in its allocation call and plans on that barrier. When its write
    loses the compare-and-set (another step changed the job), it plans again from scratch; by then another caller
    may have reported a newer snapshot of the root. The new plan must seal that one too, as a `next` without a
    report would, instead of handing out the barrier of the first attempt with the older snapshot.

    The interleaving is made certain by holding the job's row: the step has sealed, planned and waits to write;
    the newer report goes in; the holder bumps the job's version, as a concurrent step of the job would.
    """
    register(cluster, "solo", sources=[ORDERS], sinks=[OUT])
    with holding_job_row(cluster, "solo", threads=1) as hold:
        step = hold.pool.submit(cluster.post, "/jobs/solo/barriers/next", {"root_snapshots": {ORDERS: 1}}, server=1)
        hold.wait_for_waiters(1, what="the job's step to wait to write")
        (first,) = [b["barrier"] for b in cluster.get("/barriers")["barriers"]]  # sealed snapshot 1

        reported = cluster.post(f"/tables/{table_path(ORDERS)}/snapshots", {"snapshot_id": 2})
        assert reported.status_code == 200, reported.text
        hold.blocker.execute("UPDATE jobs SET version = version + 1 WHERE name = %s", ("solo",))
        hold.blocker.commit()
        response = step.result(timeout=TIMEOUT)

    assert response.status_code == 200, response.text
    decision = response.json()
    assert decision["action"] == "process", decision
    assert decision["barrier"] > first, decision
    assert decision["inputs"] == {ORDERS: {"snapshot_id": 2, "previous_snapshot_id": None}}, decision
    ranges = cluster.get(f"/tables/{table_path(ORDERS)}/barriers")["ranges"]
    (holding,) = covering(ranges, decision["barrier"])
    assert (holding["snapshot_id"], holding["first_barrier"]) == (2, decision["barrier"])
    info = cluster.get("/jobs/solo")
    assert info["in_flight_barrier"] == decision["barrier"]
