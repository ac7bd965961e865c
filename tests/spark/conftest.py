"""A session-scoped local[2] SparkSession and a fresh Delta lake per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spark_client.catalog import DeltaCatalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session", name="spark")
def fx_spark() -> Iterator[SparkSession]:
    """One local Spark for the whole session (starting the JVM takes seconds); UTC, two cores, no UI."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
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


@pytest.fixture(name="lake")
def fx_lake(tmp_path: Path) -> DeltaCatalog:
    """A Delta catalog rooted in this test's temporary directory."""
    return DeltaCatalog(tmp_path / "lake")
