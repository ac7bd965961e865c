"""Table formats behind one interface."""

from spark_client.catalog.base import Catalog
from spark_client.catalog.delta import DeltaCatalog, NotAppendOnly, SchemaMismatch

__all__ = ["Catalog", "DeltaCatalog", "NotAppendOnly", "SchemaMismatch"]
