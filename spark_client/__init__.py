"""PySpark client of MetaService: ETL jobs on aligned barriers and consistent multi-table reads.

Example:
    from spark_client import MetaServiceClient, DeltaCatalog, EtlJob, consistent_tables
"""

from spark_client._http import MetaServiceClient
from spark_client._retry import RetryPolicy
from spark_client.catalog import Catalog, DeltaCatalog, NotAppendOnly, SchemaMismatch
from spark_client.errors import (
    Conflict,
    CycleError,
    InvalidRequest,
    MetaServiceError,
    NoConsistentVersion,
    NotFound,
    NotInFlight,
    OutcomeUnknown,
    SnapshotConflict,
    TableHasWriter,
    Unavailable,
)
from spark_client.inputs import Inputs
from spark_client.job import EtlJob, PermanentFailure, RunResult
from spark_client.reading import ConsistentTables, consistent_tables
from spark_client.rollback import apply_rollback

__all__ = [
    "Catalog",
    "Conflict",
    "ConsistentTables",
    "CycleError",
    "DeltaCatalog",
    "EtlJob",
    "Inputs",
    "InvalidRequest",
    "MetaServiceClient",
    "MetaServiceError",
    "NoConsistentVersion",
    "NotAppendOnly",
    "NotFound",
    "NotInFlight",
    "OutcomeUnknown",
    "PermanentFailure",
    "RetryPolicy",
    "RunResult",
    "SchemaMismatch",
    "SnapshotConflict",
    "TableHasWriter",
    "Unavailable",
    "apply_rollback",
    "consistent_tables",
]
