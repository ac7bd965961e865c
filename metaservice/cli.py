"""Command line: `metaservice serve` and `metaservice migrate`."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from metaservice.settings import Settings

app = typer.Typer(
    help="MetaService: lineage and global timestamp barriers for chained Spark ETL jobs.",
    no_args_is_help=True,
)
logger = logging.getLogger("metaservice")

DatabaseUrlOption = Annotated[
    str | None,
    typer.Option("--database-url", help="PostgreSQL URL; default $METASERVICE_DATABASE_URL, else embedded PostgreSQL."),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", help="Directory of the embedded PostgreSQL (default: per-user data dir)."),
]


def _settings(**overrides: Any) -> Settings:
    values = {k: v for k, v in overrides.items() if v is not None}
    return Settings(**values)


def _resolve_database(settings: Settings) -> tuple[str, Any]:
    """The database URL to use, starting the embedded PostgreSQL when none is configured."""
    if settings.database_url:
        return settings.database_url, None
    from metaservice.db import embedded

    typer.echo(f"starting embedded PostgreSQL in {settings.data_dir}", err=True)
    server = embedded.start(settings.data_dir)
    return embedded.ensure_database(server, "metaservice"), server


@app.command()
def migrate(database_url: DatabaseUrlOption = None, data_dir: DataDirOption = None) -> None:
    """Apply all migrations (`alembic upgrade head`)."""
    from metaservice.db import migrate as migrations

    settings = _settings(database_url=database_url, data_dir=data_dir)
    url, _server = _resolve_database(settings)
    migrations.upgrade(url)
    typer.echo("database is at the newest schema revision")


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8080).")] = None,
    database_url: DatabaseUrlOption = None,
    data_dir: DataDirOption = None,
    workers: Annotated[int | None, typer.Option(help="uvicorn worker processes.")] = None,
) -> None:
    """Apply migrations, then serve the API (embedded PostgreSQL when no database URL is configured)."""
    import uvicorn

    from metaservice.db import migrate as migrations

    settings = _settings(host=host, port=port, database_url=database_url, data_dir=data_dir, workers=workers)
    url, _server = _resolve_database(settings)
    migrations.upgrade(url)
    os.environ["METASERVICE_DATABASE_URL"] = url  # workers build their settings from the environment
    typer.echo(f"MetaService listening on http://{settings.host}:{settings.port} (docs at /docs)", err=True)
    uvicorn.run(
        "metaservice.app:from_environment",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=settings.log_level,
        timeout_graceful_shutdown=10,
    )


if __name__ == "__main__":
    app()
