"""RFC 9457 problem+json rendering of every answer that is not a success.

Every `MetaServiceError` (metaservice/errors.py) renders through one handler; request validation, unknown routes,
wrong methods and unparsable bodies get the same document shape; anything else that escapes a route is a bug,
logged and answered 500.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from metaservice.errors import MetaServiceError

logger = logging.getLogger("metaservice")

PROBLEM_JSON = "application/problem+json"


# Validation errors whose context lists the values a field takes (`Literal` and enum fields).
_CHOICE_ERRORS = {"literal_error", "enum"}
_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


def _field(error: Mapping[str, Any]) -> dict[str, Any]:
    """One invalid field of a request: where, what is wrong, and for a field of fixed values which ones it takes."""
    field: dict[str, Any] = {
        "loc": [str(part) for part in error.get("loc", ())],
        "msg": str(error.get("msg", "")),
        "type": error.get("type"),
    }
    expected = (error.get("ctx") or {}).get("expected")
    if error.get("type") in _CHOICE_ERRORS and isinstance(expected, str):
        field["allowed"] = _QUOTED.findall(expected)
    return field


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
        fields = [_field(e) for e in exc.errors()]
        names = ", ".join(
            ".".join(f["loc"]) + (f" (one of {', '.join(map(repr, f['allowed']))})" if "allowed" in f else "")
            for f in fields[:5]
        )
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
    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, path or request.url.path):
            methods |= {m.upper() for m in operations}
    return sorted(methods)
