"""The application factory: everything is built in the lifespan, nothing at import time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.routing import APIRoute

from metaservice import __version__, errors, observability
from metaservice.api import barriers, flip, inspection, leases, lineage, ops, rollbacks, ui, versions
from metaservice.api.auth import authorize
from metaservice.api.limits import BodySizeLimit
from metaservice.db.engine import make_engine, make_sessionmaker
from metaservice.settings import Settings


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    settings: Settings = app.state.settings
    engine = make_engine(settings)
    app.state.engine = engine
    try:
        yield {"sessions": make_sessionmaker(engine, settings)}
    finally:
        await engine.dispose()


def _operation_id(route: APIRoute) -> str:
    return route.name


def create_app(settings: Settings) -> FastAPI:
    """Build the ASGI app for `settings` (which must name a database URL)."""
    app = FastAPI(
        dependencies=[Depends(authorize)],
        title="MetaService",
        version=__version__,
        summary="Lineage and global timestamp barriers (FLIP-276) for chains of Spark ETL jobs.",
        lifespan=_lifespan,
        generate_unique_id_function=_operation_id,
    )
    app.state.settings = settings
    errors.install_handlers(app)
    for module in (flip, barriers, versions, inspection, leases, rollbacks, ops):
        app.include_router(module.router)
    app.include_router(lineage.router)
    ui.install(app)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    observability.install(app)  # outermost: request ids and metrics cover every answer, 413s included
    return app


def from_environment() -> FastAPI:
    """Factory for uvicorn workers: settings come from `METASERVICE_*` variables set by `metaservice serve`."""
    settings = Settings()
    observability.configure_logging(settings)
    return create_app(settings)
