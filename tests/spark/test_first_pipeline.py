"""The first-pipeline guide works as written: docs/examples/first_pipeline.py, whose code the page shows, runs
against the real server with real Spark and Delta tables and a DuckDB read; every Python block of the page is a
verbatim excerpt of that file."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
from pyspark.sql import SparkSession

from spark_client import DeltaCatalog, MetaServiceClient

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "first_pipeline.py"
PAGE = ROOT / "docs" / "first-pipeline.md"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("first_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_guide_s_pipeline_ingests_once_processes_and_reads_consistently_in_duckdb(
    spark: SparkSession, client: MetaServiceClient, tmp_path: Path
) -> None:
    example = load_example()
    result = example.walk_through(spark, client, DeltaCatalog(tmp_path / "lake"))
    before, after = result["before"], result["after"]
    assert before["orders"] == before["revenue"] == pytest.approx(27.5)  # the refund (-5) is not an order
    assert after["orders"] == after["revenue"] == pytest.approx(70.0)
    assert after["barrier"] > before["barrier"]
    # what the page shows the script printing
    assert before["snapshots"] == {example.CLEAN: 0, example.DAILY: 0}
    assert after["snapshots"] == {example.CLEAN: 1, example.DAILY: 1}
    assert result["replayed"] == result["appended"] == 1  # the replay of batch 2 found its commit
    assert result["order_rows"] == 5  # five orders ingested, none twice


def test_every_python_block_of_the_page_is_an_excerpt_of_the_example() -> None:
    page = PAGE.read_text(encoding="utf-8")
    source = EXAMPLE.read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```$", page, re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 3
    for block in blocks:
        assert block in source, f"the page shows code that docs/examples/first_pipeline.py lacks:\n{block}"
    assert "docs/examples/first_pipeline.py" in page and "make install" in page
