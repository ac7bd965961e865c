"""Reads for queries: one consistent version for a set of tables."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI

from metaservice.api.deps import RuntimeDep
from metaservice.api.responses import problems
from metaservice.schemas import ConsistentVersions, VersionsRequest
from metaservice.services import versions

router = APIRouter(tags=["versions"])


@router.post("/versions", responses=problems(404, 409))
async def consistent_versions(body: VersionsRequest, rt: RuntimeDep) -> ConsistentVersions:
    """One barrier and one snapshot per table (`weak`: the tables; `strong`: their whole lineage components).

    With `min_barrier` or `max_staleness_seconds`, only a version meeting the bound, waiting up to `wait_seconds`
    for one (409 `not_fresh_enough` with the best version's figures when none came)."""
    return await versions.consistent_versions(rt, tables=body.tables, consistency=body.consistency, bound=body.bound())


def publish_wait_limit(app: FastAPI, limit: float) -> None:
    """Publish the configured `max_wait_seconds` as the `maximum` of every `wait_seconds` in the OpenAPI document
    (body field and query parameter): the wire model cannot hold a setting, and the document must not call a wait
    valid that the server refuses."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            for node in _wait_schemas(build()):
                node["maximum"] = limit
        assert app.openapi_schema is not None
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _wait_schemas(node: Any) -> list[dict[str, Any]]:
    """The number schemas of `wait_seconds` properties and parameters anywhere in the document."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        targets = []
        if isinstance(node.get("properties"), dict) and "wait_seconds" in node["properties"]:
            targets.append(node["properties"]["wait_seconds"])
        if node.get("name") == "wait_seconds" and node.get("in") == "query":
            targets.append(node.get("schema", {}))
        for target in targets:
            found += [m for m in target.get("anyOf", [target]) if m.get("type") == "number"]
        for value in node.values():
            found += _wait_schemas(value)
    elif isinstance(node, list):
        for item in node:
            found += _wait_schemas(item)
    return found
