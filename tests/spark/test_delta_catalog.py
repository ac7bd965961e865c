"""DeltaCatalog on real Delta tables: exact snapshots, tagged commits, agreeing readers, harmless crashes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession

from spark_client import _failpoints
from spark_client.catalog import Catalog, DeltaCatalog, NotAppendOnly, SchemaMismatch, UnsupportedTable

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[2]
T = "lake.raw.orders"
SCHEMA = "id long, name string"


def frame(spark: SparkSession, *ids: int) -> DataFrame:
    return spark.createDataFrame([(i, f"n{i}") for i in ids], SCHEMA)


def ids_at(spark: SparkSession, lake: DeltaCatalog, version: int) -> list[int]:
    return sorted(r["id"] for r in lake.read_at(spark, T, version).collect())


def data_files(lake: DeltaCatalog, table: str) -> list[str]:
    """Every file under the table directory except the Delta log."""
    location = lake.location(table)
    return sorted(
        os.path.relpath(os.path.join(root, name), location)
        for root, _dirs, names in os.walk(location)
        if "_delta_log" not in root
        for name in names
    )


def test_each_version_reads_exactly_its_rows(spark: SparkSession, lake: DeltaCatalog) -> None:
    assert lake.latest_snapshot(T) is None
    v0 = lake.append(spark, frame(spark, 1, 2), T)
    v1 = lake.append(spark, frame(spark, 3), T)
    v2 = lake.write(spark, frame(spark, 9), T, mode="overwrite")
    assert (v0, v1, v2) == (0, 1, 2) and lake.latest_snapshot(T) == 2
    assert ids_at(spark, lake, v0) == [1, 2]
    assert ids_at(spark, lake, v1) == [1, 2, 3]
    assert ids_at(spark, lake, v2) == [9]
    assert DeltaTable(lake.location(T)).to_pyarrow_table()["id"].to_pylist() == [9]


def test_empty_writes_commit_a_version_without_files(spark: SparkSession, lake: DeltaCatalog) -> None:
    v0 = lake.write(spark, frame(spark), T, mode="overwrite")
    empty = lake.read_at(spark, T, v0)
    assert empty.count() == 0 and empty.schema.simpleString() == "struct<id:bigint,name:string>"
    v1 = lake.append(spark, frame(spark, 1), T)
    v2 = lake.append(spark, frame(spark), T)
    v3 = lake.write(spark, frame(spark), T, mode="overwrite")
    assert (v1, v2, v3) == (1, 2, 3)
    assert ids_at(spark, lake, v2) == [1] and ids_at(spark, lake, v3) == []
    assert all(f.endswith(".parquet") for f in data_files(lake, T))  # no _SUCCESS, .crc or empty parquet
    assert len(data_files(lake, T)) == 1


def test_deltalake_reads_the_same_data_at_every_version(spark: SparkSession, lake: DeltaCatalog) -> None:
    query = """
        select id, cast(id as tinyint) b, cast(id as int) i, id * 1.5d d, cast(id / 3 as float) f,
               if(id % 3 = 0, null, concat('n', id)) s, cast(concat('x', id) as binary) bin, id % 2 = 0 flag,
               date_add(date'2024-02-27', cast(id as int)) day,
               timestamp_micros(1700000000000000 + id * 1000001) ts,
               cast(timestamp_micros(1700000000000000 + id) as timestamp_ntz) local_ts,
               cast(id / 7 as decimal(12, 3)) amount, array(id, id + 1) pair,
               named_struct('k', id, 'v', concat('v', id)) kv, map(concat('m', id), id) tags
        from range({start}, {stop})
    """
    first = spark.sql(query.format(start=0, stop=50)).repartition(3)
    second = spark.sql(query.format(start=50, stop=60))
    versions = [lake.append(spark, first, T), lake.append(spark, second, T)]
    expected = [first.toArrow().to_pylist(), first.union(second).toArrow().to_pylist()]
    for version, rows in zip(versions, expected, strict=True):
        theirs = DeltaTable(lake.location(T), version=version).to_pyarrow_table().sort_by("id").to_pylist()
        ours = lake.read_at(spark, T, version).toArrow().sort_by("id").to_pylist()
        rows.sort(key=lambda r: r["id"])
        assert theirs == ours == rows
    assert lake.read_at(spark, T, versions[1]).schema.simpleString() == first.schema.simpleString()


def test_files_carry_row_counts_and_min_max_statistics(spark: SparkSession, lake: DeltaCatalog) -> None:
    low = spark.createDataFrame([(i, f"a{i}", date(2024, 1, i)) for i in range(1, 6)], "id long, s string, d date")
    high = spark.createDataFrame([(i, "b" * 40, None) for i in range(100, 103)], "id long, s string, d date")
    lake.append(spark, low.coalesce(1), T)
    lake.append(spark, high.coalesce(1), T)
    table = DeltaTable(lake.location(T))
    files = pa.table(table.get_add_actions(flatten=True)).sort_by("min.id").to_pylist()
    assert [(f["num_records"], f["min.id"], f["max.id"]) for f in files] == [(5, 1, 5), (3, 100, 102)]
    assert (files[0]["min.s"], files[0]["max.s"], files[1]["min.s"], files[1]["max.s"]) == (
        "a1",
        "a5",
        "b" * 32,  # long strings: a truncated minimum and no maximum, as in Delta Spark
        None,
    )
    assert (files[0]["min.d"], files[0]["max.d"], files[1]["null_count.d"]) == (
        date(2024, 1, 1),
        date(2024, 1, 5),
        3,
    )
    assert len(table.file_uris(file_pruning_predicate="id > 50")) == 1  # readers skip files on the stats
    assert sorted(table.to_pyarrow_table(filters=[("id", ">=", 5)])["id"].to_pylist()) == [5, 100, 101, 102]


def test_tagged_commit_is_found_by_job_and_barrier(spark: SparkSession, lake: DeltaCatalog) -> None:
    lake.append(spark, frame(spark, 0), T)
    assert lake.committed_snapshot(T, app_id="enrich", barrier=1000) is None
    version = lake.write(spark, frame(spark, 1), T, mode="append", app_id="enrich", barrier=1000, metadata={"k": "v"})
    lake.append(spark, frame(spark, 2), T)  # later, untagged commits do not hide it
    assert DeltaTable(lake.location(T)).transaction_version("enrich") == 1000
    assert lake.committed_snapshot(T, app_id="enrich", barrier=1000) == version
    assert lake.committed_snapshot(T, app_id="enrich", barrier=999) is None  # no commit names that barrier
    assert lake.committed_snapshot(T, app_id="enrich", barrier=1001) is None
    assert lake.committed_snapshot(T, app_id="other", barrier=1000) is None
    assert lake.committed_snapshot("lake.raw.missing", app_id="enrich", barrier=1000) is None
    info = next(c for c in DeltaTable(lake.location(T)).history() if c["version"] == version)
    assert (info["metaservice.barrier"], info["metaservice.job_id"], info["k"]) == ("1000", "enrich", "v")
    tags = [(c.version, c.job_id, c.barrier) for c in lake.history(T)]
    assert tags == [(2, None, None), (1, "enrich", 1000), (0, None, None)]


def test_a_tagged_write_is_idempotent_until_a_restore_undoes_it(spark: SparkSession, lake: DeltaCatalog) -> None:
    lake.append(spark, frame(spark, 0), T)
    first = lake.write(spark, frame(spark, 1), T, mode="append", app_id="enrich", barrier=7)
    again = lake.write(spark, frame(spark, 1), T, mode="append", app_id="enrich", barrier=7)
    assert again == first == lake.latest_snapshot(T) and ids_at(spark, lake, first) == [0, 1]
    restored = lake.restore(T, 0)
    assert lake.committed_snapshot(T, app_id="enrich", barrier=7) is None  # the rollback undid it
    redone = lake.write(spark, frame(spark, 1), T, mode="append", app_id="enrich", barrier=7)
    assert redone == restored + 1 and ids_at(spark, lake, redone) == [0, 1]
    assert lake.committed_snapshot(T, app_id="enrich", barrier=7) == redone


def test_a_schema_change_is_rejected_before_anything_is_written(spark: SparkSession, lake: DeltaCatalog) -> None:
    lake.append(spark, frame(spark, 1), T)
    before = data_files(lake, T)
    with pytest.raises(SchemaMismatch, match=r"'lake\.raw\.orders'.*name: table string, data bigint") as info:
        lake.append(spark, spark.createDataFrame([(1, 2)], "id long, name long"), T)
    assert info.value.table == T and info.value.columns == ("name: table string, data bigint",)
    with pytest.raises(SchemaMismatch, match="extra: table missing, data int"):
        lake.write(
            spark,
            spark.createDataFrame([(1, "a", 3)], "id long, name string, extra int"),
            T,
            mode="overwrite",
        )
    with pytest.raises(SchemaMismatch, match="name: table string, data missing"):
        lake.append(spark, spark.range(3), T)
    assert lake.latest_snapshot(T) == 0 and data_files(lake, T) == before
    # column order and nullability are not part of the contract: columns are matched by name
    reordered = lake.append(spark, spark.range(5, 6).selectExpr("'n5' as name", "id"), T)
    assert ids_at(spark, lake, reordered) == [1, 5]


def test_changes_are_the_rows_appended_in_between(spark: SparkSession, lake: DeltaCatalog) -> None:
    v0 = lake.append(spark, frame(spark, 1), T)
    v1 = lake.append(spark, frame(spark, 2, 3), T)
    v2 = lake.append(spark, frame(spark, 4), T)

    def changes(after: int | None, at: int) -> list[int]:
        return sorted(r["id"] for r in lake.read_changes(spark, T, after_snapshot_id=after, snapshot_id=at).collect())

    assert changes(v0, v1) == [2, 3] and changes(v0, v2) == [2, 3, 4] and changes(None, v2) == [1, 2, 3, 4]
    assert changes(v2, v2) == []
    with pytest.raises(ValueError, match="newer"):
        lake.read_changes(spark, T, after_snapshot_id=v2, snapshot_id=v1)
    v3 = lake.write(spark, frame(spark, 5), T, mode="overwrite")
    with pytest.raises(NotAppendOnly, match="between versions 2 and 3"):
        lake.read_changes(spark, T, after_snapshot_id=v2, snapshot_id=v3)


def test_concurrent_writers_each_get_their_own_version(spark: SparkSession, lake: DeltaCatalog) -> None:
    versions: dict[int, int] = {}
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            versions[n] = lake.append(spark, frame(spark, *range(n * 10, n * 10 + n + 1)), T)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(1, 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors and sorted(versions.values()) == [0, 1, 2, 3]
    for n, version in versions.items():
        added = set(ids_at(spark, lake, version)) - set(ids_at(spark, lake, version - 1) if version else [])
        assert added == set(range(n * 10, n * 10 + n + 1))


@pytest.mark.parametrize("name", ["raw.orders", "a.b.c.d", "lake..orders", "lake.raw.-x", "lake.raw.a b", "l.r.x\n"])
def test_malformed_table_names_are_rejected(lake: DeltaCatalog, name: str) -> None:
    with pytest.raises(ValueError, match=r"catalog\.database\.table"):
        lake.location(name)


def test_the_catalog_is_a_delta_catalog_under_its_root(lake: DeltaCatalog) -> None:
    catalog: Catalog = lake
    assert isinstance(lake, Catalog) and catalog.format == "delta"
    assert lake.location("lake.sales.orders_2-x") == os.path.join(lake.root, "lake", "sales", "orders_2-x")
    with pytest.raises(ValueError, match="local directory or an object-store URI"):
        DeltaCatalog("hdfs://namenode/lake")  # object stores: tests/objectstore
    assert DeltaCatalog("s3a://bucket/lake/").location("lake.sales.orders") == "s3://bucket/lake/lake/sales/orders"


def test_bad_write_arguments_are_rejected_before_writing(spark: SparkSession, lake: DeltaCatalog) -> None:
    df = frame(spark, 1)
    with pytest.raises(ValueError, match="together"):
        lake.write(spark, df, T, mode="append", app_id="enrich")
    with pytest.raises(ValueError, match="set by the catalog"):
        lake.write(spark, df, T, mode="append", metadata={"metaservice.barrier": "3"})
    with pytest.raises(ValueError, match="mode"):
        lake.write(spark, df, T, mode="merge")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"span .*cannot store"):
        lake.append(spark, spark.sql("select interval '1' day as span"), T)
    assert lake.latest_snapshot(T) is None and not os.path.exists(lake.location(T))


def test_tables_a_file_list_cannot_express_are_refused(spark: SparkSession, lake: DeltaCatalog) -> None:
    write_deltalake(lake.location(T), pa.table({"id": [1, 2], "day": ["a", "b"]}), partition_by=["day"])
    with pytest.raises(UnsupportedTable, match="partition"):
        lake.read_at(spark, T, 0)


def test_an_armed_failpoint_kills_the_process_and_others_pass() -> None:
    def run(armed: str) -> int:
        script = "from spark_client import _failpoints; _failpoints.hit('after_delta_commit'); print('alive')"
        env = {**os.environ, "PYTHONPATH": str(REPO), _failpoints.ENV: armed}
        return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=60).returncode

    assert run("after_delta_commit") == -9
    assert run("after_files_written") == 0


@pytest.mark.crash
def test_write_killed_before_the_log_commit_leaves_the_table_unchanged(lake: DeltaCatalog, spark: SparkSession) -> None:
    lake.append(spark, frame(spark, 1), T)
    script = textwrap.dedent(
        f"""
        import os
        from pyspark.sql import SparkSession
        from spark_client.catalog import DeltaCatalog
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        lake = DeltaCatalog({lake.root!r})
        os.environ[{_failpoints.ENV!r}] = "after_files_written"
        lake.append(spark, spark.createDataFrame([(2, "n2")], {SCHEMA!r}), {T!r})
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop(_failpoints.ENV, None)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=240, env=env)
    assert result.returncode == -9, result.stderr.decode()[-3000:]
    assert len([f for f in data_files(lake, T) if f.endswith(".parquet")]) == 2  # the orphan is on disk
    assert lake.latest_snapshot(T) == 0 and ids_at(spark, lake, 0) == [1]
    assert DeltaTable(lake.location(T)).to_pyarrow_table()["id"].to_pylist() == [1]
    assert ids_at(spark, lake, lake.append(spark, frame(spark, 3), T)) == [
        1,
        3,
    ]  # orphan files stay invisible
