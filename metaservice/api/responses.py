"""OpenAPI documentation of the problem answers each route can give."""

from __future__ import annotations

from typing import Any

from metaservice.schemas import Problem

_PROBLEM = {"model": Problem, "content": {"application/problem+json": {}}}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` mapping for the given error statuses (413, 422, 503 and 504 are always possible)."""
    descriptions = {
        401: "Missing or bad token",
        403: "Outside the token's role or scope",
        404: "Unknown job, table, barrier or lease",
        409: "The request breaks a protocol rule (see `code`)",
        413: "Request body too large",
        422: "Invalid request (names, JSON, types)",
        503: "Database unavailable, nothing was changed; retry after `Retry-After` seconds",
        504: "Database connection lost while writing: the outcome is unknown (code `outcome_unknown`)",
    }
    return {s: {**_PROBLEM, "description": descriptions[s]} for s in sorted({*statuses, 413, 422, 503, 504})}
