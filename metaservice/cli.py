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
    auth: Annotated[bool | None, typer.Option("--auth/--no-auth", help="Require bearer tokens.")] = None,
    insecure: Annotated[bool, typer.Option(help="Serve without auth on a non-loopback address.")] = False,
) -> None:
    """Apply migrations, then serve the API (embedded PostgreSQL when no database URL is configured)."""
    import uvicorn

    from metaservice.db import migrate as migrations

    settings = _settings(
        host=host,
        port=port,
        database_url=database_url,
        data_dir=data_dir,
        workers=workers,
        auth_enabled=auth,
        insecure=insecure or None,
    )
    if not settings.auth_enabled and not settings.insecure and not _is_loopback(settings.host):
        typer.echo(
            f"refusing to serve on {settings.host} without authentication: pass --auth (and create tokens with "
            "`metaservice token create`), or --insecure if a proxy in front does the authentication",
            err=True,
        )
        raise typer.Exit(code=2)
    url, _server = _resolve_database(settings)
    migrations.upgrade(url)
    os.environ["METASERVICE_DATABASE_URL"] = url  # workers build their settings from the environment
    os.environ["METASERVICE_AUTH_ENABLED"] = str(settings.auth_enabled).lower()
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


token_app = typer.Typer(help="Manage API tokens (roles: admin, job, reader).", no_args_is_help=True)
app.add_typer(token_app, name="token")


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _run_with_session(database_url: str | None, data_dir: Path | None, work: Any) -> Any:
    """Run `work(session)` against the configured database (embedded when none)."""
    import asyncio

    from metaservice.db.engine import make_engine, make_sessionmaker

    settings = _settings(database_url=database_url, data_dir=data_dir)
    url, _server = _resolve_database(settings)

    async def main() -> Any:
        engine = make_engine(settings.model_copy(update={"database_url": url}), application_name="metaservice-cli")
        try:
            async with make_sessionmaker(engine, settings)() as session:
                return await work(session)
        finally:
            await engine.dispose()

    return asyncio.run(main())


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="A unique name for the token (who or what uses it).")],
    role: Annotated[str, typer.Option(help="admin, job or reader.")] = "reader",
    job: Annotated[list[str] | None, typer.Option(help="Job id pattern a job token may act for (glob).")] = None,
    database_url: DatabaseUrlOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Create a token and print its secret (shown once; only a hash is stored)."""
    from metaservice.services import tokens

    if role not in ("admin", "job", "reader"):
        raise typer.BadParameter("role must be admin, job or reader", param_hint="--role")
    secret, row = _run_with_session(
        database_url,
        data_dir,
        lambda s: tokens.create_token(s, name=name, role=role, job_patterns=job or []),  # type: ignore[arg-type]
    )
    typer.echo(secret)
    typer.echo(f"created {row.role} token {row.name!r}; store the secret above, it is not shown again", err=True)


@token_app.command("list")
def token_list(database_url: DatabaseUrlOption = None, data_dir: DataDirOption = None) -> None:
    """List tokens (never their secrets)."""
    from metaservice.services import tokens

    for row in _run_with_session(database_url, data_dir, tokens.list_tokens):
        state = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "active"
        typer.echo(f"{row.name}\t{row.role}\t{','.join(row.job_patterns) or '-'}\t{state}")


@token_app.command("revoke")
def token_revoke(name: str, database_url: DatabaseUrlOption = None, data_dir: DataDirOption = None) -> None:
    """Revoke a token by name; requests with it get 401 from then on."""
    from metaservice.services import tokens

    _run_with_session(database_url, data_dir, lambda s: tokens.revoke_token(s, name=name))
    typer.echo(f"revoked {name!r}")


if __name__ == "__main__":
    app()
