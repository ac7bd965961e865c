"""Table formats behind one interface: the job logic sees `Catalog`; Delta, Iceberg and Paimon implement it.

Imports are lazy (PEP 562): a format's module, and its library (deltalake, pyiceberg, pypaimon: the `delta`,
`iceberg` and `paimon` extras), load only when its catalog is first named.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_client.catalog.base import Catalog, CommitRecord, NotAppendOnly, SchemaMismatch, UnsupportedTable
    from spark_client.catalog.delta import DeltaCatalog, DeltaCommit
    from spark_client.catalog.iceberg import IcebergCatalog
    from spark_client.catalog.paimon import PaimonCatalog
    from spark_client.catalog.routing import RoutingCatalog

# public name → the module defining it
_MODULES = {
    "Catalog": "spark_client.catalog.base",
    "CommitRecord": "spark_client.catalog.base",
    "DeltaCatalog": "spark_client.catalog.delta",
    "DeltaCommit": "spark_client.catalog.delta",
    "IcebergCatalog": "spark_client.catalog.iceberg",
    "NotAppendOnly": "spark_client.catalog.base",
    "PaimonCatalog": "spark_client.catalog.paimon",
    "RoutingCatalog": "spark_client.catalog.routing",
    "SchemaMismatch": "spark_client.catalog.base",
    "UnsupportedTable": "spark_client.catalog.base",
}
# the extra that installs what a name's module imports at its top
_EXTRAS = {"DeltaCatalog": "delta", "DeltaCommit": "delta"}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_client.catalog' has no attribute {name!r}")
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get(name)
        if extra is None or (exc.name or "").startswith("spark_client"):
            raise
        raise ModuleNotFoundError(
            f"{name} needs the {extra!r} extra, which installs {exc.name!r}: pip install 'metaservice[{extra}]'",
            name=exc.name,
        ) from exc
    value = getattr(loaded, name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULES})


__all__ = [
    "Catalog",
    "CommitRecord",
    "DeltaCatalog",
    "DeltaCommit",
    "IcebergCatalog",
    "NotAppendOnly",
    "PaimonCatalog",
    "RoutingCatalog",
    "SchemaMismatch",
    "UnsupportedTable",
]
