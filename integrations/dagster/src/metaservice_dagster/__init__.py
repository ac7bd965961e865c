"""Dagster integration for MetaService: one run per consistent barrier, barrier-versioned source assets,
freshness checks from the server's delays, and a Pipes helper for `spark_client` jobs.

Example:
    from metaservice_dagster import (MetaServiceResource, MetaServiceVersions, metaservice_consistency_sensor,
                                     metaservice_freshness_checks, metaservice_source_assets)
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from metaservice_dagster.assets import metaservice_freshness_checks, metaservice_source_assets, table_asset_key
from metaservice_dagster.config import MetaServiceVersions
from metaservice_dagster.pipes import pipes_extras
from metaservice_dagster.resources import MetaServiceResource
from metaservice_dagster.sensors import metaservice_consistency_sensor, run_key

try:
    __version__ = version("metaservice-dagster")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "MetaServiceResource",
    "MetaServiceVersions",
    "__version__",
    "metaservice_consistency_sensor",
    "metaservice_freshness_checks",
    "metaservice_source_assets",
    "pipes_extras",
    "run_key",
    "table_asset_key",
]
