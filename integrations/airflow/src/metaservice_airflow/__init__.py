"""Apache Airflow provider for MetaService: wait for tables to have a consistent version, one run per barrier.

Example:
    from metaservice_airflow import MetaServiceConsistencySensor, MetaServiceConsistencyTrigger, MetaServiceHook
    from metaservice_airflow import openlineage_parent_id, spark_env  # the task's OpenLineage run, for Spark jobs
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("metaservice-airflow")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"


def get_provider_info() -> dict[str, Any]:
    """What Airflow's provider manager reads (entry point `apache_airflow_provider`)."""
    return {
        "package-name": "metaservice-airflow",
        "name": "MetaService",
        "description": "Wait for tables to have a consistent version (MetaService barriers); one run per barrier.",
        "versions": [__version__],
        "connection-types": [
            {"hook-class-name": "metaservice_airflow.hooks.MetaServiceHook", "connection-type": "metaservice"}
        ],
        "hooks": [{"integration-name": "MetaService", "python-modules": ["metaservice_airflow.hooks"]}],
        "sensors": [{"integration-name": "MetaService", "python-modules": ["metaservice_airflow.sensors"]}],
        "triggers": [{"integration-name": "MetaService", "python-modules": ["metaservice_airflow.triggers"]}],
        "integrations": [{"integration-name": "MetaService", "tags": ["service"]}],
    }


def __getattr__(name: str) -> Any:
    """The public classes, imported on first use (the provider manager imports this module early)."""
    if name == "MetaServiceHook":
        from metaservice_airflow.hooks import MetaServiceHook

        return MetaServiceHook
    if name == "MetaServiceConsistencySensor":
        from metaservice_airflow.sensors import MetaServiceConsistencySensor

        return MetaServiceConsistencySensor
    if name == "MetaServiceConsistencyTrigger":
        from metaservice_airflow.triggers import MetaServiceConsistencyTrigger

        return MetaServiceConsistencyTrigger
    if name == "handed_versions":
        from metaservice_airflow.handover import handed_versions

        return handed_versions
    if name in ("openlineage_parent_id", "spark_env"):
        from metaservice_airflow import lineage

        return getattr(lineage, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MetaServiceConsistencySensor",
    "MetaServiceConsistencyTrigger",
    "MetaServiceHook",
    "__version__",
    "get_provider_info",
    "handed_versions",
    "openlineage_parent_id",
    "spark_env",
]
