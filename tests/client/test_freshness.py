"""The client's freshness-bounded reads against the real server over HTTP: `versions`/`version` with a bound,
`NotFreshEnough` with the staleness figures, an HTTP timeout that outlasts the wait, and `consistent_arrow`."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from spark_client import DeltaCatalog, InvalidRequest, MetaServiceClient, NotFreshEnough, RetryPolicy, consistent_arrow
from tests import support
from tests.support import metric
from tests.support.pipelines import (
    DIAMOND,
    ENRICHED,
    Pipeline,
)

WAIT = 20.0  # long enough never to be what ends a read that a write should answer


@pytest.fixture(name="pipeline")
def fx_pipeline(api: httpx.Client) -> Pipeline:
    pipeline = Pipeline(api)
    pipeline.register({"enrich": DIAMOND["enrich"]})
    return pipeline


@pytest.fixture(name="client")
def fx_client(server: support.ServerProcess) -> Iterator[MetaServiceClient]:
    """A client whose own timeout (1 s) is shorter than the waits it asks for; no retries."""
    with MetaServiceClient(server.base_url, timeout=1.0, retry=RetryPolicy(attempts=1)) as client:
        yield client


def test_versions_waits_past_its_own_timeout_and_answers_when_the_job_commits(
    pipeline: Pipeline, client: MetaServiceClient, server: support.ServerProcess
) -> None:
    t1 = pipeline.run("enrich", orders=1)["barrier"]
    assert client.versions([ENRICHED], "weak", min_barrier=t1).barrier == t1  # met at once
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(client.versions, [ENRICHED], "weak", min_barrier=t1 + 1, wait_seconds=WAIT)
        support.wait_until(
            lambda: metric(server.base_url, "metaservice_version_waiters") >= 1, timeout=30, what="the waiter"
        )
        t2 = pipeline.run("enrich", orders=2)["barrier"]
        answer = pending.result(timeout=WAIT + 30)
    assert answer.barrier == t2 and answer.versions == {ENRICHED: 1}


def test_not_fresh_enough_carries_the_figures_after_a_wait_longer_than_the_timeout(
    pipeline: Pipeline, client: MetaServiceClient
) -> None:
    t1 = pipeline.run("enrich", orders=1)["barrier"]
    with pytest.raises(NotFreshEnough) as raised:
        client.versions([ENRICHED], "weak", min_barrier=t1 + 1, wait_seconds=1.5)  # > the client's 1 s timeout
    exc = raised.value
    assert (exc.status, exc.code) == (409, "not_fresh_enough")
    assert exc.best_barrier == t1 and exc.min_barrier == t1 + 1 and exc.max_staleness_seconds is None
    assert exc.staleness_seconds is not None and exc.staleness_seconds >= 0
    assert exc.best_issued_at is not None and exc.best_issued_at.tzinfo is not None
    with pytest.raises(NotFreshEnough) as by_age:
        client.version(ENRICHED, "weak", max_staleness_seconds=1e-6)
    assert by_age.value.best_barrier == t1 and by_age.value.max_staleness_seconds == 1e-6
    with pytest.raises(InvalidRequest) as both:
        client.versions([ENRICHED], min_barrier=1, max_staleness_seconds=5)
    assert "not both" in str(both.value.body["errors"])


def test_consistent_arrow_takes_the_bound_and_leases_nothing_when_it_is_not_met(
    pipeline: Pipeline, client: MetaServiceClient, api: httpx.Client, tmp_path: Path
) -> None:
    t1 = pipeline.run("enrich", orders=1)["barrier"]
    with (
        pytest.raises(NotFreshEnough) as raised,
        consistent_arrow(client, DeltaCatalog(tmp_path), [ENRICHED], consistency="weak", min_barrier=t1 + 1),
    ):
        raise AssertionError("a version older than the bound was read")
    assert raised.value.best_barrier == t1
    assert api.get("/leases").json()["leases"] == []
