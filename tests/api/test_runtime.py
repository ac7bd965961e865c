"""The server process's runtime set-up: what the app does to the interpreter once it has started."""

from __future__ import annotations

import gc
from typing import Any

from fastapi.testclient import TestClient

from metaservice.app import create_app
from metaservice.settings import Settings


def test_startup_freezes_the_long_lived_heap_out_of_the_cyclic_collector(database_url: str) -> None:
    """Modules, routes, schemas and the pool live as long as the process: left in the collector's oldest
    generation, every full collection walked them (~100 ms each under load, the p99 of every route)."""
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        with TestClient(create_app(Settings(database_url=database_url))) as client:
            assert client.get("/readyz").status_code == 200
            assert gc.get_freeze_count() > 10_000  # the app's whole start-up heap, not a handful of objects
    finally:
        gc.unfreeze()


def test_no_route_runs_a_dependency_in_the_thread_pool() -> None:
    """FastAPI runs a plain `def` dependency in the thread pool: a thread hop on every request (~0.1 ms of CPU,
    a third of the driver floor's budget). Every dependency of every route is `async def`."""
    import inspect

    from fastapi.dependencies.models import Dependant
    from fastapi.routing import APIRoute

    app = create_app(Settings(database_url="postgresql://unused/unused"))

    def sync_calls(dependant: Dependant) -> set[str]:
        found = set()
        for sub in dependant.dependencies:
            if sub.call is not None and not inspect.iscoroutinefunction(sub.call):
                found.add(getattr(sub.call, "__qualname__", repr(sub.call)))
            found |= sync_calls(sub)
        return found

    def api_routes(routes: list[Any]) -> list[APIRoute]:
        found = []
        for route in routes:
            if isinstance(route, APIRoute):
                found.append(route)
            elif (included := getattr(route, "original_router", None)) is not None:  # FastAPI >= 0.160 nests them
                found.extend(api_routes(included.routes))
        return found

    routes = api_routes(list(app.routes))
    assert {"/readyz", "/jobs/{job_id}/barriers/next", "/barriers", "/versions"} <= {r.path for r in routes}
    offenders = {f"{route.path}: {name}" for route in routes for name in sync_calls(route.dependant)}
    assert not offenders, sorted(offenders)


def test_pooled_and_allocator_connections_plan_prepared_statements_once(database_url: str) -> None:
    """The protocol's prepared statements run on generic plans: with PostgreSQL choosing per call, a sixth of the
    gathers and a quarter of the writes were planned again under load (`python -m bench.profile`)."""
    import anyio

    from metaservice.db.database import Database

    async def settings_seen() -> tuple[str, str]:
        db = Database(Settings(database_url=database_url))
        await db.open()
        try:
            async with db.connection() as conn:
                pooled = await (await conn.execute("SHOW plan_cache_mode")).fetchone()
            dedicated = await db.connect()
            try:
                allocator = await (await dedicated.execute("SHOW plan_cache_mode")).fetchone()
            finally:
                await dedicated.close()
        finally:
            await db.close()
        assert pooled is not None and allocator is not None
        return str(pooled[0]), str(allocator[0])

    assert anyio.run(settings_seen) == ("force_generic_plan", "force_generic_plan")


def test_server_connections_read_times_in_utc_whatever_the_database_zone(admin_url: str, worker_id: str) -> None:
    """The API gives times in UTC (RFC 3339), whatever zone the database server defaults to; psycopg loads a UTC
    time with no zone conversion (through the `Etc/UTC` of a default installation it cost twice as much)."""
    import anyio
    import psycopg
    import pydantic_core

    from metaservice.db.database import Database
    from tests import support

    name = f"metaservice_zone_{worker_id}"
    url = support.fresh_database(admin_url, name)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE {name} SET TimeZone = 'Pacific/Chatham'")  # +13:45 or +12:45

    async def time_read() -> Any:
        db = Database(Settings(database_url=url))
        await db.open()
        try:
            async with db.connection() as conn:
                row = await (await conn.execute("SELECT now()")).fetchone()
        finally:
            await db.close()
        assert row is not None
        return row[0]

    try:
        now = anyio.run(time_read)
    finally:
        support.drop_database(admin_url, name)
    assert now.utcoffset().total_seconds() == 0
    assert pydantic_core.to_json(now).endswith(b'Z"')
