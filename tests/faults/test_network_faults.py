"""Network faults between the server and PostgreSQL, and database timeouts: 503 with Retry-After, never a 500 or a hang.

The server reaches PostgreSQL through `FaultProxy`, a TCP proxy written for these tests, which drops, refuses,
delays, partitions or cuts connections on command. Lock waits are provoked from a separate psycopg connection
that holds a lock in an open transaction.

What PostgreSQL's timeouts can and cannot do: `statement_timeout` and `lock_timeout` are measured inside
PostgreSQL, so they bound lock waits and slow statements, but not time spent on the network. Added latency
makes answers slower, never wrong; a partition (bytes silently lost) is bounded only by a deadline the server
keeps itself.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest

from spark_client import MetaServiceClient, RetryPolicy
from tests import support
from tests.faults.conftest import Servers
from tests.faults.proxy import FaultProxy
from tests.support import table_path

pytestmark = [pytest.mark.crash, pytest.mark.xdist_group("faults")]

STATEMENT_TIMEOUT_MS = 200
LOCK_TIMEOUT_MS = 200
CLIENT_TIMEOUT = 15.0
# A request whose database round trips are lost must end, as a 503, within this many seconds: the server's
# transaction deadline plus room for the answer.
TRANSACTION_DEADLINE = 4.0
PARTITION_ANSWER_BOUND = 8.0
LOAD_THREADS = 8
ROOT = "lake.raw.src"
PATIENT = RetryPolicy(attempts=10, deadline=20, initial_backoff=0.05, max_backoff=1.0)


def assert_unavailable(response: httpx.Response, *, cause: str | None = None) -> None:
    """A 503 problem document with Retry-After; `cause` names the database error behind it."""
    assert response.status_code == 503, f"{response.request.method} {response.request.url}: {response.text}"
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    assert int(response.headers["retry-after"]) >= 1
    body = response.json()
    assert body["status"] == 503 and body["code"] == "unavailable", body
    if cause is not None:
        assert cause in body["detail"], body


def wait_for_success(api: httpx.Client, *, timeout: float = 20) -> None:
    """The server answers normally again, without a restart."""

    def ok() -> bool:
        try:
            return api.get("/jobs", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    support.wait_until(ok, timeout=timeout, what="the server to recover on its own")


@pytest.fixture(scope="module", name="proxied")
def fx_proxied(servers: Servers, proxy: FaultProxy, faults_database: str) -> support.ServerProcess:
    """A server that reaches PostgreSQL through the proxy, with a small statement timeout."""
    return servers.start(
        proxy.route(faults_database),
        env={
            "METASERVICE_STATEMENT_TIMEOUT_MS": str(STATEMENT_TIMEOUT_MS),
            "METASERVICE_POOL_SIZE": "4",
            "METASERVICE_MAX_OVERFLOW": "4",
            "METASERVICE_TRANSACTION_DEADLINE_SECONDS": str(TRANSACTION_DEADLINE),
        },
    )


@pytest.fixture(scope="module", name="lock_limited")
def fx_lock_limited(servers: Servers, faults_database: str) -> support.ServerProcess:
    """A server connected directly, with a small lock timeout (and the default statement timeout)."""
    return servers.start(faults_database, env={"METASERVICE_LOCK_TIMEOUT_MS": str(LOCK_TIMEOUT_MS)})


@pytest.fixture(name="api")
def fx_api(proxied: support.ServerProcess, proxy: FaultProxy, faults_database: str) -> Iterator[httpx.Client]:
    """A client of the proxied server; the proxy is healed and the tables emptied after each test."""
    with httpx.Client(base_url=proxied.base_url, timeout=CLIENT_TIMEOUT) as api:
        yield api
        proxy.heal()
        wait_for_success(api)
    support.truncate(faults_database)


def settled(api: httpx.Client, method: str, url: str, body: object = None) -> httpx.Response:
    """The first answer that is not a 503. For steps around the fault: with a 200 ms statement timeout, a busy
    machine may time a statement out now and then, and that is not what those steps test."""
    answers: list[httpx.Response] = []

    def answered() -> bool:
        answers.append(api.request(method, url, json=body))
        return answers[-1].status_code != 503

    support.wait_until(answered, timeout=30, what=f"{method} {url} to be answered without 503")
    return answers[-1]


def register(api: httpx.Client, job: str, sources: list[str], sinks: list[str]) -> None:
    for role, tables in (("source", sources), ("sink", sinks)):
        for table in tables:
            response = settled(api, "POST", f"/register/{role}/{job}/{table_path(table)}")
            assert response.status_code in (200, 201), response.text


# --- connection drops under load ------------------------------------------------------------------------------


@dataclass
class Answer:
    method: str
    path: str
    status: int | None
    seconds: float
    at: float
    error: str | None = None
    content_type: str = ""
    retry_after: str | None = None
    code: str | None = None


@dataclass
class Load:
    """Threads that run one job each through next / commit / versions / inspection, recording every answer."""

    base_url: str
    answers: list[Answer] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _roots: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def successes_since(self, moment: float) -> int:
        with self._lock:
            return sum(1 for a in self.answers if a.at >= moment and a.status is not None and a.status < 300)

    def count(self, status: int) -> int:
        with self._lock:
            return sum(1 for a in self.answers if a.status == status)

    def run(self, job: str, sink: str) -> None:
        pending: tuple[int, int] | None = None  # a commit answered 503: repeat it (commit is idempotent)
        snapshots = itertools.count(1)
        with httpx.Client(base_url=self.base_url, timeout=CLIENT_TIMEOUT) as api:
            for step in itertools.count():
                if self.stop.is_set():
                    return
                if pending is not None:
                    barrier, snapshot = pending
                    body = {"snapshots": {sink: snapshot}}
                    if self._send(api, "POST", f"/jobs/{job}/barriers/{barrier}/commit", body) == 200:
                        pending = None
                    continue
                with self._lock:
                    root = next(self._roots)
                body = {"root_snapshots": {ROOT: root}}
                answer = self._send(api, "POST", f"/jobs/{job}/barriers/next", body, keep=True)
                if isinstance(answer, dict) and answer.get("action") == "process":
                    pending = (int(answer["barrier"]), next(snapshots))
                    continue
                if step % 3 == 0:
                    self._send(api, "POST", "/versions", {"tables": [sink], "consistency": "strong"})
                elif step % 3 == 1:
                    self._send(api, "GET", f"/jobs/{job}")
                else:
                    self._send(api, "POST", "/barriers", {})

    def _send(
        self, api: httpx.Client, method: str, url: str, body: object = None, *, keep: bool = False
    ) -> int | dict[str, Any] | None:
        started = time.monotonic()
        try:
            response = api.request(method, url, json=body)
        except httpx.HTTPError as exc:
            self._record(Answer(method, url, None, time.monotonic() - started, time.monotonic(), error=repr(exc)))
            return None
        code = None
        if response.headers.get("content-type", "").startswith("application/problem+json"):
            code = response.json().get("code")
        self._record(
            Answer(
                method,
                url,
                response.status_code,
                time.monotonic() - started,
                time.monotonic(),
                content_type=response.headers.get("content-type", ""),
                retry_after=response.headers.get("retry-after"),
                code=code,
            )
        )
        if keep and response.status_code == 200:
            return dict(response.json())
        return response.status_code

    def _record(self, answer: Answer) -> None:
        with self._lock:
            self.answers.append(answer)


def test_dropped_connections_under_load_give_503_with_retry_after_and_heal_on_their_own(
    api: httpx.Client, proxy: FaultProxy, proxied: support.ServerProcess
) -> None:
    jobs = {f"load{i}": f"lake.mid.out{i}" for i in range(LOAD_THREADS)}
    for job, sink in jobs.items():
        register(api, job, [ROOT], [sink])
    load = Load(proxied.base_url)
    threads = [threading.Thread(target=load.run, args=(job, sink), daemon=True) for job, sink in jobs.items()]
    for thread in threads:
        thread.start()
    try:
        support.wait_until(lambda: load.successes_since(0) >= 40, timeout=20, what="traffic before the fault")
        proxy.refuse()
        dropped = proxy.drop()
        support.wait_until(lambda: load.count(503) >= 2 * LOAD_THREADS, timeout=20, what="503s while refused")
        proxy.heal()
        healed = time.monotonic()
        support.wait_until(
            lambda: load.successes_since(healed) >= 5 * LOAD_THREADS, timeout=30, what="recovery after the heal"
        )
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(timeout=2 * CLIENT_TIMEOUT)
    assert not any(thread.is_alive() for thread in threads)

    answers = list(load.answers)
    hangs = [a for a in answers if a.status is None]
    assert not hangs, f"requests without an answer within {CLIENT_TIMEOUT}s: {hangs[:5]}"
    # 504 outcome_unknown: a connection dropped while a write was committing (only writes may say so)
    unexpected = [
        a
        for a in answers
        if a.status not in (200, 201, 503)
        and not (a.status == 404 and a.code == "no_consistent_version")
        and not (a.status == 504 and a.code == "outcome_unknown" and a.method == "POST")
    ]
    assert not unexpected, f"answers other than success, 503 or 504 for a write: {unexpected[:5]}"
    for answer in (a for a in answers if a.status in (503, 504)):
        assert answer.content_type.startswith("application/problem+json"), answer
        assert answer.retry_after is not None and int(answer.retry_after) >= 1, answer
        assert answer.code == ("unavailable" if answer.status == 503 else "outcome_unknown"), answer
    print(
        f"load: {len(answers)} answers, {load.count(503)} x 503, {load.count(504)} x 504, "
        f"{dropped} connection(s) dropped"
    )


# --- latency ---------------------------------------------------------------------------------------------------


def test_latency_beyond_the_statement_timeout_slows_answers_but_never_breaks_them(
    api: httpx.Client, proxy: FaultProxy
) -> None:
    register(api, "slow", [ROOT], ["lake.mid.slow"])
    decision = settled(api, "POST", "/jobs/slow/barriers/next", {"root_snapshots": {ROOT: 1}}).json()
    commit = {"snapshots": {"lake.mid.slow": 1}}
    assert settled(api, "POST", f"/jobs/slow/barriers/{decision['barrier']}/commit", commit).status_code == 200
    per_hop = 1.25 * STATEMENT_TIMEOUT_MS / 1000
    proxy.latency(per_hop)
    for method, url, body in (
        ("GET", "/jobs/slow", None),
        ("POST", "/versions", {"tables": ["lake.mid.slow"], "consistency": "strong"}),
    ):
        started = time.monotonic()
        response = api.request(method, url, json=body)  # a client timeout here is a hang: the test fails
        elapsed = time.monotonic() - started
        assert elapsed > 2 * per_hop, "the proxy did not delay the round trips"
        if response.status_code != 503:
            assert response.status_code == 200, response.text
        else:
            assert_unavailable(response)
    proxy.heal()
    assert settled(api, "POST", "/versions", {"tables": ["lake.mid.slow"]}).json()["versions"] == {"lake.mid.slow": 1}


# --- timeouts inside PostgreSQL -------------------------------------------------------------------------------


def test_statement_timeout_hit_gives_503_and_clears_when_the_lock_is_released(
    api: httpx.Client, faults_database: str
) -> None:
    with psycopg.connect(faults_database) as blocker:  # a transaction stays open until rollback
        blocker.execute("LOCK TABLE barriers IN ACCESS EXCLUSIVE MODE")
        for method, url in (("GET", "/barriers"), ("POST", "/barriers")):
            started = time.monotonic()
            response = api.request(method, url)
            assert_unavailable(response, cause="QueryCanceled")
            assert time.monotonic() - started < 5, "the statement timeout did not bound the wait"
        blocker.rollback()
    assert settled(api, "POST", "/barriers").status_code == 201
    assert len(settled(api, "GET", "/barriers").json()["barriers"]) == 1


def test_lock_timeout_on_the_barrier_clock_gives_503_and_succeeds_after_release(
    lock_limited: support.ServerProcess, faults_database: str
) -> None:
    with httpx.Client(base_url=lock_limited.base_url, timeout=CLIENT_TIMEOUT) as api:
        register(api, "clocked", [ROOT], ["lake.mid.clocked"])
        try:
            with psycopg.connect(faults_database) as blocker:
                blocker.execute("SELECT last_barrier FROM barrier_clock WHERE id = 1 FOR UPDATE")
                started = time.monotonic()
                assert_unavailable(api.post("/barriers"), cause="LockNotAvailable")
                assert time.monotonic() - started < 5, "the lock timeout did not bound the wait"
                # a `next` that must issue a barrier waits on the same lock
                next_body = {"root_snapshots": {ROOT: 1}}
                assert_unavailable(api.post("/jobs/clocked/barriers/next", json=next_body), cause="LockNotAvailable")
                blocker.rollback()
            issued = settled(api, "POST", "/barriers")
            assert issued.status_code == 201, issued.text
            decision = settled(api, "POST", "/jobs/clocked/barriers/next", {"root_snapshots": {ROOT: 1}}).json()
            assert decision["action"] == "process" and decision["barrier"] > issued.json()["barrier"]
            barriers = settled(api, "GET", "/barriers").json()["barriers"]
            assert len(barriers) == 2, "a timed-out attempt left a barrier behind"
        finally:
            support.truncate(faults_database)


# --- a connection lost while COMMIT is in flight ---------------------------------------------------------------


def test_connection_lost_during_commit_of_an_idempotent_call_has_exactly_one_effect(
    api: httpx.Client, proxy: FaultProxy, proxied: support.ServerProcess
) -> None:
    register(api, "cut", [ROOT], ["lake.mid.cut"])
    decision = settled(api, "POST", "/jobs/cut/barriers/next", {"root_snapshots": {ROOT: 1}}).json()
    barrier = int(decision["barrier"])
    cuts = proxy.cuts
    # a commit is one compare-and-set statement, the only one of the call that names the sink: cut after it
    proxy.cut_after(b"lake.mid.cut")
    with MetaServiceClient(proxied.base_url, retry=PATIENT, timeout=CLIENT_TIMEOUT) as client:
        commit = client.commit_barrier("cut", barrier, {"lake.mid.cut": 3})
    assert proxy.cuts == cuts + 1, "the fault was not injected"
    assert dict(commit.snapshots) == {"lake.mid.cut": 3}
    runs = settled(api, "GET", "/jobs/cut/barriers").json()["runs"]
    assert [(r["barrier"], r["status"], r["outputs"]) for r in runs] == [(barrier, "committed", {"lake.mid.cut": 3})]


def test_connection_lost_during_commit_of_post_barriers_never_issues_two_barriers(
    api: httpx.Client, proxy: FaultProxy, proxied: support.ServerProcess
) -> None:
    """One POST /barriers call has at most one effect, even when the COMMIT's acknowledgement is lost.

    The database commits the barrier, then the connection is lost before the server hears so. The server cannot
    know the outcome and says so (504 outcome_unknown, never 503 "nothing happened"); the client retries with
    the same Idempotency-Key, and the retry returns the barrier the first attempt issued.
    """
    key = "cut-during-commit-7f3a"
    cuts = proxy.cuts
    # the allocation is one autocommit statement: cut after the message that carries the call's key
    proxy.cut_after(key.encode())
    first = api.post("/barriers", json={}, headers={"Idempotency-Key": key})
    assert proxy.cuts == cuts + 1, "the fault was not injected"
    assert first.status_code == 504, first.text
    assert first.headers["content-type"].startswith("application/problem+json")
    assert first.json()["code"] == "outcome_unknown" and int(first.headers["retry-after"]) >= 1
    barriers = [b["barrier"] for b in settled(api, "GET", "/barriers").json()["barriers"]]
    assert len(barriers) == 1, "the database did not commit the cut call"

    with MetaServiceClient(proxied.base_url, retry=PATIENT, timeout=CLIENT_TIMEOUT) as client:
        again = client.issue_barrier(idempotency_key=key)
        fresh = client.issue_barrier()  # a call without that key issues a new barrier
    assert again.barrier == barriers[0], "the retry with the same key did not return the committed barrier"
    after = [b["barrier"] for b in settled(api, "GET", "/barriers").json()["barriers"]]
    assert after == [fresh.barrier, again.barrier] and fresh.barrier > again.barrier


# --- partition: connections stay open, nothing gets through ---------------------------------------------------


def test_partitioned_database_gives_503_within_a_bound_not_a_hang(api: httpx.Client, proxy: FaultProxy) -> None:
    register(api, "cut-off", [ROOT], ["lake.mid.cut_off"])
    proxy.partition()
    try:
        started = time.monotonic()
        try:
            response: httpx.Response | None = api.get("/jobs/cut-off", timeout=PARTITION_ANSWER_BOUND + 2)
        except httpx.TimeoutException:
            response = None
        elapsed = time.monotonic() - started
    finally:
        proxy.heal()
    assert response is not None, (
        f"GET /jobs/cut-off hung for {elapsed:.1f}s while the database was unreachable: no deadline bounds "
        "the server's database round trips (statement_timeout is enforced by PostgreSQL, whose answer is lost)"
    )
    assert_unavailable(response)
    assert elapsed < PARTITION_ANSWER_BOUND
    wait_for_success(api)
