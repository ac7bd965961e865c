"""Runtime configuration, read from `METASERVICE_*` environment variables (and CLI flags)."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    """The per-user directory that holds the embedded PostgreSQL cluster when no database URL is given."""
    return Path(platformdirs.user_data_dir("metaservice", appauthor=False))


class OpenLineageDatasetRule(BaseModel):
    """One rule of `METASERVICE_OPENLINEAGE_DATASETS`: an OpenLineage dataset whose namespace matches the glob
    `namespace` and whose whole name matches the regular expression `name` is the table `table`, a template
    filled with the name's groups (`{0}` the whole name, `{1}`… the groups, `{group}` named groups). `table: null`
    ignores the datasets the rule matches. Rules are tried in order; the first that matches decides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str = Field(default="*", min_length=1, description="fnmatch glob on the dataset namespace")
    name: str = Field(min_length=1, description="regular expression the whole dataset name must match")
    table: str | None = Field(description="`catalog.database.table` template, or null to ignore the dataset")

    @field_validator("name")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        return value

    @model_validator(mode="after")
    def _template_uses_known_groups(self) -> OpenLineageDatasetRule:
        if self.table is None:
            return self
        pattern = re.compile(self.name)
        try:
            fields = [f for _, f, spec, conv in string.Formatter().parse(self.table) if f is not None]
        except ValueError as exc:
            raise ValueError(f"table template {self.table!r}: {exc}") from exc
        for field in fields:
            known = field in pattern.groupindex or (field.isdigit() and int(field) <= pattern.groups)
            if not known:
                raise ValueError(
                    f"table template {self.table!r} names {{{field}}}, which is not a group of {self.name!r} "
                    f"(use {{0}} to {{{pattern.groups}}} or a named group)"
                )
        return self


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
    pool_size: int = Field(
        default=20,
        ge=1,
        description="Most pooled database connections per server process. Each process also keeps six of its own "
        "(the barrier protocol's allocations, gathers and writes, token lookups, the change listener and notifier), "
        "opened when first needed.",
    )
    pool_min_size: int = Field(
        default=2,
        ge=1,
        description="Connections kept open even when idle (at most pool_size); more are opened on demand and kept "
        "until idle for pool_max_idle_seconds.",
    )
    pool_timeout: float = Field(default=5.0, gt=0, description="Seconds a request waits for a pooled connection.")
    outage_wait_seconds: float = Field(
        default=1.0,
        gt=0,
        description="While the database is unreachable (a wait for a connection ended with none open), seconds a "
        "request waits for one before it is answered 503, instead of pool_timeout.",
    )
    pool_max_waiting: int = Field(
        default=512,
        ge=0,
        description="Requests that may queue for a connection; more are answered 429 with Retry-After at once "
        "(0: unbounded).",
    )
    pool_max_idle_seconds: float = Field(default=600.0, gt=0, description="Idle connections above the minimum close.")
    idle_check_seconds: float = Field(
        default=5.0, ge=0, description="A connection idle this long is pinged before use (busy ones never are)."
    )
    connect_timeout: float = Field(default=5.0, gt=0)
    dead_connection_seconds: float = Field(
        default=10.0,
        ge=2,
        description="Within about this many seconds a connection to a database host that vanished without closing "
        "it (a network cut, a dead machine) is noticed and replaced: TCP keepalives (idle a third of it, then "
        "probes every second) and tcp_user_timeout on every connection, and the change listener checks its "
        "connection after a third of it without notifications.",
    )
    allow_async_replication: bool = Field(
        default=False,
        description="Serve although the primary replicates asynchronously (a standby streams but none is synchronous, "
        "or synchronous_commit is off or local): barriers, commits and snapshot reports acknowledged shortly before a "
        "failover may then be lost. Unset, the server refuses to start on such a setup (docs/failover.md).",
    )
    statement_timeout_ms: int = Field(default=10_000, ge=0)
    lock_timeout_ms: int = Field(default=5_000, ge=0)
    transaction_deadline_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Longest one database transaction may take, waiting for a connection included; past it the "
        "request gets 503 (or 504 during a commit). Default: pool timeout + connect timeout + statement timeout "
        "+ 1 s. Bounds requests when the database stops answering without closing connections.",
    )
    max_wait_seconds: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="Longest `wait_seconds` a freshness-bounded read (POST /versions, GET /version/...) may ask for.",
    )
    max_body_bytes: int = Field(default=1_048_576, ge=1024, description="Larger request bodies get 413.")
    retry_after_seconds: int = Field(default=1, ge=1, description="Retry-After sent with 503 answers.")
    auth_enabled: bool = Field(
        default=False, description="Require bearer tokens (`metaservice token create`). Required off loopback."
    )
    insecure: bool = Field(default=False, description="Allow serving without auth on a non-loopback address.")
    metrics_auth: bool = Field(
        default=False, description="With auth on, /metrics needs a token of any role (it names every job and table)."
    )
    metrics_refresh_seconds: float = Field(
        default=5.0, gt=0, description="How often /metrics' database figures are read, in the background."
    )
    log_json: bool = False
    log_level: str = "info"
    openlineage_datasets: list[OpenLineageDatasetRule] | None = Field(
        default=None,
        description="How OpenLineage datasets map to tables (POST /api/v1/lineage): a JSON list of rules "
        '{"namespace": glob, "name": regex, "table": template or null}, first match wins. Unset: a dataset named '
        "`catalog.database.table` is that table whatever its namespace.",
    )
    openlineage_unmapped: Literal["ignore", "reject"] = Field(
        default="ignore",
        description="Datasets of an OpenLineage event that no rule maps: `ignore` (registered nothing, listed in "
        "the answer's `ignored`) or `reject` (422, nothing registered).",
    )
    openlineage_url: str | None = Field(
        default=None,
        description="OpenLineage endpoint base URL (Marquez: http://host:5000). Set: every committed or aborted "
        "barrier run is sent there as a RunEvent, in the background.",
    )
    openlineage_endpoint: str = Field(
        default="api/v1/lineage", description="Path joined to openlineage_url, as OpenLineage's HTTP transport does."
    )
    openlineage_api_key: SecretStr | None = Field(default=None, description="Sent as `Authorization: Bearer …`.")
    openlineage_namespace: str = Field(
        default="metaservice", min_length=1, description="OpenLineage namespace of the jobs emitted."
    )
    openlineage_dataset_namespace: str | None = Field(
        default=None,
        min_length=1,
        description="OpenLineage namespace of the tables emitted as datasets (default: openlineage_namespace).",
    )
    openlineage_queue_size: int = Field(
        default=10_000, ge=1, description="Events waiting to be sent; when full the oldest is dropped (counted)."
    )
    openlineage_timeout_seconds: float = Field(default=5.0, gt=0, description="Per attempt to send one event.")
    openlineage_attempts: int = Field(
        default=5, ge=1, description="Attempts per event (connection errors, 5xx, 408, 429), with backoff."
    )
    openlineage_backoff_seconds: float = Field(
        default=0.5, gt=0, description="First wait between attempts; doubles each time (jittered, at most 30 s)."
    )

    @field_validator("openlineage_datasets", mode="before")
    @classmethod
    def _json_rules(cls, value: object) -> object:
        if isinstance(value, str):  # the environment variable holds JSON
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not JSON: {exc}") from exc
        return value

    @field_validator("openlineage_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an http:// or https:// URL with a host")
        return value.strip()

    def transaction_deadline(self) -> float:
        """Seconds one transaction may take (see `transaction_deadline_seconds`)."""
        if self.transaction_deadline_seconds is not None:
            return self.transaction_deadline_seconds
        return self.pool_timeout + self.connect_timeout + self.statement_timeout_ms / 1000 + 1.0

    def libpq_url(self) -> str:
        """The configured URL as libpq (psycopg) reads it."""
        if self.database_url is None:
            raise ValueError("no database URL configured")
        return to_libpq_url(self.database_url)


def to_sqlalchemy_url(url: str) -> str:
    """Turn any postgres URL into one for SQLAlchemy's psycopg 3 dialect. Only for single-host URLs that
    SQLAlchemy parses itself; a libpq multi-host URL (`host1:p1,host2:p2`) goes through `to_libpq_url` and a
    `creator` (migrations/env.py)."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    raise ValueError(f"not a PostgreSQL URL: {url!r}")


def primary_conninfo(url: str) -> str:
    """The libpq conninfo for `url` that only accepts a server that takes writes: `target_session_attrs=read-write`
    unless the URL chose otherwise. With several hosts libpq tries them in turn and skips standbys; with one, a
    standby (an old primary back after a failover, behind an address that has not moved yet) is refused at connect
    instead of failing every write later. Multi-host URLs (`postgresql://u@h1:p1,h2:p2/db`) are libpq's own."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(to_libpq_url(url))
    params.setdefault("target_session_attrs", "read-write")
    return make_conninfo("", **params)


def shown_url(url: str) -> str:
    """`url` for messages and logs: the password replaced by `***` (multi-host URLs included)."""
    import re

    url = re.sub(r"(://[^:@/?#]*):[^@/?#]*@", r"\1:***@", url)
    return re.sub(r"([?&]password=)[^&]*", r"\1***", url)


def to_libpq_url(url: str) -> str:
    """Turn any postgres URL (also SQLAlchemy's `postgresql+psycopg://`) into one libpq accepts."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    raise ValueError(f"not a PostgreSQL URL: {url!r}")
