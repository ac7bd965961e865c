"""A session-scoped local[2] SparkSession, a client of the worker's server, a fresh Delta lake per test, and a
catalog of every format."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from spark_client import MetaServiceClient
from spark_client.catalog import Catalog, DeltaCatalog
from tests import support
from tests.spark.formats import FORMATS, make_catalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session", name="spark")
def fx_spark() -> Iterator[SparkSession]:
    """One local Spark for the whole session (starting the JVM takes seconds); UTC, two cores, no UI.

    Python tasks (Paimon's executor-side writes) run in this interpreter, which has pypaimon installed.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors' Python: pypaimon writes there
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("metaservice-tests")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()


@pytest.fixture(name="client")
def fx_client(server: support.ServerProcess, api: httpx.Client) -> Iterator[MetaServiceClient]:
    """A client of the worker's server; every table is emptied after the test (through `api`)."""
    del api
    with MetaServiceClient(server.base_url) as client:
        yield client


@pytest.fixture(name="lake")
def fx_lake(tmp_path: Path) -> DeltaCatalog:
    """A Delta catalog rooted in this test's temporary directory."""
    return DeltaCatalog(tmp_path / "lake")


@pytest.fixture(name="catalog", params=FORMATS)
def fx_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Catalog:
    """A catalog of each format (Delta, Iceberg on a SQLite catalog, Paimon) in this test's directory."""
    return make_catalog(request.param, tmp_path / "lake")


@pytest.fixture(scope="session", name="iceberg_pg_url")
def fx_iceberg_pg_url(admin_url: str, worker_id: str) -> str:
    """A fresh database on the test PostgreSQL server for pyiceberg's SQL catalog."""
    return support.fresh_database(admin_url, f"iceberg_catalog_{worker_id}")
