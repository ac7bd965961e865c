"""The client's public surface is exactly what CLIENT.md documents (plus the error types)."""

from __future__ import annotations

import spark_client


def test_public_names_are_pinned() -> None:
    assert sorted(spark_client.__all__) == sorted(
        [
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
    )
    for name in spark_client.__all__:
        assert getattr(spark_client, name) is not None
