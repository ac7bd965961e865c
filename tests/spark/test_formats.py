"""One catalog contract, three formats: exact snapshots, tags, changes and each format's own reader, on real tables.

The write modes' contract is tests/spark/test_write_mode_contract.py."""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyiceberg.catalog import load_catalog
from pyspark.sql import DataFrame, SparkSession

from spark_client import MetaServiceClient
from spark_client.catalog import (
    Catalog,
    DeltaCatalog,
    IcebergCatalog,
    NotAppendOnly,
    PaimonCatalog,
    SchemaMismatch,
)
from spark_client.modes import Merge, Overwrite, OverwritePartitions
from tests.spark.formats import FORMATS, make_catalog, snapshot_files, table_files

pytestmark = pytest.mark.spark
T = "lake.raw.orders"
SCHEMA = "id long, name string, day long"
OPEN_FORMATS = ("iceberg", "paimon")  # the formats whose own reader is not a plain file list


def frame(spark: SparkSession, *ids: int) -> DataFrame:
    return spark.createDataFrame([(i, f"n{i}", i % 2) for i in ids], SCHEMA)


def rows(spark: SparkSession, catalog: Catalog, snapshot: int) -> list[tuple[object, ...]]:
    return sorted(tuple(r) for r in catalog.read_at(spark, T, snapshot).collect())


def ids(spark: SparkSession, catalog: Catalog, snapshot: int) -> list[int]:
    return sorted(r["id"] for r in catalog.read_at(spark, T, snapshot).collect())


def own_reader(catalog: Catalog, table: str, snapshot: int) -> pa.Table:
    """The table at the snapshot MetaService would report, read by the format's own library (no Spark)."""
    if isinstance(catalog, DeltaCatalog):
        return DeltaTable(catalog.location(table), version=snapshot).to_pyarrow_table()
    if isinstance(catalog, IcebergCatalog):
        ice = catalog.pyiceberg_table(table)
        return ice.scan(snapshot_id=catalog.iceberg_snapshot_id(table, snapshot)).to_arrow()
    assert isinstance(catalog, PaimonCatalog)
    at = catalog.paimon_table(table, snapshot_id=snapshot)
    builder = at.new_read_builder()
    return builder.new_read().to_arrow(builder.new_scan().plan().splits())


@pytest.fixture(name="open_catalog", params=OPEN_FORMATS)
def fx_open_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Catalog:
    from tests.spark.formats import make_catalog

    return make_catalog(request.param, tmp_path / "lake")


def test_each_snapshot_reads_exactly_its_rows_and_ids_grow(spark: SparkSession, catalog: Catalog) -> None:
    assert catalog.latest_snapshot(T) is None
    s0 = catalog.append(spark, frame(spark, 1, 2), T)
    s1 = catalog.append(spark, frame(spark, 3), T)
    s2 = catalog.write(spark, frame(spark, 9), T, mode="overwrite")
    s3 = catalog.write(spark, frame(spark), T, mode="append")  # an empty write is a snapshot too
    assert s0 < s1 < s2 < s3 == catalog.latest_snapshot(T)
    assert (ids(spark, catalog, s0), ids(spark, catalog, s1), ids(spark, catalog, s2)) == ([1, 2], [1, 2, 3], [9])
    assert ids(spark, catalog, s3) == [9]
    for snapshot in (s0, s1, s2, s3):
        theirs = sorted(own_reader(catalog, T, snapshot)["id"].to_pylist())
        assert theirs == ids(spark, catalog, snapshot)


def test_a_tagged_write_is_found_again_and_never_applied_twice(spark: SparkSession, catalog: Catalog) -> None:
    catalog.append(spark, frame(spark, 0), T)
    assert catalog.committed_snapshot(T, app_id="enrich", barrier=1000) is None
    tagged = catalog.write(spark, frame(spark, 1), T, mode="append", app_id="enrich", barrier=1000, metadata={"k": "v"})
    catalog.append(spark, frame(spark, 2), T)  # later, untagged commits do not hide it
    again = catalog.write(spark, frame(spark, 1), T, mode="append", app_id="enrich", barrier=1000)
    assert again == tagged == catalog.committed_snapshot(T, app_id="enrich", barrier=1000)
    assert ids(spark, catalog, catalog.latest_snapshot(T) or 0) == [0, 1, 2]  # the retry wrote nothing
    assert catalog.committed_snapshot(T, app_id="enrich", barrier=999) is None
    assert catalog.committed_snapshot(T, app_id="enrich", barrier=1001) is None
    assert catalog.committed_snapshot(T, app_id="other", barrier=1000) is None
    assert catalog.committed_snapshot("lake.raw.missing", app_id="enrich", barrier=1000) is None


def test_a_restore_undoes_later_commits_for_the_exactly_once_check(spark: SparkSession, catalog: Catalog) -> None:
    base = catalog.append(spark, frame(spark, 0), T)
    first = catalog.write(spark, frame(spark, 1), T, mode="append", app_id="enrich", barrier=7)
    restored = catalog.restore(T, base)
    assert ids(spark, catalog, restored) == [0] and catalog.latest_snapshot(T) == restored
    assert catalog.committed_snapshot(T, app_id="enrich", barrier=7) is None  # the rollback undid it
    redone = catalog.write(spark, frame(spark, 1), T, mode="append", app_id="enrich", barrier=7)
    assert redone > restored and ids(spark, catalog, redone) == [0, 1]
    assert catalog.committed_snapshot(T, app_id="enrich", barrier=7) == redone
    if not isinstance(catalog, PaimonCatalog):  # Paimon's rollback deletes later snapshots: ids are reused
        assert redone > first


def test_changes_are_the_rows_appended_in_between(spark: SparkSession, catalog: Catalog) -> None:
    s0 = catalog.append(spark, frame(spark, 1), T)
    s1 = catalog.append(spark, frame(spark, 2, 3), T)
    s2 = catalog.append(spark, frame(spark, 4), T)

    def changes(after: int | None, at: int) -> list[int]:
        read = catalog.read_changes(spark, T, after_snapshot_id=after, snapshot_id=at)
        return sorted(r["id"] for r in read.collect())

    assert changes(s0, s1) == [2, 3] and changes(s0, s2) == [2, 3, 4] and changes(None, s2) == [1, 2, 3, 4]
    assert changes(s2, s2) == []
    with pytest.raises(ValueError, match="newer"):
        catalog.read_changes(spark, T, after_snapshot_id=s2, snapshot_id=s1)
    s3 = catalog.write(spark, frame(spark, 5), T, mode="overwrite")
    with pytest.raises(NotAppendOnly, match=f"between .* {s2} and {s3}"):
        catalog.read_changes(spark, T, after_snapshot_id=s2, snapshot_id=s3)


def test_a_schema_change_is_rejected_before_anything_is_committed(spark: SparkSession, catalog: Catalog) -> None:
    first = catalog.append(spark, frame(spark, 1), T)
    with pytest.raises(SchemaMismatch, match=r"'lake\.raw\.orders'.*name: table string, data bigint") as info:
        catalog.append(spark, spark.createDataFrame([(1, 2, 3)], "id long, name long, day long"), T)
    assert info.value.columns == ("name: table string, data bigint",)
    with pytest.raises(SchemaMismatch, match="name: table string, data missing"):
        catalog.append(spark, spark.range(3).selectExpr("id", "id as day"), T)
    assert catalog.latest_snapshot(T) == first
    reordered = catalog.append(spark, spark.range(5, 6).selectExpr("id % 2 as day", "'n5' as name", "id"), T)
    assert ids(spark, catalog, reordered) == [1, 5]  # columns are matched by name


def test_concurrent_writers_each_get_their_own_snapshot(spark: SparkSession, catalog: Catalog) -> None:
    catalog.append(spark, frame(spark, 0), T)  # created first: concurrent creation is the format's own business
    snapshots: dict[int, int] = {}
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            snapshots[n] = catalog.append(spark, frame(spark, *range(n * 10, n * 10 + n + 1)), T)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(1, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert len(set(snapshots.values())) == 3
    everything = ids(spark, catalog, catalog.latest_snapshot(T) or 0)
    assert everything == sorted([0, *(i for n in range(1, 4) for i in range(n * 10, n * 10 + n + 1))])


def test_iceberg_snapshot_ids_are_sequence_numbers_that_pyiceberg_opens(spark: SparkSession, tmp_path: Path) -> None:
    catalog = IcebergCatalog(tmp_path / "lake")
    first = catalog.append(spark, frame(spark, 1), T)
    second = catalog.append(spark, frame(spark, 2), T)
    ice = catalog.pyiceberg_table(T)
    by_sequence = {s.sequence_number: s.snapshot_id for s in ice.metadata.snapshots}
    assert (first, second) == (1, 2) and catalog.iceberg_snapshot_id(T, second) == by_sequence[2]
    assert ice.current_snapshot().snapshot_id == by_sequence[2]  # type: ignore[union-attr]
    catalog.restore(T, first)  # Iceberg's own rollback: the current snapshot moves back
    assert catalog.pyiceberg_table(T).current_snapshot().snapshot_id == by_sequence[1]  # type: ignore[union-attr]
    third = catalog.append(spark, frame(spark, 3), T)
    assert third == 3 and ids(spark, catalog, third) == [1, 3]  # still growing after the rollback
    with pytest.raises(ValueError, match="has no snapshot 9"):
        catalog.read_at(spark, T, 9)
    summary = catalog.pyiceberg_table(T).current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None and summary.get("metaservice.write_id")
    assert summary.get("metaservice.barrier") is None  # untagged


@pytest.mark.parametrize("format_name", FORMATS)
@pytest.mark.parametrize("name", ["lake[prod]", "lake{a,b}", "lake*", "what?"])
def test_a_root_spark_would_read_as_a_pattern_is_refused_before_anything_is_written(
    tmp_path: Path, format_name: str, name: str
) -> None:
    """Spark expands glob characters in the file names it reads: such a lake would write and then not read back."""
    with pytest.raises(ValueError, match=r"contains .*choose a directory without them"):
        make_catalog(format_name, tmp_path / name)
    with pytest.raises(ValueError, match=r"contains .*choose a directory without them"):
        make_catalog(format_name, f"s3://bucket/{name}")
    with pytest.raises(ValueError, match="local directory or an object-store URI"):
        make_catalog(format_name, "hdfs://namenode/lake")  # object stores: tests/objectstore
    assert list(tmp_path.iterdir()) == []


def test_iceberg_appends_merge_manifests_so_planning_stays_bounded(spark: SparkSession, tmp_path: Path) -> None:
    """One barrier, one append: without merging, every scan would read one more manifest per commit ever made."""
    catalog = IcebergCatalog(tmp_path / "lake")
    snapshots = [catalog.append(spark, frame(spark, i), T) for i in range(1, 21)]
    ice = catalog.pyiceberg_table(T)
    assert ice.properties["commit.manifest-merge.enabled"] == "true"
    assert len(ice.current_snapshot().manifests(ice.io)) <= 16  # type: ignore[union-attr]
    # merged manifests keep every snapshot's files: reads at old snapshots and changes across a merge are exact
    assert ids(spark, catalog, snapshots[4]) == list(range(1, 6))
    assert ids(spark, catalog, snapshots[-1]) == list(range(1, 21))
    changed = catalog.read_changes(spark, T, after_snapshot_id=snapshots[9], snapshot_id=snapshots[-1])
    assert sorted(r["id"] for r in changed.collect()) == list(range(11, 21))
    # a table whose owner turned merging off keeps Iceberg's fast appends: one more manifest per commit
    with ice.transaction() as tx:
        tx.set_properties({"commit.manifest-merge.enabled": "false"})
    before = len(catalog.pyiceberg_table(T).current_snapshot().manifests(ice.io))  # type: ignore[union-attr]
    for i in (21, 22):
        catalog.append(spark, frame(spark, i), T)
    after = catalog.pyiceberg_table(T).current_snapshot()
    assert after is not None and len(after.manifests(ice.io)) == before + 2
    # a table without the property (created elsewhere, or before this client set it) merges: Iceberg's default
    with catalog.pyiceberg_table(T).transaction() as tx:
        tx.remove_properties("commit.manifest-merge.enabled")
        tx.set_properties({"commit.manifest.min-count-to-merge": "2"})
    catalog.append(spark, frame(spark, 23), T)
    merged = catalog.pyiceberg_table(T).current_snapshot()
    assert merged is not None and len(merged.manifests(ice.io)) == 1
    assert catalog.pyiceberg_table(T).properties["commit.manifest-merge.enabled"] == "true"
    assert ids(spark, catalog, merged.sequence_number or 0) == list(range(1, 24))


def test_paimon_changes_read_only_the_snapshots_in_between(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pypaimon never merges manifests, so a full plan reads one more per commit ever made; a barrier's changes
    come from the delta manifests of the snapshots in between, and say what comparing two full plans says."""
    from spark_client.catalog import paimon

    catalog = PaimonCatalog(tmp_path / "lake")
    history = [catalog.append(spark, frame(spark, 1, 2), T), catalog.append(spark, frame(spark, 3), T)]
    history.append(catalog.write(spark, frame(spark, 10), T, mode=OverwritePartitions(columns=("day",))))
    history += [catalog.append(spark, frame(spark, i), T) for i in (11, 12)]
    upserts = spark.createDataFrame(
        [(12, "m12", 0, False), (1, None, 1, True)], "id long, name string, day long, gone boolean"
    )
    history.append(catalog.write(spark, upserts, T, mode=Merge(keys=("id",), delete_column="gone")))
    history.append(catalog.append(spark, frame(spark, 13), T))
    native = catalog.paimon_table(T)

    def by_plans(after: int, until: int) -> tuple[set[str], int]:
        now = paimon._current_files(catalog.paimon_table(T, snapshot_id=until), T)
        before = paimon._current_files(catalog.paimon_table(T, snapshot_id=after), T)
        return set(now.keys() - before.keys()), len(before.keys() - now.keys())

    pairs = [(a, b) for a in history for b in history if a <= b]
    for after, until in pairs:  # appends, a partition overwrite, a merge: the same answer both ways
        assert paimon._added_between(native, T, after, until) == by_plans(after, until), (after, until)
    monkeypatch.setattr(paimon, "DELTA_SNAPSHOTS", 1)  # a long range compares the full plans
    for after, until in pairs:
        assert paimon._added_between(native, T, after, until) == by_plans(after, until), (after, until)
    monkeypatch.undo()

    # Only the snapshots in between are read: hide every manifest older than them and the changes still read.
    recent = [catalog.append(spark, frame(spark, i), T) for i in (20, 21)]
    from pypaimon.manifest.manifest_list_manager import ManifestListManager

    manager = catalog.paimon_table(T).snapshot_manager()
    fresh = {m.file_name for s in recent for m in ManifestListManager(native).read_delta(manager.get_snapshot_by_id(s))}
    manifest_dir = Path(catalog.location(T)) / "manifest"
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for path in manifest_dir.glob("manifest-*"):
        if path.name.startswith("manifest-list-") or path.name in fresh:
            continue
        path.rename(hidden / path.name)
    changed = catalog.read_changes(spark, T, after_snapshot_id=history[-1], snapshot_id=recent[-1])
    assert sorted(r["id"] for r in changed.collect()) == [20, 21]
    with pytest.raises(
        FileNotFoundError, match="manifest"
    ):  # a full plan of the same snapshot needs the hidden manifests
        catalog.read_at(spark, T, recent[-1])


def test_iceberg_catalog_on_the_test_postgresql(spark: SparkSession, tmp_path: Path, iceberg_pg_url: str) -> None:
    with IcebergCatalog(tmp_path / "lake", uri=iceberg_pg_url) as catalog:
        tagged = catalog.write(spark, frame(spark, 1, 2), T, mode="append", app_id="enrich", barrier=11)
        assert tagged == 1 and ids(spark, catalog, tagged) == [1, 2]
    # any pyiceberg catalog by configuration: here the same SQL catalog, loaded the way a REST or Glue one would be
    native = load_catalog(
        "metaservice", type="sql", uri=iceberg_pg_url.replace("postgresql://", "postgresql+psycopg://")
    )
    try:
        another = IcebergCatalog(tmp_path / "lake", catalog=native)
        assert another.committed_snapshot(T, app_id="enrich", barrier=11) == 1
        assert ids(spark, another, another.append(spark, frame(spark, 3), T)) == [1, 2, 3]
    finally:
        native.engine.dispose()  # type: ignore[attr-defined]
    with psycopg.connect(iceberg_pg_url) as conn:
        row = conn.execute(
            "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables WHERE table_name = 'orders'"
        ).fetchone()
    assert row is not None and row[0] == "lake.raw" and row[2].startswith(catalog.location(T))
    assert not os.path.exists(tmp_path / "lake" / "iceberg_catalog.db")  # no SQLite file beside the data


def test_paimon_commits_carry_the_job_as_commit_user_and_the_barrier_as_identifier(
    spark: SparkSession, tmp_path: Path
) -> None:
    catalog = PaimonCatalog(tmp_path / "lake")
    catalog.append(spark, frame(spark, 0), T)
    tagged = catalog.write(spark, frame(spark, 1), T, mode="append", app_id="enrich", barrier=4242)
    snapshot = catalog.paimon_table(T).snapshot_manager().get_snapshot_by_id(tagged)
    assert snapshot is not None
    assert (snapshot.commit_user, snapshot.commit_identifier, snapshot.commit_kind) == ("enrich", 4242, "APPEND")
    assert snapshot.properties is not None and snapshot.properties["metaservice.barrier"] == "4242"
    overwritten = catalog.write(spark, frame(spark, 2), T, mode=Overwrite(), app_id="enrich", barrier=4243)
    kind = catalog.paimon_table(T).snapshot_manager().get_snapshot_by_id(overwritten)
    assert kind is not None and kind.commit_kind == "OVERWRITE"
    assert catalog.location(T) == os.path.join(catalog.root, "lake", "raw.db", "orders")
    assert "schema/schema-0" in table_files(catalog, T)  # an ordinary Paimon table any Paimon engine opens


def _described(catalog: PaimonCatalog, table: str, snapshot: int) -> dict[str, object]:
    """The one data file of `table` at `snapshot` as its manifest entry describes it (rows as bytes)."""
    from pypaimon.manifest.schema.simple_stats import SimpleStats
    from pypaimon.table.row.binary_row import BinaryRow
    from pypaimon.table.row.generic_row import GenericRow, GenericRowSerializer

    from spark_client.catalog import paimon

    [file] = paimon._current_files(catalog.paimon_table(table, snapshot_id=snapshot), table).values()

    def plain(value: object) -> object:
        if isinstance(value, SimpleStats):
            return (plain(value.min_values), plain(value.max_values), list(value.null_counts))
        if isinstance(value, BinaryRow):
            return value.data
        return GenericRowSerializer.to_bytes(value) if isinstance(value, GenericRow) else value

    fields = {f.name: plain(getattr(file.meta, f.name)) for f in dataclasses.fields(file.meta)}
    return fields | {"partition": file.partition, "bucket": file.bucket}


def _spark_wrote(path: object) -> bool:
    import pyarrow.parquet as pq

    return b"org.apache.spark.version" in (pq.read_metadata(str(path)).metadata or {})


def test_paimon_files_are_written_by_spark_and_described_as_pypaimon_describes_its_own(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain append table's data files are plain parquet: Spark's writer writes them (no Python workers), and
    the commit describes them exactly as pypaimon's own writer describes the files it writes (forced here for a
    second table), so every Paimon reader plans them the same."""
    from spark_client.catalog import paimon

    catalog = PaimonCatalog(tmp_path / "lake")
    data = frame(spark, 1, 2, 3).coalesce(1)
    by_spark = catalog.append(spark, data, T)
    other = "lake.raw.by_pypaimon"
    catalog.append(spark, data.limit(0), other)
    with monkeypatch.context() as patched:
        patched.setattr(paimon, "_spark_codec", lambda _native: None)
        by_pypaimon = catalog.append(spark, data, other)
    spark_file, own_file = _described(catalog, T, by_spark), _described(catalog, other, by_pypaimon)
    assert _spark_wrote(spark_file["file_path"]) and not _spark_wrote(own_file["file_path"])
    differ = {"file_name", "file_size", "creation_time", "file_path"}
    assert {k: v for k, v in spark_file.items() if k not in differ} == {
        k: v for k, v in own_file.items() if k not in differ
    }
    path = str(spark_file["file_path"])
    assert os.path.dirname(path) == os.path.join(catalog.location(T), "bucket-0")
    assert os.path.basename(path) == spark_file["file_name"] and str(spark_file["file_name"]).startswith("data-")
    assert spark_file["file_size"] == os.path.getsize(path) and spark_file["row_count"] == 3
    assert own_reader(catalog, T, by_spark).sort_by("id") == own_reader(catalog, other, by_pypaimon).sort_by("id")
    assert not os.listdir(os.path.join(catalog.location(T), "_staging"))  # every staged file moved into place


def test_paimon_tables_spark_cannot_write_alike_are_written_by_pypaimon(spark: SparkSession, tmp_path: Path) -> None:
    """Tables made elsewhere with statistics, partitions or fixed buckets get pypaimon's files; another codec
    gets Spark's."""
    import pyarrow.parquet as pq
    from pypaimon import Schema

    catalog = PaimonCatalog(tmp_path / "lake")
    warehouse = catalog._warehouse("lake")
    warehouse.create_database("raw", True)
    arrow = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.int64())])
    plain = {"bucket": "-1", "file.format": "parquet"}
    made = {
        "stats": Schema.from_pyarrow_schema(arrow, options=plain | {"metadata.stats-mode": "full"}),
        "parts": Schema.from_pyarrow_schema(arrow, partition_keys=["day"], options=plain),
        "buckets": Schema.from_pyarrow_schema(arrow, options=plain | {"bucket": "2", "bucket-key": "id"}),
        "zstd": Schema.from_pyarrow_schema(arrow, options=plain | {"file.compression": "zstd"}),
    }
    for name, schema in made.items():
        warehouse.create_table(f"raw.{name}", schema, False)
        snapshot = catalog.append(spark, frame(spark, 1, 2, 3, 4), f"lake.raw.{name}")
        assert sorted(own_reader(catalog, f"lake.raw.{name}", snapshot)["id"].to_pylist()) == [1, 2, 3, 4]
        assert sorted(r["id"] for r in catalog.read_at(spark, f"lake.raw.{name}", snapshot).collect()) == [1, 2, 3, 4]
        files = snapshot_files(catalog, f"lake.raw.{name}", snapshot)
        assert [_spark_wrote(f) for f in files] == [name == "zstd"] * len(files), name
    zstd = snapshot_files(catalog, "lake.raw.zstd", 1)[0]
    assert pq.read_metadata(zstd).row_group(0).column(0).compression == "ZSTD"


def overwrites(spark: SparkSession, catalog: Catalog, client: MetaServiceClient, count: int) -> list[int]:
    """`count` whole-table overwrites of a root table MetaService knows, reported as they happen."""
    client.register_source("reader", T, format=catalog.format, location=catalog.location(T))
    snapshots = []
    for n in range(count):
        snapshots.append(catalog.write(spark, frame(spark, n), T, mode="overwrite"))
        client.report_snapshot(T, snapshots[-1])
    return snapshots


def test_iceberg_expiry_removes_unprotected_snapshots_and_only_their_files(
    spark: SparkSession, tmp_path: Path, client: MetaServiceClient
) -> None:
    catalog = IcebergCatalog(tmp_path / "lake")
    first, second, third = overwrites(spark, catalog, client, 3)
    lease = client.create_lease("test", {T: second}, ttl_seconds=600)
    second_files = snapshot_files(catalog, T, second)
    assert catalog.vacuum(T, client, dry_run=True) == catalog.vacuum(T, client)  # dry run names what goes
    sequences = sorted(s.sequence_number or 0 for s in catalog.pyiceberg_table(T).metadata.snapshots)
    assert sequences == [second, third]  # expired below the leased snapshot
    with pytest.raises(ValueError, match=f"has no snapshot {first}"):
        catalog.read_at(spark, T, first)
    assert ids(spark, catalog, second) == [1] and all(os.path.exists(f) for f in second_files)
    client.release_lease(lease.lease_id)
    deleted = catalog.vacuum(T, client)
    assert set(second_files) <= set(deleted) and any(f.endswith(".avro") for f in deleted)
    assert ids(spark, catalog, third) == [2] and own_reader(catalog, T, third)["id"].to_pylist() == [2]


def test_paimon_expiry_respects_consumers_and_the_service(
    spark: SparkSession, tmp_path: Path, client: MetaServiceClient
) -> None:
    from pypaimon.consumer import Consumer

    catalog = PaimonCatalog(tmp_path / "lake")
    snapshots = overwrites(spark, catalog, client, 4)
    consumers = catalog.paimon_table(T).consumer_manager()
    consumers.reset_consumer("flink-job", Consumer(next_snapshot=snapshots[1]))  # a streaming reader is at #2
    deleted = catalog.vacuum(T, client)
    assert any(f.endswith(f"snapshot-{snapshots[0]}") for f in deleted)
    assert ids(spark, catalog, snapshots[1]) == [1]  # the consumer's snapshot stays readable
    consumers.delete_consumer("flink-job")
    catalog.vacuum(T, client)
    for expired in snapshots[:3]:  # only the newest (MetaService protects it) is left
        with pytest.raises(ValueError, match=f"no snapshot {expired}"):
            catalog.read_at(spark, T, expired)
    assert ids(spark, catalog, snapshots[3]) == [3] and own_reader(catalog, T, snapshots[3])["id"].to_pylist() == [3]
    data = [f for f in table_files(catalog, T) if f.startswith("bucket-")]
    assert len(data) == 1  # every other data file was only referenced by expired snapshots


def test_paimon_vacuum_removes_what_a_dead_spark_write_left_in_staging_once_it_is_old(
    spark: SparkSession, tmp_path: Path, client: MetaServiceClient
) -> None:
    catalog = PaimonCatalog(tmp_path / "lake")
    [snapshot] = overwrites(spark, catalog, client, 1)
    left = os.path.join(catalog.location(T), "_staging", "a-dead-write")
    frame(spark, 9).write.parquet(left)  # what a driver that died while Spark wrote leaves behind
    leftovers = sorted(os.path.join(left, name) for name in os.listdir(left))
    assert catalog.vacuum(T, client) == []  # younger than the orphan age: the write may still be running
    assert catalog.vacuum(T, client, min_orphan_age_seconds=0) == leftovers
    assert not any(os.path.exists(f) for f in leftovers)
    assert ids(spark, catalog, snapshot) == [0] and own_reader(catalog, T, snapshot)["id"].to_pylist() == [0]


def test_every_storable_type_reads_back_the_same_through_spark_and_the_own_reader(
    spark: SparkSession, open_catalog: Catalog
) -> None:
    catalog = open_catalog
    query = """
        select id, cast(id as int) i, id * 1.5d d, cast(id / 3 as float) f,
               if(id % 3 = 0, null, concat('n', id)) s, cast(concat('x', id) as binary) bin, id % 2 = 0 flag,
               date_add(date'2024-02-27', cast(id as int)) day, timestamp_micros(1700000000000000 + id * 1000001) ts,
               cast(timestamp_micros(1700000000000000 + id) as timestamp_ntz) local_ts,
               cast(id / 7 as decimal(12, 3)) amount, array(id, id + 1) pair,
               named_struct('k', id, 'v', concat('v', id)) kv, map(concat('m', id), id) tags
               {small}
        from range(0, 40)
    """
    small = ", cast(id as tinyint) b, cast(id as smallint) sh" if isinstance(catalog, PaimonCatalog) else ""
    df = spark.sql(query.format(small=small)).repartition(3)
    first = catalog.append(spark, df, T)
    second = catalog.append(spark, df.filter("id < 5"), T)  # the table's schema takes the same data again
    expected = sorted(df.toArrow().to_pylist(), key=lambda r: r["id"])
    assert sorted(catalog.read_at(spark, T, first).toArrow().to_pylist(), key=lambda r: r["id"]) == expected
    assert sorted(own_reader(catalog, T, first).to_pylist(), key=lambda r: r["id"]) == expected
    assert catalog.read_at(spark, T, second).count() == 45
    assert catalog.read_at(spark, T, first).schema.simpleString() == df.schema.simpleString()
    if isinstance(catalog, IcebergCatalog):
        with pytest.raises(ValueError, match=r"column b .* tinyint, which an Iceberg table cannot store"):
            catalog.append(spark, spark.sql("select cast(1 as tinyint) b"), "lake.raw.small")
