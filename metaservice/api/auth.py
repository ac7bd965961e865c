"""Authorisation of every route by role: admin (everything), job (its own job ids, plus reads), reader (reads).

One app-wide dependency classifies the matched route, so routers stay free of auth code.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.routing import APIRoute

from metaservice.errors import Forbidden, Unauthorized
from metaservice.services import tokens
from metaservice.services.tokens import ANONYMOUS_ADMIN, Principal

PUBLIC_PATHS = {"/healthz", "/readyz", "/docs", "/openapi.json", "/docs/oauth2-redirect", "/redoc"}
JOB_WRITE_PREFIXES = ("/register/", "/unregister/", "/jobs/{job_id}/barriers/")
# Job writes that name their job in the body, not the path (OpenLineage events: `job.name`); the service checks the
# job id against the token's patterns once the body is parsed.
JOB_BODY_WRITES = {"/api/v1/lineage"}
# Writes that readers (dashboards, query engines) need: consistent versions and leases.
READER_WRITES = {"/versions", "/leases", "/leases/{lease_id}", "/leases/{lease_id}/renew"}


async def authorize(request: Request) -> Principal:
    """Resolve the caller and check the route is allowed for its role (401 / 403 problem documents)."""
    settings = request.app.state.settings
    route = request.scope.get("route")
    path = route.path if isinstance(route, APIRoute) else request.url.path
    if not settings.auth_enabled or path in PUBLIC_PATHS or (path == "/metrics" and not settings.metrics_auth):
        return ANONYMOUS_ADMIN
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("send 'Authorization: Bearer <token>'", headers={"WWW-Authenticate": "Bearer"})
    principal = await tokens.authenticate(request.state.runtime, token=token.strip())
    if principal is None:
        raise Unauthorized("the token is unknown or revoked", headers={"WWW-Authenticate": "Bearer"})
    _check(principal, path=path, method=request.method, job_id=request.path_params.get("job_id"))
    return principal


def _check(principal: Principal, *, path: str, method: str, job_id: str | None) -> None:
    if principal.role == "admin":
        return
    if method == "GET" or (method in ("POST", "DELETE") and path in READER_WRITES):
        return
    if principal.role == "job" and method == "POST" and path in JOB_BODY_WRITES:
        return
    if path.startswith(JOB_WRITE_PREFIXES) and method in ("POST", "DELETE") and job_id is not None:
        if principal.may_act_for(job_id):
            return
        raise Forbidden(
            f"token {principal.name!r} ({principal.role}) may not act for job {job_id!r}",
            role=principal.role,
            job_id=job_id,
        )
    raise Forbidden(f"token {principal.name!r} ({principal.role}) may not {method} {path}", role=principal.role)


PrincipalDep = Annotated[Principal, Depends(authorize)]
"""The caller, in a route that needs it (the app-wide dependency already resolved it; FastAPI reuses the value)."""
