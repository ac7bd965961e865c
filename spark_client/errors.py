"""Exceptions raised by the client; each carries the server's problem `code`."""

from __future__ import annotations

from typing import Any


class MetaServiceError(Exception):
    """Base of every error from MetaService. `code` is the problem document's machine-readable code."""

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str = "error",
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {detail}")
        self.detail, self.status, self.code, self.body = detail, status, code, body or {}


class NotFound(MetaServiceError):
    """404: unknown job, table, barrier or lease."""


class NoConsistentVersion(NotFound):
    """404: no barrier is complete in every requested table yet."""


class InvalidRequest(MetaServiceError):
    """400/413/422: the request was malformed; `errors` lists the offending fields."""

    @property
    def errors(self) -> list[Any]:
        return list(self.body.get("errors", []))


class Unauthorized(MetaServiceError):
    """401: missing or bad token."""


class Forbidden(MetaServiceError):
    """403: the token's role or scope does not allow this."""


class Conflict(MetaServiceError):
    """409: the request breaks a protocol rule."""


class CycleError(Conflict):
    """409 `cycle`: the registration would close a loop; `cycle` names the nodes along it."""

    @property
    def cycle(self) -> list[str]:
        return list(self.body.get("cycle", []))


class TableHasWriter(Conflict):
    """409 `table_has_writer`: another job writes the table; `writer` names it."""

    @property
    def writer(self) -> str | None:
        value = self.body.get("writer")
        return str(value) if value is not None else None


class NotInFlight(Conflict):
    """409 `not_in_flight`: the barrier was never handed to the job, or was aborted."""


class SnapshotConflict(Conflict):
    """409 `snapshot_conflict`: the barrier was committed with other snapshots."""


class SnapshotRegressed(Conflict):
    """409 `snapshot_regressed`: a snapshot id lower than an earlier barrier's."""


class AlreadyCommitted(Conflict):
    """409 `already_committed`: an abort came after the commit."""


class NotRoot(Conflict):
    """409 `not_root`: the table is written by a job."""


class Unavailable(MetaServiceError):
    """The server or its database stayed unavailable (503/502/504/429 or connection errors) through all retries."""


class ServerError(MetaServiceError):
    """500: a server bug; not retried."""


class OutcomeUnknown(MetaServiceError):
    """A non-idempotent call may or may not have taken effect (timeout after sending). Never retried blindly."""


_CONFLICTS: dict[str, type[Conflict]] = {
    "cycle": CycleError,
    "table_has_writer": TableHasWriter,
    "not_in_flight": NotInFlight,
    "snapshot_conflict": SnapshotConflict,
    "snapshot_regressed": SnapshotRegressed,
    "already_committed": AlreadyCommitted,
    "not_root": NotRoot,
}


def error_for(status: int, body: dict[str, Any]) -> MetaServiceError:
    """The exception for an error answer's status and problem document."""
    code = str(body.get("code") or f"http_{status}")
    detail = str(body.get("detail") or body.get("title") or f"HTTP {status}")
    cls: type[MetaServiceError]
    if status == 404:
        cls = NoConsistentVersion if code == "no_consistent_version" else NotFound
    elif status == 409:
        cls = _CONFLICTS.get(code, Conflict)
    elif status in (400, 413, 422):
        cls = InvalidRequest
    elif status == 401:
        cls = Unauthorized
    elif status == 403:
        cls = Forbidden
    elif status in (429, 502, 503, 504):
        cls = Unavailable
    elif status >= 500:
        cls = ServerError
    else:
        cls = MetaServiceError
    return cls(detail, status=status, code=code, body=body)
