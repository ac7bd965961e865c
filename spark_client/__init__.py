"""PySpark client of MetaService: ETL jobs on aligned barriers and consistent multi-table reads.

Example:
    from spark_client import MetaServiceClient, DeltaCatalog, IcebergCatalog, PaimonCatalog, EtlJob, consistent_tables
    from spark_client.modes import Append, Merge, Overwrite, OverwritePartitions, ReplaceWhere
"""

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
