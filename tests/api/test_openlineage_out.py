"""OpenLineage out: real servers with METASERVICE_OPENLINEAGE_URL pointing at a capture server the test runs (a
real HTTP server on a socket, tests/support/openlineage.py), driven over HTTP. Events are awaited by polling the
capture server with a deadline."""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest
from prometheus_client.parser import text_string_to_metric_families

from spark_client import MetaServiceClient
from spark_client.errors import InvalidRequest
from tests import support
from tests.support.openlineage import Capture, start_server

ORDERS, CUSTOMERS, ENRICHED = "lake.raw.orders", "lake.raw.customers", "lake.mart.orders_enriched"
# Documented in docs/design.md ("OpenLineage out"): run id = uuid5(this, "<namespace>/<job id>/<barrier>").
RUN_ID_NAMESPACE = uuid.UUID("6f0e2a7c-4d0b-5b8e-9a51-3c2f1d7e8b90")
NAMESPACE = "ms-test"
FACET_SCHEMAS = support.REPO / "docs" / "openlineage" / "facets"


def assert_facet(name: str, facet: dict[str, Any]) -> None:
    """`facet` is what the shipped JSON Schema `docs/openlineage/facets/<name>.json` describes, under its URL."""
    document = json.loads((FACET_SCHEMAS / f"{name}.json").read_text())
    assert facet["_schemaURL"] == f"{document['$id']}#/$defs/{name}"
    own = document["$defs"][name]["allOf"][1]  # the facet's own fields (the first part is OpenLineage's base)
    jsonschema_rs.validate(own, facet)


@pytest.fixture(scope="module", name="capture")
def fx_capture() -> Iterator[Capture]:
    with Capture() as capture:
        yield capture


@pytest.fixture(scope="module", name="emitting")
def fx_emitting(
    database_url: str, capture: Capture, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """Two server processes on the worker's database, both sending to the capture server."""
    logs = Path(tmp_path_factory.mktemp("ol-out"))
    settings = {
        "openlineage_url": capture.url,
        "openlineage_namespace": NAMESPACE,
        "openlineage_dataset_namespace": "s3://lake",
        "openlineage_api_key": "secret-key",
        "openlineage_backoff_seconds": "0.05",
        "openlineage_attempts": "3",
    }
    servers = [start_server(database_url, logs, **settings) for _ in range(2)]
    with (
        httpx.Client(base_url=servers[0].base_url, timeout=30) as a,
        httpx.Client(base_url=servers[1].base_url, timeout=30) as b,
    ):
        yield a, b
    for server in servers:
        server.stop()


@pytest.fixture(name="servers")
def fx_servers(
    emitting: tuple[httpx.Client, httpx.Client], capture: Capture, api: httpx.Client
) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    """The emitting servers, with an empty capture and (through `api`) an empty database after the test."""
    del api
    capture.clear()
    yield emitting


def ok(response: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return dict(response.json())


def register(api: httpx.Client, job: str, sources: list[str], sinks: list[str]) -> None:
    for role, tables in (("source", sources), ("sink", sinks)):
        for table in tables:
            assert api.post(f"/register/{role}/{job}/{table.replace('.', '/')}").status_code in (200, 201)


def process(api: httpx.Client, job: str, **roots: int) -> int:
    decision = ok(api.post(f"/jobs/{job}/barriers/next", json={"root_snapshots": roots}))
    assert decision["action"] == "process", decision
    return int(decision["barrier"])


def counters(api: httpx.Client) -> dict[str, float]:
    families = text_string_to_metric_families(api.get("/metrics").text)
    return {s.name: s.value for f in families for s in f.samples if s.name.startswith("metaservice_openlineage_")}


def of_barrier(events: list[dict[str, Any]], barrier: int) -> list[dict[str, Any]]:
    return [e for e in events if e["run"]["facets"]["metaservice_barrier"]["barrier"] == barrier]


def test_a_commit_is_sent_as_a_complete_run_event_with_snapshots_and_barrier(
    servers: tuple[httpx.Client, httpx.Client], capture: Capture
) -> None:
    api, _ = servers
    register(api, "enrich", [ORDERS], [ENRICHED])
    barrier = process(api, "enrich", **{ORDERS: 3})
    ok(api.post(f"/jobs/enrich/barriers/{barrier}/commit", json={"snapshots": {ENRICHED: 7}}))
    ok(api.post(f"/jobs/enrich/barriers/{barrier}/commit", json={"snapshots": {ENRICHED: 7}}))  # a repeat: no event
    second = process(api, "enrich", **{ORDERS: 5})
    ok(api.post(f"/jobs/enrich/barriers/{second}/commit", json={"snapshots": {ENRICHED: 8}}))

    events = capture.wait_for("two COMPLETE events", lambda e: len(e) >= 2)
    path, headers, _ = capture.requests[0]
    assert path == "/api/v1/lineage" and headers["Authorization"] == "Bearer secret-key"
    [event] = of_barrier(events, barrier)
    assert event["eventType"] == "COMPLETE"
    assert event["job"] == {"namespace": NAMESPACE, "name": "enrich", "facets": {}}
    assert event["run"]["runId"] == str(uuid.uuid5(RUN_ID_NAMESPACE, f"{NAMESPACE}/enrich/{barrier}"))
    assert event["run"]["facets"]["metaservice_barrier"]["status"] == "committed"
    nominal = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=barrier)
    assert datetime.fromisoformat(event["run"]["facets"]["nominalTime"]["nominalStartTime"]) == nominal
    [read] = event["inputs"]
    assert (read["namespace"], read["name"]) == ("s3://lake", ORDERS)
    assert read["facets"]["version"]["datasetVersion"] == "3"
    assert read["inputFacets"]["metaservice_snapshot"]["snapshotId"] == 3
    assert "previousSnapshotId" not in read["inputFacets"]["metaservice_snapshot"]  # the first read
    [written] = event["outputs"]
    assert (written["name"], written["facets"]["version"]["datasetVersion"]) == (ENRICHED, "7")
    assert written["outputFacets"]["metaservice_snapshot"]["snapshotId"] == 7
    assert_facet("BarrierRunFacet", event["run"]["facets"]["metaservice_barrier"])
    assert_facet("SnapshotInputDatasetFacet", read["inputFacets"]["metaservice_snapshot"])
    assert_facet("SnapshotOutputDatasetFacet", written["outputFacets"]["metaservice_snapshot"])

    [later] = of_barrier(events, second)
    assert later["inputs"][0]["inputFacets"]["metaservice_snapshot"] == {
        **later["inputs"][0]["inputFacets"]["metaservice_snapshot"],
        "snapshotId": 5,
        "previousSnapshotId": 3,
    }
    assert len(capture.events()) == 2


def test_aborts_by_the_job_are_fail_and_by_the_server_abort(
    servers: tuple[httpx.Client, httpx.Client], capture: Capture
) -> None:
    """FAIL when the job gives its barrier up; ABORT when a lineage change, an unregister or a rollback does."""
    api, _ = servers
    register(api, "enrich", [ORDERS], [ENRICHED])
    committed = process(api, "enrich", **{ORDERS: 1})
    ok(api.post(f"/jobs/enrich/barriers/{committed}/commit", json={"snapshots": {ENRICHED: 1}}))

    failed = process(api, "enrich", **{ORDERS: 2})
    ok(api.post(f"/jobs/enrich/barriers/{failed}/abort", json={"reason": "bad input file"}))
    changed = process(api, "enrich", **{ORDERS: 3})
    register(api, "enrich", [CUSTOMERS], [])  # rule 7: a lineage change aborts the barrier in flight
    rolled_back = process(api, "enrich", **{ORDERS: 4, CUSTOMERS: 1})
    plan = ok(api.post("/rollbacks", json={"table": ENRICHED, "barrier": committed}), 201)
    ok(api.post(f"/rollbacks/{plan['rollback_id']}/complete", json={}))
    again = process(api, "enrich", **{ORDERS: 5, CUSTOMERS: 2})
    assert again == rolled_back  # the job resumes after the rollback's barrier: the same run (run id) again
    ok(api.post("/unregister/enrich"))

    events = capture.wait_for("five events", lambda e: len(e) >= 5)
    kinds = {
        barrier: sorted(
            (e["eventType"], meta["abortedBy"], meta["reason"])
            for e in of_barrier(events, barrier)
            if (meta := {"abortedBy": None, "reason": None, **e["run"]["facets"]["metaservice_barrier"]})
        )
        for barrier in (committed, failed, changed, rolled_back)
    }
    assert kinds == {
        committed: [("COMPLETE", None, None)],
        failed: [("FAIL", "job", "bad input file")],
        changed: [("ABORT", "server", "lineage changed: enrich now reads lake.raw.customers")],
        rolled_back: [
            ("ABORT", "server", "job unregistered"),
            ("ABORT", "server", f"rolled back to barrier {committed} by rollback {plan['rollback_id']}"),
        ],
    }
    [aborted] = of_barrier(events, failed)
    assert_facet("BarrierRunFacet", aborted["run"]["facets"]["metaservice_barrier"])
    assert_facet("SnapshotInputDatasetFacet", aborted["inputs"][0]["inputFacets"]["metaservice_snapshot"])
    assert aborted["outputs"] == [{"namespace": "s3://lake", "name": ENRICHED, "facets": {}, "outputFacets": {}}]
    assert aborted["inputs"][0]["inputFacets"]["metaservice_snapshot"]["previousSnapshotId"] == 1


def test_a_refused_request_sends_nothing_for_the_abort_it_undid(
    servers: tuple[httpx.Client, httpx.Client], capture: Capture
) -> None:
    """An OpenLineage event whose first edge aborts the in-flight barrier and whose second is refused: the
    transaction rolls back, the barrier stays in flight, and no ABORT is sent for it."""
    api, _ = servers
    sent = counters(api)["metaservice_openlineage_events_sent_total"]
    register(api, "enrich", [ORDERS], [ENRICHED])
    register(api, "other", [], ["lake.mart.taken"])
    barrier = process(api, "enrich", **{ORDERS: 1})
    event = {
        "eventTime": "2026-11-24T08:00:00Z",
        "eventType": "START",
        "run": {"runId": str(uuid.uuid4())},
        "job": {"namespace": "spark", "name": "enrich"},
        "inputs": [{"namespace": "s3", "name": CUSTOMERS}],
        "outputs": [{"namespace": "s3", "name": "lake.mart.taken"}],
    }
    assert api.post("/api/v1/lineage", json=event).json()["code"] == "table_has_writer"
    ok(api.post(f"/jobs/enrich/barriers/{barrier}/commit", json={"snapshots": {ENRICHED: 1}}))
    events = capture.wait_for("the COMPLETE event", lambda e: len(e) >= 1)
    support.wait_until(
        lambda: counters(api)["metaservice_openlineage_events_sent_total"] == sent + 1, timeout=30, what="one sent"
    )
    assert [e["eventType"] for e in events] == ["COMPLETE"]
    assert [e["eventType"] for e in capture.events()] == ["COMPLETE"]


def test_each_server_process_sends_what_it_committed(
    servers: tuple[httpx.Client, httpx.Client], capture: Capture
) -> None:
    a, b = servers
    sent = "metaservice_openlineage_events_sent_total"
    before = [counters(a)[sent], counters(b)[sent]]
    register(a, "enrich", [ORDERS], [ENRICHED])
    first = process(a, "enrich", **{ORDERS: 1})
    ok(a.post(f"/jobs/enrich/barriers/{first}/commit", json={"snapshots": {ENRICHED: 1}}))
    second = process(b, "enrich", **{ORDERS: 2})
    ok(b.post(f"/jobs/enrich/barriers/{second}/abort", json={}))
    events = capture.wait_for("two events", lambda e: len(e) >= 2)
    assert sorted((e["eventType"], e["run"]["facets"]["metaservice_barrier"]["barrier"]) for e in events) == [
        ("COMPLETE", first),
        ("FAIL", second),
    ]
    support.wait_until(
        lambda: [counters(a)[sent], counters(b)[sent]] == [before[0] + 1, before[1] + 1], timeout=30, what="one each"
    )
    assert len(capture.events()) == 2


def test_a_5xx_is_retried_and_a_4xx_is_given_up(servers: tuple[httpx.Client, httpx.Client], capture: Capture) -> None:
    api, _ = servers
    register(api, "enrich", [ORDERS], [ENRICHED])
    before = counters(api)
    capture.answers.extend([503, 503])
    first = process(api, "enrich", **{ORDERS: 1})
    ok(api.post(f"/jobs/enrich/barriers/{first}/commit", json={"snapshots": {ENRICHED: 1}}))
    events = capture.wait_for("three attempts", lambda e: len(e) >= 3)
    assert [e["run"]["facets"]["metaservice_barrier"]["barrier"] for e in events] == [first] * 3  # the same event

    capture.answers.append(400)
    second = process(api, "enrich", **{ORDERS: 2})
    ok(api.post(f"/jobs/enrich/barriers/{second}/commit", json={"snapshots": {ENRICHED: 2}}))
    capture.wait_for("the refused attempt", lambda e: len(e) >= 4)

    def delta() -> dict[str, float]:
        now = counters(api)
        return {k: now[k] - before.get(k, 0) for k in now if k.endswith("_total")}

    support.wait_until(lambda: delta()["metaservice_openlineage_events_failed_total"] == 1, timeout=30, what="failed")
    assert delta() == {
        "metaservice_openlineage_events_sent_total": 1,
        "metaservice_openlineage_events_failed_total": 1,
        "metaservice_openlineage_events_dropped_total": 0,
    }
    assert len(capture.events()) == 4  # a 400 is not retried


def test_a_dead_endpoint_does_not_slow_commits_and_drops_are_counted(
    database_url: str, api: httpx.Client, tmp_path: Path
) -> None:
    """The endpoint accepts connections and never answers. Commits answer as fast as ever; four events hang in
    the senders, three wait in the queue, and every further one drops the oldest."""
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))
        dead.listen(64)
        url = f"http://127.0.0.1:{dead.getsockname()[1]}"
        server = start_server(
            database_url, tmp_path, openlineage_url=url, openlineage_queue_size="3", openlineage_timeout_seconds="60"
        )
        try:
            with httpx.Client(base_url=server.base_url, timeout=30) as ms:
                register(ms, "enrich", [ORDERS], [ENRICHED])
                took = []
                for snapshot in range(1, 13):
                    barrier = process(ms, "enrich", **{ORDERS: snapshot})
                    started = time.perf_counter()
                    ok(ms.post(f"/jobs/enrich/barriers/{barrier}/commit", json={"snapshots": {ENRICHED: snapshot}}))
                    took.append(time.perf_counter() - started)
                figures = counters(ms)
        finally:
            server.stop()
    assert max(took) < 2.0, took  # a commit waiting for the endpoint would take the 60 s timeout
    assert figures["metaservice_openlineage_events_dropped_total"] >= 12 - 3 - 4
    assert figures["metaservice_openlineage_events_sent_total"] == 0
    del api  # empties the database after the test


PARENT_HEADER = "X-OpenLineage-Parent"


def parent_facet(namespace: str, name: str, run_id: str) -> dict[str, Any]:
    """OpenLineage's standard parent facet as MetaService sends it: the root is the parent (nothing better known)."""
    ids = {"run": {"runId": run_id, "facets": {}}, "job": {"namespace": namespace, "name": name, "facets": {}}}
    return {**ids, "root": ids}


def test_a_job_naming_its_parent_run_nests_the_runs_it_ends_under_it(
    servers: tuple[httpx.Client, httpx.Client], capture: Capture
) -> None:
    """X-OpenLineage-Parent on commit and abort becomes the `parent` facet of the COMPLETE and FAIL events; a run
    the server aborts carries none, even when the job's `next` named a parent."""
    api, _ = servers
    register(api, "enrich", [ORDERS], [ENRICHED])
    task_run, retry_run = str(uuid.uuid4()), str(uuid.uuid4())
    # a job name may hold '/': the namespace ends at the first one, the run id starts after the last
    as_task = {PARENT_HEADER: f"airflow/daily/enrich.spark/{task_run}"}
    as_retry = {PARENT_HEADER: f"airflow/daily.enrich/{retry_run.upper()}"}  # any UUID spelling

    committed = ok(api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {ORDERS: 1}}, headers=as_task))
    ok(
        api.post(
            f"/jobs/enrich/barriers/{committed['barrier']}/commit", json={"snapshots": {ENRICHED: 1}}, headers=as_task
        )
    )
    failed = process(api, "enrich", **{ORDERS: 2})
    ok(api.post(f"/jobs/enrich/barriers/{failed}/abort", json={"reason": "bad file"}, headers=as_retry))
    changed = ok(api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {ORDERS: 3}}, headers=as_task))
    register(api, "enrich", [CUSTOMERS], [])  # the server aborts the run in flight

    events = capture.wait_for("three events", lambda e: len(e) >= 3)
    [complete] = of_barrier(events, committed["barrier"])
    [fail] = of_barrier(events, failed)
    [abort] = of_barrier(events, changed["barrier"])
    assert (complete["eventType"], fail["eventType"], abort["eventType"]) == ("COMPLETE", "FAIL", "ABORT")
    parent = complete["run"]["facets"]["parent"]
    assert re.fullmatch(
        r"https://openlineage\.io/spec/facets/[\d-]+/ParentRunFacet\.json#/\$defs/ParentRunFacet", parent["_schemaURL"]
    )
    assert parent == {
        **parent_facet("airflow", "daily/enrich.spark", task_run),
        "_producer": complete["producer"],
        "_schemaURL": parent["_schemaURL"],  # OpenLineage's own (the version is the library's)
    }
    assert fail["run"]["facets"]["parent"]["run"]["runId"] == retry_run  # canonical (lower case)
    assert {k: fail["run"]["facets"]["parent"][k] for k in ("run", "job", "root")} == parent_facet(
        "airflow", "daily.enrich", retry_run
    )
    assert "parent" not in abort["run"]["facets"]
    assert len(capture.events()) == 3


@pytest.mark.parametrize(
    ("value", "wrong"),
    [
        ("airflow/daily.enrich", "three non-empty parts"),
        ("/daily.enrich/0192f7a4-7c1e-7d3a-9b1e-2f4c6a8e0d11", "three non-empty parts"),
        ("airflow//0192f7a4-7c1e-7d3a-9b1e-2f4c6a8e0d11", "three non-empty parts"),
        ("airflow/daily.enrich/not-a-uuid", "'not-a-uuid' (after the last '/') is not a UUID"),
    ],
)
def test_a_malformed_parent_is_422_naming_the_header_and_changes_nothing(
    servers: tuple[httpx.Client, httpx.Client], capture: Capture, value: str, wrong: str
) -> None:
    api, _ = servers
    register(api, "enrich", [ORDERS], [ENRICHED])
    bad = {PARENT_HEADER: value}
    barrier = process(api, "enrich", **{ORDERS: 1})
    calls = [
        api.post(f"/jobs/enrich/barriers/{barrier}/commit", json={"snapshots": {ENRICHED: 1}}, headers=bad),
        api.post(f"/jobs/enrich/barriers/{barrier}/abort", json={}, headers=bad),
        api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {ORDERS: 2}}, headers=bad),
    ]
    for response in calls:
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == "application/problem+json"
        body = response.json()
        assert body["code"] == "invalid_request" and PARENT_HEADER in body["detail"]
        [error] = body["errors"]
        assert error["loc"] == ["header", PARENT_HEADER] and wrong in error["msg"], error
    job = ok(api.get("/jobs/enrich"))
    assert job["in_flight_barrier"] == barrier  # neither committed nor aborted
    assert ok(api.get(f"/tables/{ORDERS.replace('.', '/')}"))["latest_snapshot_id"] == 1  # `next`'s report: not taken
    ok(api.post(f"/jobs/enrich/barriers/{barrier}/commit", json={"snapshots": {ENRICHED: 1}}))
    [event] = capture.wait_for("the COMPLETE event", lambda e: len(e) >= 1)
    assert event["eventType"] == "COMPLETE" and "parent" not in event["run"]["facets"]


def test_the_client_sends_the_parent_run_with_next_commit_and_abort(
    servers: tuple[httpx.Client, httpx.Client], capture: Capture
) -> None:
    """spark_client's MetaServiceClient, the HTTP layer EtlJob and StreamingJob call, against the real server."""
    api, _ = servers
    register(api, "enrich", [ORDERS], [ENRICHED])
    parent, run_id = "airflow/daily.enrich", str(uuid.uuid4())
    with MetaServiceClient(str(api.base_url)) as client:
        first = client.next_barrier("enrich", {ORDERS: 1}, openlineage_parent=f"{parent}/{run_id}")
        assert first.barrier is not None
        client.commit_barrier("enrich", first.barrier, {ENRICHED: 1}, openlineage_parent=f"{parent}/{run_id}")
        second = client.next_barrier("enrich", {ORDERS: 2}, openlineage_parent=f"{parent}/{run_id}")
        assert second.barrier is not None
        with pytest.raises(InvalidRequest, match=PARENT_HEADER) as refused:
            client.abort_barrier("enrich", second.barrier, openlineage_parent=f"{parent}/not-a-uuid")
        assert refused.value.status == 422
        client.abort_barrier("enrich", second.barrier, reason="bad file", openlineage_parent=f"{parent}/{run_id}")

    events = capture.wait_for("two events", lambda e: len(e) >= 2)
    assert sorted((e["eventType"], e["run"]["facets"]["parent"]["run"]["runId"]) for e in events) == [
        ("COMPLETE", run_id),
        ("FAIL", run_id),
    ]
    assert {e["run"]["facets"]["parent"]["job"]["name"] for e in events} == {"daily.enrich"}
