"""The job the write-mode crash tests run, in-process and as a driver killed at a failpoint.

`python -m tests.spark.crash_job BASE_URL LAKE_ROOT MODE` runs one barrier; with `METASERVICE_CLIENT_FAILPOINT`
set, the driver dies there (SIGKILL), as `spark_client._failpoints` describes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession

from spark_client import DeltaCatalog, EtlJob, Inputs, MetaServiceClient, RunResult
from spark_client.modes import Append, Merge, Overwrite, OverwritePartitions, ReplaceWhere, WriteMode

RAW, OUT = "lake.raw.events", "lake.mart.events"
SCHEMA = "id long, batch long, value long"


def changes(inputs: Inputs) -> DataFrame:
    return inputs.changes(RAW)


def whole(inputs: Inputs) -> DataFrame:
    return inputs[RAW]


# mode name → (the mode for the barrier of batch N, how the sink's rows are computed)
MODES: dict[str, tuple[Callable[[int], WriteMode], Callable[[Inputs], DataFrame]]] = {
    "append": (lambda _n: Append(), changes),
    "overwrite": (lambda _n: Overwrite(), whole),
    "replace_where": (lambda n: ReplaceWhere(f"batch = {n}"), changes),
    "overwrite_partitions": (lambda _n: OverwritePartitions(columns=("batch",)), changes),
    "merge": (lambda _n: Merge(keys=("id",)), changes),
}


def batch(spark: SparkSession, number: int) -> DataFrame:
    """Batch 1: ids 0-4. Batch 2: id 1 again (an update for Merge) and ids 10-14."""
    ids = range(5) if number == 1 else [1, *range(10, 15)]
    return spark.createDataFrame([(i, number, 100 * (number - 1) + i) for i in ids], SCHEMA)


def expected(mode: str) -> list[tuple[int, int, int]]:
    """The sink after both batches, each applied exactly once."""
    first = [(i, 1, i) for i in range(5)]
    second = [(i, 2, 100 + i) for i in [1, *range(10, 15)]]
    if mode == "merge":
        return sorted([r for r in first if r[0] != 1] + second)
    return sorted(first + second)


def make_job(spark: SparkSession, client: MetaServiceClient, lake: DeltaCatalog) -> EtlJob:
    return EtlJob(spark, client, lake, job_id="events", sources=[RAW], sinks=[OUT], future_roots=[RAW])


def run(job: EtlJob, mode: str, number: int) -> RunResult:
    """Process the barrier that brings batch `number`."""
    write_mode, rows = MODES[mode]

    def transform(inputs: Inputs) -> Mapping[str, DataFrame]:
        return {OUT: rows(inputs)}

    return job.run_once(transform, mode=write_mode(number))


def main(base_url: str, lake_root: str, mode: str) -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    with MetaServiceClient(base_url) as client:
        run(make_job(spark, client, DeltaCatalog(lake_root)), mode, 2)


if __name__ == "__main__":
    main(*sys.argv[1:4])
