"""Write modes on real Delta tables: what each mode leaves in the table, read back by Spark and by delta-rs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from spark_client.catalog import DeltaCatalog, SchemaMismatch
from spark_client.modes import Append, Merge, Overwrite, OverwritePartitions, ReplaceWhere, as_mode, resolve

pytestmark = pytest.mark.spark
T = "lake.mart.readings"
SCHEMA = "sensor long, day string, value long"


def rows(spark: SparkSession, *data: tuple[Any, ...], schema: str = SCHEMA) -> DataFrame:
    return spark.createDataFrame(list(data), schema)


def content(spark: SparkSession, lake: DeltaCatalog, version: int | None = None) -> list[tuple[Any, ...]]:
    """The table at `version` (newest by default), sorted; delta-rs must read exactly the same rows."""
    version = lake.latest_snapshot(T) if version is None else version
    assert version is not None
    ours = ordered(tuple(r) for r in lake.read_at(spark, T, version).collect())
    theirs = DeltaTable(lake.location(T), version=version).to_pyarrow_table().to_pylist()
    assert ordered(tuple(r.values()) for r in theirs) == ours
    return ours


def ordered(found: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows in a stable order that tolerates NULLs."""
    return sorted(found, key=repr)


def test_append_and_overwrite_objects_behave_like_their_shorthands(spark: SparkSession, lake: DeltaCatalog) -> None:
    lake.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append())
    lake.write(spark, rows(spark, (2, "d1", 20)), T, mode="append")
    assert content(spark, lake) == [(1, "d1", 10), (2, "d1", 20)]
    lake.write(spark, rows(spark, (3, "d2", 30)), T, mode=Overwrite())
    assert content(spark, lake) == [(3, "d2", 30)]


def test_replace_where_replaces_exactly_the_matching_rows(spark: SparkSession, lake: DeltaCatalog) -> None:
    lake.write(spark, rows(spark, (1, "d1", 10), (2, "d2", 20)).coalesce(1), T, mode=Append())
    lake.write(spark, rows(spark, (3, "d3", 30), (4, None, 40)), T, mode=Append())
    before = lake.latest_snapshot(T)
    version = lake.write(spark, rows(spark, (5, "d2", 50), (6, "d2", 60)), T, mode=ReplaceWhere("day = 'd2'"))
    # the file holding d1 and d2 was rewritten with d1 only; the NULL day is not 'd2' and stays
    assert content(spark, lake, version) == ordered(
        [(1, "d1", 10), (3, "d3", 30), (4, None, 40), (5, "d2", 50), (6, "d2", 60)]
    )
    assert content(spark, lake, before) == ordered([(1, "d1", 10), (2, "d2", 20), (3, "d3", 30), (4, None, 40)])
    old, new = (set(DeltaTable(lake.location(T), version=v).file_uris()) for v in (before, version))
    assert len(old) == 1 + len(old & new)  # only the file with a 'd2' row was replaced


def test_replace_where_refuses_rows_outside_the_predicate(spark: SparkSession, lake: DeltaCatalog) -> None:
    lake.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append())
    with pytest.raises(ValueError, match="is not true; every row written must match the predicate") as err:
        lake.write(spark, rows(spark, (5, "d2", 50), (6, "d9", 60)), T, mode=ReplaceWhere("day = 'd2'"))
    assert T in str(err.value) and "nothing was written" in str(err.value)
    assert lake.latest_snapshot(T) == 0


def test_overwrite_partitions_replaces_the_touched_partitions_only(spark: SparkSession, lake: DeltaCatalog) -> None:
    lake.write(spark, rows(spark, (1, "d1", 10), (2, "d2", 20), (3, None, 30)), T, mode=Append())
    lake.write(spark, rows(spark, (4, "d3", 40)), T, mode=Append())
    version = lake.write(
        spark, rows(spark, (7, "d2", 70), (8, None, 80)), T, mode=OverwritePartitions(columns=("day",))
    )
    # d2 and the NULL partition are replaced (NULL matches NULL); d1 and d3 stay
    assert content(spark, lake, version) == ordered([(1, "d1", 10), (4, "d3", 40), (7, "d2", 70), (8, None, 80)])


def test_merge_upserts_inserts_and_deletes_by_key(spark: SparkSession, lake: DeltaCatalog) -> None:
    lake.write(spark, rows(spark, (1, "d1", 10), (2, "d1", 20), (3, "d1", 30)), T, mode=Append())
    lake.write(spark, rows(spark, (None, "d1", 99)), T, mode=Append())
    changes = rows(
        spark,
        (2, "d2", 21, False),
        (3, "d2", 0, True),
        (4, "d2", 40, None),
        (None, "d2", 98, False),
        schema=SCHEMA + ", gone boolean",
    )
    version = lake.write(spark, changes, T, mode=Merge(keys=("sensor",), delete_column="gone"))
    # 2 updated, 3 deleted, 4 inserted (NULL delete flag: kept), NULL keys never match: inserted beside the old
    assert content(spark, lake, version) == ordered(
        [(1, "d1", 10), (2, "d2", 21), (4, "d2", 40), (None, "d1", 99), (None, "d2", 98)]
    )
    assert "gone" not in lake.read_at(spark, T, version).columns


def test_merge_refuses_duplicate_keys_and_missing_columns(spark: SparkSession, lake: DeltaCatalog) -> None:
    lake.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append())
    with pytest.raises(ValueError, match=r"more than one row for key \{'sensor': 2\}"):
        lake.write(spark, rows(spark, (2, "a", 1), (2, "b", 2)), T, mode=Merge(keys=("sensor",)))
    with pytest.raises(ValueError, match=r"names columns \['site'\] the data does not have"):
        lake.write(spark, rows(spark, (2, "a", 1)), T, mode=Merge(keys=("site",)))
    with pytest.raises(ValueError, match="delete_column 'day' must be boolean"):
        lake.write(spark, rows(spark, (2, "a", 1)), T, mode=Merge(keys=("sensor",), delete_column="day"))
    assert lake.latest_snapshot(T) == 0


def test_merge_into_a_new_table_creates_it_without_the_deleted_rows(spark: SparkSession, lake: DeltaCatalog) -> None:
    data = rows(spark, (1, "d1", 10, False), (2, "d1", 20, True), schema=SCHEMA + ", gone boolean")
    version = lake.write(spark, data, T, mode=Merge(keys=("sensor",), delete_column="gone"))
    assert version == 0 and content(spark, lake) == [(1, "d1", 10)]


def test_schema_merge_adds_columns_and_strict_refuses_them(spark: SparkSession, lake: DeltaCatalog) -> None:
    lake.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append())
    wider = rows(spark, (2, "d1", 20, "ok"), schema=SCHEMA + ", status string")
    with pytest.raises(SchemaMismatch, match="status: table missing, data string"):
        lake.write(spark, wider, T, mode=Append())
    lake.write(spark, wider, T, mode=Append(schema="merge"), app_id="job", barrier=5)
    # a schema-only commit, then the data, both tagged for the barrier
    kinds = [(c.kind, c.job_id, c.barrier) for c in lake.commits_after(T, 0)]
    assert kinds == [("write", "job", 5), ("schema", "job", 5)]
    narrower = rows(spark, (3, "d2"), schema="sensor long, day string")
    lake.write(spark, narrower, T, mode=Merge(keys=("sensor",), schema="merge"))
    assert content(spark, lake) == ordered([(1, "d1", 10, None), (2, "d1", 20, "ok"), (3, "d2", None, None)])
    with pytest.raises(SchemaMismatch, match="value: table bigint, data string"):
        lake.write(
            spark,
            rows(spark, (4, "d", "x"), schema="sensor long, day string, value string"),
            T,
            mode=Append(schema="merge"),
        )


def test_schema_overwrite_replaces_the_schema_with_a_whole_table_overwrite(
    spark: SparkSession, lake: DeltaCatalog
) -> None:
    lake.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append())
    other = rows(spark, ("a", 1.5), schema="name string, score double")
    version = lake.write(spark, other, T, mode=Overwrite(schema="overwrite"))
    assert content(spark, lake, version) == [("a", 1.5)]
    assert lake.read_at(spark, T, version).schema.simpleString() == "struct<name:string,score:double>"
    with pytest.raises(ValueError, match="only allowed with a whole-table Overwrite"):
        as_mode(Append(schema="overwrite"))


def test_mode_specs_name_every_sink_exactly_once() -> None:
    sinks = ["lake.mart.a", "lake.mart.b"]
    assert resolve("append", sinks, job_id="j") == {"lake.mart.a": Append(), "lake.mart.b": Append()}
    assert resolve({"lake.mart.a": "overwrite", "lake.mart.b": Merge(keys=("k",))}, sinks, job_id="j")[
        "lake.mart.b"
    ] == Merge(keys=("k",))
    with pytest.raises(ValueError, match=r"job 'j': no mode for sinks \['lake.mart.b'\]"):
        resolve({"lake.mart.a": "append"}, sinks, job_id="j")
    with pytest.raises(ValueError, match=r"not sinks of the job: \['lake.mart.c'\]"):
        resolve({"lake.mart.a": "append", "lake.mart.b": "append", "lake.mart.c": "append"}, sinks, job_id="j")
    with pytest.raises(ValueError, match="unknown write mode 'upsert'"):
        resolve("upsert", sinks, job_id="j")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"keys=\('id',\)"):
        Merge(keys="id")  # type: ignore[arg-type]
