"""Alembic environment: runs migrations synchronously through psycopg 3 under an advisory lock.

The lock lets several server processes start at once against one database: one migrates, the others wait
and then find nothing to do.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool, text

from metaservice.db.models import Base
from metaservice.settings import Settings, to_sqlalchemy_url

MIGRATION_LOCK_KEY = 0x6D657461  # "meta"

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url") or Settings().database_url
    if not url:
        raise RuntimeError("no database URL: set METASERVICE_DATABASE_URL or pass --database-url")
    return to_sqlalchemy_url(str(url))


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
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
