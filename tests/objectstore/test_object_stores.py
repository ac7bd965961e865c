"""Lake roots on an object store, against a real S3-compatible server (moto, started by tests/objectstore/conftest.py)
and the real MetaService server, for every format: the driver's side of a job's barrier (the catalog's file step,
its commit tagged with the barrier, finding the commit again), listing, vacuum under a lease, and the non-Spark
readers (DuckDB, Polars) at the consistent version, all on the bucket.

Spark cannot write `s3a://` here (hadoop-aws is not on PyPI), so Spark's parquet writer is the one part stood in
for: `ArrowFrame` gives `SparkWrittenCatalog.write` what it asks of a DataFrame for `Append` and `Overwrite`, and
its `write....parquet(path)` receives the `s3a://` directory the catalog hands Spark and writes one parquet file
there with pyarrow's own S3 client, as hadoop-aws would. Everything else is the catalogs' own code. The modes
planned in Spark (`ReplaceWhere`, `OverwritePartitions`, `Merge`), Spark's reads (`read_at`) and the streaming
source are not exercised on an object store (docs/formats.md, "Object stores").
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, cast

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_client import MetaServiceClient, consistent_arrow
from spark_client.catalog import DeltaCatalog, IcebergCatalog, PaimonCatalog
from spark_client.catalog._lake import LakeRoot
from tests import support
from tests.objectstore.conftest import S3Server

if TYPE_CHECKING:
    from collections.abc import Iterator

    import httpx
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

ORDERS, ENRICHED = "lake.raw.orders", "lake.mart.orders_enriched"
FORMATS = ("delta", "iceberg", "paimon")
Catalog = DeltaCatalog | IcebergCatalog | PaimonCatalog


class ArrowSession:
    """The session `write` hands the file step: only its configuration is read and set."""

    def __init__(self) -> None:
        self.conf = _Conf()
        self.written: list[str] = []  # every directory the catalogs gave the parquet writer


class _Conf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class ArrowFrame:
    """What `SparkWrittenCatalog.write` asks of a DataFrame for `Append` and `Overwrite` (its schema and columns,
    and `write.mode(...).option(...).parquet(path)`), over an Arrow table. `parquet` receives the directory as the
    catalog gives it to Spark (`s3a://bucket/...`) and writes the rows into it as one parquet file through pyarrow's
    S3 client, named as Spark names its files."""

    def __init__(self, rows: pa.Table, s3: S3Server, session: ArrowSession) -> None:
        self.rows, self._s3, self._session = rows, s3, session
        self._options: dict[str, str] = {}

    @property
    def schema(self) -> StructType:
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(self.rows.schema)

    @property
    def columns(self) -> list[str]:
        return list(self.rows.column_names)

    @property
    def write(self) -> ArrowFrame:
        return self

    def mode(self, mode: str) -> ArrowFrame:
        assert mode == "error"  # a fresh directory, as Spark's writes are
        return self

    def option(self, key: str, value: str) -> ArrowFrame:
        self._options[key] = value
        return self

    def parquet(self, path: str) -> None:
        import pyarrow.fs as pafs

        assert path.startswith("s3a://"), f"Spark is given {path!r}, which its s3a connector would not write"
        self._session.written.append(path)
        fs, directory = self._s3.filesystem(), path.removeprefix("s3a://")
        assert fs.get_file_info(pafs.FileSelector(directory, allow_not_found=True)) == [], "not a fresh directory"
        codec = self._options.get("compression", "snappy")
        name = f"part-00000-{uuid.uuid4()}-c000.{codec}.parquet"
        pq.write_table(self.rows, f"{directory}/{name}", filesystem=fs, compression=codec)


def make_catalog(kind: str, s3: S3Server, bucket: str, tmp_path: Path) -> Catalog:
    root = f"s3://{bucket}/warehouse"
    if kind == "delta":
        return DeltaCatalog(root, storage_options=s3.delta_options())
    if kind == "iceberg":
        uri = f"sqlite:///{tmp_path / 'iceberg_catalog.db'}"  # the catalog itself: any SQL database
        return IcebergCatalog(root, uri=uri, storage_options=s3.iceberg_options())
    return PaimonCatalog(root, storage_options=s3.paimon_options())


@pytest.fixture(name="client")
def fx_client(server: support.ServerProcess, api: httpx.Client) -> Iterator[MetaServiceClient]:
    del api  # empties every table after the test
    with MetaServiceClient(server.base_url) as client:
        yield client


def orders(*rows: tuple[int, str, float]) -> pa.Table:
    ids, days, amounts = zip(*rows, strict=True)
    return pa.table(
        {"order_id": pa.array(ids, pa.int64()), "day": pa.array(days), "amount": pa.array(amounts, pa.float64())}
    )


def objects(s3: S3Server, bucket: str, prefix: str) -> set[str]:
    """The objects under `s3://bucket/prefix`, listed by pyarrow's own S3 client (not a format library's)."""
    import pyarrow.fs as pafs

    selector = pafs.FileSelector(f"{bucket}/{prefix}", recursive=True, allow_not_found=True)
    found = s3.filesystem().get_file_info(selector)
    return {f"s3://{info.path}" for info in found if info.type == pafs.FileType.File}


def data_files(catalog: Catalog, table: str, snapshot_id: int) -> set[str]:
    """The data files of `table` at `snapshot_id` as the format's own library lists them."""
    if isinstance(catalog, DeltaCatalog):
        from deltalake import DeltaTable

        delta = DeltaTable(catalog.location(table), version=snapshot_id, storage_options=catalog.storage_options)
        return set(delta.file_uris())
    if isinstance(catalog, IcebergCatalog):
        scan = catalog.pyiceberg_table(table).scan(snapshot_id=catalog.iceberg_snapshot_id(table, snapshot_id))
        return {task.file.file_path for task in scan.plan_files()}
    assert isinstance(catalog, PaimonCatalog)
    splits = catalog.paimon_table(table, snapshot_id=snapshot_id).new_read_builder().new_scan().plan().splits()
    return {str(meta.file_path) for split in splits for meta in split.files}


@pytest.mark.parametrize("kind", FORMATS)
def test_a_barrier_is_committed_listed_read_and_vacuumed_on_s3(
    kind: str, s3: S3Server, bucket: str, client: MetaServiceClient, tmp_path: Path
) -> None:
    catalog = make_catalog(kind, s3, bucket, tmp_path)
    session = ArrowSession()
    spark = cast("SparkSession", session)

    def frame(rows: pa.Table) -> DataFrame:
        return cast("DataFrame", ArrowFrame(rows, s3, session))

    # a root table: the ingestion's untagged append, its files in the bucket
    first = orders((1, "2026-11-23", 10.0), (2, "2026-11-23", 5.0))
    r1 = catalog.append(spark, frame(first), ORDERS)
    assert catalog.latest_snapshot(ORDERS) == r1
    assert catalog.location(ORDERS).startswith(f"s3://{bucket}/warehouse/lake/")
    assert session.written and all(p.startswith(f"s3a://{bucket}/warehouse/lake/") for p in session.written)
    assert data_files(catalog, ORDERS, r1) <= objects(s3, bucket, "warehouse/lake")

    # the job's barrier: registered with the tables' object-store locations, committed through the catalog
    client.register_job(
        "enrich",
        sources=[ORDERS],
        sinks=[ENRICHED],
        new_roots=[ORDERS],
        formats={ORDERS: catalog.format, ENRICHED: catalog.format},
        locations={t: catalog.location(t) for t in (ORDERS, ENRICHED)},
    )
    decision = client.next_barrier("enrich", {ORDERS: r1})
    assert decision.action == "process" and decision.barrier is not None
    b1 = decision.barrier
    s1 = catalog.write(spark, frame(first), ENRICHED, mode="append", app_id="enrich", barrier=b1)
    old_files = data_files(catalog, ENRICHED, s1)
    assert old_files and old_files <= objects(s3, bucket, "warehouse/lake")
    # listing at the barrier finds the commit; a replay of the barrier writes nothing and returns it
    assert catalog.committed_snapshot(ENRICHED, app_id="enrich", barrier=b1) == s1
    [record] = catalog.commits_after(ENRICHED, None)
    assert (record.snapshot_id, record.kind, record.job_id, record.barrier) == (s1, "write", "enrich", b1)
    written = len(session.written)
    assert catalog.write(spark, frame(first), ENRICHED, mode="append", app_id="enrich", barrier=b1) == s1
    assert len(session.written) == written and catalog.latest_snapshot(ENRICHED) == s1
    client.commit_barrier("enrich", b1, {ENRICHED: s1})
    assert client.get_table(ENRICHED)["location"] == catalog.location(ENRICHED)
    assert client.versions([ENRICHED, ORDERS], "strong").versions == {ENRICHED: s1, ORDERS: r1}

    # the next barrier overwrites the sink: its files replace the first barrier's
    second = orders((3, "2026-11-24", 7.0))
    r2 = catalog.append(spark, frame(second), ORDERS)
    b2 = client.next_barrier("enrich", {ORDERS: r2}).barrier
    assert b2 is not None and b2 > b1
    both = pa.concat_tables([first, second])
    s2 = catalog.write(spark, frame(both), ENRICHED, mode="overwrite", app_id="enrich", barrier=b2)
    assert s2 > s1 and catalog.committed_snapshot(ENRICHED, app_id="enrich", barrier=b2) == s2
    assert [c.barrier for c in catalog.commits_after(ENRICHED, s1)] == [b2]
    new_files = data_files(catalog, ENRICHED, s2)
    assert not new_files & old_files
    client.commit_barrier("enrich", b2, {ENRICHED: s2})

    # DuckDB and Polars read the consistent version from the bucket, without Spark
    with consistent_arrow(client, catalog, [ENRICHED, ORDERS]) as tables:
        assert tables.barrier == b2 and tables.snapshots == {ENRICHED: s2, ORDERS: r2}
        con = duckdb.connect()
        con.register("enriched", tables[ENRICHED])
        assert con.sql("SELECT count(*), sum(amount) FROM enriched").fetchall() == [(3, 22.0)]
        by_day = pl.scan_pyarrow_dataset(tables[ORDERS]).group_by("day").agg(pl.col("amount").sum()).collect()
        assert dict(by_day.sort("day").iter_rows()) == {"2026-11-23": 15.0, "2026-11-24": 7.0}

    # a dead write's file (files written, no commit) and a lease on the first barrier's snapshot
    dead = orphan_path(catalog, ENRICHED)
    pq.write_table(orders((9, "2026-11-25", 1.0)), dead.removeprefix("s3://"), filesystem=s3.filesystem())
    lease = client.create_lease("object-store-test", {ENRICHED: s1})
    deleted = catalog.vacuum(ENRICHED, client, min_orphan_age_seconds=3600)
    assert not set(deleted) & (old_files | {dead}), deleted  # leased, and too young to be an orphan
    assert old_files | new_files | {dead} <= objects(s3, bucket, "warehouse/lake")
    con = duckdb.connect()
    con.register("leased", catalog.arrow_dataset(ENRICHED, s1))
    assert con.sql("SELECT count(*), sum(amount) FROM leased").fetchall() == [(2, 15.0)]

    # the lease released: the first barrier's files and the orphan go, the consistent version stays readable
    client.release_lease(lease.lease_id)
    assert sorted(catalog.vacuum(ENRICHED, client, min_orphan_age_seconds=0, dry_run=True)) == sorted(
        catalog.vacuum(ENRICHED, client, min_orphan_age_seconds=0)
    )
    remaining = objects(s3, bucket, "warehouse/lake")
    assert not remaining & (old_files | {dead}), "vacuum left files only an expired snapshot or no commit held"
    assert new_files <= remaining
    with consistent_arrow(client, catalog, [ENRICHED]) as tables:
        con = duckdb.connect()
        con.register("enriched", tables[ENRICHED])
        assert con.sql("SELECT count(*), sum(amount) FROM enriched").fetchall() == [(3, 22.0)]
    assert catalog.vacuum(ENRICHED, client, min_orphan_age_seconds=0) == []


def orphan_path(catalog: Catalog, table: str) -> str:
    """Where a write that died between its files and its commit left a file."""
    write_id = uuid.uuid4().hex
    if isinstance(catalog, PaimonCatalog):
        return f"{catalog.location(table)}/_staging/{write_id}/part-00000-{write_id}-c000.snappy.parquet"
    return f"{catalog.location(table)}/data/{write_id}/part-00000-{write_id}-c000.snappy.parquet"


@pytest.mark.parametrize(
    ("given", "driver", "spark"),
    [
        ("s3://bucket/lake/", "s3://bucket/lake", "s3a://bucket/lake"),
        ("s3a://bucket/lake", "s3://bucket/lake", "s3a://bucket/lake"),
        ("gs://bucket/a/lake", "gs://bucket/a/lake", "gs://bucket/a/lake"),
        ("gcs://bucket", "gs://bucket", "gs://bucket"),
        (
            "abfss://lake@account.dfs.core.windows.net/warehouse",
            "abfss://lake@account.dfs.core.windows.net/warehouse",
            "abfss://lake@account.dfs.core.windows.net/warehouse",
        ),
        ("file:///data/lake", "/data/lake", "/data/lake"),
        ("/data/lake/", "/data/lake", "/data/lake"),
    ],
)
def test_one_scheme_mapping_between_the_driver_and_spark(given: str, driver: str, spark: str) -> None:
    root = LakeRoot.parse(given, what="a lake root")
    assert root.uri == driver and root.join("lake", "raw", "orders") == f"{driver}/lake/raw/orders"
    assert root.spark_path(root.uri) == spark
    # what Spark reports of a file it read (`_metadata.file_path`, percent-encoded) maps back to the driver's path
    reported = root.spark_path(root.join("lake", "x", "part 0.parquet")).replace(" ", "%20")
    if root.is_local:
        reported = f"file:{reported}"
    assert root.driver_path(reported) == root.join("lake", "x", "part 0.parquet")


def test_roots_a_format_cannot_use_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"local directory or an object-store URI \(gcs://, gs://, s3://"):
        PaimonCatalog("abfss://lake@account.dfs.core.windows.net/warehouse")  # pypaimon has no Azure file system
    with pytest.raises(ValueError, match="hdfs://nn/lake"):
        DeltaCatalog("hdfs://nn/lake")
    with pytest.raises(ValueError, match="names no bucket"):
        DeltaCatalog("s3:///lake")
    with pytest.raises(ValueError, match=r"contains \*"):
        DeltaCatalog("s3://bucket/lake*")
    with pytest.raises(ValueError, match="needs a catalog every job reaches"):
        IcebergCatalog("s3://bucket/lake")  # a SQLite file beside the data cannot live in a bucket
    with pytest.raises(ValueError, match="configure the catalog given instead"):
        IcebergCatalog("s3://bucket/lake", catalog=object(), storage_options={"s3.region": "x"})  # type: ignore[arg-type]
    assert IcebergCatalog(tmp_path).root == str(tmp_path)  # local roots as before


def test_a_streaming_job_refuses_an_object_store_catalog() -> None:
    from spark_client.streaming._catalogs import catalog_spec

    with pytest.raises(TypeError, match="object store; streaming jobs"):
        catalog_spec(DeltaCatalog("s3://bucket/lake"))
