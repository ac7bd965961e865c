"""Initial schema: barriers, tables, jobs, lineage edges, snapshot ranges, job runs.

Revision ID: 8121a04d53ef
Revises:
Create Date: 2026-11-22 20:56:45.529319
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "8121a04d53ef"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gist")
    op.create_table(
        "barrier_clock",
        sa.Column("id", sa.SmallInteger(), nullable=False),
        sa.Column("last_barrier", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_barrier_clock_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_barrier_clock")),
    )
    op.create_table(
        "barriers",
        sa.Column("barrier", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("issued_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("issued_by", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("barrier", name=op.f("pk_barriers")),
    )
    op.create_table(
        "tables",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("format", sa.Text(), nullable=True),
        sa.Column("location", sa.Text(), nullable=True),
        sa.Column("latest_snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("latest_snapshot_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("format IN ('delta', 'paimon', 'iceberg')", name=op.f("ck_tables_known_format")),
        sa.CheckConstraint("latest_snapshot_id >= 0", name=op.f("ck_tables_snapshot_non_negative")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tables")),
        sa.UniqueConstraint("name", name=op.f("uq_tables_name")),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("is_active", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("last_barrier", sa.BigInteger(), nullable=True),
        sa.Column("registered_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("unregistered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.ForeignKeyConstraint(["last_barrier"], ["barriers.barrier"], name=op.f("fk_jobs_last_barrier_barriers")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("name", name=op.f("uq_jobs_name")),
    )
    op.create_table(
        "job_runs",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("first_barrier", sa.BigInteger(), nullable=False),
        sa.Column("barrier", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column(
            "inputs",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column(
            "outputs",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("inputs_ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('in_flight', 'committed', 'idle', 'aborted')", name=op.f("ck_job_runs_known_status")
        ),
        sa.CheckConstraint("barrier >= first_barrier", name=op.f("ck_job_runs_ordered")),
        sa.ForeignKeyConstraint(["barrier"], ["barriers.barrier"], name=op.f("fk_job_runs_barrier_barriers")),
        sa.ForeignKeyConstraint(
            ["first_barrier"], ["barriers.barrier"], name=op.f("fk_job_runs_first_barrier_barriers")
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_runs_job_id_jobs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_runs")),
    )
    op.create_index("ix_job_runs_job_barrier", "job_runs", ["job_id", "barrier"], unique=False)
    op.create_index("uq_job_runs_job_first", "job_runs", ["job_id", "first_barrier"], unique=True)
    op.create_index(
        "uq_job_runs_one_in_flight",
        "job_runs",
        ["job_id"],
        unique=True,
        postgresql_where=sa.text("status = 'in_flight'"),
    )
    op.create_table(
        "lineage_edges",
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("role IN ('source', 'sink')", name=op.f("ck_lineage_edges_known_role")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_lineage_edges_job_id_jobs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name=op.f("fk_lineage_edges_table_id_tables")),
        sa.PrimaryKeyConstraint("job_id", "table_id", name=op.f("pk_lineage_edges")),
    )
    op.create_index("ix_lineage_edges_table_id_role", "lineage_edges", ["table_id", "role"], unique=False)
    op.create_index(
        "uq_lineage_edges_one_writer",
        "lineage_edges",
        ["table_id"],
        unique=True,
        postgresql_where=sa.text("role = 'sink'"),
    )
    op.create_table(
        "snapshot_ranges",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("first_barrier", sa.BigInteger(), nullable=False),
        sa.Column("last_barrier", sa.BigInteger(), nullable=True),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=True),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        postgresql.ExcludeConstraint(
            (sa.text("table_id"), "="),
            (sa.text("int8range(first_barrier, last_barrier, '[]')"), "&&"),
            using="gist",
            name="ex_snapshot_ranges_no_overlap",
            deferrable=True,
            initially="DEFERRED",
        ),
        sa.CheckConstraint(
            "(snapshot_id IS NULL) = (kind = 'aborted')",
            name=op.f("ck_snapshot_ranges_aborted_has_no_snapshot"),
        ),
        sa.CheckConstraint(
            "kind IN ('sealed', 'committed', 'idle', 'aborted', 'restored')",
            name=op.f("ck_snapshot_ranges_known_kind"),
        ),
        sa.CheckConstraint(
            "last_barrier IS NULL OR last_barrier >= first_barrier", name=op.f("ck_snapshot_ranges_ordered")
        ),
        sa.CheckConstraint("snapshot_id >= 0", name=op.f("ck_snapshot_ranges_snapshot_non_negative")),
        sa.ForeignKeyConstraint(
            ["first_barrier"], ["barriers.barrier"], name=op.f("fk_snapshot_ranges_first_barrier_barriers")
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_snapshot_ranges_job_id_jobs")),
        sa.ForeignKeyConstraint(
            ["last_barrier"], ["barriers.barrier"], name=op.f("fk_snapshot_ranges_last_barrier_barriers")
        ),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name=op.f("fk_snapshot_ranges_table_id_tables")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_snapshot_ranges")),
    )
    op.create_index("uq_snapshot_ranges_table_first", "snapshot_ranges", ["table_id", "first_barrier"], unique=True)
    op.execute("INSERT INTO barrier_clock (id, last_barrier) VALUES (1, 0)")


def downgrade() -> None:
    op.drop_index("uq_snapshot_ranges_table_first", table_name="snapshot_ranges")
    op.drop_table("snapshot_ranges")
    op.drop_index("uq_lineage_edges_one_writer", table_name="lineage_edges", postgresql_where=sa.text("role = 'sink'"))
    op.drop_index("ix_lineage_edges_table_id_role", table_name="lineage_edges")
    op.drop_table("lineage_edges")
    op.drop_index("uq_job_runs_one_in_flight", table_name="job_runs", postgresql_where=sa.text("status = 'in_flight'"))
    op.drop_index("uq_job_runs_job_first", table_name="job_runs")
    op.drop_index("ix_job_runs_job_barrier", table_name="job_runs")
    op.drop_table("job_runs")
    op.drop_table("jobs")
    op.drop_table("tables")
    op.drop_table("barriers")
    op.drop_table("barrier_clock")
