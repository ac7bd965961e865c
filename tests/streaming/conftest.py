"""Streaming tests use the Spark tests' fixtures: one local[2] session, a client of the worker's server, a
catalog of every format."""

from tests.spark.conftest import fx_catalog, fx_client, fx_iceberg_pg_url, fx_lake, fx_spark

__all__ = ["fx_catalog", "fx_client", "fx_iceberg_pg_url", "fx_lake", "fx_spark"]
