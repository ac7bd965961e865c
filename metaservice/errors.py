"""Typed errors and their RFC 9457 problem+json rendering.

Every error a user can cause is a `MetaServiceError` subclass with a stable `code`; one handler renders
them all. Anything else that escapes a route is a bug and is reported as a 500 problem document.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

logger = logging.getLogger("metaservice")

PROBLEM_JSON = "application/problem+json"


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


def problem(
    request: Request,
    *,
    status: int,
    code: str,
    title: str,
    detail: str,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """Render one RFC 9457 problem document with our `code` extension."""
    body = {
        "type": f"/problems/{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "instance": request.url.path,
        "code": code,
        **extra,
    }
    return JSONResponse(jsonable_encoder(body), status_code=status, media_type=PROBLEM_JSON, headers=headers)


def install_handlers(app: FastAPI) -> None:
    """Route every exception kind to a problem document; unknown exceptions become a logged 500."""

    @app.exception_handler(MetaServiceError)
    async def _domain(request: Request, exc: MetaServiceError) -> JSONResponse:
        return problem(
            request,
            status=exc.status,
            code=exc.code,
            title=exc.title,
            detail=exc.detail,
            headers=exc.headers or None,
            **exc.extra,
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = [
            {
                "loc": [str(part) for part in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": e.get("type"),
            }
            for e in exc.errors()
        ]
        names = ", ".join(".".join(f["loc"]) for f in fields[:5])
        return problem(
            request,
            status=422,
            code="invalid_request",
            title="Invalid request",
            detail=f"{len(fields)} invalid field(s): {names}",
            errors=fields,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {
            404: "not_found",
            405: "method_not_allowed",
            413: "payload_too_large",
            400: "invalid_request",
        }
        code = codes.get(exc.status_code, "http_error")
        if exc.status_code == 405:  # Starlette names only the first matching route's methods
            allowed = _allowed_methods(request)
            return problem(
                request,
                status=405,
                code="method_not_allowed",
                title="Method not allowed",
                detail=f"{request.method} is not allowed on {request.url.path}; allowed: {', '.join(allowed)}",
                headers={"Allow": ", ".join(allowed)},
                allowed=allowed,
            )
        if exc.status_code == 400:  # a body that does not parse: the contract says 422 invalid_request
            return problem(
                request,
                status=422,
                code="invalid_request",
                title="Invalid request",
                detail=f"the request body is not valid JSON: {exc.detail}",
                errors=[{"loc": ["body"], "msg": str(exc.detail), "type": "json_invalid"}],
            )
        return problem(
            request,
            status=exc.status_code,
            code=code,
            title=str(exc.detail) if exc.status_code != 404 else "Not found",
            detail=str(exc.detail) if exc.status_code != 404 else _no_route(request),
            headers=dict(exc.headers) if exc.headers else None,
        )

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return problem(
            request,
            status=500,
            code="internal_error",
            title="Internal error",
            detail="an unexpected error occurred",
        )


def _no_route(request: Request) -> str:
    """The 404 detail; a path that exists without its trailing slash says so (there is no slash redirect)."""
    path = request.url.path
    stripped = path.rstrip("/")
    if stripped and stripped != path and _allowed_methods(request, stripped):
        return f"no route for {path}; without the trailing slash: {stripped}"
    return f"no route for {path}"


def _allowed_methods(request: Request, path: str | None = None) -> list[str]:
    """Every method the published API serves at `path` (default: the request's; routes are nested in included
    routers)."""
    import re

    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path or request.url.path):
            methods |= {m.upper() for m in operations}
    return sorted(methods)
