"""The client's retry budget against a real server that goes away and comes back on the same port (a rolling
restart): a job's call made while the server is down succeeds once it is back, even after far more than the 8
attempts (about 7 s) the client used to give up after; a budget that runs out ends the call with an error saying
so.

The server is a real `metaservice serve` process, stopped (SIGTERM) and started again on its port. The test moves
on when the client has done what it waits for (attempts made, answers received), never after a fixed sleep.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from metaservice.db import migrate
from spark_client import MetaServiceClient, RetryPolicy, Unavailable
from spark_client.models import BarrierDecision
from tests import support

pytestmark = pytest.mark.xdist_group("crash")

JOB, ROOT, SINK = "rolling", "lake.raw.clicks", "lake.mart.click_counts"
OLD_ATTEMPTS, OLD_SECONDS = 8, 7.0  # what the client used to give up after


class Attempts:
    """The policy's `sleep`: records each failed attempt (it is called before each wait), then really waits."""

    def __init__(self) -> None:
        self.failed: list[float] = []
        self.changed = threading.Condition()

    def sleep(self, seconds: float) -> None:
        with self.changed:
            self.failed.append(time.monotonic())
            self.changed.notify_all()
        time.sleep(seconds)

    def wait_for(self, predicate: object, *, timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout=timeout)  # type: ignore[arg-type]

    def poke(self) -> None:
        with self.changed:
            self.changed.notify_all()


@pytest.fixture(name="restart_url")
def fx_restart_url(admin_url: str, worker_id: str) -> Iterator[str]:
    name = f"ms_restart_{worker_id}"
    url = support.fresh_database(admin_url, name)
    migrate.upgrade(url)
    yield url
    support.drop_database(admin_url, name)


@pytest.fixture(name="servers")
def fx_servers(restart_url: str, tmp_path: Path) -> Iterator[list[support.ServerProcess]]:
    """Server processes on the test's database (one log); every one still running is stopped after the test."""
    started: list[support.ServerProcess] = [
        support.ServerProcess(restart_url, log_path=tmp_path / "server.log").start()
    ]
    yield started
    for server in started:
        server.stop()


def registered(base_url: str) -> None:
    with MetaServiceClient(base_url) as client:
        client.register_source(JOB, ROOT)
        client.register_sink(JOB, SINK)


def test_a_job_call_rides_out_a_restart_longer_than_the_old_budget(servers: list[support.ServerProcess]) -> None:
    (first,) = servers
    registered(first.base_url)
    attempts = Attempts()
    client = MetaServiceClient(first.base_url, retry=RetryPolicy(sleep=attempts.sleep))  # the default budget
    assert client.retry.deadline >= 60
    first.stop()  # the rolling restart begins: nothing listens on the port

    outcome: dict[str, BarrierDecision | BaseException] = {}

    def job_call() -> None:
        try:
            outcome["answer"] = client.next_barrier(JOB, {ROOT: 1})
        except BaseException as exc:
            outcome["answer"] = exc
        finally:
            attempts.poke()

    caller = threading.Thread(target=job_call, daemon=True)
    caller.start()
    try:
        down_long_enough = attempts.wait_for(
            lambda: (
                "answer" in outcome
                or (len(attempts.failed) > OLD_ATTEMPTS and attempts.failed[-1] - attempts.failed[0] > OLD_SECONDS)
            ),
            timeout=90,
        )
        assert down_long_enough, "the client neither retried nor ended"
        assert "answer" not in outcome, f"the call ended while the server was down: {outcome['answer']!r}"
        failed_while_down = len(attempts.failed)
        servers.append(support.ServerProcess(first.database_url, port=first.port, log_path=first.log_path).start())
        caller.join(timeout=120)
        assert not caller.is_alive(), "the call did not end after the server came back"
    finally:
        client.close()
    answer = outcome["answer"]
    assert isinstance(answer, BarrierDecision), f"the call failed: {answer!r}"
    assert answer.action == "process" and answer.inputs[ROOT].snapshot_id == 1
    assert failed_while_down > OLD_ATTEMPTS
    with MetaServiceClient(servers[-1].base_url) as check:
        assert check.get_job(JOB)["in_flight_barrier"] == answer.barrier


def test_a_budget_that_runs_out_ends_the_call_with_an_error_that_says_so(
    servers: list[support.ServerProcess],
) -> None:
    (server,) = servers
    registered(server.base_url)
    attempts = Attempts()
    policy = RetryPolicy(deadline=3, initial_backoff=0.05, max_backoff=0.5, sleep=attempts.sleep)
    server.stop()
    with MetaServiceClient(server.base_url, retry=policy) as client, pytest.raises(Unavailable) as caught:
        client.next_barrier(JOB, {ROOT: 1})
    message = str(caught.value)
    assert f"cannot reach the MetaService server at {server.base_url}" in message
    assert f"gave up after {len(attempts.failed) + 1} attempt(s)" in message
    assert "the retry budget being for up to 3s (RetryPolicy(deadline=...) sets it)" in message
