"""Table formats behind one interface: the job logic sees `Catalog`; Delta is the first implementation."""

from spark_client.catalog.base import Catalog
from spark_client.catalog.delta import (
    DeltaCatalog,
    DeltaCommit,
    NotAppendOnly,
    SchemaMismatch,
    UnsupportedTable,
)

__all__ = ["Catalog", "DeltaCatalog", "DeltaCommit", "NotAppendOnly", "SchemaMismatch", "UnsupportedTable"]
