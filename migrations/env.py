"""Alembic environment: runs migrations synchronously through psycopg 3 under an advisory lock.

The lock lets several server processes start at once against one database: one migrates, the others wait
and then find nothing to do.
"""

from __future__ import annotations

from typing import Any

import psycopg
from alembic import context
from sqlalchemy import create_engine, pool, text

from metaservice.db.models import Base
from metaservice.settings import Settings, primary_conninfo

MIGRATION_LOCK_KEY = 0x6D657461  # "meta"

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url") or Settings().database_url
    if not url:
        raise RuntimeError("no database URL: set METASERVICE_DATABASE_URL or pass --database-url")
    return str(url)


def run_migrations_offline() -> None:
    # SQL is only printed: the dialect is all that matters (a multi-host URL would not parse)
    context.configure(dialect_name="postgresql", target_metadata=target_metadata, literal_binds=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    # SQLAlchemy cannot parse libpq's multi-host URLs (host1:port1,host2:port2): psycopg connects with the URL
    # as libpq reads it, and SQLAlchemy only learns the dialect.
    conninfo = primary_conninfo(_url())

    def connect(*_: Any, **__: Any) -> psycopg.Connection[Any]:
        return psycopg.connect(conninfo)

    engine = create_engine("postgresql+psycopg://", creator=connect, poolclass=pool.NullPool)
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection: object) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, compare_type=True)  # type: ignore[arg-type]
    with context.begin_transaction():
        context.execute(text(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})"))
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
