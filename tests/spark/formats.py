"""Catalogs of every format for the parametrized Spark tests (importable by crash-test subprocesses too)."""

from __future__ import annotations

import os
from pathlib import Path

from spark_client.catalog import Catalog, DeltaCatalog, IcebergCatalog, PaimonCatalog

FORMATS = ("delta", "iceberg", "paimon")
# The kill point right after the format's own commit, before MetaService hears of it.
COMMIT_FAILPOINT = {"delta": "after_delta_commit", "iceberg": "after_table_commit", "paimon": "after_table_commit"}


def make_catalog(format_name: str, root: str | os.PathLike[str], *, iceberg_uri: str | None = None) -> Catalog:
    """A catalog of `format_name` rooted at `root` (Iceberg: SQLite catalog there unless `iceberg_uri`)."""
    if format_name == "delta":
        return DeltaCatalog(root)
    if format_name == "iceberg":
        return IcebergCatalog(root, uri=iceberg_uri)
    if format_name == "paimon":
        return PaimonCatalog(root)
    raise ValueError(f"unknown format {format_name!r}; one of {FORMATS}")


def snapshot_files(catalog: Catalog, table: str, snapshot_id: int) -> list[str]:
    """The data files of `table` at `snapshot_id`, listed by the format's own library."""
    if isinstance(catalog, DeltaCatalog):
        from deltalake import DeltaTable

        return sorted(os.path.normpath(p) for p in DeltaTable(catalog.location(table), version=snapshot_id).file_uris())
    if isinstance(catalog, IcebergCatalog):
        ice = catalog.pyiceberg_table(table)
        scan = ice.scan(snapshot_id=catalog.iceberg_snapshot_id(table, snapshot_id))
        return sorted(os.path.normpath(task.file.file_path) for task in scan.plan_files())
    if isinstance(catalog, PaimonCatalog):
        native = catalog.paimon_table(table, snapshot_id=snapshot_id)
        splits = native.new_read_builder().new_scan().plan().splits()
        return sorted({os.path.normpath(f.file_path) for split in splits for f in split.files})
    raise TypeError(f"no file listing for {catalog!r}")


def table_files(catalog: Catalog, table: str) -> list[str]:
    """Every file under the table's directory (data, logs, metadata), relative to it."""
    location = Path(catalog.location(table))
    return sorted(str(p.relative_to(location)) for p in location.rglob("*") if p.is_file())
