"""The check behind `make test-fast`'s promise: a test that is not `spark` and starts a JVM fails.

A suite of two tests outside tests/ runs with the suite's conftest as a plugin: one only imports pyspark (no JVM:
it passes), the other starts a local Spark session without being marked `spark` (it must fail at its
teardown, naming the JVM).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests import support

SUITE = """
from pyspark.sql import SparkSession


def test_imports_pyspark_only() -> None:
    assert SparkSession is not None


def test_starts_a_spark_session() -> None:
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    spark.stop()
"""


def test_a_test_outside_tests_spark_that_starts_a_jvm_fails(tmp_path: Path, admin_url: str) -> None:
    suite = tmp_path / "test_jvm.py"
    suite.write_text(SUITE)
    env = {**os.environ, "METASERVICE_TEST_DATABASE_URL": admin_url, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [sys.executable, "-m", "pytest", "-c", "pyproject.toml", "-p", "tests.conftest", "-p", "no:cacheprovider"]
    run = subprocess.run(
        [*command, "-q", str(suite)], cwd=support.REPO, env=env, capture_output=True, text=True, timeout=300
    )
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "2 passed, 1 error" in output, output  # the check fails the test at its teardown
    assert "test_starts_a_spark_session is not a spark test (tests/spark) but started a JVM" in output, output
    assert "test_imports_pyspark_only is not" not in output, output
