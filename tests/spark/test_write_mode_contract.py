"""The write-mode contract, one suite for every format: what each mode leaves in a real table (read back by Spark
and by the format's own library), and every error it raises, with nothing committed after an error.

Delta, Iceberg and Paimon share one implementation of the modes (`spark_client.catalog._writes`); this suite is
what keeps it one: each test runs against all three (the `catalog` fixture), in the one session-wide Spark.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from spark_client.catalog import Catalog, PaimonCatalog, SchemaMismatch
from spark_client.modes import Append, Merge, Overwrite, OverwritePartitions, ReplaceWhere, resolve
from tests.spark.formats import snapshot_files

pytestmark = pytest.mark.spark
T = "lake.mart.readings"
SCHEMA = "sensor long, day string, value long"


def rows(spark: SparkSession, *data: tuple[Any, ...], schema: str = SCHEMA) -> DataFrame:
    return spark.createDataFrame(list(data), schema)


def ordered(found: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rows in a stable order that tolerates NULLs."""
    return sorted(found, key=repr)


def content(spark: SparkSession, catalog: Catalog, snapshot: int | None = None) -> list[tuple[Any, ...]]:
    """The table at `snapshot` (newest by default), sorted; the format's own reader must read the same rows."""
    snapshot = catalog.latest_snapshot(T) if snapshot is None else snapshot
    assert snapshot is not None
    ours = ordered(tuple(r) for r in catalog.read_at(spark, T, snapshot).collect())
    theirs = catalog.arrow_dataset(T, snapshot).to_table().to_pylist()
    assert ordered(tuple(r.values()) for r in theirs) == ours
    return ours


def unchanged(catalog: Catalog, snapshot: int | None) -> None:
    """Nothing was committed (and nothing was left in the table's data files of the newest snapshot)."""
    assert catalog.latest_snapshot(T) == snapshot


def test_append_and_overwrite_and_their_shorthands(spark: SparkSession, catalog: Catalog) -> None:
    first = catalog.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append())
    second = catalog.write(spark, rows(spark, (2, "d1", 20)), T, mode="append")
    assert second > first
    assert content(spark, catalog) == [(1, "d1", 10), (2, "d1", 20)]
    third = catalog.write(spark, rows(spark, (3, "d2", 30)), T, mode=Overwrite())
    assert content(spark, catalog, third) == [(3, "d2", 30)]
    fourth = catalog.write(spark, rows(spark, (4, "d2", 40)), T, mode="overwrite")
    assert content(spark, catalog, fourth) == [(4, "d2", 40)]
    assert content(spark, catalog, second) == [(1, "d1", 10), (2, "d1", 20)]  # older snapshots stay readable


def test_replace_where_replaces_exactly_the_matching_rows_rewriting_only_their_files(
    spark: SparkSession, catalog: Catalog
) -> None:
    catalog.write(spark, rows(spark, (1, "d1", 10), (2, "d2", 20)).coalesce(1), T, mode=Append())
    before = catalog.write(spark, rows(spark, (3, "d3", 30), (4, None, 40)).coalesce(1), T, mode=Append())
    after = catalog.write(spark, rows(spark, (5, "d2", 50), (6, "d2", 60)), T, mode=ReplaceWhere("day = 'd2'"))
    # the file holding d1 and d2 was rewritten with d1 only; the NULL day is not 'd2' and stays
    assert content(spark, catalog, after) == ordered(
        [(1, "d1", 10), (3, "d3", 30), (4, None, 40), (5, "d2", 50), (6, "d2", 60)]
    )
    old, new = set(snapshot_files(catalog, T, before)), set(snapshot_files(catalog, T, after))
    assert len(old) == 2 and len(old & new) == 1  # only the file with a 'd2' row was replaced


def test_replace_where_refuses_rows_outside_the_predicate(spark: SparkSession, catalog: Catalog) -> None:
    snapshot = catalog.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append())
    with pytest.raises(ValueError, match="is not true; every row written must match the predicate") as err:
        catalog.write(spark, rows(spark, (5, "d2", 50), (6, None, 60)), T, mode=ReplaceWhere("day = 'd2'"))
    assert T in str(err.value) and "nothing was written" in str(err.value)
    unchanged(catalog, snapshot)


def test_overwrite_partitions_replaces_the_touched_values_null_included(spark: SparkSession, catalog: Catalog) -> None:
    catalog.write(spark, rows(spark, (1, "d1", 10), (2, "d2", 20), (3, None, 30)), T, mode=Append())
    catalog.write(spark, rows(spark, (4, "d3", 40)), T, mode=Append())
    after = catalog.write(
        spark, rows(spark, (7, "d2", 70), (8, None, 80)), T, mode=OverwritePartitions(columns=("day",))
    )
    # d2 and the NULL partition are replaced (NULL matches NULL); d1 and d3 stay
    assert content(spark, catalog, after) == ordered([(1, "d1", 10), (4, "d3", 40), (7, "d2", 70), (8, None, 80)])
    with pytest.raises(ValueError, match=r"OverwritePartitions on 'lake.mart.readings' names columns \['site'\]"):
        catalog.write(spark, rows(spark, (9, "d2", 90)), T, mode=OverwritePartitions(columns=("site",)))
    unchanged(catalog, after)


def test_merge_upserts_inserts_and_deletes_by_key_rewriting_only_touched_files(
    spark: SparkSession, catalog: Catalog
) -> None:
    catalog.write(spark, rows(spark, (1, "d1", 10), (2, "d1", 20), (3, "d1", 30)).coalesce(1), T, mode=Append())
    before = catalog.write(spark, rows(spark, (None, "d1", 99), (5, "d1", 50)).coalesce(1), T, mode=Append())
    changes = rows(
        spark,
        (2, "d2", 21, False),
        (3, "d2", 0, True),
        (4, "d2", 40, None),
        (None, "d2", 98, False),
        schema=SCHEMA + ", gone boolean",
    )
    after = catalog.write(spark, changes, T, mode=Merge(keys=("sensor",), delete_column="gone"), app_id="j", barrier=3)
    # 2 updated, 3 deleted, 4 inserted (a NULL delete flag keeps the row), NULL keys never match: inserted beside
    assert content(spark, catalog, after) == ordered(
        [(1, "d1", 10), (2, "d2", 21), (4, "d2", 40), (5, "d1", 50), (None, "d1", 99), (None, "d2", 98)]
    )
    assert "gone" not in catalog.read_at(spark, T, after).columns  # the delete column is not stored
    old, new = set(snapshot_files(catalog, T, before)), set(snapshot_files(catalog, T, after))
    assert len(old - new) == 1 and len(old & new) == 1  # the file of keys 5 and NULL was kept as it is


def test_merge_refuses_duplicate_keys_missing_columns_and_a_non_boolean_delete_column(
    spark: SparkSession, catalog: Catalog
) -> None:
    snapshot = catalog.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append())
    with pytest.raises(
        ValueError, match=r"Merge into 'lake.mart.readings': .* more than one row for key \{'sensor': 2\}"
    ):
        catalog.write(spark, rows(spark, (2, "a", 1), (2, "b", 2)), T, mode=Merge(keys=("sensor",)))
    with pytest.raises(ValueError, match=r"Merge on 'lake.mart.readings' names columns \['site'\] the data does not"):
        catalog.write(spark, rows(spark, (2, "a", 1)), T, mode=Merge(keys=("site",)))
    with pytest.raises(ValueError, match=r"names columns \['gone'\]"):
        catalog.write(spark, rows(spark, (2, "a", 1)), T, mode=Merge(keys=("sensor",), delete_column="gone"))
    with pytest.raises(ValueError, match="delete_column 'day' must be boolean, it is string"):
        catalog.write(spark, rows(spark, (2, "a", 1)), T, mode=Merge(keys=("sensor",), delete_column="day"))
    unchanged(catalog, snapshot)


def test_merge_into_a_new_table_creates_it_without_the_deleted_rows(spark: SparkSession, catalog: Catalog) -> None:
    data = rows(spark, (1, "d1", 10, False), (2, "d1", 20, True), schema=SCHEMA + ", gone boolean")
    created = catalog.write(spark, data, T, mode=Merge(keys=("sensor",), delete_column="gone"))
    assert content(spark, catalog, created) == [(1, "d1", 10)]
    assert catalog.read_at(spark, T, created).columns == ["sensor", "day", "value"]


def test_schema_strict_refuses_merge_adds_and_a_type_change_is_refused_by_both(
    spark: SparkSession, catalog: Catalog
) -> None:
    first = catalog.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append())
    wider = rows(spark, (2, "d1", 20, "ok"), schema=SCHEMA + ", status string")
    with pytest.raises(SchemaMismatch, match="status: table missing, data string") as err:
        catalog.write(spark, wider, T, mode=Append())
    assert err.value.table == T and err.value.columns == ("status: table missing, data string",)
    unchanged(catalog, first)
    catalog.write(spark, wider, T, mode=Append(schema="merge"), app_id="job", barrier=5)
    narrower = rows(spark, (3, "d2"), schema="sensor long, day string")  # a missing column is written as NULL
    catalog.write(spark, narrower, T, mode=Merge(keys=("sensor",), schema="merge"))
    assert content(spark, catalog) == ordered([(1, "d1", 10, None), (2, "d1", 20, "ok"), (3, "d2", None, None)])
    assert content(spark, catalog, first) == [(1, "d1", 10)]  # an old snapshot keeps its schema
    newest = catalog.latest_snapshot(T)
    retyped = rows(spark, (4, "d", "x"), schema="sensor long, day string, value string")
    for policy in ("strict", "merge"):
        with pytest.raises(SchemaMismatch, match="value: table bigint, data string"):
            catalog.write(spark, retyped, T, mode=Append(schema=policy))
    unchanged(catalog, newest)


def test_a_schema_merge_write_is_tagged_in_every_commit_it_makes(spark: SparkSession, catalog: Catalog) -> None:
    first = catalog.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append())
    wider = rows(spark, (2, "d1", 20, "ok"), schema=SCHEMA + ", status string")
    written = catalog.write(spark, wider, T, mode=Append(schema="merge"), app_id="job", barrier=5)
    commits = catalog.commits_after(T, first)
    assert commits[0].snapshot_id == written and (commits[0].kind, commits[0].job_id, commits[0].barrier) == (
        "write",
        "job",
        5,
    )
    # Delta commits the new columns first (Iceberg: in the data commit; Paimon: a schema change, no snapshot),
    # tagged for the barrier too
    schema_commits = [(c.kind, c.job_id, c.barrier) for c in commits[1:]]
    assert schema_commits == ([("schema", "job", 5)] if catalog.format == "delta" else [])
    assert catalog.committed_snapshot(T, app_id="job", barrier=5) == written


def test_schema_overwrite_replaces_the_schema_only_with_a_whole_table_overwrite(
    spark: SparkSession, catalog: Catalog
) -> None:
    first = catalog.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append())
    with pytest.raises(ValueError, match="only allowed with a whole-table Overwrite"):
        catalog.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append(schema="overwrite"))
    other = rows(spark, ("a", 1.5), schema="name string, score double")
    if isinstance(catalog, PaimonCatalog):  # Paimon keeps one schema history per table
        with pytest.raises(ValueError, match="schema='overwrite' is not supported for Paimon table"):
            catalog.write(spark, other, T, mode=Overwrite(schema="overwrite"))
        unchanged(catalog, first)
        return
    replaced = catalog.write(spark, other, T, mode=Overwrite(schema="overwrite"))
    assert content(spark, catalog, replaced) == [("a", 1.5)]
    assert catalog.read_at(spark, T, replaced).schema.simpleString() == "struct<name:string,score:double>"


def test_a_tagged_write_is_applied_once(spark: SparkSession, catalog: Catalog) -> None:
    catalog.write(spark, rows(spark, (1, "d1", 10)), T, mode=Append())
    merge = Merge(keys=("sensor",))
    done = catalog.write(spark, rows(spark, (1, "d1", 11), (2, "d1", 20)), T, mode=merge, app_id="j", barrier=7)
    again = catalog.write(spark, rows(spark, (1, "d1", 99)), T, mode=merge, app_id="j", barrier=7)
    assert again == done == catalog.latest_snapshot(T)  # found, not written again
    assert content(spark, catalog) == [(1, "d1", 11), (2, "d1", 20)]


def test_bad_arguments_are_refused_before_anything_is_written(spark: SparkSession, catalog: Catalog) -> None:
    df = rows(spark, (1, "d1", 10))
    with pytest.raises(ValueError, match="app_id and barrier tag a commit together"):
        catalog.write(spark, df, T, mode="append", app_id="enrich")
    with pytest.raises(ValueError, match=r"commit metadata keys \['metaservice.barrier'\] are set by the catalog"):
        catalog.write(spark, df, T, mode="append", metadata={"metaservice.barrier": "3"})
    with pytest.raises(ValueError, match=r"unknown write mode 'merge' for sink 'lake\.mart\.readings'"):
        catalog.write(spark, df, T, mode="merge")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"must be a spark_client\.modes object"):
        catalog.write(spark, df, T, mode=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"column span of the data for 'lake.mart.readings' has type interval"):
        catalog.append(spark, spark.sql("select interval '1' day as span"), T)
    with pytest.raises(ValueError, match=r"catalog\.database\.table"):
        catalog.write(spark, df, "mart.readings", mode="append")
    with pytest.raises(ValueError, match=r"names columns \['site'\]"):
        catalog.write(spark, df, T, mode=OverwritePartitions(columns=("site",)))
    assert catalog.latest_snapshot(T) is None and not os.path.exists(catalog.location(T))


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
