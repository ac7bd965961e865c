"""The consistency sensor on a real Dagster instance against the real server: one run per new consistent
barrier, the snapshot ids in the run config, the cursor and run keys across a killed daemon, outages."""

# (no `from __future__ import annotations`: Dagster reads the op config annotation as a type)

from typing import Any

import pytest
from daemon import evaluate, launch, runs_of
from dagster import DagsterInstance, job, op
from metaservice_dagster import MetaServiceResource, MetaServiceVersions, metaservice_consistency_sensor, run_key
from metaservice_pipeline import Chain, flaky_proxy, server_url, when_waiting

SEEN: list[dict[str, Any]] = []


@op
def consume(config: MetaServiceVersions) -> None:
    SEEN.append({"barrier": config.barrier, "snapshots": dict(config.snapshots)})


@job
def consumer() -> None:
    consume()


def _sensor(chain: Chain, **kwargs: Any) -> Any:
    return metaservice_consistency_sensor(
        name="inputs_ready", tables=chain.tables, job=consumer, ops=["consume"], **{"wait_seconds": 0, **kwargs}
    )


@pytest.fixture(autouse=True)
def _clear_seen() -> None:
    SEEN.clear()


def test_one_run_per_new_consistent_barrier_reading_exactly_the_handed_snapshots(
    chain: Chain, instance: DagsterInstance, metaservice: MetaServiceResource
) -> None:
    sensor, resources = _sensor(chain), {"metaservice": metaservice}
    first, snapshots = chain.commit_round()
    tick = launch(evaluate(sensor, instance, None, resources), sensor, instance, consumer, resources)
    assert tick.launched == [run_key(chain.tables, "strong", first)]
    assert [{"barrier": first, "snapshots": snapshots}] == SEEN

    again = evaluate(sensor, instance, tick.cursor, resources)  # nothing new
    assert again.requests == [] and again.skip is not None

    chain.start()  # a has a newer barrier, b not yet: not consistent
    assert evaluate(sensor, instance, tick.cursor, resources).requests == []

    second, _ = chain.finish()
    tick2 = evaluate(sensor, instance, tick.cursor, resources)
    chain.commit_round()  # a newer version is committed before the run starts
    launch(tick2, sensor, instance, consumer, resources)
    assert [s["barrier"] for s in SEEN] == [first, second]
    assert SEEN[1]["snapshots"] == {t: chain.snapshot_at(t, second) for t in chain.tables}
    assert chain.newest_barrier(chain.a) > second
    assert len(runs_of(instance, sensor)) == 2


def test_an_evaluation_waits_on_the_server_and_is_answered_by_the_commit(
    chain: Chain, instance: DagsterInstance, metaservice: MetaServiceResource
) -> None:
    sensor, resources = _sensor(chain, wait_seconds=30), {"metaservice": metaservice}
    first, _ = chain.commit_round()
    tick = evaluate(sensor, instance, None, resources)
    chain.start()
    finisher = when_waiting(chain.api, chain.finish)  # b commits while the evaluation waits
    waited = evaluate(sensor, instance, tick.cursor, resources)
    finisher.join()
    assert not finisher.failure  # type: ignore[attr-defined]
    assert [r.run_key for r in waited.requests] == [run_key(chain.tables, "strong", chain.newest_barrier(chain.b))]
    assert chain.newest_barrier(chain.b) > first


def test_a_killed_daemon_neither_duplicates_nor_misses_a_barrier(
    chain: Chain, instance: DagsterInstance, metaservice: MetaServiceResource
) -> None:
    sensor, resources = _sensor(chain), {"metaservice": metaservice}
    first, _ = chain.commit_round()
    # killed after the evaluation, before the run was launched and the cursor stored: the restarted daemon
    # evaluates with the old cursor and launches the run for the barrier (not missed)
    evaluate(sensor, instance, None, resources)
    restarted = launch(evaluate(sensor, instance, None, resources), sensor, instance, consumer, resources)
    assert restarted.launched == [run_key(chain.tables, "strong", first)]
    # killed after the run was launched, before the cursor was stored: the same run key again, skipped
    again = launch(evaluate(sensor, instance, None, resources), sensor, instance, consumer, resources)
    assert again.launched == [] and again.skipped == [run_key(chain.tables, "strong", first)]
    # a barrier committed while the daemon was down: launched once the daemon runs again
    second, _ = chain.commit_round()
    later = launch(evaluate(sensor, instance, again.cursor, resources), sensor, instance, consumer, resources)
    assert later.launched == [run_key(chain.tables, "strong", second)]
    assert [s["barrier"] for s in SEEN] == [first, second]
    assert len(runs_of(instance, sensor)) == 2


def test_a_server_down_or_answering_503_skips_the_evaluation_and_never_fails_it(
    chain: Chain, instance: DagsterInstance
) -> None:
    first, _ = chain.commit_round()
    with flaky_proxy(server_url(), mode="down") as proxy:
        resources = {"metaservice": MetaServiceResource(url=proxy.url, retry_seconds=1)}
        sensor = _sensor(chain)
        down = evaluate(sensor, instance, None, resources)
        assert down.requests == [] and "unavailable" in (down.skip or "")
        assert proxy.refused >= 2  # it retried within the evaluation
        proxy.set_mode("503")
        busy = evaluate(sensor, instance, None, resources)
        assert busy.requests == [] and "unavailable" in (busy.skip or "")
        assert proxy.unavailable >= 2
        proxy.set_mode("forward")
        up = evaluate(sensor, instance, None, resources)
    assert [r.run_key for r in up.requests] == [run_key(chain.tables, "strong", first)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tables": "lake.mart.a"}, "non-empty list"),
        ({"tables": ["lake.mart"]}, "catalog.database.table"),
        ({"tables": ["a.b.c"], "consistency": "eventual"}, "'strong' or 'weak'"),
        ({"tables": ["a.b.c"], "min_barrier": 1, "max_staleness_seconds": 5}, "not both"),
        ({"tables": ["a.b.c"], "max_staleness_seconds": -1}, "max_staleness_seconds"),
        ({"tables": ["a.b.c"], "wait_seconds": 90}, "wait_seconds"),
        ({"tables": ["a.b.c"], "job": None}, "exactly one of job and job_name"),
    ],
)
def test_bad_arguments_fail_when_the_definitions_load(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"name": "s", "job": consumer, **kwargs}
    with pytest.raises(ValueError, match=message):
        metaservice_consistency_sensor(**arguments)
