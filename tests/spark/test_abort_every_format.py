"""Rule 11 for every table format: an aborted attempt's sink commit is undone, so no row lands twice.

Delta undoes with a new version (RESTORE); Iceberg moves its current snapshot back and Paimon rolls back.
The job logic (`plan_sink`) is the same for all: it reads the sink's commits after its baseline
(`Catalog.commits_after`) and restores the baseline when it finds an aborted attempt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from spark_client import Catalog, MetaServiceClient, SchemaMismatch
from tests.spark.test_abort_exactly_once import FIRST, RAW, SECOND, Pipeline, readings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def ids(spark: SparkSession, catalog: Catalog, table: str) -> list[int]:
    snapshot = catalog.latest_snapshot(table)
    assert snapshot is not None
    return sorted(r["id"] for r in catalog.read_at(spark, table, snapshot).collect())


def test_an_aborted_attempt_is_undone_in_every_format(
    spark: SparkSession, client: MetaServiceClient, catalog: Catalog
) -> None:
    pipeline = Pipeline(spark, client, catalog, "append")  # type: ignore[arg-type]
    catalog.append(spark, readings(spark, 1, 2), RAW)
    assert pipeline.run().action == "process"
    baseline = catalog.latest_snapshot(FIRST)
    assert baseline is not None

    catalog.append(spark, readings(spark, 3), RAW)
    pipeline.broken = True  # SECOND's write fails after FIRST committed the attempt
    with pytest.raises(SchemaMismatch):
        pipeline.run(abort_on=(SchemaMismatch,))
    assert ids(spark, catalog, FIRST) == [1, 2]  # the abort undid the attempt in storage
    aborted = client._call("GET", "/jobs/split/barriers")["runs"][0]
    assert aborted["status"] == "aborted"
    attempt = aborted["barrier"]
    assert catalog.committed_snapshot(FIRST, app_id="split", barrier=attempt) is None  # no live commit of it

    catalog.append(spark, readings(spark, 4), RAW)
    pipeline.broken = False
    result = pipeline.run()
    assert result.action == "process"
    assert ids(spark, catalog, FIRST) == [1, 2, 3, 4]  # 3 once: without the undo it would land twice
    assert ids(spark, catalog, SECOND) == [1, 2, 3, 4]
    # the sink's history after the baseline: this barrier's write on top of the undone attempt. Delta undoes with
    # a new version (a restore of the baseline, listed); Iceberg and Paimon rewind (the attempt left the line).
    history = [(c.kind, c.job_id, c.barrier, c.restored_snapshot_id) for c in catalog.commits_after(FIRST, baseline)]
    undone = (
        [("restore", "split", None, baseline), ("write", "split", attempt, None)] if catalog.format == "delta" else []
    )
    assert history == [("write", "split", result.barrier, None), *undone]
    assert catalog.commits_after(FIRST, baseline)[0].snapshot_id == result.snapshots[FIRST]
