"""A session-scoped local[2] SparkSession and a fresh Delta lake per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spark_client import DeltaCatalog
from spark_client._spark import local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session", name="spark")
def fx_spark() -> Iterator[SparkSession]:
    spark = local_session("metaservice-tests")
    yield spark
    spark.stop()


@pytest.fixture(name="lake")
def fx_lake(tmp_path: Path) -> DeltaCatalog:
    return DeltaCatalog(tmp_path / "lake")
