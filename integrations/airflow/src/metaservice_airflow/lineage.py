"""The task's OpenLineage run, handed to the Spark job it starts, so that MetaService's events of the job's runs
nest under the task (their `parent` facet) in Marquez, DataHub or any OpenLineage consumer."""

from __future__ import annotations

from typing import Any

OPENLINEAGE_PARENT_ENV = "OPENLINEAGE_PARENT_ID"  # read by spark_client's EtlJob and StreamingJob, and openlineage-dbt


def openlineage_parent_id(context: Any) -> str:
    """The task instance's OpenLineage run as `<namespace>/<job name>/<run id>`: exactly what the OpenLineage
    provider's `lineage_parent_id` macro gives (it is called), the run its listener reports for the task.

    Raises:
        ImportError: Airflow's OpenLineage provider is not installed (`pip install 'metaservice-airflow[openlineage]'`):
            without it the task has no OpenLineage run to nest under.

    Example:
        @task
        def enrich(**context):
            EtlJob(spark, client, catalog, job_id="enrich", sources=[...], sinks=[...],
                   openlineage_parent=openlineage_parent_id(context)).run_once(transform)
    """
    try:
        from airflow.providers.openlineage.plugins.macros import lineage_parent_id
    except ImportError as exc:
        raise ImportError(
            "openlineage_parent_id needs Airflow's OpenLineage provider (apache-airflow-providers-openlineage): "
            "pip install 'metaservice-airflow[openlineage]'"
        ) from exc
    return str(lineage_parent_id(context["ti"]))


def spark_env(context: Any) -> dict[str, str]:
    """Environment variables for a Spark job the task starts: `{"OPENLINEAGE_PARENT_ID": <the task's run>}`, which
    `EtlJob` and `StreamingJob` read when not given `openlineage_parent`.

    Raises:
        ImportError: as `openlineage_parent_id`.

    Example:
        @task
        def enrich(**context):
            subprocess.run(["spark-submit", "jobs/enrich.py"], env={**os.environ, **spark_env(context)}, check=True)
    """
    return {OPENLINEAGE_PARENT_ENV: openlineage_parent_id(context)}
