"""Engine construction: psycopg 3 async driver, bounded pool, server-side timeouts."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from metaservice.settings import Settings


def make_engine(settings: Settings, *, application_name: str = "metaservice") -> AsyncEngine:
    """Build the async engine. Timeouts are set per connection so a stuck lock or query turns into a 503."""
    options = f"-c statement_timeout={settings.statement_timeout_ms} -c lock_timeout={settings.lock_timeout_ms}"
    return create_async_engine(
        settings.sqlalchemy_url(),
        pool_size=settings.pool_size,
        max_overflow=settings.max_overflow,
        pool_timeout=settings.pool_timeout,
        pool_pre_ping=True,
        connect_args={
            "application_name": application_name,
            "connect_timeout": max(1, int(settings.connect_timeout)),
            "options": options,
        },
    )


def make_sessionmaker(engine: AsyncEngine, settings: Settings) -> async_sessionmaker[AsyncSession]:
    """Sessions that keep loaded attributes after commit (responses are built after the transaction ends).

    Each carries the deadline that bounds one transaction (`in_transaction`), in `session.info`.
    """
    return async_sessionmaker(engine, expire_on_commit=False, info={"deadline": settings.transaction_deadline()})
