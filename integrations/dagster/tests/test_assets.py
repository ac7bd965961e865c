"""Observable source assets (DataVersion = the barrier), freshness checks from the server's delays, and the
Pipes helper in a real subprocess: on a real Dagster instance against the real server."""

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    AssetExecutionContext,
    AssetKey,
    DagsterInstance,
    Definitions,
    PipesSubprocessClient,
    asset,
    materialize,
)
from dagster._core.definitions.observe import observe
from metaservice_dagster import (
    MetaServiceResource,
    metaservice_freshness_checks,
    metaservice_source_assets,
    pipes_extras,
    table_asset_key,
)
from metaservice_pipeline import Chain, server_url


def _observed_version(instance: DagsterInstance, key: AssetKey) -> str | None:
    record = instance.get_latest_data_version_record(key, is_source=True)
    if record is None:
        return None
    observation = record.asset_observation
    assert observation is not None
    return observation.data_version


def test_a_source_asset_is_versioned_by_the_barrier_its_table_completed(
    chain: Chain, instance: DagsterInstance, metaservice: MetaServiceResource
) -> None:
    sources = metaservice_source_assets(chain.tables)
    first, _ = chain.commit_round()
    assert observe(sources, instance=instance, resources={"metaservice": metaservice}).success
    assert {_observed_version(instance, table_asset_key(t)) for t in chain.tables} == {str(first)}
    chain.start()  # a completes a new barrier, b does not: strong versions stay at the consistent one
    observe(sources, instance=instance, resources={"metaservice": metaservice})
    assert {_observed_version(instance, table_asset_key(t)) for t in chain.tables} == {str(first)}
    second, _ = chain.finish()
    observe(sources, instance=instance, resources={"metaservice": metaservice})
    assert {_observed_version(instance, table_asset_key(t)) for t in chain.tables} == {str(second)}


def test_freshness_checks_pass_and_fail_by_the_servers_delays(
    chain: Chain, instance: DagsterInstance, metaservice: MetaServiceResource
) -> None:
    chain.commit_round()
    sources = metaservice_source_assets(chain.tables)
    lenient = metaservice_freshness_checks(chain.tables, max_freshness_seconds=3600)
    strict = metaservice_freshness_checks([chain.a], max_freshness_seconds=0)
    for checks, passed in ((lenient, True), (strict, False)):
        defs = Definitions(assets=sources, asset_checks=checks, resources={"metaservice": metaservice})
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(instance=instance)
        evaluations = result.get_asset_check_evaluations()
        assert evaluations and {e.passed for e in evaluations} == {passed}
        for evaluation in evaluations:
            metadata = evaluation.metadata
            assert metadata["barrier"].value == chain.newest_barrier(chain.a)
            assert metadata["freshness_seconds"].value is not None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tables": ["lake.mart"], "max_lag_seconds": 1}, "catalog.database.table"),
        ({"tables": ["a.b.c"]}, "max_freshness_seconds and/or max_lag_seconds"),
        ({"tables": ["a.b.c"], "max_lag_seconds": -2}, "max_lag_seconds"),
    ],
)
def test_bad_check_arguments_fail_at_load_time(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        metaservice_freshness_checks(**kwargs)


JOB = textwrap.dedent(
    """
    import sys
    from types import SimpleNamespace

    from dagster_pipes import open_dagster_pipes

    from metaservice_dagster.pipes import handed_versions, report_run
    from spark_client import MetaServiceClient

    url, job, root, sink, snapshot = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    with open_dagster_pipes() as pipes, MetaServiceClient(url) as client:
        handed = handed_versions(pipes)
        pipes.log.info(f"handed {handed}")
        decision = client.next_barrier(job, {root: snapshot})
        assert decision.action == "process", decision
        client.commit_barrier(job, decision.barrier, {sink: snapshot})
        report_run(pipes, SimpleNamespace(action="process", barrier=decision.barrier, snapshots={sink: snapshot}))
    """
)


def test_pipes_reports_the_barrier_and_snapshots_of_a_job_as_materialization_metadata(
    chain: Chain, instance: DagsterInstance, tmp_path: Path
) -> None:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    job_id = next(iter(chain.jobs))
    handed = {"barrier": 1, "snapshots": {chain.a: 1}}

    @asset(key=table_asset_key(chain.a))
    def mart_a(context: AssetExecutionContext, pipes_subprocess_client: PipesSubprocessClient) -> Any:
        command = [sys.executable, str(script), server_url(), job_id, chain.root, chain.a, "7"]
        return pipes_subprocess_client.run(
            command=command, context=context, extras=pipes_extras(handed)
        ).get_materialize_result()

    result = materialize([mart_a], instance=instance, resources={"pipes_subprocess_client": PipesSubprocessClient()})
    assert result.success
    [materialization] = result.asset_materializations_for_node(mart_a.op.name)
    barrier = chain.newest_barrier(chain.a)
    assert materialization.metadata["metaservice_barrier"].value == barrier
    assert materialization.metadata["metaservice_snapshots"].value == {chain.a: 7}
    assert materialization.tags is not None and materialization.tags.get("dagster/data_version") == str(barrier)
    assert chain.snapshot_at(chain.a, barrier) == 7
