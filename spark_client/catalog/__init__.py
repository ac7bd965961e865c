"""Table formats behind one interface: the job logic sees `Catalog`; Delta, Iceberg and Paimon implement it."""

from spark_client.catalog.base import Catalog, CommitRecord, NotAppendOnly, SchemaMismatch, UnsupportedTable
from spark_client.catalog.delta import DeltaCatalog, DeltaCommit
from spark_client.catalog.iceberg import IcebergCatalog
from spark_client.catalog.paimon import PaimonCatalog
from spark_client.catalog.routing import RoutingCatalog

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
