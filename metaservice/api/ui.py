"""The admin web page: static files from `metaservice/static`, served at `/ui/` (no build step)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

# The page loads only its own files and talks only to this server; nothing from elsewhere may run.
_SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class _Page(StaticFiles):
    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(_SECURITY_HEADERS)
        return response


async def _to_page(request: Request) -> Response:
    """`/ui` → `/ui/` (query kept). The Location is a path, never built from the Host header."""
    query = request.url.query
    location = request.scope.get("root_path", "") + "/ui/" + (f"?{query}" if query else "")
    return RedirectResponse(location, status_code=307)


def install(app: FastAPI) -> None:
    """Mount the page at `/ui/` and redirect `/ui` there. The page is public (it holds no data); the API calls
    it makes are authorised like any other."""
    app.add_route("/ui", _to_page, include_in_schema=False)
    app.mount("/ui", _Page(directory=STATIC_DIR, html=True), name="ui")
