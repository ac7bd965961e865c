"""Command line: `metaservice serve`, `metaservice migrate` and `metaservice token …` on the database; the admin
commands (`lineage`, `delays`, `job`, `abort`, `barrier`, `retire`, `rollback`) over HTTP (metaservice/admin_cli.py).

A user's mistake (a name in use, an unknown token, an unreachable database, a bad setting) is answered with one
line on stderr and a non-zero exit, never a traceback. SIGTERM and SIGINT end every command through its cleanup,
so an embedded PostgreSQL the command started is stopped with it.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from metaservice import admin_cli
from metaservice.settings import Settings


class _OneLineErrors(TyperGroup):
    """Usage mistakes (an unknown option, a value of the wrong type, a missing argument) in one line too."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            from typer._click import exceptions as click  # typer 0.2x vendors click
        except ImportError:  # older typer: click itself
            from click import exceptions as click  # type: ignore[no-redef]

        try:
            result = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except click.NoArgsIsHelpError as exc:
            exc.show()  # `metaservice` alone: the help, as before
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            typer.echo(f"error: {exc.format_message()}{where}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            sys.exit(1)
        code = result if isinstance(result, int) else 0  # non-standalone click returns Exit codes
        if not standalone_mode:
            return code
        sys.exit(code)


app = typer.Typer(
    cls=_OneLineErrors,
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


# A job token's --job pattern: job id characters (schemas.JOB_PATTERN) and the glob characters of fnmatch.
JOB_GLOB = re.compile(r"[A-Za-z0-9_.:*?\[\]!-]{1,200}")
TABLE_GLOB = re.compile(r"[A-Za-z0-9_.*?\[\]!-]{1,386}")
ROLES = ("admin", "job", "reader")
_OPTIONS = {  # settings the commands take as options too, for naming them in errors
    "host": ("--host",),
    "port": ("--port",),
    "workers": ("--workers",),
    "database_url": ("--database-url",),
    "data_dir": ("--data-dir",),
    "auth_enabled": ("--auth",),
    "insecure": ("--insecure",),
}


@app.callback()
def _main() -> None:
    """Lineage and global timestamp barriers for chained Spark ETL jobs."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_on_signal)


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    """Turn SIGTERM/SIGINT into SystemExit: `finally` blocks and atexit handlers run (the embedded PostgreSQL
    is stopped), where SIGTERM's default would end the process on the spot. uvicorn restores this handler after
    its graceful shutdown and raises the signal again, which lands here too."""
    raise SystemExit(128 + signum)


def _fail(message: str, *, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=code)


@contextmanager
def _user_errors() -> Iterator[None]:
    """Answer the mistakes a user can make with one line and exit status 1 (2 for a bad setting)."""
    import psycopg
    import pydantic

    from metaservice.errors import MetaServiceError

    try:
        yield
    except MetaServiceError as exc:
        _fail(exc.detail)
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        name = str(error["loc"][0]) if error["loc"] else "settings"
        where = " or ".join([*_OPTIONS.get(name, ()), f"METASERVICE_{name.upper()}"])
        _fail(f"invalid {name} ({where}): {error['msg']} (got {error.get('input')!r})", code=2)
    except psycopg.Error as exc:
        cause = exc
        if isinstance(cause, psycopg.errors.UndefinedTable):
            _fail(f"the database has no MetaService schema ({_one_line(cause)}): run `metaservice migrate` first")
        if isinstance(cause, psycopg.OperationalError | psycopg.errors.InsufficientPrivilege):
            _fail(f"the database refused: {_one_line(cause)}")  # lost connection, permissions, resources
        raise  # anything else is a bug: keep its traceback


def _one_line(exc: BaseException) -> str:
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__


def _settings(**overrides: Any) -> Settings:
    values = {k: v for k, v in overrides.items() if v is not None}
    return Settings(**values)


def _resolve_database(settings: Settings) -> tuple[str, Any]:
    """The database URL to use, starting the embedded PostgreSQL when none is configured.

    A configured URL is tried once first, so that a wrong or unreachable one is reported as such.
    """
    if settings.database_url:
        _check_reachable(settings.database_url)
        return settings.database_url, None
    from metaservice.db import embedded

    typer.echo(f"starting embedded PostgreSQL in {settings.data_dir}", err=True)
    server = embedded.start(settings.data_dir)
    return embedded.ensure_database(server, "metaservice"), server


def _check_reachable(url: str) -> None:
    import psycopg

    from metaservice.settings import primary_conninfo, shown_url

    try:
        conninfo = primary_conninfo(url)  # libpq's URL forms, several hosts included
    except (ValueError, psycopg.ProgrammingError):
        _fail(f"not a PostgreSQL URL: {url!r} (expected postgresql://user@host:port/database)", code=2)
    try:
        psycopg.connect(conninfo, connect_timeout=10).close()
    except psycopg.Error as exc:
        _fail(f"cannot connect to a primary at {shown_url(url)}: {_one_line(exc)}")


def _check_replication(url: str, settings: Settings) -> None:
    """Refuse to serve on an asynchronously replicated primary unless allowed (metaservice/db/replication.py). The
    app's lifespan checks again in every worker, and warns there when allowed."""
    import psycopg

    from metaservice.db.replication import inspect
    from metaservice.settings import primary_conninfo

    with psycopg.connect(primary_conninfo(url), connect_timeout=10, autocommit=True) as conn:
        replication = inspect(conn)
    if replication.asynchronous and not settings.allow_async_replication:
        _fail(replication.refusal())


def _stop_embedded(server: Any) -> None:
    """Stop the embedded PostgreSQL this command started (unless another process still uses it)."""
    from metaservice.db import embedded

    for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal must not cut the shutdown short
        signal.signal(sig, signal.SIG_IGN)
    if embedded.stop(server):
        typer.echo(f"stopped embedded PostgreSQL in {server.pgdata}", err=True)
    else:
        typer.echo(f"embedded PostgreSQL in {server.pgdata} keeps running: another process uses it", err=True)


@app.command()
def migrate(database_url: DatabaseUrlOption = None, data_dir: DataDirOption = None) -> None:
    """Apply all migrations (`alembic upgrade head`)."""
    from metaservice.db import migrate as migrations

    with _user_errors():
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

    from metaservice import observability
    from metaservice.db import migrate as migrations

    with _user_errors():
        settings = _settings(
            host=host,
            port=port,
            database_url=database_url,
            data_dir=data_dir,
            workers=workers,
            auth_enabled=auth,
            insecure=insecure or None,
        )
    observability.configure_logging(settings)
    if not settings.auth_enabled and not settings.insecure and not _is_loopback(settings.host):
        _fail(
            f"refusing to serve on {settings.host} without authentication: pass --auth (and create tokens with "
            "`metaservice token create`), or --insecure if a proxy in front does the authentication",
            code=2,
        )
    with _user_errors():
        url, server = _resolve_database(settings)
    try:
        with _user_errors():
            migrations.upgrade(url)
            _check_replication(url, settings)
        os.environ["METASERVICE_DATABASE_URL"] = url  # workers build their settings from the environment
        os.environ["METASERVICE_AUTH_ENABLED"] = str(settings.auth_enabled).lower()
        if settings.insecure and not settings.auth_enabled:
            logger.warning(
                "serving WITHOUT authentication (--insecure): anyone who reaches %s:%d may do everything an admin "
                "may; run like this only behind a proxy that authenticates every request",
                settings.host,
                settings.port,
            )
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
    finally:
        if server is not None:
            _stop_embedded(server)


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
    """Run `work(database)` against the configured database (embedded when none), on the server's own pool."""
    import asyncio

    from metaservice.db.database import Database

    settings = _settings(database_url=database_url, data_dir=data_dir)
    url, _server = _resolve_database(settings)

    async def main() -> Any:
        database = Database(
            settings.model_copy(update={"database_url": url, "pool_min_size": 1, "pool_size": 2}),
            application_name="metaservice-cli",
        )
        await database.open()
        try:
            return await work(database)
        finally:
            await database.close()

    return asyncio.run(main())


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="A unique name for the token (who or what uses it).")],
    role: Annotated[str, typer.Option(help="admin, job or reader.", show_default=True)] = "reader",
    job: Annotated[list[str] | None, typer.Option(help="Job id pattern a job token may act for (glob).")] = None,
    tables: Annotated[
        list[str] | None,
        typer.Option(help="Table namespace a job token may register sinks in (glob on catalog.database.table)."),
    ] = None,
    database_url: DatabaseUrlOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Create a token and print its secret (shown once; only a hash is stored)."""
    from metaservice.services import tokens

    if role not in ROLES:
        _fail(f"--role must be one of {', '.join(ROLES)} (got {role!r})", code=2)
    for pattern in job or []:
        if not JOB_GLOB.fullmatch(pattern):
            _fail(
                f"--job {pattern!r} matches no job id: give a job id or a glob of one (letters, digits, "
                "'_', '-', '.', ':' and the glob characters * ? [ ] !)",
                code=2,
            )
    for pattern in tables or []:
        if not TABLE_GLOB.fullmatch(pattern):
            _fail(
                f"--tables {pattern!r} matches no table: give a catalog.database.table glob (letters, digits, "
                "'_', '-', '.' and the glob characters * ? [ ] !)",
                code=2,
            )
    with _user_errors():
        secret, row = _run_with_session(
            database_url,
            data_dir,
            lambda s: tokens.create_token(
                s,
                name=name,
                role=role,  # type: ignore[arg-type]
                job_patterns=job or [],
                table_patterns=tables or [],
            ),
        )
    typer.echo(secret)
    typer.echo(f"created {row.role} token {row.name!r}; store the secret above, it is not shown again", err=True)


@token_app.command("list")
def token_list(database_url: DatabaseUrlOption = None, data_dir: DataDirOption = None) -> None:
    """List tokens (never their secrets)."""
    from metaservice.services import tokens

    with _user_errors():
        rows = _run_with_session(database_url, data_dir, tokens.list_tokens)
    for row in rows:
        state = f"revoked {row.revoked_at:%Y-%m-%d %H:%M}" if row.revoked_at else "active"
        patterns = f"{','.join(row.job_patterns) or '-'}\t{','.join(row.table_patterns) or '-'}"
        typer.echo(f"{row.name}\t{row.role}\t{patterns}\t{state}")


@token_app.command("revoke")
def token_revoke(name: str, database_url: DatabaseUrlOption = None, data_dir: DataDirOption = None) -> None:
    """Revoke a token by name; requests with it get 401 from then on."""
    from metaservice.services import tokens

    with _user_errors():
        _run_with_session(database_url, data_dir, lambda s: tokens.revoke_token(s, name=name))
    typer.echo(f"revoked {name!r}")


admin_cli.mount(app)

if __name__ == "__main__":
    app()
