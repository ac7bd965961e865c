"""OpenLineage in: events sent by the real openlineage-python client (HttpTransport) to a real server register
the job's sources and sinks, with the same problems as `/register/...`, all of an event's edges or none."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import (
    DatasetEvent,
    InputDataset,
    Job,
    JobEvent,
    OutputDataset,
    Run,
    RunEvent,
    RunState,
    StaticDataset,
)
from openlineage.client.transport.http import HttpConfig, HttpTransport

from tests import support

ORDERS, CUSTOMERS, ENRICHED = "lake.raw.orders", "lake.raw.customers", "lake.mart.orders_enriched"
NOW = datetime(2026, 11, 24, 8, 0, tzinfo=UTC).isoformat()


def transport(base_url: str, **config: Any) -> HttpTransport:
    """OpenLineage's own HTTP transport, posting to `{base_url}/api/v1/lineage` (its default endpoint)."""
    return HttpTransport(HttpConfig(url=base_url, retry={"total": 0}, **config))


def run_event(
    job: str,
    inputs: list[tuple[str, str]],
    outputs: list[tuple[str, str]],
    *,
    state: RunState = RunState.START,
    run_id: str | None = None,
) -> RunEvent:
    """A RunEvent for `job` with (namespace, name) datasets."""
    return RunEvent(
        eventType=state,
        eventTime=NOW,
        run=Run(runId=run_id or str(uuid.uuid4())),
        job=Job(namespace="spark", name=job),
        inputs=[InputDataset(namespace=ns, name=name) for ns, name in inputs],
        outputs=[OutputDataset(namespace=ns, name=name) for ns, name in outputs],
        producer="https://example.org/test",
    )


def post(base_url: str, event: RunEvent | JobEvent | DatasetEvent) -> requests.Response:
    """Send `event` with the transport; its answer whatever the status (the transport raises on a 4xx)."""
    try:
        return transport(base_url).emit(event)
    except requests.HTTPError as exc:
        assert exc.response is not None
        return exc.response


def problem(response: requests.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    return body


def job(api: httpx.Client, name: str) -> dict[str, Any]:
    answer = api.get(f"/jobs/{name}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def graph(api: httpx.Client) -> Any:
    return api.get("/lineage").json()


def test_run_event_from_the_openlineage_client_registers_sources_and_sinks(api: httpx.Client) -> None:
    client = OpenLineageClient(transport=transport(str(api.base_url)))
    event = run_event(
        "enrich",
        [("s3://warehouse", ORDERS), ("hive://metastore", CUSTOMERS)],
        [("hive://metastore", ENRICHED)],
    )
    client.emit(event)  # raises on anything but a 2xx
    enrich = job(api, "enrich")
    assert sorted(enrich["sources"]) == [CUSTOMERS, ORDERS] and enrich["sinks"] == [ENRICHED]
    assert api.get(f"/tables/{ENRICHED.replace('.', '/')}").json()["writer"] == "enrich"
    assert api.get(f"/tables/{ORDERS.replace('.', '/')}").json()["kind"] == "root"

    answer = post(str(api.base_url), event)  # the same event again: nothing new
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "job_id": "enrich",
        "registered": [
            {"job_id": "enrich", "table": ORDERS, "role": "source", "created": False},
            {"job_id": "enrich", "table": CUSTOMERS, "role": "source", "created": False},
            {"job_id": "enrich", "table": ENRICHED, "role": "sink", "created": False},
        ],
        "ignored": [],
    }


def test_the_answer_lists_what_was_registered_and_the_datasets_left_aside(api: httpx.Client) -> None:
    event = run_event(
        "merge-job",
        [("file", "/tmp/lookup.csv"), ("delta", ORDERS), ("delta", ENRICHED), ("kafka://broker", "orders-topic")],
        [("delta", ENRICHED)],  # MERGE INTO reads its target: an input that is also the output
        state=RunState.COMPLETE,
    )
    answer = post(str(api.base_url), event)
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["registered"] == [
        {"job_id": "merge-job", "table": ORDERS, "role": "source", "created": True},
        {"job_id": "merge-job", "table": ENRICHED, "role": "sink", "created": True},
    ]
    ignored = {(d["name"], d["role"]): d for d in body["ignored"]}
    assert set(ignored) == {("/tmp/lookup.csv", "input"), (ENRICHED, "input"), ("orders-topic", "input")}
    assert "no dataset mapping rule matches" in ignored[("/tmp/lookup.csv", "input")]["reason"]
    assert ignored[(ENRICHED, "input")]["table"] == ENRICHED
    assert "registered as a sink only" in ignored[(ENRICHED, "input")]["reason"]
    assert job(api, "merge-job")["sources"] == [ORDERS]


def test_a_job_event_registers_and_a_dataset_event_registers_nothing(api: httpx.Client) -> None:
    static = JobEvent(
        eventTime=NOW,
        job=Job(namespace="airflow", name="dag.task"),
        inputs=[InputDataset(namespace="pg", name=ORDERS)],
        outputs=[OutputDataset(namespace="pg", name=ENRICHED)],
        producer="https://example.org/test",
    )
    assert post(str(api.base_url), static).status_code == 201
    assert job(api, "dag.task")["sinks"] == [ENRICHED]
    dataset = DatasetEvent(
        eventTime=NOW, dataset=StaticDataset(namespace="pg", name=CUSTOMERS), producer="https://example.org/test"
    )
    answer = post(str(api.base_url), dataset)
    assert answer.status_code == 200, answer.text
    assert answer.json()["job_id"] is None and answer.json()["registered"] == []
    assert answer.json()["ignored"][0]["role"] == "dataset"
    assert api.get(f"/tables/{CUSTOMERS.replace('.', '/')}").status_code == 404


def test_a_second_writer_is_409_table_has_writer_and_nothing_of_the_event_is_registered(api: httpx.Client) -> None:
    assert api.post(f"/register/sink/enrich/{ENRICHED.replace('.', '/')}").status_code == 201
    event = run_event("rogue", [("s3", ORDERS)], [("s3", "lake.mart.fresh"), ("s3", ENRICHED)])
    body = problem(post(str(api.base_url), event), 409, "table_has_writer")
    assert body["writer"] == "enrich" and body["table"] == ENRICHED
    assert api.get("/jobs/rogue").status_code == 404  # neither the job, its source nor its first sink
    assert api.get("/tables/lake/raw/orders").status_code == 404
    assert api.get("/tables/lake/mart/fresh").status_code == 404


def test_a_cycle_is_409_cycle_naming_the_loop(api: httpx.Client) -> None:
    assert post(str(api.base_url), run_event("a", [("x", "lake.s.t1")], [("x", "lake.s.t2")])).status_code == 201
    assert post(str(api.base_url), run_event("b", [("x", "lake.s.t2")], [("x", "lake.s.t3")])).status_code == 201
    before = graph(api)
    body = problem(post(str(api.base_url), run_event("c", [("x", "lake.s.t3")], [("x", "lake.s.t1")])), 409, "cycle")
    assert body["cycle"][0] == body["cycle"][-1] == "lake.s.t1"
    assert {"a", "b", "c"} <= set(body["cycle"])
    assert graph(api) == before and api.get("/jobs/c").status_code == 404


def test_a_case_variant_of_a_table_is_409_table_name_conflict(api: httpx.Client) -> None:
    assert api.post("/register/source/enrich/lake/raw/Orders").status_code == 201
    body = problem(post(str(api.base_url), run_event("audit", [("s3", ORDERS)], [])), 409, "table_name_conflict")
    assert body["registered"] == "lake.raw.Orders"
    assert api.get("/jobs/audit").status_code == 404


def test_a_job_name_that_is_no_job_id_is_422_naming_the_field(api: httpx.Client) -> None:
    body = problem(
        post(str(api.base_url), run_event("my job/with spaces", [("s3", ORDERS)], [])), 422, "invalid_request"
    )
    assert any(e["loc"][-2:] == ["job", "name"] for e in body["errors"]), body["errors"]
    assert api.get("/tables/lake/raw/orders").status_code == 404
    missing = api.post("/api/v1/lineage", json={"eventTime": NOW, "inputs": []})
    assert missing.status_code == 422 and missing.json()["code"] == "invalid_request"


def test_a_refused_event_leaves_a_barrier_in_flight_and_an_accepted_one_aborts_it(api: httpx.Client) -> None:
    """An answer of 4xx means nothing changed: not even rule 7's abort of the job's in-flight barrier."""
    base = str(api.base_url)
    assert post(base, run_event("enrich", [("s3", ORDERS)], [("s3", ENRICHED)])).status_code == 201
    assert api.post("/register/sink/other/lake/mart/taken").status_code == 201
    decision = api.post("/jobs/enrich/barriers/next", json={"root_snapshots": {ORDERS: 1}}).json()
    assert decision["action"] == "process"
    barrier = decision["barrier"]

    refused = run_event("enrich", [("s3", ORDERS), ("s3", CUSTOMERS)], [("s3", ENRICHED), ("s3", "lake.mart.taken")])
    problem(post(base, refused), 409, "table_has_writer")
    assert job(api, "enrich")["in_flight_barrier"] == barrier
    assert post(base, run_event("enrich", [("s3", ORDERS)], [("s3", ENRICHED)])).status_code == 200  # a repeat
    assert job(api, "enrich")["in_flight_barrier"] == barrier

    assert post(base, run_event("enrich", [("s3", CUSTOMERS)], [])).status_code == 201  # a new source
    late = api.post(f"/jobs/enrich/barriers/{barrier}/commit", json={"snapshots": {ENRICHED: 1}})
    assert late.status_code == 409 and late.json()["code"] == "not_in_flight"


# --- configured mapping ------------------------------------------------------------------------------------------

RULES = (
    '[{"namespace": "s3://lake", "name": "warehouse/(?P<db>\\\\w+)/(?P<table>\\\\w+)", "table": "lake.{db}.{table}"},'
    ' {"namespace": "kafka://*", "name": ".*", "table": null},'
    ' {"namespace": "file", "name": "/data/(.*)", "table": "lake.files.{1}"}]'
)


@pytest.fixture(scope="module", name="mapped")
def fx_mapped(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second server on the worker's database with dataset rules and unmapped datasets refused."""
    env = {"METASERVICE_OPENLINEAGE_DATASETS": RULES, "METASERVICE_OPENLINEAGE_UNMAPPED": "reject"}
    log = Path(tmp_path_factory.mktemp("ol-mapped")) / "server.log"
    server = support.ServerProcess(database_url, env=env, log_path=log).start()
    yield server.base_url
    server.stop()


def test_configured_rules_map_paths_to_tables_ignore_topics_and_refuse_the_rest(api: httpx.Client, mapped: str) -> None:
    event = run_event(
        "ingest",
        [("s3://lake", "warehouse/raw/orders"), ("kafka://prod", "orders-topic")],
        [("s3://lake", "warehouse/mart/orders_enriched")],
    )
    answer = post(mapped, event)
    assert answer.status_code == 201, answer.text
    assert [(r["table"], r["role"]) for r in answer.json()["registered"]] == [(ORDERS, "source"), (ENRICHED, "sink")]
    assert answer.json()["ignored"][0]["reason"] == "ignored by dataset mapping rule 1"

    # the default rule is replaced: a catalog name no rule matches is refused, and nothing of the event registered
    refused = run_event("other", [("s3://lake", "warehouse/raw/customers")], [("hive", "lake.mart.x"), ("s3", "y")])
    body = problem(post(mapped, refused), 422, "invalid_request")
    assert [e["loc"] for e in body["errors"]] == [["body", "outputs", 0, "name"], ["body", "outputs", 1, "name"]]
    assert "'lake.mart.x'" in body["errors"][0]["msg"]
    assert api.get("/jobs/other").status_code == 404 and api.get("/tables/lake/raw/customers").status_code == 404

    # a rule whose template makes no table name is a configuration mistake, reported as such
    body = problem(post(mapped, run_event("files", [("file", "/data/a b.csv")], [])), 422, "invalid_request")
    assert body["errors"][0]["type"] == "invalid_mapping"
    assert "rule 2" in body["errors"][0]["msg"] and "'lake.files.a b.csv'" in body["errors"][0]["msg"]


def test_a_bad_mapping_setting_stops_serve_with_one_line(database_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("METASERVICE_")}
    env |= {"METASERVICE_DATABASE_URL": database_url, "METASERVICE_OPENLINEAGE_DATASETS": '[{"name": "(", "table": 1}]'}
    result = subprocess.run(
        [sys.executable, "-m", "metaservice", "serve", "--port", str(support.free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 2, result.stderr
    assert "METASERVICE_OPENLINEAGE_DATASETS" in result.stderr and "not a regular expression" in result.stderr
