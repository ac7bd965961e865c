"""The client's public surface is exactly what CLIENT.md documents (plus the error types)."""

from __future__ import annotations

import inspect

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


def test_every_public_name_is_a_documented_class_or_function_of_the_client_exported_under_its_own_name() -> None:
    """A name of `__all__` that is missing, a stray alias (another object under this name), a re-exported
    third-party object, a module, a constant or an undocumented object fails here."""
    exported: dict[str, object] = {}
    exec("from spark_client import *", exported)  # what a star import brings
    assert sorted(k for k in exported if k != "__builtins__") == sorted(spark_client.__all__)
    for name in spark_client.__all__:
        obj = getattr(spark_client, name)
        assert inspect.isclass(obj) or inspect.isfunction(obj), f"{name} is {type(obj).__name__}"
        assert obj.__name__ == name, f"spark_client.{name} is {obj.__module__}.{obj.__name__}"
        assert obj.__module__.split(".")[0] == "spark_client", f"{name} comes from {obj.__module__}"
        assert inspect.getdoc(obj), f"{name} has no docstring"
