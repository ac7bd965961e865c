"""PySpark client of MetaService: ETL jobs on aligned barriers and consistent multi-table reads.

Example:
    from spark_client import MetaServiceClient, DeltaCatalog, IcebergCatalog, PaimonCatalog, EtlJob, consistent_tables
    from spark_client.modes import Append, Merge, Overwrite, OverwritePartitions, ReplaceWhere

Imports are lazy (PEP 562): `import spark_client` loads nothing but this module, so the HTTP client works with the
base install alone (httpx, tenacity); a name is imported from its module when first used, and Spark or a table
format library only when a name that needs it is (`EtlJob` runs with the `spark` extra, `DeltaCatalog` needs the
`delta` extra, and so on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_client._lazy import exports

if TYPE_CHECKING:
    from spark_client._http import MetaServiceClient
    from spark_client._retry import RetryPolicy
    from spark_client.arrow import ConsistentArrow, consistent_arrow
    from spark_client.catalog import (
        Catalog,
        DeltaCatalog,
        IcebergCatalog,
        NotAppendOnly,
        PaimonCatalog,
        RoutingCatalog,
        SchemaMismatch,
    )
    from spark_client.errors import (
        Conflict,
        CycleError,
        InvalidRequest,
        InvalidTransformResult,
        MetaServiceError,
        NoConsistentVersion,
        NotFound,
        NotFreshEnough,
        NotInFlight,
        OutcomeUnknown,
        SnapshotConflict,
        TableHasWriter,
        Unavailable,
        UnexpectedSinkCommit,
        UnsafeWriteMode,
    )
    from spark_client.inputs import Inputs
    from spark_client.job import EtlJob, PermanentFailure, RunResult
    from spark_client.reading import ConsistentTables, consistent_tables
    from spark_client.rollback import apply_rollback

# public name → the module defining it
_MODULES = {
    "Catalog": "spark_client.catalog",
    "Conflict": "spark_client.errors",
    "ConsistentArrow": "spark_client.arrow",
    "ConsistentTables": "spark_client.reading",
    "CycleError": "spark_client.errors",
    "DeltaCatalog": "spark_client.catalog",
    "EtlJob": "spark_client.job",
    "IcebergCatalog": "spark_client.catalog",
    "Inputs": "spark_client.inputs",
    "InvalidRequest": "spark_client.errors",
    "InvalidTransformResult": "spark_client.errors",
    "MetaServiceClient": "spark_client._http",
    "MetaServiceError": "spark_client.errors",
    "NoConsistentVersion": "spark_client.errors",
    "NotAppendOnly": "spark_client.catalog",
    "NotFound": "spark_client.errors",
    "NotFreshEnough": "spark_client.errors",
    "NotInFlight": "spark_client.errors",
    "OutcomeUnknown": "spark_client.errors",
    "PaimonCatalog": "spark_client.catalog",
    "PermanentFailure": "spark_client.job",
    "RetryPolicy": "spark_client._retry",
    "RoutingCatalog": "spark_client.catalog",
    "RunResult": "spark_client.job",
    "SchemaMismatch": "spark_client.catalog",
    "SnapshotConflict": "spark_client.errors",
    "TableHasWriter": "spark_client.errors",
    "Unavailable": "spark_client.errors",
    "UnexpectedSinkCommit": "spark_client.errors",
    "UnsafeWriteMode": "spark_client.errors",
    "apply_rollback": "spark_client.rollback",
    "consistent_arrow": "spark_client.arrow",
    "consistent_tables": "spark_client.reading",
}


__getattr__, __dir__ = exports(__name__, _MODULES, globals())


__all__ = [
    "Catalog",
    "Conflict",
    "ConsistentArrow",
    "ConsistentTables",
    "CycleError",
    "DeltaCatalog",
    "EtlJob",
    "IcebergCatalog",
    "Inputs",
    "InvalidRequest",
    "InvalidTransformResult",
    "MetaServiceClient",
    "MetaServiceError",
    "NoConsistentVersion",
    "NotAppendOnly",
    "NotFound",
    "NotFreshEnough",
    "NotInFlight",
    "OutcomeUnknown",
    "PaimonCatalog",
    "PermanentFailure",
    "RetryPolicy",
    "RoutingCatalog",
    "RunResult",
    "SchemaMismatch",
    "SnapshotConflict",
    "TableHasWriter",
    "Unavailable",
    "UnexpectedSinkCommit",
    "UnsafeWriteMode",
    "apply_rollback",
    "consistent_arrow",
    "consistent_tables",
]
