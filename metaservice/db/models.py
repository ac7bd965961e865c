"""The schema. Invariants live here as constraints so that no code path can store an illegal state.

Invariants (also in docs/design.md):
- one row in `barrier_clock`; barriers are allocated under its row lock (function `metaservice_issue_barrier`,
  migration 2026-11-23-1000), so they are unique and increasing; an idempotency key issues at most one barrier;
- a table has at most one current sink edge and a job never reads and writes one table (partial unique indexes
  over current edges); edges keep their history (added/removed after which barrier);
- `snapshot_ranges` keep, per table, which snapshot holds for which inclusive range of barriers
  (`last_barrier` NULL = open: holds through the newest barrier, used for root tables); `snapshot_id` NULL marks
  barriers the table will never complete (aborted or skipped). Ranges of one table never overlap (exclusion
  constraint), so "the snapshot of table X at barrier B" is one index lookup;
- `job_runs` hold the per-job barrier history; at most one run per job is in flight (partial unique index);
- `changed_xid` (tables, jobs, lineage_edges, snapshot_ranges, job_runs) is the transaction that last wrote what
  `/metrics` shows of the row, set by a trigger (migration 2026-11-27-1730) so that no write path can forget it;
  deletions of ranges and runs, and TRUNCATEs, are noted in `metric_removals`. The /metrics refresh reads only the
  rows whose marker its previous snapshot could not see (services/metric_state.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    Identity,
    Index,
    MetaData,
    SmallInteger,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, ExcludeConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

TABLE_FORMATS = ("delta", "paimon", "iceberg")
RUN_STATUSES = ("in_flight", "committed", "idle", "aborted")
RANGE_KINDS = ("sealed", "committed", "idle", "aborted", "gap", "restored")
NEVER_KINDS = ("aborted", "gap")  # ranges of barriers the table never completes


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSONB, datetime: DateTime(timezone=True)}


class BarrierClock(Base):
    """The single row every barrier allocation updates; holds the newest barrier ever issued."""

    __tablename__ = "barrier_clock"
    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)

    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    last_barrier: Mapped[int] = mapped_column(BigInteger)


class Barrier(Base):
    """A global timestamp barrier (µs since the epoch) and when it was issued."""

    __tablename__ = "barriers"
    __table_args__ = (
        CheckConstraint("char_length(request_key) BETWEEN 1 AND 255", name="request_key_length"),
        Index("uq_barriers_request_key", "request_key", unique=True, postgresql_where=text("request_key IS NOT NULL")),
    )

    barrier: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    issued_at: Mapped[datetime] = mapped_column(server_default=func.now())
    issued_by: Mapped[str | None] = mapped_column(Text)
    # The client's Idempotency-Key of the POST /barriers call that issued it: a repeat returns this barrier.
    request_key: Mapped[str | None] = mapped_column(Text)


class Table(Base):
    """A registered table; `latest_snapshot_id` is the newest snapshot known (reported for roots, else committed).

    `sealable`: with no writer, barriers seal its newest known snapshot. False once a job wrote it, until an
    external writer reports a snapshot: an orphan (its writer gone) must not pair its last job output with newer
    inputs. Names are unique regardless of case (case-insensitive stores would mix two tables).
    """

    __tablename__ = "tables"
    __table_args__ = (
        CheckConstraint(f"format IN {TABLE_FORMATS!r}", name="known_format"),
        CheckConstraint("latest_snapshot_id >= 0", name="snapshot_non_negative"),
        Index("uq_tables_name_folded", text("lower(name)"), unique=True),
        Index("ix_tables_seal_candidate", "id", postgresql_where=text("seal_candidate")),
        Index("ix_tables_root_group", "root_group", postgresql_where=text("root_group IS NOT NULL")),
        Index("ix_tables_changed_xid", "changed_xid", postgresql_where=text("changed_xid IS NOT NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    sealable: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    # May need a seal (a report or a rollback changed it since the last barrier): the seal reads only these
    # (migration 2026-11-24-2200); every path that can make a root differ from its open range marks it. A writer
    # leaving marks nothing: the orphan stays unsealable until a report, which marks it.
    seal_candidate: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    format: Mapped[str | None] = mapped_column(Text)
    location: Mapped[str | None] = mapped_column(Text)
    latest_snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    latest_snapshot_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    # Set when an admin retired the table (no job used it): out of lists and reads; registrations naming it are
    # refused until it is revived.
    retired_at: Mapped[datetime | None]
    # The root group the table belongs to: roots one ingestion writes together, sealed only together (a job's
    # report of such a root records nothing; the ingestion reports the group).
    root_group: Mapped[str | None] = mapped_column(Text)
    # The transaction that last changed what /metrics shows of the row (trigger; services/metric_state.py).
    changed_xid: Mapped[int | None] = mapped_column(BigInteger)


class Job(Base):
    """An ETL job. `last_barrier` is the newest barrier it finished (committed, idle or aborted).

    `version` grows with every change of the job's planning state (its runs, its sinks' ranges, its lineage):
    a protocol step reads the state, decides, and writes in one statement only if the version is unchanged.
    """

    __tablename__ = "jobs"
    __table_args__ = (
        CheckConstraint("version >= 0", name="version_non_negative"),
        Index("ix_jobs_changed_xid", "changed_xid", postgresql_where=text("changed_xid IS NOT NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    is_active: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    version: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    last_barrier: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("barriers.barrier"))
    registered_at: Mapped[datetime] = mapped_column(server_default=func.now())
    unregistered_at: Mapped[datetime | None]
    last_seen_at: Mapped[datetime] = mapped_column(server_default=func.now())
    # The transaction that last changed what /metrics shows of the row (trigger; services/metric_state.py).
    changed_xid: Mapped[int | None] = mapped_column(BigInteger)


class Edge(Base):
    """A job reads (`source`) or writes (`sink`) a table, from `added_after` until `removed_after`.

    Edges are never deleted: the lineage at barrier b is the edges with `added_after < b` and `removed_after`
    NULL or `>= b` (both hold the newest barrier issued when the change committed, so a change takes effect at
    the first barrier issued after it). Rows with `removed_at` NULL are the current lineage.
    """

    __tablename__ = "lineage_edges"
    __table_args__ = (
        CheckConstraint("role IN ('source', 'sink')", name="known_role"),
        CheckConstraint("(removed_at IS NULL) = (removed_after IS NULL)", name="removed_together"),
        CheckConstraint("removed_after >= added_after", name="removed_after_added"),
        Index(
            "uq_lineage_edges_current",
            "job_id",
            "table_id",
            unique=True,
            postgresql_where=text("removed_at IS NULL"),
        ),
        Index(
            "uq_lineage_edges_one_writer",
            "table_id",
            unique=True,
            postgresql_where=text("role = 'sink' AND removed_at IS NULL"),
        ),
        Index("ix_lineage_edges_table_id_role", "table_id", "role"),
        Index("ix_lineage_edges_job_id", "job_id"),
        Index("ix_lineage_edges_added_after", "added_after"),
        Index("ix_lineage_edges_removed_after", "removed_after"),
        Index("ix_lineage_edges_created_at", "created_at"),
        Index("ix_lineage_edges_removed_at", "removed_at", postgresql_where=text("removed_at IS NOT NULL")),
        Index("ix_lineage_edges_changed_xid", "changed_xid", postgresql_where=text("changed_xid IS NOT NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    job_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("jobs.id", ondelete="CASCADE"))
    table_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("tables.id"))
    role: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    added_after: Mapped[int] = mapped_column(BigInteger)
    removed_after: Mapped[int | None] = mapped_column(BigInteger)
    removed_at: Mapped[datetime | None]
    # The transaction that last changed what /metrics shows of the row (trigger; services/metric_state.py).
    changed_xid: Mapped[int | None] = mapped_column(BigInteger)


class SnapshotRange(Base):
    """Table X holds `snapshot_id` at every barrier in [first_barrier, last_barrier] (NULL last: open-ended)."""

    __tablename__ = "snapshot_ranges"
    __table_args__ = (
        CheckConstraint("last_barrier IS NULL OR last_barrier >= first_barrier", name="ordered"),
        CheckConstraint(f"(snapshot_id IS NULL) = (kind IN {NEVER_KINDS!r})", name="never_has_no_snapshot"),
        CheckConstraint(f"kind IN {RANGE_KINDS!r}", name="known_kind"),
        CheckConstraint("snapshot_id >= 0", name="snapshot_non_negative"),
        Index("uq_snapshot_ranges_table_first", "table_id", "first_barrier", unique=True),
        Index("ix_snapshot_ranges_table_snapshot", "table_id", "snapshot_id", "first_barrier"),
        # the open range of a table (at most one: the exclusion constraint), which every seal looks up
        Index("ix_snapshot_ranges_open", "table_id", postgresql_where=text("last_barrier IS NULL")),
        Index("ix_snapshot_ranges_changed_xid", "changed_xid", postgresql_where=text("changed_xid IS NOT NULL")),
        ExcludeConstraint(
            (text("table_id"), "="),
            (text("int8range(first_barrier, last_barrier, '[]')"), "&&"),
            name="ex_snapshot_ranges_no_overlap",
            using="gist",
            deferrable=True,
            initially="DEFERRED",  # a seal closes and opens ranges in one statement; checked at commit
        ),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    table_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("tables.id"))
    first_barrier: Mapped[int] = mapped_column(BigInteger, ForeignKey("barriers.barrier"))
    last_barrier: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("barriers.barrier"))
    snapshot_id: Mapped[int | None] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(Text)
    job_id: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("jobs.id"))
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(server_default=func.now())
    # The transaction that last changed what /metrics shows of the row (trigger; services/metric_state.py).
    changed_xid: Mapped[int | None] = mapped_column(BigInteger)


class JobRun(Base):
    """One step of a job's barrier history; idle and skipped stretches are one row covering a range."""

    __tablename__ = "job_runs"
    __table_args__ = (
        CheckConstraint(f"status IN {RUN_STATUSES!r}", name="known_status"),
        CheckConstraint("barrier >= first_barrier", name="ordered"),
        Index("uq_job_runs_job_first", "job_id", "first_barrier", unique=True),
        Index("ix_job_runs_job_barrier", "job_id", "barrier"),
        Index("uq_job_runs_one_in_flight", "job_id", unique=True, postgresql_where=text("status = 'in_flight'")),
        Index("ix_job_runs_changed_xid", "changed_xid", postgresql_where=text("changed_xid IS NOT NULL")),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    job_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("jobs.id"))
    first_barrier: Mapped[int] = mapped_column(BigInteger, ForeignKey("barriers.barrier"))
    barrier: Mapped[int] = mapped_column(BigInteger, ForeignKey("barriers.barrier"))
    status: Mapped[str] = mapped_column(Text)
    inputs: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    outputs: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    reason: Mapped[str | None] = mapped_column(Text)
    inputs_ready_at: Mapped[datetime | None]
    started_at: Mapped[datetime] = mapped_column(server_default=func.now())
    finished_at: Mapped[datetime | None]
    # The transaction that last changed what /metrics shows of the row (trigger; services/metric_state.py).
    changed_xid: Mapped[int | None] = mapped_column(BigInteger)


class Lease(Base):
    """A reader's hold on snapshots: they are reported as protected until `expires_at` or release."""

    __tablename__ = "leases"
    __table_args__ = (
        CheckConstraint("ttl_seconds > 0", name="positive_ttl"),
        CheckConstraint("expires_at > created_at", name="expires_after_creation"),
        CheckConstraint("char_length(holder) BETWEEN 1 AND 200", name="holder_length"),
        Index("ix_leases_expires_at", "expires_at"),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    holder: Mapped[str] = mapped_column(Text)
    # The name of the token that created it (NULL with authentication off): only it or an admin may end it.
    owner: Mapped[str | None] = mapped_column(Text)
    ttl_seconds: Mapped[float] = mapped_column(Double)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    expires_at: Mapped[datetime]
    released_at: Mapped[datetime | None]


class LeaseSnapshot(Base):
    """One table snapshot a lease protects."""

    __tablename__ = "lease_snapshots"
    __table_args__ = (
        CheckConstraint("snapshot_id >= 0", name="snapshot_non_negative"),
        Index("ix_lease_snapshots_table_id", "table_id"),
    )

    lease_id: Mapped[str] = mapped_column(Text, ForeignKey("leases.id", ondelete="CASCADE"), primary_key=True)
    table_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("tables.id"), primary_key=True)
    snapshot_id: Mapped[int] = mapped_column(BigInteger)


ROLLBACK_STATUSES = ("planned", "completed", "cancelled")


class Rollback(Base):
    """A planned or applied rollback of a table and everything downstream of it to `barrier`.

    `plan` holds the wire plan ({"tables": {name: {"restore_snapshot_id"}}, "jobs": {name: {...}}}); `forgotten`
    keeps the snapshot ranges and job runs that completing it removed, so the history is not lost.
    """

    __tablename__ = "rollbacks"
    __table_args__ = (
        CheckConstraint(f"status IN {ROLLBACK_STATUSES!r}", name="known_status"),
        CheckConstraint("(status = 'completed') = (completed_at IS NOT NULL)", name="completed_when_completed"),
        CheckConstraint("(status = 'cancelled') = (cancelled_at IS NOT NULL)", name="cancelled_when_cancelled"),
        Index("ix_rollbacks_planned", "status", postgresql_where=text("status = 'planned'")),
    )

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    table_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("tables.id"))
    barrier: Mapped[int] = mapped_column(BigInteger, ForeignKey("barriers.barrier"))
    plan: Mapped[dict[str, Any]] = mapped_column(JSONB)
    status: Mapped[str] = mapped_column(Text, server_default=text("'planned'"))
    forgotten: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    completed_at: Mapped[datetime | None]
    cancelled_at: Mapped[datetime | None]


TOKEN_ROLES = ("admin", "job", "reader")


class ApiToken(Base):
    """A bearer token, stored as its SHA-256 (tokens are 256-bit random, so a fast hash is enough)."""

    __tablename__ = "api_tokens"
    __table_args__ = (
        CheckConstraint(f"role IN {TOKEN_ROLES!r}", name="known_role"),
        CheckConstraint("role = 'job' OR cardinality(job_patterns) = 0", name="patterns_only_for_jobs"),
        CheckConstraint("role = 'job' OR cardinality(table_patterns) = 0", name="tables_only_for_jobs"),
    )

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    token_sha256: Mapped[str] = mapped_column(Text, unique=True)
    role: Mapped[str] = mapped_column(Text)
    job_patterns: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'::text[]"))
    # Table namespaces (globs on catalog.database.table) a job token may register sinks in; empty: none.
    table_patterns: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'::text[]"))
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    revoked_at: Mapped[datetime | None]


class MetricRemoval(Base):
    """Ranges and runs deleted (a completed rollback) leave no row to carry a `changed_xid`: a statement trigger
    notes their table or job here, so the /metrics refresh reads them again; a TRUNCATE of a catalog table notes a
    row with neither (the refresh reads everything again)."""

    __tablename__ = "metric_removals"
    __table_args__ = (Index("ix_metric_removals_changed_xid", "changed_xid"),)

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    changed_xid: Mapped[int] = mapped_column(BigInteger)
    table_id: Mapped[int | None] = mapped_column(BigInteger)
    job_id: Mapped[int | None] = mapped_column(BigInteger)
