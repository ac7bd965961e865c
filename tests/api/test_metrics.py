"""`GET /metrics` (Prometheus text), request ids and structured logs, against a real server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests import support
from tests.support import Samples, by_label, scrape, scrape_once
from tests.support.pipelines import (
    CHAIN,
    MART_B,
    MART_C,
    MART_D,
    RAW_A,
    Driver,
)


@pytest.fixture(name="chain")
def fx_chain(api: httpx.Client) -> Driver:
    return Driver(api, CHAIN)


def test_metrics_report_delays_lag_durations_counts_latency_and_pool(chain: Driver) -> None:
    barrier = chain.run("j1", {RAW_A: 1})
    chain.run("j2", during=lambda: chain.busy(20))
    chain.run("j3")
    second = chain.run("j1", {RAW_A: 2})
    aborted = chain.next("j2")["barrier"]
    assert aborted == second
    assert chain.api.post(f"/jobs/j2/barriers/{aborted}/abort", json={"reason": "test"}).status_code == 200
    chain.next("j3")  # skips the aborted barrier

    samples = scrape(chain.api)
    delays = {s.labels["table"]: s for s in samples["metaservice_table_delay_seconds"]}
    assert set(delays) == {RAW_A, MART_B, MART_C, MART_D}
    assert delays[RAW_A].labels["kind"] == "root" and delays[MART_D].labels["kind"] == "intermediate"
    assert delays[MART_D].value >= delays[MART_B].value >= 0
    newest = by_label(samples, "metaservice_table_newest_complete_barrier", "table")
    assert newest == {RAW_A: second, MART_B: second, MART_C: barrier, MART_D: barrier}

    j2_committed = [r for r in chain.api.get("/jobs/j2/barriers").json()["runs"] if r["status"] == "committed"]
    durations = by_label(samples, "metaservice_job_last_barrier_duration_seconds", "job")
    assert durations["j2"] == pytest.approx(j2_committed[0]["duration_seconds"], abs=1e-6)
    assert set(durations) == {"j1", "j2", "j3"}
    assert set(by_label(samples, "metaservice_job_last_barrier_waiting_seconds", "job")) == {"j1", "j2", "j3"}
    assert by_label(samples, "metaservice_job_lag_barriers", "job") == {"j1": 0, "j2": 0, "j3": 0}
    issued = chain.api.post("/barriers").json()
    after = scrape(chain.api)
    assert by_label(after, "metaservice_job_lag_barriers", "job") == {"j1": 1, "j2": 1, "j3": 1}
    lag_seconds = by_label(after, "metaservice_job_lag_seconds", "job")
    assert all(v > 0 for v in lag_seconds.values())

    assert after["metaservice_barriers_issued_total"][0].value == 3
    assert issued["barrier"] > second
    assert by_label(after, "metaservice_job_commits_total", "job") == {"j1": 2, "j2": 1, "j3": 1}
    assert by_label(after, "metaservice_job_aborts_total", "job") == {"j1": 0, "j2": 1, "j3": 0}
    assert by_label(after, "metaservice_job_skips_total", "job") == {"j1": 0, "j2": 0, "j3": 1}

    counts = {
        (s.labels["method"], s.labels["route"]): s.value
        for s in after["metaservice_http_request_duration_seconds_count"]
    }
    assert counts[("POST", "/jobs/{job_id}/barriers/next")] >= 5
    assert counts[("GET", "/healthz")] >= 20
    assert not any("j1" in route for _, route in counts), "routes are templates, not raw paths"
    requests = {(s.labels["route"], s.labels["status"]) for s in after["metaservice_http_requests_total"]}
    assert ("/jobs/{job_id}/barriers/{barrier}/commit", "200") in requests
    assert after["metaservice_db_pool_size"][0].value >= 1
    assert after["metaservice_db_pool_in_use"][0].value >= 0


def test_answers_to_next_are_counted_by_action(chain: Driver) -> None:
    """Idle polls show in /metrics: a streaming job's trigger asks `next` whether or not there is work."""
    before = by_label(scrape_once(chain.api), "metaservice_next_answers_total", "action")
    barrier = chain.next("j1", {RAW_A: 1})
    assert barrier["action"] == "process"
    assert chain.next("j2")["action"] == "wait"  # j1 has not committed the barrier yet
    chain.commit("j1", barrier["barrier"])
    assert chain.next("j1")["action"] == "idle"
    assert chain.next("j1")["action"] == "idle"
    after = by_label(scrape_once(chain.api), "metaservice_next_answers_total", "action")
    counted = {action: after.get(action, 0) - before.get(action, 0) for action in ("process", "wait", "idle")}
    assert counted == {"process": 1, "wait": 1, "idle": 2}


def test_unmatched_routes_share_one_label(api: httpx.Client) -> None:
    for n in range(3):
        assert api.get(f"/no/such/path/{n}").status_code == 404
    routes = {s.labels["route"] for s in scrape(api)["metaservice_http_requests_total"]}
    assert "<unmatched>" in routes and not any(r.startswith("/no/such") for r in routes)


def test_request_id_is_echoed_or_generated(api: httpx.Client) -> None:
    given = api.get("/healthz", headers={"X-Request-ID": "trace-42.a:b"})
    assert given.headers["x-request-id"] == "trace-42.a:b"
    fresh = api.get("/healthz")
    other = api.get("/healthz")
    assert len(fresh.headers["x-request-id"]) == 32 and fresh.headers["x-request-id"] != other.headers["x-request-id"]
    hostile = api.get("/healthz", headers={"X-Request-ID": 'x" injected\tvalue'})
    assert hostile.headers["x-request-id"] != 'x" injected\tvalue' and len(hostile.headers["x-request-id"]) == 32
    problem = api.get("/tables/lake/raw/nope", headers={"X-Request-ID": "on-error"})
    assert problem.status_code == 404 and problem.headers["x-request-id"] == "on-error"


@pytest.fixture(name="json_server")
def fx_json_server(database_url: str, tmp_path: Path) -> Iterator[support.ServerProcess]:
    server = support.ServerProcess(
        database_url, env={"METASERVICE_LOG_JSON": "true"}, log_path=tmp_path / "server.log"
    ).start()
    yield server
    server.stop()
    support.truncate(database_url)


def test_json_logs_carry_the_request_id(json_server: support.ServerProcess) -> None:
    with httpx.Client(base_url=json_server.base_url) as client:
        assert client.get("/lineage", headers={"X-Request-ID": "json-log-check"}).status_code == 200
    json_server.stop()
    assert json_server.log_path is not None
    lines = [line for line in json_server.log_path.read_text().splitlines() if line.startswith("{")]
    entries = [json.loads(line) for line in lines]
    access = [e for e in entries if e.get("request_id") == "json-log-check"]
    assert access, lines[-5:]
    (entry,) = access
    assert entry["logger"] == "metaservice.access" and entry["level"] == "info"
    assert entry["route"] == "/lineage" and entry["status"] == 200 and entry["duration_ms"] > 0
    assert all({"ts", "level", "logger", "message", "request_id"} <= e.keys() for e in entries)


def test_metrics_count_the_sql_statements_of_each_route(chain: Driver) -> None:
    """`next` is one read, a decision and one compare-and-set write; the count is per route. A `next` reporting a
    new root snapshot first has it sealed (one allocation call; here no other request shares it). A commit right
    after its `next` on the same process plans on what that `next` stored: the write alone
    (services/commit_hints.py); a commit on another process, or after its job changed, gathers first."""
    chain.run("j1", {RAW_A: 1})

    def statements(samples: Samples, route: str) -> float:
        return sum(
            s.value
            for s in samples.get("metaservice_db_statements_total", [])
            if s.labels["route"] == route and s.labels["method"] == "POST"
        )

    def requests(samples: Samples, route: str) -> float:
        return sum(s.value for s in samples["metaservice_http_requests_total"] if s.labels["route"] == route)

    commit_route, next_route = "/jobs/{job_id}/barriers/{barrier}/commit", "/jobs/{job_id}/barriers/next"
    before = scrape_once(chain.api)
    for snapshot in range(2, 6):
        chain.run("j1", {RAW_A: snapshot})  # each: a next that seals a new snapshot, then a commit
    after = scrape_once(chain.api)
    commits = requests(after, commit_route) - requests(before, commit_route)
    nexts = requests(after, next_route) - requests(before, next_route)
    assert commits == 4 and nexts == 4
    assert statements(after, commit_route) - statements(before, commit_route) == commits  # the write alone
    per_next = (statements(after, next_route) - statements(before, next_route)) / nexts
    assert per_next == 3  # the allocation call, the gather, the write: no gather before the allocation
