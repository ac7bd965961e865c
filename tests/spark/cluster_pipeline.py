"""A two-job pipeline run by a driver attached to a Spark standalone cluster (see test_cluster.py).

`python -m tests.spark.cluster_pipeline MASTER_URL METASERVICE_URL LAKE_ROOT` ingests two rounds of sensor
readings into a root table, runs `clean` (Merge on the reading id) and `daily` (OverwritePartitions by day)
after each, and prints one JSON line: the driver's pid, the pids of the executors that ran tasks, and each
round's barriers and snapshots.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_client import DeltaCatalog, EtlJob, Inputs, MetaServiceClient
from spark_client.modes import Merge, OverwritePartitions

RAW, CLEAN, DAILY = "lake.raw.sensor_readings", "lake.mart.readings_clean", "lake.mart.readings_daily"


def clean(inputs: Inputs) -> Mapping[str, DataFrame]:
    new = inputs.changes(RAW)
    return {CLEAN: new.filter(F.col("value").isNotNull()).withColumn("value", F.round("value", 1))}


def daily(inputs: Inputs) -> Mapping[str, DataFrame]:
    days = inputs.changes(CLEAN).select("day").distinct()
    touched = inputs[CLEAN].join(days, "day")
    return {DAILY: touched.groupBy("day", "sensor").agg(F.count("*").alias("readings"), F.sum("value").alias("total"))}


def readings(spark: SparkSession, round_no: int) -> DataFrame:
    rows = [
        (round_no * 1000 + i, f"sensor-{i % 4}", f"2026-11-{20 + (round_no + i) % 3:02d}", None if i == 7 else i * 1.25)
        for i in range(40)
    ]
    return spark.createDataFrame(rows, "reading_id long, sensor string, day string, value double").repartition(4)


def main(master: str, base_url: str, lake_root: str) -> None:
    spark = (
        SparkSession.builder.master(master)
        .appName("metaservice-cluster-test")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .config("spark.cores.max", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    lake = DeltaCatalog(lake_root)
    report: dict[str, object] = {"driver_pid": os.getpid(), "rounds": []}
    with MetaServiceClient(base_url) as client:
        jobs = {
            "clean": EtlJob(spark, client, lake, job_id="clean", sources=[RAW], sinks=[CLEAN], future_roots=[RAW]),
            "daily": EtlJob(spark, client, lake, job_id="daily", sources=[CLEAN], sinks=[DAILY]),
        }
        for job in jobs.values():
            job.register()
        for round_no in (1, 2):
            lake.append(spark, readings(spark, round_no), RAW)
            first = jobs["clean"].run_pending(clean, mode=Merge(keys=("reading_id",)))
            second = jobs["daily"].run_pending(daily, mode=OverwritePartitions(columns=("day",)))
            report["rounds"].append(  # type: ignore[attr-defined]
                {
                    "clean": [(r.action, r.barrier, dict(r.snapshots)) for r in first],
                    "daily": [(r.action, r.barrier, dict(r.snapshots)) for r in second],
                }
            )
    pids = spark.sparkContext.parallelize(range(8), 4).map(lambda _: os.getpid()).distinct().collect()
    report["executor_pids"] = sorted(pids)
    spark.stop()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
