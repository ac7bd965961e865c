"""Freshness-bounded reads over HTTP (issue 17): `min_barrier` / `max_staleness_seconds` with `wait_seconds`.

A waiting read is decided by what the server answers: the test starts it, waits until the server reports it
waiting (`metaservice_version_waiters` in /metrics), then makes the write it waits for; the answer must carry the
new barrier (a read that merely timed out would be a 409).

orders ──► enrich ──► orders_enriched ──┐
   └─────► audit  ──► order_audit       ├──► revenue ──► revenue_by_day
customers ► dims ───► customer_dim ─────┘
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from metaservice.db.listener import LISTEN
from tests import support
from tests.support import Token, assert_problem, metric, request_as
from tests.support.pipelines import (
    CUSTOMERS,
    DIM,
    ENRICHED,
    ORDERS,
    REVENUE,
    Pipeline,
)

TEAM_B = "lake.team_b.out"
WAIT = 20.0  # long enough never to be what ends a read that a write should answer


@pytest.fixture(name="pipeline")
def fx_pipeline(api: httpx.Client) -> Pipeline:
    pipeline = Pipeline(api)
    pipeline.register()
    return pipeline


@pytest.fixture(name="pool")
def fx_pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        yield pool


def wait_for_waiters(base_url: str, count: int = 1) -> None:
    support.wait_until(
        lambda: metric(base_url, "metaservice_version_waiters") >= count,
        timeout=30,
        what=f"{count} freshness-bounded read(s) waiting on {base_url}",
    )


def post_versions(base_url: str, body: dict[str, Any], *, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(f"{base_url}/versions", json=body, headers=headers, timeout=WAIT + 30)


def in_background(pool: ThreadPoolExecutor, call: Callable[[], httpx.Response]) -> Future[tuple[httpx.Response, float]]:
    def timed() -> tuple[httpx.Response, float]:
        started = time.monotonic()
        response = call()
        return response, time.monotonic() - started

    return pool.submit(timed)


def settle(pipeline: Pipeline, *jobs: str) -> None:
    for job in jobs:
        while pipeline.run(job)["action"] == "process":
            pass


# --- answered at once ------------------------------------------------------------------------------------------


def test_a_bound_already_met_answers_at_once_like_an_unbounded_read(pipeline: Pipeline) -> None:
    t1 = pipeline.run("enrich", orders=1, customers=1)["barrier"]
    settle(pipeline, "audit", "dims", "revenue")
    for consistency in ("weak", "strong"):
        plain = pipeline.versions([ENRICHED, REVENUE], consistency)
        assert plain.status_code == 200 and plain.json()["barrier"] == t1
        for bound in ({"min_barrier": t1}, {"min_barrier": 0}, {"max_staleness_seconds": 3600}):
            body = {"tables": [ENRICHED, REVENUE], "consistency": consistency, **bound, "wait_seconds": WAIT}
            started = time.monotonic()
            response = pipeline.api.post("/versions", json=body)
            assert response.status_code == 200, response.text
            assert response.json() == plain.json()
            assert time.monotonic() - started < WAIT / 2
        single = pipeline.api.get(f"/version/{consistency}/lake/mart/orders_enriched", params={"min_barrier": t1})
        assert single.status_code == 200, single.text
        assert single.json() == {"table": ENRICHED, "consistency": consistency, "barrier": t1, "snapshot_id": 0}


# --- waiting until a write makes a fresh enough version ----------------------------------------------------------


def test_weak_read_waits_for_min_barrier_and_is_answered_when_the_job_commits(
    pipeline: Pipeline, server: support.ServerProcess, pool: ThreadPoolExecutor
) -> None:
    t1 = pipeline.run("enrich", orders=1)["barrier"]
    body = {"tables": [ENRICHED], "consistency": "weak", "min_barrier": t1 + 1, "wait_seconds": WAIT}
    pending = in_background(pool, lambda: post_versions(server.base_url, body))
    wait_for_waiters(server.base_url)
    decision = pipeline.next("enrich", orders=2)  # a barrier is issued: a wake-up, but not yet a fresh version
    assert decision["action"] == "process" and decision["barrier"] > t1
    assert not pending.done()  # woken, checked again, still waiting: the barrier is not complete in the table
    assert pipeline.commit("enrich", decision["barrier"], **{ENRICHED: 1}).status_code == 200
    response, elapsed = pending.result(timeout=WAIT + 30)
    assert response.status_code == 200, response.text
    assert response.json() == {"consistency": "weak", "barrier": decision["barrier"], "versions": {ENRICHED: 1}}
    assert elapsed < WAIT / 2  # answered by the wake-up, not by the check at the deadline
    assert metric(server.base_url, "metaservice_version_waiters") == 0


def test_strong_read_waits_until_the_whole_component_completes_the_barrier(
    pipeline: Pipeline, server: support.ServerProcess, pool: ThreadPoolExecutor
) -> None:
    t1 = pipeline.run("enrich", orders=1, customers=1)["barrier"]
    settle(pipeline, "audit", "dims", "revenue")
    url = f"{server.base_url}/version/strong/lake/mart/revenue_by_day"
    params = {"min_barrier": str(t1 + 1), "wait_seconds": str(WAIT)}
    pending = in_background(pool, lambda: httpx.get(url, params=params, timeout=WAIT + 30))
    wait_for_waiters(server.base_url)
    t2 = pipeline.run("enrich", orders=2)["barrier"]
    settle(pipeline, "audit")
    assert not pending.done()  # revenue has not processed t2: no strong version at t2 yet
    settle(pipeline, "dims", "revenue")
    response, elapsed = pending.result(timeout=WAIT + 30)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["table"] == REVENUE and answer["consistency"] == "strong"
    assert answer["barrier"] >= t2 and answer["snapshot_id"] == 1
    assert elapsed < WAIT / 2  # answered by the wake-up, not by the check at the deadline


def test_max_staleness_waits_for_a_newer_barrier_by_the_database_clock(
    pipeline: Pipeline, server: support.ServerProcess, pool: ThreadPoolExecutor
) -> None:
    t1 = pipeline.run("enrich", orders=1)["barrier"]
    bound = 1.0
    body = {"tables": [ORDERS], "consistency": "weak", "max_staleness_seconds": bound}

    def stale() -> bool:
        return pipeline.api.post("/versions", json=body).status_code == 409

    support.wait_until(stale, timeout=30, what=f"barrier {t1} to be more than {bound} s old")
    figures = assert_problem(pipeline.api.post("/versions", json=body), 409, "not_fresh_enough")
    assert figures["best_barrier"] == t1 and figures["staleness_seconds"] > bound
    assert figures["max_staleness_seconds"] == bound and figures["min_barrier"] is None
    pending = in_background(pool, lambda: post_versions(server.base_url, {**body, "wait_seconds": WAIT}))
    wait_for_waiters(server.base_url)
    t2 = pipeline.next("enrich", orders=2)["barrier"]  # the root holds snapshot 2 from the new barrier on
    response, elapsed = pending.result(timeout=WAIT + 30)
    assert response.status_code == 200, response.text
    assert response.json() == {"consistency": "weak", "barrier": t2, "versions": {ORDERS: 2}}
    assert elapsed < WAIT / 2  # answered by the wake-up, not by the check at the deadline


# --- the deadline ------------------------------------------------------------------------------------------------


def test_deadline_answers_409_with_how_stale_the_best_version_is(pipeline: Pipeline) -> None:
    t1 = pipeline.run("dims", customers=1)["barrier"]
    started = time.monotonic()
    body = {"tables": [DIM, CUSTOMERS], "consistency": "weak", "min_barrier": t1 + 5, "wait_seconds": 0.5}
    problem = assert_problem(pipeline.api.post("/versions", json=body), 409, "not_fresh_enough")
    assert time.monotonic() - started >= 0.5
    assert problem["best_barrier"] == t1
    assert problem["min_barrier"] == t1 + 5 and problem["max_staleness_seconds"] is None
    assert problem["wait_seconds"] == 0.5
    assert problem["staleness_seconds"] >= 0
    issued = datetime.fromisoformat(pipeline.api.get(f"/barriers/{t1}").json()["issued_at"])
    assert datetime.fromisoformat(problem["best_issued_at"]) == issued
    assert problem["tables"] == [DIM, CUSTOMERS] and problem["consistency"] == "weak"
    assert str(t1) in problem["detail"]
    # without waiting: decided by one check
    no_wait = pipeline.api.get("/version/weak/lake/mart/customer_dim", params={"min_barrier": t1 + 1})
    assert assert_problem(no_wait, 409, "not_fresh_enough")["best_barrier"] == t1


def test_a_bound_on_tables_never_complete_is_404_and_unknown_tables_are_not_waited_for(pipeline: Pipeline) -> None:
    body = {"tables": [REVENUE], "min_barrier": 1, "wait_seconds": 0.2}
    assert_problem(pipeline.api.post("/versions", json=body), 404, "no_consistent_version")
    started = time.monotonic()
    unknown = {"tables": ["lake.mart.nope"], "min_barrier": 1, "wait_seconds": WAIT}
    assert_problem(pipeline.api.post("/versions", json=unknown), 404, "not_found")
    assert time.monotonic() - started < WAIT / 2


def test_a_wait_without_a_bound_has_nothing_to_wait_for(pipeline: Pipeline) -> None:
    t1 = pipeline.run("enrich", orders=1)["barrier"]
    started = time.monotonic()
    body = {"tables": [ENRICHED], "consistency": "weak", "wait_seconds": WAIT}
    assert pipeline.api.post("/versions", json=body).json()["barrier"] == t1
    single = pipeline.api.get("/version/weak/lake/mart/orders_enriched", params={"wait_seconds": WAIT})
    assert single.json()["barrier"] == t1
    assert time.monotonic() - started < WAIT / 2
    too_long = pipeline.api.post("/versions", json={**body, "wait_seconds": 31})
    assert "wait_seconds" in str(assert_problem(too_long, 422, "invalid_request"))


def test_the_document_publishes_the_configured_longest_wait(api: httpx.Client) -> None:
    document = api.get("/openapi.json").json()
    body = document["components"]["schemas"]["VersionsRequest"]["properties"]["wait_seconds"]["anyOf"][0]
    query = next(
        p["schema"]["anyOf"][0]
        for p in document["paths"]["/version/{consistency_type}/{catalog}/{database}/{table}"]["get"]["parameters"]
        if p["name"] == "wait_seconds"
    )
    assert body["maximum"] == query["maximum"] == 30  # METASERVICE_MAX_WAIT_SECONDS' default


# --- bad input ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"min_barrier": 1, "max_staleness_seconds": 5}, "not both"),
        ({"min_barrier": 1, "wait_seconds": -1}, "wait_seconds"),
        ({"min_barrier": 1, "wait_seconds": 30.5}, "wait_seconds"),
        ({"min_barrier": 1, "wait_seconds": 1e9}, "wait_seconds"),
        ({"min_barrier": -1}, "min_barrier"),
        ({"max_staleness_seconds": 0}, "max_staleness_seconds"),
        ({"max_staleness_seconds": -2.5}, "max_staleness_seconds"),
        ({"min_barrier": "7"}, "min_barrier"),
        ({"min_barrier": 1, "wait_seconds": "5"}, "wait_seconds"),
    ],
)
def test_bad_bounds_are_422_naming_what_is_wrong(pipeline: Pipeline, extra: dict[str, Any], field: str) -> None:
    pipeline.run("enrich", orders=1)
    started = time.monotonic()
    body = {"tables": [ENRICHED], "consistency": "weak", **extra}
    problem = assert_problem(pipeline.api.post("/versions", json=body), 422, "invalid_request")
    assert field in str(problem), problem
    assert time.monotonic() - started < 5  # refused before any wait


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"min_barrier": "1", "max_staleness_seconds": "5"}, "not both"),
        ({"min_barrier": "1", "wait_seconds": "-1"}, "wait_seconds"),
        ({"min_barrier": "1", "wait_seconds": "31"}, "wait_seconds"),
        ({"min_barrier": "1", "wait_seconds": "nan"}, "wait_seconds"),
        ({"min_barrier": "x"}, "min_barrier"),
        ({"min_barier": "3"}, "min_barier"),
    ],
)
def test_bad_bounds_in_the_query_are_422(pipeline: Pipeline, params: dict[str, str], field: str) -> None:
    pipeline.run("enrich", orders=1)
    response = pipeline.api.get("/version/weak/lake/mart/orders_enriched", params=params)
    assert field in str(assert_problem(response, 422, "invalid_request"))


# --- across server processes, many waiters, shutdown --------------------------------------------------------------


@pytest.fixture(name="second_server")
def fx_second_server(database_url: str, tmp_path: Path) -> Iterator[support.ServerProcess]:
    """Another server process on the same database, with a pool far smaller than the waiters it will hold."""
    env = {"METASERVICE_POOL_SIZE": "4", "METASERVICE_POOL_MIN_SIZE": "1", "METASERVICE_POOL_MAX_WAITING": "8"}
    server = support.ServerProcess(database_url, env=env, log_path=tmp_path / "second.log").start()
    yield server
    server.stop()


def test_a_commit_through_another_server_process_wakes_the_waiter(
    pipeline: Pipeline, second_server: support.ServerProcess, pool: ThreadPoolExecutor
) -> None:
    t1 = pipeline.run("enrich", orders=1)["barrier"]
    body = {"tables": [ENRICHED], "consistency": "weak", "min_barrier": t1 + 1, "wait_seconds": WAIT}
    pending = in_background(pool, lambda: post_versions(second_server.base_url, body))
    wait_for_waiters(second_server.base_url)
    t2 = pipeline.run("enrich", orders=2)["barrier"]  # through the first server process
    response, elapsed = pending.result(timeout=WAIT + 30)
    assert response.status_code == 200, response.text
    assert response.json()["barrier"] == t2 and elapsed < WAIT / 2
    assert metric(second_server.base_url, "metaservice_version_notifications_total") >= 1


def test_a_lost_listening_connection_is_replaced_and_its_waiters_still_wake(
    pipeline: Pipeline, second_server: support.ServerProcess, pool: ThreadPoolExecutor, database_url: str
) -> None:
    t1 = pipeline.run("enrich", orders=1)["barrier"]
    body = {"tables": [ENRICHED], "consistency": "weak", "min_barrier": t1 + 1, "wait_seconds": WAIT}
    pending = in_background(pool, lambda: post_versions(second_server.base_url, body))
    wait_for_waiters(second_server.base_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND query = %s",
            [LISTEN],
        ).fetchone()
    assert row is not None and row[0] >= 1  # every server process's listener, the waiter's among them
    t2 = pipeline.run("enrich", orders=2)["barrier"]  # perhaps before the listener is back: it re-checks then
    response, elapsed = pending.result(timeout=WAIT + 30)
    assert response.status_code == 200, response.text
    assert response.json()["barrier"] == t2 and elapsed < WAIT / 2


def test_two_hundred_waiters_hold_no_pooled_connection(
    pipeline: Pipeline, second_server: support.ServerProcess
) -> None:
    t1 = pipeline.run("enrich", orders=1)["barrier"]
    body = {"tables": [ENRICHED], "consistency": "weak", "min_barrier": t1 + 1, "wait_seconds": WAIT}
    with ThreadPoolExecutor(max_workers=200) as many:
        pending = [in_background(many, lambda: post_versions(second_server.base_url, body)) for _ in range(200)]
        wait_for_waiters(second_server.base_url, 200)
        assert metric(second_server.base_url, "metaservice_db_pool_in_use") <= 1  # the metrics refresher's, at most
        assert metric(second_server.base_url, "metaservice_db_pool_waiting") == 0
        t2 = pipeline.run("enrich", orders=2)["barrier"]
        answers = [future.result(timeout=WAIT + 30)[0] for future in pending]
    assert [a.status_code for a in answers] == [200] * 200, {a.status_code: a.text for a in answers}
    assert {a.json()["barrier"] for a in answers} == {t2}


def test_stopping_the_server_answers_waiters_503_at_once(
    pipeline: Pipeline, second_server: support.ServerProcess, pool: ThreadPoolExecutor
) -> None:
    t1 = pipeline.run("enrich", orders=1)["barrier"]
    body = {"tables": [ENRICHED], "min_barrier": t1 + 1, "wait_seconds": WAIT}
    pending = in_background(pool, lambda: post_versions(second_server.base_url, body))
    wait_for_waiters(second_server.base_url)
    second_server.stop()  # SIGTERM: uvicorn's graceful shutdown would otherwise wait 10 s, then cut it off
    assert second_server.process is not None and second_server.process.returncode is not None
    response, elapsed = pending.result(timeout=WAIT + 30)
    problem = assert_problem(response, 503, "unavailable")
    assert "shutting down" in problem["detail"]
    assert response.headers["retry-after"] == "1"
    assert elapsed < 8


# --- auth ----------------------------------------------------------------------------------------------------------


@pytest.fixture(name="secured")
def fx_secured(admin_url: str, worker_id: str, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    tokens = {
        "admin": Token("ops", "admin"),
        "team-a": Token("team-a-runner", "job", ("team-a.*",), tables=("lake.team_a.*",)),
        "revoked": Token("old", "reader"),
    }
    database, log = f"ms_fresh_auth_{worker_id}", tmp_path / "secured.log"
    with support.secured_server(admin_url, database, tokens, log_path=log, revoked=["revoked"]) as (server, secrets):
        yield server.base_url, secrets


def test_a_token_waits_only_where_it_may_read_and_the_wait_changes_nothing_it_may_do(
    secured: tuple[str, dict[str, str]], pool: ThreadPoolExecutor
) -> None:
    base, tokens = secured

    def as_admin(method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = request_as(base, tokens["admin"], method, path, **kwargs)
        assert response.status_code < 300, response.text
        return response

    as_admin("POST", "/register/source/team-b.load/lake/raw/b_src")
    as_admin("POST", "/register/sink/team-b.load/lake/team_b/out")

    def run_team_b(snapshot: int) -> int:
        body = {"root_snapshots": {"lake.raw.b_src": snapshot}}
        barrier = int(as_admin("POST", "/jobs/team-b.load/barriers/next", json=body).json()["barrier"])
        as_admin("POST", f"/jobs/team-b.load/barriers/{barrier}/commit", json={"snapshots": {TEAM_B: snapshot}})
        return barrier

    t1 = run_team_b(1)
    bounded = {"tables": [TEAM_B], "consistency": "weak", "min_barrier": t1 + 1, "wait_seconds": WAIT}
    # no token, a revoked one: refused before any wait (the wait is never entered)
    for token in (None, "ms_not-a-token", tokens["revoked"]):
        started = time.monotonic()
        assert_problem(post_versions(base, bounded, token=token), 401, "unauthorized")
        assert time.monotonic() - started < WAIT / 2
    assert metric(base, "metaservice_version_waiters") == 0
    # team-a's job token reads team-b's tables today (reads are open to every role; its table scope bounds
    # writes): it may wait on them just as it may read them, and no more
    plain = request_as(base, tokens["team-a"], "POST", "/versions", json={"tables": [TEAM_B], "consistency": "weak"})
    assert plain.status_code == 200 and plain.json()["barrier"] == t1
    pending = in_background(pool, lambda: post_versions(base, bounded, token=tokens["team-a"]))
    wait_for_waiters(base)
    denied = request_as(
        base, tokens["team-a"], "POST", f"/jobs/team-b.load/barriers/{t1}/commit", json={"snapshots": {}}
    )
    assert_problem(denied, 403, "forbidden")
    assert not pending.done()
    t2 = run_team_b(2)
    response, elapsed = pending.result(timeout=WAIT + 30)
    assert response.status_code == 200, response.text
    assert response.json() == {"consistency": "weak", "barrier": t2, "versions": {TEAM_B: 2}}
    assert elapsed < WAIT / 2
