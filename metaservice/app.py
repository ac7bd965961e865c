"""The application factory: everything is built in the lifespan, nothing at import time."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.routing import APIRoute

from metaservice import __version__, observability
from metaservice.api import barriers, flip, inspection, leases, lineage, ops, problems, rollbacks, ui, versions
from metaservice.api import openlineage as openlineage_api
from metaservice.api.auth import authorize
from metaservice.api.limits import RequestBodies
from metaservice.api.openlineage_outbox import RunOutbox
from metaservice.db.database import Database
from metaservice.db.replication import AsyncReplication
from metaservice.db.replication import inspect_async as inspect_replication
from metaservice.metrics_process import FiguresProcess
from metaservice.openlineage.mapping import DatasetMapping
from metaservice.runtime import Runtime
from metaservice.settings import Settings

logger = logging.getLogger("metaservice.app")


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    settings: Settings = app.state.settings
    database = Database(settings)
    await database.open()
    try:
        await _check_replication(database)
    except BaseException:
        await database.close()
        raise
    runtime = Runtime(database)  # the protocol's per-process machinery over the pool (runtime.py)
    app.state.database = database
    app.state.runtime = runtime
    figures = FiguresProcess(settings)  # /metrics' database figures, read by a process of their own
    app.state.metrics_figures = figures
    try:
        async with AsyncExitStack() as background:
            await background.enter_async_context(figures.running())
            background.enter_context(runtime.listener.draining_on_signals())
            if settings.openlineage_url is not None:
                from metaservice.openlineage.emitter import OpenLineageEmitter  # only when configured

                emitter = OpenLineageEmitter(settings, app.state.http_metrics.openlineage)
                await background.enter_async_context(emitter.running())
                app.state.openlineage = emitter
            # Everything built so far (modules, routes, pydantic schemas, the pool) lives as long as the process.
            # Frozen, the cyclic collector no longer walks it: a full collection took ~100 ms with it, every
            # second or so under load, and was the p99 of every route.
            gc.freeze()
            yield {"database": database, "runtime": runtime}
    finally:
        await runtime.close()  # waiters answer before the pool goes
        await database.close()


async def _check_replication(database: Database) -> None:
    """Refuse to serve on an asynchronously replicated primary unless allowed (db/replication.py); allowed, warn
    once (per process)."""
    async with database.connection() as conn:
        replication = await inspect_replication(conn)
    if not replication.asynchronous:
        return
    if not database.settings.allow_async_replication:
        raise AsyncReplication(replication.refusal())
    logger.warning(replication.warning())


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
        # Starlette's slash redirect builds an absolute Location from the Host header (an open redirect) and
        # sends API clients, which do not follow redirects, a 307 instead of an error: an unknown path is a 404
        # problem (naming the path without the slash); only /ui → /ui/ redirects, relatively (ui.install).
        redirect_slashes=False,
    )
    app.state.settings = settings
    app.state.openlineage = None  # the emitter, started in the lifespan when an OpenLineage URL is configured
    app.state.openlineage_datasets = DatasetMapping(settings.openlineage_datasets)
    problems.install_handlers(app)
    for module in (flip, barriers, versions, inspection, leases, rollbacks, ops):
        app.include_router(module.router)
    app.include_router(lineage.router)
    app.include_router(openlineage_api.router)
    ui.install(app)
    versions.publish_wait_limit(app, settings.max_wait_seconds)
    app.add_middleware(RequestBodies, max_bytes=settings.max_body_bytes)
    if settings.openlineage_url is not None:
        app.add_middleware(RunOutbox)  # ended barrier runs of a successful request go to the emitter
    observability.install(app)  # outermost: request ids and metrics cover every answer, 413s and 422s included
    return app


def from_environment() -> FastAPI:
    """Factory for uvicorn workers: settings come from `METASERVICE_*` variables set by `metaservice serve`."""
    settings = Settings()
    observability.configure_logging(settings)
    return create_app(settings)
