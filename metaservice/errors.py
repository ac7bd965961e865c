"""Typed errors: every error a user can cause is a `MetaServiceError` subclass with a stable `code`.

No web import here: the database layer and the services raise these, and `metaservice/api/problems.py` renders
them as RFC 9457 problem documents. Anything else that escapes a route is a bug, reported as a 500 problem.
"""

from __future__ import annotations

from typing import Any, ClassVar


class MetaServiceError(Exception):
    """Base of every error the API reports. One subclass per problem `code`; `extra` lands in the body."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    title: ClassVar[str] = "Internal error"

    def __init__(self, detail: str, *, headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra
        self.headers = headers or {}


class InvalidRequest(MetaServiceError):
    status, code, title = 422, "invalid_request", "Invalid request"


class NotFound(MetaServiceError):
    status, code, title = 404, "not_found", "Not found"


class NoConsistentVersion(MetaServiceError):
    status, code, title = 404, "no_consistent_version", "No consistent version yet"


class NotFreshEnough(MetaServiceError):
    """No consistent version met the freshness bound within the wait; the body says how stale the best one is."""

    status, code, title = 409, "not_fresh_enough", "No consistent version is fresh enough"


class CycleError(MetaServiceError):
    status, code, title = 409, "cycle", "Registration would close a cycle"


class TableHasWriter(MetaServiceError):
    status, code, title = 409, "table_has_writer", "Table already has a writer"


class TableNameConflict(MetaServiceError):
    status, code, title = 409, "table_name_conflict", "Table name differs only in case from a registered table"


class TableMetadataConflict(MetaServiceError):
    status, code, title = 409, "table_metadata_conflict", "Table format or location differs"


class NotInFlight(MetaServiceError):
    status, code, title = 409, "not_in_flight", "Barrier is not in flight for this job"


class SnapshotConflict(MetaServiceError):
    status, code, title = 409, "snapshot_conflict", "Barrier already committed with other snapshots"


class SnapshotRegressed(MetaServiceError):
    status, code, title = 409, "snapshot_regressed", "Snapshot id is lower than an earlier barrier's"


class AlreadyCommitted(MetaServiceError):
    status, code, title = 409, "already_committed", "Barrier already committed"


class NameTaken(MetaServiceError):
    status, code, title = 409, "name_taken", "Name already in use"


class NotRoot(MetaServiceError):
    status, code, title = 409, "not_root", "Table is written by a job"


class JobInactive(MetaServiceError):
    status, code, title = 409, "job_unregistered", "Job is unregistered"


class UnknownSource(MetaServiceError):
    """A job registration names sources MetaService has never seen (a misspelt name would wait forever)."""

    status, code, title = 409, "unknown_source", "Source table is not known"


class TableRetired(MetaServiceError):
    status, code, title = 409, "table_retired", "Table is retired"


class TableInUse(MetaServiceError):
    status, code, title = 409, "table_in_use", "Table is used by a job"


class PartialRootGroup(MetaServiceError):
    """A report names some roots of a group without the others: a barrier would seal a part of the group."""

    status, code, title = 409, "partial_root_group", "Roots of a group are reported together"


class RootGroupConflict(MetaServiceError):
    status, code, title = 409, "root_group_conflict", "Table cannot join the root group"


class RollbackConflict(MetaServiceError):
    status, code, title = 409, "rollback_conflict", "Rollback cannot proceed"


class RollbackStale(MetaServiceError):
    status, code, title = 409, "rollback_stale", "Rollback plan no longer matches the lineage"


class RollbackNotPlanned(MetaServiceError):
    status, code, title = 409, "rollback_not_planned", "Rollback is no longer planned"


class PayloadTooLarge(MetaServiceError):
    status, code, title = 413, "payload_too_large", "Request body too large"


class Unauthorized(MetaServiceError):
    status, code, title = 401, "unauthorized", "Authentication required"


class Forbidden(MetaServiceError):
    status, code, title = 403, "forbidden", "Not allowed"


class Unavailable(MetaServiceError):
    status, code, title = 503, "unavailable", "Service temporarily unavailable"

    def __init__(self, detail: str, *, retry_after: int = 1, **extra: Any) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after)}, retry_after_seconds=retry_after, **extra)


class Overloaded(MetaServiceError):
    """More requests wait for a database connection than the server queues: shed early, retry shortly."""

    status, code, title = 429, "overloaded", "Too many requests"

    def __init__(self, detail: str, *, retry_after: int = 1, **extra: Any) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after)}, retry_after_seconds=retry_after, **extra)


class OutcomeUnknown(MetaServiceError):
    """The database connection was lost after a write was sent: it may or may not have committed.

    504 (the database is the upstream that did not answer), never 503, whose meaning here is "nothing
    happened". Idempotent calls may simply be repeated; `POST /barriers` is safe to repeat with the same
    `Idempotency-Key`.
    """

    status, code, title = 504, "outcome_unknown", "Outcome unknown"

    def __init__(self, detail: str, *, retry_after: int = 1, **extra: Any) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after)}, retry_after_seconds=retry_after, **extra)
