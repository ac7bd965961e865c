"""Overload sheds early: past `METASERVICE_POOL_MAX_WAITING` queued requests, a request is answered 429 at once.

Deterministic: a pool of one connection, a queue of one. The test holds an ACCESS EXCLUSIVE lock on `jobs`, so the
first `GET /jobs` holds the only connection (blocked in PostgreSQL, seen in pg_stat_activity), the second waits for
a connection (seen in the live `metaservice_db_pool_waiting` gauge), and the third finds the queue full.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from metaservice.db import migrate
from tests import support


@pytest.fixture(name="small_pool")
def fx_small_pool(admin_url: str, worker_id: str) -> Iterator[tuple[str, support.ServerProcess]]:
    url = support.fresh_database(admin_url, f"ms_overload_{worker_id}")
    migrate.upgrade(url)
    env = {
        "METASERVICE_POOL_SIZE": "1",
        "METASERVICE_POOL_MIN_SIZE": "1",
        "METASERVICE_POOL_MAX_WAITING": "1",
        "METASERVICE_POOL_TIMEOUT": "120",
        "METASERVICE_LOCK_TIMEOUT_MS": "120000",
        "METASERVICE_STATEMENT_TIMEOUT_MS": "120000",
        "METASERVICE_METRICS_REFRESH_SECONDS": "3600",  # its one read (at start) is over before the test locks
    }
    server = support.ServerProcess(url, env=env).start()
    try:
        yield url, server
    finally:
        server.stop()


def _gauge(base_url: str, name: str) -> float | None:
    for line in httpx.get(f"{base_url}/metrics", timeout=30).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


def _pool_waiting(base_url: str) -> float | None:
    return _gauge(base_url, "metaservice_db_pool_waiting")


def test_a_request_past_the_wait_queue_is_answered_429_at_once_and_the_queued_ones_are_served(
    small_pool: tuple[str, support.ServerProcess],
) -> None:
    url, server = small_pool
    answers: dict[str, httpx.Response] = {}
    # the background read of /metrics' figures also takes a pooled connection: let its first (only) one finish
    read = "metaservice_figures_read_timestamp_seconds"
    support.wait_until(lambda: _gauge(server.base_url, read) is not None, timeout=60, what="the figures' first read")

    def call(name: str) -> None:
        answers[name] = httpx.get(f"{server.base_url}/jobs", timeout=120)

    with psycopg.connect(url) as locker:
        locker.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        holding = threading.Thread(target=call, args=("holding",))
        holding.start()

        def blocked_on_lock() -> bool:
            row = locker.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            ).fetchone()
            return bool(row and row[0] == 1)

        # `locker` is inside its transaction; pg_stat_activity is read in it (a snapshot per statement there)
        support.wait_until(blocked_on_lock, timeout=60, what="the first request to hold the only connection")
        queued = threading.Thread(target=call, args=("queued",))
        queued.start()
        support.wait_until(lambda: _pool_waiting(server.base_url) == 1, timeout=60, what="a request in the queue")

        started = time.monotonic()
        shed = httpx.get(f"{server.base_url}/jobs", timeout=120)
        assert time.monotonic() - started < 5  # at once, not after the pool timeout (120 s here)
        assert shed.status_code == 429, shed.text
        assert shed.headers["content-type"].startswith("application/problem+json")
        assert shed.json()["code"] == "overloaded"
        assert int(shed.headers["retry-after"]) >= 1
        locker.rollback()

    holding.join(timeout=120)
    queued.join(timeout=120)
    assert answers["holding"].status_code == 200 and answers["queued"].status_code == 200
    assert _pool_waiting(server.base_url) == 0
