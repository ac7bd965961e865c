"""PySpark client of MetaService: ETL jobs on aligned barriers and consistent multi-table reads.

Example:
    from spark_client import MetaServiceClient, DeltaCatalog, IcebergCatalog, PaimonCatalog, EtlJob, consistent_tables
    from spark_client.modes import Append, Merge, Overwrite, OverwritePartitions, ReplaceWhere
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Each public name and the module it lives in, imported on first use (PEP 562): `import spark_client` and the
# HTTP part (`spark_client._http`, `.errors`, `.models`) need neither pyspark nor the table format libraries.
_LAZY = {
    "MetaServiceClient": "spark_client._http",
    "RetryPolicy": "spark_client._retry",
    "ConsistentArrow": "spark_client.arrow",
    "consistent_arrow": "spark_client.arrow",
    **dict.fromkeys(
        (
            "Catalog",
            "DeltaCatalog",
            "IcebergCatalog",
            "NotAppendOnly",
            "PaimonCatalog",
            "RoutingCatalog",
            "SchemaMismatch",
        ),
        "spark_client.catalog",
    ),
    **dict.fromkeys(
        (
            "Conflict",
            "CycleError",
            "InvalidRequest",
            "InvalidTransformResult",
            "MetaServiceError",
            "NoConsistentVersion",
            "NotFound",
            "NotFreshEnough",
            "NotInFlight",
            "OutcomeUnknown",
            "SnapshotConflict",
            "TableHasWriter",
            "Unavailable",
            "UnexpectedSinkCommit",
            "UnsafeWriteMode",
        ),
        "spark_client.errors",
    ),
    "Inputs": "spark_client.inputs",
    "EtlJob": "spark_client.job",
    "PermanentFailure": "spark_client.job",
    "RunResult": "spark_client.job",
    "ConsistentTables": "spark_client.reading",
    "consistent_tables": "spark_client.reading",
    "apply_rollback": "spark_client.rollback",
}

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


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
