"""`METASERVICE_MIN_BARRIER_INTERVAL`: `next` does not issue barriers faster than that; it says how long to wait.

The throttle lives in the allocation function (`metaservice_issue_barriers`, a request's `min_interval`), decided
under the clock lock. An interval of an hour makes the test independent of timing: the second barrier is never due.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from metaservice.db import migrate
from tests import support

HOUR = 3600.0


@pytest.fixture(name="throttled")
def fx_throttled(admin_url: str, worker_id: str) -> Iterator[httpx.Client]:
    url = support.fresh_database(admin_url, f"ms_throttle_{worker_id}")
    migrate.upgrade(url)
    server = support.ServerProcess(url, env={"METASERVICE_MIN_BARRIER_INTERVAL": str(HOUR)}).start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as api:
            yield api
    finally:
        server.stop()


def test_next_within_the_minimum_interval_issues_no_barrier_and_says_how_long_to_wait(
    throttled: httpx.Client,
) -> None:
    api = throttled
    for role, table in (("source", "lake/raw/orders"), ("sink", "lake/mart/enriched")):
        assert api.post(f"/register/{role}/enrich/{table}").status_code == 201
    first = api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {"lake.raw.orders": 1}}).json()
    assert first["action"] == "process" and first["retry_after_seconds"] is None
    done = api.post(f"/jobs/enrich/barriers/{first['barrier']}/commit", json={"snapshots": {"lake.mart.enriched": 1}})
    assert done.status_code == 200, done.text

    second = api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {"lake.raw.orders": 2}}).json()
    # the job settled the only barrier and no new one may be issued yet: idle, and how long until one may
    assert (second["action"], second["barrier"], second["skipped"]) == ("idle", None, []), second
    assert 0 < second["retry_after_seconds"] <= HOUR
    assert [b["barrier"] for b in api.get("/barriers").json()["barriers"]] == [first["barrier"]]
    assert api.get("/tables/lake/raw/orders").json()["latest_snapshot_id"] == 2  # reported, sealed later

    issued = api.post("/barriers", json={})  # an explicit barrier is never throttled
    assert issued.status_code == 201 and issued.json()["sealed"] == {"lake.raw.orders": 2}
