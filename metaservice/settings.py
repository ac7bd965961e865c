"""Runtime configuration, read from `METASERVICE_*` environment variables (and CLI flags)."""

from __future__ import annotations

from pathlib import Path

import platformdirs
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    """The per-user directory that holds the embedded PostgreSQL cluster when no database URL is given."""
    return Path(platformdirs.user_data_dir("metaservice", appauthor=False))


class Settings(BaseSettings):
    """Every knob of the server. Only the CLI (and tests) construct this; nothing reads it at import time."""

    model_config = SettingsConfigDict(env_prefix="METASERVICE_", extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL (postgresql://…). Unset: start the embedded PostgreSQL in data_dir.",
    )
    data_dir: Path = Field(default_factory=default_data_dir, description="Where the embedded PostgreSQL lives.")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    workers: int = Field(default=1, ge=1, le=64)
    min_barrier_interval: float = Field(
        default=0.0, ge=0, description="Seconds between barriers issued implicitly by `next` calls."
    )
    pool_size: int = Field(default=20, ge=1, description="Connections kept open per server process.")
    max_overflow: int = Field(default=10, ge=0)
    pool_timeout: float = Field(default=5.0, gt=0, description="Seconds to wait for a pooled connection.")
    connect_timeout: float = Field(default=5.0, gt=0)
    statement_timeout_ms: int = Field(default=10_000, ge=0)
    lock_timeout_ms: int = Field(default=5_000, ge=0)
    transaction_deadline_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Longest one database transaction may take, waiting for a connection included; past it the "
        "request gets 503 (or 504 during a commit). Default: pool timeout + connect timeout + statement timeout "
        "+ 1 s. Bounds requests when the database stops answering without closing connections.",
    )
    max_body_bytes: int = Field(default=1_048_576, ge=1024, description="Larger request bodies get 413.")
    retry_after_seconds: int = Field(default=1, ge=1, description="Retry-After sent with 503 answers.")
    auth_enabled: bool = Field(
        default=False, description="Require bearer tokens (`metaservice token create`). Required off loopback."
    )
    insecure: bool = Field(default=False, description="Allow serving without auth on a non-loopback address.")
    log_json: bool = False
    log_level: str = "info"

    def transaction_deadline(self) -> float:
        """Seconds one transaction may take (see `transaction_deadline_seconds`)."""
        if self.transaction_deadline_seconds is not None:
            return self.transaction_deadline_seconds
        return self.pool_timeout + self.connect_timeout + self.statement_timeout_ms / 1000 + 1.0

    def sqlalchemy_url(self) -> str:
        """The configured URL with the psycopg 3 async driver selected."""
        if self.database_url is None:
            raise ValueError("no database URL configured")
        return to_sqlalchemy_url(self.database_url)


def to_sqlalchemy_url(url: str) -> str:
    """Turn any postgres URL into one for SQLAlchemy's psycopg 3 dialect."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    raise ValueError(f"not a PostgreSQL URL: {url!r}")
