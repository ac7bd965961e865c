"""`openlineage_parent_id` and `spark_env` in a real task instance (`dag.test()`), with Airflow's OpenLineage
provider on (a file transport, conftest.py): the id is what the provider's `lineage_parent_id` macro renders, and
names the run its listener reported for the task, which MetaService's events of the Spark job then nest under."""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Any

import pytest
from airflow.sdk import DAG, task
from conftest import OPENLINEAGE_EVENTS
from dag_registry import run_dag, states
from metaservice_airflow import openlineage_parent_id, spark_env

from spark_client._http import check_openlineage_parent


def reported(job_name: str, *, timeout: float = 30) -> list[dict[str, Any]]:
    """The OpenLineage events Airflow's listener wrote for `job_name`, once its COMPLETE is there."""
    deadline = time.monotonic() + timeout
    while True:
        lines = OPENLINEAGE_EVENTS.read_text().splitlines() if OPENLINEAGE_EVENTS.exists() else []
        events = [e for e in map(json.loads, filter(None, lines)) if e.get("job", {}).get("name") == job_name]
        if any(e["eventType"] == "COMPLETE" for e in events):
            return events
        assert time.monotonic() < deadline, f"no COMPLETE event for {job_name} in {OPENLINEAGE_EVENTS}: {events}"
        time.sleep(0.1)  # polling a file another thread writes, with a deadline


def test_the_parent_id_is_the_providers_macro_and_names_the_run_airflow_reported() -> None:
    seen: dict[str, Any] = {}

    def build() -> DAG:
        with DAG("openlineage_parent", schedule=None) as dag:

            @task
            def start_spark(macro: str, **context: Any) -> None:
                seen.update(ours=openlineage_parent_id(context), env=spark_env(context), macro=macro)

            start_spark("{{ macros.OpenLineageProviderPlugin.lineage_parent_id(task_instance) }}")
        return dag

    run = run_dag("openlineage_parent", build)
    assert states(run) == {"start_spark": "success"}
    assert seen["ours"] == seen["macro"]
    assert seen["env"] == {"OPENLINEAGE_PARENT_ID": seen["ours"]}
    assert check_openlineage_parent(seen["ours"]) == seen["ours"]  # what EtlJob takes
    namespace, name, run_id = seen["ours"].split("/")
    assert (namespace, name) == ("default", "openlineage_parent.start_spark")
    assert uuid.UUID(run_id)
    events = reported(name)
    assert {e["run"]["runId"] for e in events} == {run_id}
    assert {e["job"]["namespace"] for e in events} == {namespace}
    assert {"START", "COMPLETE"} <= {e["eventType"] for e in events}


def test_without_the_provider_the_error_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "airflow.providers.openlineage.plugins.macros", None)  # import fails
    with pytest.raises(ImportError, match=r"pip install 'metaservice-airflow\[openlineage\]'"):
        spark_env({"ti": object()})
