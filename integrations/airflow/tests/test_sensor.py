"""MetaServiceConsistencySensor in real Airflow (`dag.test()`, the triggerer inline) against the real server."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from airflow.sdk import DAG, task
from conftest import connection_env
from dag_registry import run_dag, states
from metaservice_airflow.sensors import MetaServiceConsistencySensor
from metaservice_pipeline import Chain, flaky_proxy, server_url, when_waiting


def test_deferred_sensor_hands_over_the_barrier_and_the_downstream_task_reads_exactly_it(chain: Chain) -> None:
    """The sensor waits (deferred) until a and b are consistent at a new barrier; a newer barrier committed
    before the downstream task runs does not change what it reads."""
    barrier0, _ = chain.commit_round()
    first = chain.start()  # a has the new barrier, b not: not consistent yet
    seen: dict[str, Any] = {}

    def build() -> DAG:
        with DAG("sensor_handover", schedule=None) as dag:
            ready = MetaServiceConsistencySensor(
                task_id="ready", tables=chain.tables, min_barrier=barrier0 + 1, timeout=600, poll_seconds=5
            )

            @task
            def commit_a_newer_barrier() -> None:
                chain.commit_round()

            @task
            def downstream(handed: dict[str, Any]) -> None:
                seen.update(handed)

            ready >> commit_a_newer_barrier() >> downstream(ready.output)
        return dag

    finisher = when_waiting(chain.api, chain.finish)  # b commits while the sensor waits on the server
    run = run_dag("sensor_handover", build)
    finisher.join()
    assert not finisher.failure  # type: ignore[attr-defined]
    assert states(run) == {"ready": "success", "commit_a_newer_barrier": "success", "downstream": "success"}
    assert seen["barrier"] == first
    assert seen["snapshots"] == {chain.a: 20, chain.b: 21}  # round 2's, not round 3's
    assert chain.newest_barrier(chain.a) > first  # a newer version existed when downstream ran
    assert {t: chain.snapshot_at(t, first) for t in chain.tables} == seen["snapshots"]


def test_a_server_down_then_answering_503_delays_the_wait_and_never_fails_it(
    chain: Chain, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sensor starts while the server is down, then it answers 503, then it is back: the sensor keeps asking
    and succeeds with the barrier committed meanwhile."""
    chain.commit_round()
    with flaky_proxy(server_url(), mode="down") as proxy:
        monkeypatch.setenv("AIRFLOW_CONN_METASERVICE_DEFAULT", connection_env(proxy.url))

        def outage() -> None:
            proxy.wait_for(lambda p: p.refused >= 3)
            proxy.set_mode("503")
            proxy.wait_for(lambda p: p.unavailable >= 3)
            chain.commit_round()
            proxy.set_mode("forward")

        thread = threading.Thread(target=outage, daemon=True)
        thread.start()
        barrier0 = chain.newest_barrier(chain.a)

        def build() -> DAG:
            with DAG("sensor_outage", schedule=None) as dag:
                MetaServiceConsistencySensor(
                    task_id="ready", tables=chain.tables, min_barrier=barrier0 + 1, timeout=600, poll_seconds=5
                )
            return dag

        run = run_dag("sensor_outage", build)
        thread.join(timeout=60)
    assert states(run) == {"ready": "success"}
    assert proxy.refused >= 3 and proxy.unavailable >= 3


def test_the_sensor_fails_at_its_timeout_and_not_before(chain: Chain) -> None:
    barrier0, _ = chain.commit_round()
    timeout = 6

    def build() -> DAG:
        with DAG("sensor_timeout", schedule=None) as dag:
            MetaServiceConsistencySensor(
                task_id="ready", tables=chain.tables, min_barrier=barrier0 + 1, timeout=timeout, poll_seconds=2
            )
        return dag

    started = time.monotonic()
    run = run_dag("sensor_timeout", build)
    assert states(run) == {"ready": "failed"}
    assert time.monotonic() - started >= timeout


def test_the_sensor_waits_in_the_worker_when_not_deferrable(chain: Chain) -> None:
    barrier0, _ = chain.commit_round()
    chain.start()

    def build() -> DAG:
        with DAG("sensor_in_worker", schedule=None) as dag:
            MetaServiceConsistencySensor(
                task_id="ready", tables=chain.tables, min_barrier=barrier0 + 1, timeout=600, deferrable=False
            )
        return dag

    finisher = when_waiting(chain.api, chain.finish)
    run = run_dag("sensor_in_worker", build)
    finisher.join()
    assert states(run) == {"ready": "success"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tables": "lake.mart.a"}, "non-empty list"),
        ({"tables": ["lake.mart"]}, "catalog.database.table"),
        ({"tables": ["a.b.c"], "consistency": "eventual"}, "'strong' or 'weak'"),
        ({"tables": ["a.b.c"], "min_barrier": 1, "max_staleness_seconds": 5}, "not both"),
        ({"tables": ["a.b.c"], "min_barrier": "{{ ti.xcom_pull() }}", "max_staleness_seconds": 5}, "not both"),
        ({"tables": ["a.b.c"], "max_staleness_seconds": 0}, "max_staleness_seconds"),
        ({"tables": ["a.b.c"], "poll_seconds": -1}, "poll_seconds"),
    ],
)
def test_bad_arguments_fail_when_the_dag_is_parsed(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MetaServiceConsistencySensor(task_id="bad", **kwargs)


def test_the_provider_registers_the_connection_type() -> None:
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    assert "metaservice-airflow" in manager.providers
    hook = manager.hooks["metaservice"]
    assert hook is not None and hook.hook_class_name == "metaservice_airflow.hooks.MetaServiceHook"
