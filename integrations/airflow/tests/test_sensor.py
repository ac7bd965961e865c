"""MetaServiceConsistencySensor in real Airflow (`dag.test()`, the triggerer inline) against the real server."""

from __future__ import annotations

from typing import Any

from airflow.sdk import DAG, task
from dag_registry import run_dag, states
from metaservice_pipeline import Chain, when_waiting

from metaservice_airflow.sensors import MetaServiceConsistencySensor


def test_deferred_sensor_hands_over_the_barrier_and_the_downstream_task_reads_exactly_it(chain: Chain) -> None:
    """The sensor waits (deferred) until a and b are consistent at a new barrier; a newer barrier committed
    before the downstream task runs does not change what it reads."""
    barrier0, _ = chain.commit_round()
    first = chain.start()  # a has the new barrier, b not: not consistent yet
    seen: dict[str, Any] = {}

    def build() -> DAG:
        with DAG("sensor_handover", schedule=None) as dag:
            ready = MetaServiceConsistencySensor(
                task_id="ready", tables=chain.tables, min_barrier=barrier0 + 1, timeout=120, poll_seconds=5
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
