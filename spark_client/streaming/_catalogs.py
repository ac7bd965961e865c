"""What the stream source needs of a catalog in Spark's Python workers: a catalog rebuilt from a JSON spec
(Spark passes a data source only string options) and the parquet files of a snapshot, or of the rows added
between two snapshots, listed by the format's own library."""

from __future__ import annotations

import json
import os
from typing import Any

from spark_client.catalog.base import Catalog, NotAppendOnly, UnsupportedTable


def catalog_spec(catalog: Catalog) -> str:
    """`catalog` as a JSON string `catalog_from_spec` rebuilds it from.

    Raises:
        TypeError: a catalog that cannot be rebuilt from its settings (e.g. an Iceberg catalog made around a
            pyiceberg catalog object).
    """
    return json.dumps(_spec(catalog), sort_keys=True)


def _spec(catalog: Catalog) -> dict[str, Any]:
    from spark_client.catalog import DeltaCatalog, IcebergCatalog, PaimonCatalog, RoutingCatalog

    lake = getattr(catalog, "_lake", None)
    if lake is not None and not lake.is_local:
        raise TypeError(
            f"{catalog!r} keeps its tables on an object store; streaming jobs read and write lakes in a local (or "
            "mounted) directory so far: the stream source's Python workers and the checkpoint use the local file "
            "system"
        )
    if isinstance(catalog, DeltaCatalog):
        return {"format": "delta", "root": catalog.root}
    if isinstance(catalog, PaimonCatalog):
        return {"format": "paimon", "root": catalog.root}
    if isinstance(catalog, IcebergCatalog):
        if not getattr(catalog, "_owns_catalog", False):
            raise TypeError(
                f"{catalog!r} wraps a pyiceberg catalog object, which Spark's Python workers cannot rebuild; "
                "make it with IcebergCatalog(root, uri=...) for a streaming job"
            )
        return {"format": "iceberg", "root": catalog.root, "uri": catalog._uri, "name": catalog._name}
    if isinstance(catalog, RoutingCatalog):
        return {
            "format": "routing",
            "routes": [[pattern, _spec(routed)] for pattern, routed in catalog.routes],
            "default": _spec(catalog.default),
        }
    raise TypeError(f"a streaming job needs a Delta, Iceberg, Paimon or routing catalog, got {catalog!r}")


def catalog_from_spec(spec: str) -> Catalog:
    """The catalog `catalog_spec` described."""
    return _build(json.loads(spec))


def _build(spec: dict[str, Any]) -> Catalog:
    from spark_client.catalog import DeltaCatalog, IcebergCatalog, PaimonCatalog, RoutingCatalog

    kind = spec["format"]
    if kind == "delta":
        return DeltaCatalog(spec["root"])
    if kind == "paimon":
        return PaimonCatalog(spec["root"])
    if kind == "iceberg":
        return IcebergCatalog(spec["root"], uri=spec.get("uri"), name=spec.get("name", "metaservice"))
    if kind == "routing":
        routes = [(str(pattern), _build(routed)) for pattern, routed in spec["routes"]]
        return RoutingCatalog(routes, default=_build(spec["default"]))
    raise ValueError(f"unknown catalog spec {spec!r}")


def snapshot_files(catalog: Catalog, table: str, snapshot_id: int) -> list[str]:
    """The parquet data files of `table` at `snapshot_id` (local paths, sorted).

    Raises:
        UnsupportedTable: the snapshot is not a plain list of parquet files (deletes, primary keys).
    """
    catalog_for = getattr(catalog, "catalog_for", None)
    if callable(catalog_for):
        catalog = catalog_for(table)
    from spark_client.catalog import DeltaCatalog

    if isinstance(catalog, DeltaCatalog):
        from deltalake import DeltaTable

        files = DeltaTable(catalog.location(table), version=snapshot_id).file_uris()
    else:
        import pyarrow.dataset as pads

        from spark_client.arrow import arrow_dataset

        dataset = arrow_dataset(catalog, table, snapshot_id)
        if not isinstance(dataset, pads.FileSystemDataset) or not isinstance(dataset.format, pads.ParquetFileFormat):
            raise UnsupportedTable(
                f"{table!r} at snapshot {snapshot_id} is not a plain list of parquet files (deletes or primary "
                "keys); a streaming job reads append-only tables"
            )
        files = list(dataset.files)
    return sorted(_local(f) for f in files)


def added_files(catalog: Catalog, table: str, *, after: int | None, snapshot_id: int) -> list[str]:
    """The files of `snapshot_id` that `after` lacks (every file when `after` is None).

    Raises:
        NotAppendOnly: files of `after` are gone at `snapshot_id` (overwritten, merged, restored).
    """
    now = snapshot_files(catalog, table, snapshot_id)
    if after is None:
        return now
    if after > snapshot_id:
        raise ValueError(f"{table!r}: snapshot {after} is newer than {snapshot_id}")
    before = set(snapshot_files(catalog, table, after))
    if gone := len(before.difference(now)):
        raise NotAppendOnly(
            f"{table!r} is not append-only between snapshots {after} and {snapshot_id}: {gone} file(s) were "
            "removed (overwritten, merged or restored)",
            table=table,
            after_snapshot_id=after,
            snapshot_id=snapshot_id,
        )
    return [f for f in now if f not in before]


def _local(path: str) -> str:
    if path.startswith("file:"):
        path = "/" + path[len("file:") :].lstrip("/")
    return os.path.normpath(path)
