"""Jobs and readers under Spark Connect, against the Connect server that ships with pyspark.

The server is pyspark's own `SparkConnectServer` (what `sbin/start-connect-server.sh` runs), started once for
this module on a free port; the tests talk to it only through `SparkSession.builder.remote("sc://…")`. As in a
real deployment, the job's Python process commits through the format library, so it reaches the same table
storage the server writes (here: the local disk).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spark_client import EtlJob, Inputs, MetaServiceClient, consistent_tables
from spark_client.catalog import Catalog
from spark_client.modes import Append, Merge, WriteMode
from tests import support

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# One worker runs the module's tests one after the other: while a Connect session lives, pyspark routes this
# process's DataFrame functions to Spark Connect (SPARK_CONNECT_MODE_ENABLED), so no classic test may interleave.
pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark-connect")]
RAW, LATEST, HISTORY = "lake.raw.readings", "lake.mart.latest", "lake.mart.history"
_STARTED = "Spark Connect server started"
_MODE_VARIABLES = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")  # what pyspark sets for a remote session


@pytest.fixture(scope="module", name="connect")
def fx_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """A Spark Connect session to a `SparkConnectServer` (pyspark's own, local[2]) started for this module."""
    pytest.importorskip("grpc", reason="Spark Connect needs the `connect` extra (grpcio, grpcio-status, ...)")
    import pyspark
    from pyspark.sql import SparkSession

    home = os.path.dirname(pyspark.__file__)
    port = support.free_port()
    log = tmp_path_factory.mktemp("connect") / "server.log"
    env = {
        **os.environ,
        "SPARK_HOME": home,
        "PYSPARK_PYTHON": sys.executable,  # the server's Python workers (Paimon's executor-side writes, UDFs)
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    command = [
        os.path.join(home, "bin", "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        "local[2]",
        *("--conf", "spark.driver.memory=1g"),
        *("--conf", "spark.ui.enabled=false"),
        *("--conf", "spark.sql.shuffle.partitions=2"),
        *("--conf", "spark.sql.session.timeZone=UTC"),
        *("--conf", "spark.connect.grpc.binding.address=127.0.0.1"),
        *("--conf", f"spark.connect.grpc.binding.port={port}"),
    ]
    with open(log, "wb") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        support.wait_until(
            lambda: server.poll() is not None or _STARTED in log.read_text(errors="replace"),
            timeout=600,
            what=f"the Spark Connect server on port {port} (log: {log})",
        )
        assert server.poll() is None, f"the Spark Connect server exited: {log.read_text(errors='replace')[-2000:]}"
        before = {name: os.environ.get(name) for name in _MODE_VARIABLES}
        spark = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").create()
        try:
            yield spark
        finally:
            spark.stop()
            for name, value in before.items():  # the classic `spark` of the other modules works again
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    finally:
        support.stop_group(server, timeout=60)


def readings(spark: SparkSession, *rows: tuple[int, str, int]) -> DataFrame:
    return spark.createDataFrame(list(rows), "id long, sensor string, value long")


def table(spark: SparkSession, catalog: Catalog, name: str, snapshot: int) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in catalog.read_at(spark, name, snapshot).collect())


def test_the_session_is_a_connect_session(connect: SparkSession) -> None:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    assert isinstance(connect, ConnectSession)


def test_a_batch_job_runs_once_per_format_under_connect(
    connect: SparkSession, client: MetaServiceClient, catalog: Catalog
) -> None:
    """Append to a root, then two rounds of a job writing a Merge sink and an Append sink: the copy-on-write
    plan (file names from `_metadata`, joins), the checks and the writes all go through Connect."""
    catalog.append(connect, readings(connect, (1, "a", 10), (2, "b", 20)), RAW)
    job = EtlJob(connect, client, catalog, job_id="latest", sources=[RAW], sinks=[LATEST, HISTORY])
    job.register()

    def transform(inputs: Inputs) -> Mapping[str, DataFrame]:
        changes = inputs.changes(RAW)
        return {LATEST: changes, HISTORY: changes}

    modes: dict[str, WriteMode] = {LATEST: Merge(keys=("id",)), HISTORY: Append()}
    first = job.run_once(transform, mode=modes)
    assert first.action == "process"
    catalog.append(connect, readings(connect, (2, "b", 21), (3, "c", 30)), RAW)
    second = job.run_once(transform, mode=modes)
    assert second.action == "process" and second.barrier is not None and first.barrier is not None
    assert second.barrier > first.barrier
    assert table(connect, catalog, LATEST, second.snapshots[LATEST]) == [(1, "a", 10), (2, "b", 21), (3, "c", 30)]
    assert table(connect, catalog, HISTORY, second.snapshots[HISTORY]) == [
        (1, "a", 10),
        (2, "b", 20),
        (2, "b", 21),
        (3, "c", 30),
    ]
    with pytest.raises(ValueError, match="more than one row for key"):  # the checks run through Connect too
        catalog.write(connect, readings(connect, (4, "d", 1), (4, "d", 2)), LATEST, mode=Merge(keys=("id",)))
    assert catalog.latest_snapshot(LATEST) == second.snapshots[LATEST]


def test_a_consistent_read_under_connect(connect: SparkSession, client: MetaServiceClient, tmp_path: Path) -> None:
    from tests.spark.formats import make_catalog

    catalog = make_catalog("delta", tmp_path / "lake")
    catalog.append(connect, readings(connect, (1, "a", 10)), RAW)
    job = EtlJob(connect, client, catalog, job_id="copy", sources=[RAW], sinks=[HISTORY])
    job.register()
    done = job.run_once(lambda inputs: {HISTORY: inputs.changes(RAW)}, mode="append")
    assert done.action == "process"
    catalog.append(connect, readings(connect, (2, "b", 20)), RAW)  # newer than the consistent version
    with consistent_tables(connect, client, catalog, [RAW, HISTORY]) as tables:
        assert tables.snapshots[HISTORY] == done.snapshots[HISTORY]
        assert sorted(tuple(r) for r in tables[RAW].collect()) == [(1, "a", 10)]
        assert sorted(tuple(r) for r in tables[HISTORY].collect()) == [(1, "a", 10)]
