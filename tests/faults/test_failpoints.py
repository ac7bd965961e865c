"""kill -9 at each server failpoint while a client call is in flight; the client retries; exactly one effect.

A server armed with `METASERVICE_FAILPOINT` SIGKILLs itself inside the first write transaction it runs:
`before_commit` (work done, not committed), `after_commit` (committed, no answer sent) or `barrier_allocated`
(a barrier allocated in a transaction not yet committed). The call runs in a thread with a patient retry
policy; the test waits for the armed process to die, then starts a clean server on the same port, which the
retries reach. A helper server, never armed, prepares and inspects state over the API.

Which failpoints an operation passes: register and commit run one write transaction and allocate no barrier;
a `next` that seals a new root snapshot and `POST /barriers` allocate one.

What the protocol guarantees, per operation:
- register, next, commit are idempotent: the client repeats them after a lost answer, and the repeat returns
  the first answer. So they end with exactly one effect whichever side of the commit the crash fell.
- `POST /barriers` is made idempotent by the client's `Idempotency-Key`: the retry after the crash carries the
  same key, so it returns the barrier the first attempt committed (after_commit, barrier_allocated) or issues
  the one barrier (before_commit). Never two. (The allocation is one autocommit statement, so
  `barrier_allocated` falls after its commit; a connection lost during it: see test_network_faults.py.)
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx
import pytest

from metaservice import failpoints
from spark_client import MetaServiceClient, MetaServiceError, RetryPolicy, SnapshotConflict
from tests import support
from tests.faults.conftest import Servers

pytestmark = [pytest.mark.crash, pytest.mark.xdist_group("faults")]

T = TypeVar("T")

ORDERS, ENRICHED = "lake.raw.orders", "lake.mart.orders_enriched"
# Retries while the server is dead and restarting: connection refused is retried every <= 0.5 s for 60 s.
PATIENT = RetryPolicy(attempts=200, deadline=60, initial_backoff=0.05, max_backoff=0.5)
DEATH_TIMEOUT = 30.0
# Which failpoints each operation passes (register and commit allocate no barrier).
CASES = {
    "register_sink": ("before_commit", "after_commit"),
    "next": ("before_commit", "after_commit", "barrier_allocated"),
    "commit": ("before_commit", "after_commit"),
    "issue_barrier": ("before_commit", "after_commit", "barrier_allocated"),
}


@dataclass
class Outcome(Generic[T]):
    """How a call that crashed the server ended, and the clean server that answered its retries."""

    value: T | None
    error: MetaServiceError | None
    server: support.ServerProcess


class ArmedServers:
    """Armed servers, each started in the background while the case before it runs (in collection order).

    An armed server does nothing until its first write, so starting it early changes nothing but the wait.
    Only one case ahead: a worker that gets a few of these tests (xdist) wastes at most one start.
    """

    def __init__(self, servers: Servers, database_url: str) -> None:
        self._servers, self._database_url = servers, database_url
        self._order = [(operation, failpoint) for operation, points in CASES.items() for failpoint in points]
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="armed-start")
        self._started: dict[tuple[str, str], Future[support.ServerProcess]] = {}

    def take(self, operation: str, failpoint: str) -> support.ServerProcess:
        key = (operation, failpoint)
        position = self._order.index(key)
        for ahead in self._order[position : position + 2]:
            if ahead not in self._started:
                env = {failpoints.ENV: ahead[1]}
                self._started[ahead] = self._pool.submit(self._servers.start, self._database_url, env=env)
        return self._started.pop(key).result(timeout=120)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module", name="armed")
def fx_armed(servers: Servers, faults_database: str) -> Iterator[ArmedServers]:
    armed = ArmedServers(servers, faults_database)
    yield armed
    armed.close()


@pytest.fixture(scope="module", name="helper")
def fx_helper(servers: Servers, faults_database: str) -> support.ServerProcess:
    """A server that is never armed: prepares state before the crash and inspects it after."""
    return servers.start(faults_database)


@pytest.fixture(name="client")
def fx_client(helper: support.ServerProcess, faults_database: str) -> Iterator[MetaServiceClient]:
    with MetaServiceClient(helper.base_url, retry=PATIENT) as client:
        yield client
    support.truncate(faults_database)


@pytest.fixture(name="api")
def fx_api(helper: support.ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=helper.base_url, timeout=30) as api:
        yield api


def crash_during(servers: Servers, armed: support.ServerProcess, call: Callable[[MetaServiceClient], T]) -> Outcome[T]:
    """Run `call` against an armed server; after it dies at its failpoint, restart it clean on the same port."""
    failpoint = armed.env[failpoints.ENV]
    results: dict[str, Any] = {}

    def run() -> None:
        with MetaServiceClient(armed.base_url, retry=PATIENT, timeout=10) as client:
            try:
                results["value"] = call(client)
            except MetaServiceError as exc:
                results["error"] = exc

    thread = threading.Thread(target=run, name=f"call-{failpoint}", daemon=True)
    thread.start()
    assert armed.process is not None
    returncode = armed.process.wait(timeout=DEATH_TIMEOUT)
    assert returncode == -signal.SIGKILL, f"the armed server exited with {returncode}, not by its failpoint"
    assert armed.database_url is not None
    restarted = servers.start(armed.database_url, port=armed.port)
    thread.join(timeout=PATIENT.deadline + 10)
    assert not thread.is_alive(), "the client call did not end"
    return Outcome(results.get("value"), results.get("error"), restarted)


def barriers(api: httpx.Client) -> list[int]:
    return [int(b["barrier"]) for b in api.get("/barriers", params={"limit": 1000}).json()["barriers"]]


def runs(api: httpx.Client, job: str) -> list[tuple[int, str, dict[str, Any]]]:
    history = api.get(f"/jobs/{job}/barriers").json()["runs"]
    return [(int(r["barrier"]), str(r["status"]), dict(r["outputs"])) for r in history]


@pytest.mark.parametrize("failpoint", CASES["register_sink"])
def test_register_sink_killed_at_a_failpoint_leaves_exactly_one_edge(
    failpoint: str, servers: Servers, armed: ArmedServers, client: MetaServiceClient
) -> None:
    client.register_source("enrich", ORDERS)

    server = armed.take("register_sink", failpoint)
    outcome = crash_during(servers, server, lambda c: c.register_sink("enrich", ENRICHED))

    assert outcome.error is None, outcome.error
    assert outcome.value is not None
    # after_commit: the crashed attempt created the edge, and the retry answered "already there"
    assert outcome.value.created is (failpoint == "before_commit")
    assert client.get_job("enrich")["sinks"] == [ENRICHED]
    assert client.get_table(ENRICHED)["writer"] == "enrich"
    edges = client.lineage()["edges"]
    assert edges.count({"from": "job:enrich", "to": f"table:{ENRICHED}"}) == 1, edges
    assert client.register_sink("enrich", ENRICHED).created is False
    outcome.server.kill()


@pytest.mark.parametrize("failpoint", CASES["next"])
def test_next_that_issues_a_barrier_killed_at_a_failpoint_hands_out_one_barrier_and_reoffers_it(
    failpoint: str, servers: Servers, armed: ArmedServers, client: MetaServiceClient, api: httpx.Client
) -> None:
    client.register_source("enrich", ORDERS)
    client.register_sink("enrich", ENRICHED)

    server = armed.take("next", failpoint)
    outcome = crash_during(servers, server, lambda c: c.next_barrier("enrich", {ORDERS: 1}))

    assert outcome.error is None, outcome.error
    decision = outcome.value
    assert decision is not None and decision.action == "process" and decision.barrier is not None
    assert {t: (s.snapshot_id, s.previous_snapshot_id) for t, s in decision.inputs.items()} == {ORDERS: (1, None)}
    assert barriers(api) == [decision.barrier], "one call issued more than one barrier"
    sealed = api.get(f"/barriers/{decision.barrier}").json()["tables"][ORDERS]
    assert sealed == {"state": "complete", "snapshot_id": 1}
    assert client.next_barrier("enrich", {ORDERS: 1}) == decision, "the in-flight barrier was not re-offered as is"
    assert client.get_job("enrich")["in_flight_barrier"] == decision.barrier
    assert runs(api, "enrich") == [(decision.barrier, "in_flight", {})]
    outcome.server.kill()


@pytest.mark.parametrize("failpoint", CASES["commit"])
def test_commit_killed_at_a_failpoint_records_one_completion_with_its_snapshots(
    failpoint: str, servers: Servers, armed: ArmedServers, client: MetaServiceClient, api: httpx.Client
) -> None:
    client.register_source("enrich", ORDERS)
    client.register_sink("enrich", ENRICHED)
    barrier = client.next_barrier("enrich", {ORDERS: 1}).barrier
    assert barrier is not None

    server = armed.take("commit", failpoint)
    outcome = crash_during(servers, server, lambda c: c.commit_barrier("enrich", barrier, {ENRICHED: 7}))

    assert outcome.error is None, outcome.error
    assert outcome.value is not None and dict(outcome.value.snapshots) == {ENRICHED: 7}
    assert runs(api, "enrich") == [(barrier, "committed", {ENRICHED: 7})]
    ranges = api.get(f"/tables/{ENRICHED.replace('.', '/')}/barriers").json()["ranges"]
    assert [(r["first_barrier"], r["last_barrier"], r["snapshot_id"], r["how"]) for r in ranges] == [
        (barrier, barrier, 7, "committed")
    ]
    weak = client.version(ENRICHED, "weak")
    assert (weak.barrier, weak.snapshot_id) == (barrier, 7)
    assert dict(client.commit_barrier("enrich", barrier, {ENRICHED: 7}).snapshots) == {ENRICHED: 7}
    with pytest.raises(SnapshotConflict):
        client.commit_barrier("enrich", barrier, {ENRICHED: 8})
    outcome.server.kill()


@pytest.mark.parametrize("failpoint", CASES["issue_barrier"])
def test_post_barriers_killed_at_a_failpoint_is_retried_with_its_key_and_issues_exactly_one(
    failpoint: str, servers: Servers, armed: ArmedServers, client: MetaServiceClient, api: httpx.Client
) -> None:
    client.register_source("reader", ORDERS)

    server = armed.take("issue_barrier", failpoint)
    outcome = crash_during(servers, server, lambda c: c.issue_barrier({ORDERS: 5}))

    assert outcome.error is None, outcome.error
    assert outcome.value is not None
    # died before or after the allocation committed: either way, one barrier, and the call's answer names it
    assert barriers(api) == [outcome.value.barrier]
    assert dict(outcome.value.sealed) == {ORDERS: 5}
    # the root snapshot reported with the call shares its statement: reported and sealed together
    assert client.get_table(ORDERS)["latest_snapshot_id"] == 5
    sealed = api.get(f"/barriers/{outcome.value.barrier}").json()["tables"][ORDERS]
    assert sealed == {"state": "complete", "snapshot_id": 5}
    # a new call (a new key) issues a new, later barrier
    again = client.issue_barrier({ORDERS: 5}).barrier
    assert barriers(api) == [again, outcome.value.barrier] and again > outcome.value.barrier
    outcome.server.kill()
