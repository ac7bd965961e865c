"""The client on a real Spark standalone cluster: a master and a worker started from pyspark's own
distribution on this machine, executors in their own JVMs writing the files the driver commits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from pyspark.find_spark_home import _find_spark_home
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark_client import DeltaCatalog, MetaServiceClient
from tests.spark import cluster_pipeline as pipeline
from tests.support import ServerProcess, free_port, stop_group, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
START_DEADLINE = 120.0


@dataclass
class Cluster:
    master_url: str
    web_url: str
    processes: list[subprocess.Popen[bytes]]


def _daemon(spark_class: str, args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A Spark daemon in its own process group: stopping the group also stops the executors it forked."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [spark_class, *args], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


@pytest.fixture(scope="module", name="cluster")
def fx_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One master and one worker (2 cores, 1 GiB) on 127.0.0.1, stopped (with their executors) afterwards."""
    spark_class = os.path.join(_find_spark_home(), "bin", "spark-class")
    work = tmp_path_factory.mktemp("spark-cluster")
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(work),
        "SPARK_LOCAL_DIRS": str(work / "local"),
        "PYTHONPATH": str(REPO),
    }
    port, web = free_port(), free_port()
    master_url, web_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}"
    processes = [
        _daemon(
            spark_class,
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(web),
            ],
            work / "master.log",
            env,
        )
    ]
    try:
        processes.append(
            _daemon(
                spark_class,
                [
                    "org.apache.spark.deploy.worker.Worker",
                    master_url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "2",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(work / "worker"),
                ],
                work / "worker.log",
                env,
            )
        )

        def worker_registered() -> bool:
            for process in processes:
                if process.poll() is not None:
                    logs = "\n".join(p.read_text()[-2000:] for p in work.glob("*.log"))
                    pytest.fail(f"a Spark daemon exited with {process.returncode}:\n{logs}")
            try:
                return int(httpx.get(f"{web_url}/json/", timeout=2).json().get("aliveworkers", 0)) >= 1
            except (httpx.HTTPError, ValueError):
                return False

        wait_until(worker_registered, timeout=START_DEADLINE, what="a worker registered with the Spark master")
        yield Cluster(master_url, web_url, processes)
    finally:
        for process in reversed(processes):
            stop_group(process, timeout=30)


@pytest.mark.timeout(1200)  # five JVMs start (master, worker, driver, executors) on two shared cores
def test_a_two_job_pipeline_runs_on_a_standalone_cluster(
    cluster: Cluster, spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog, server: ServerProcess
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    driver = subprocess.run(
        [sys.executable, "-m", "tests.spark.cluster_pipeline", cluster.master_url, server.base_url, lake.root],
        env=env,
        capture_output=True,
        timeout=600,
    )
    assert driver.returncode == 0, driver.stderr.decode()[-4000:]
    report = json.loads(driver.stdout.decode().strip().splitlines()[-1])
    assert report["executor_pids"] and report["driver_pid"] not in report["executor_pids"]  # other JVMs/processes
    apps = httpx.get(f"{cluster.web_url}/json/", timeout=5).json()["completedapps"]
    assert [a["name"] for a in apps] == ["metaservice-cluster-test"]  # the work ran on this cluster

    for done in report["rounds"]:
        assert [a for a, _b, _s in done["clean"]] == ["process", "idle"], done
        assert [a for a, _b, _s in done["daily"]] == ["process", "idle"], done
        assert done["daily"][0][1] == done["clean"][0][1]  # daily processed the barrier clean committed

    # what the cluster wrote, read back here by another Spark (local) and checked against the raw data
    raw = lake.read_at(spark, pipeline.RAW, lake.latest_snapshot(pipeline.RAW))  # type: ignore[arg-type]
    with_value = raw.filter(F.col("value").isNotNull())
    clean = lake.read_at(spark, pipeline.CLEAN, lake.latest_snapshot(pipeline.CLEAN))  # type: ignore[arg-type]
    assert clean.count() == with_value.count() == 78 and clean.select("reading_id").distinct().count() == 78
    daily = lake.read_at(spark, pipeline.DAILY, lake.latest_snapshot(pipeline.DAILY))  # type: ignore[arg-type]
    expected = {
        (r["day"], r["sensor"]): r["readings"]
        for r in with_value.groupBy("day", "sensor").agg(F.count("*").alias("readings")).collect()
    }
    assert {(r["day"], r["sensor"]): r["readings"] for r in daily.collect()} == expected
    versions = client.versions([pipeline.CLEAN, pipeline.DAILY], "strong")
    assert versions.barrier == report["rounds"][-1]["daily"][0][1]
