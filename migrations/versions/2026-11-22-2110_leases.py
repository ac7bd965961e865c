"""Leases: readers' holds on snapshots, protected from vacuum until they expire.

Revision ID: 962acdab254f
Revises: 8121a04d53ef
Create Date: 2026-11-22 21:10:43.696150
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "962acdab254f"
down_revision: str | None = "8121a04d53ef"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table(
        "leases",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("holder", sa.Text(), nullable=False),
        sa.Column("ttl_seconds", sa.Double(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("expires_at > created_at", name=op.f("ck_leases_expires_after_creation")),
        sa.CheckConstraint("ttl_seconds > 0", name=op.f("ck_leases_positive_ttl")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leases")),
    )
    op.create_index("ix_leases_expires_at", "leases", ["expires_at"], unique=False)
    op.create_table(
        "lease_snapshots",
        sa.Column("lease_id", sa.Text(), nullable=False),
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("snapshot_id", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("snapshot_id >= 0", name=op.f("ck_lease_snapshots_snapshot_non_negative")),
        sa.ForeignKeyConstraint(
            ["lease_id"], ["leases.id"], name=op.f("fk_lease_snapshots_lease_id_leases"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name=op.f("fk_lease_snapshots_table_id_tables")),
        sa.PrimaryKeyConstraint("lease_id", "table_id", name=op.f("pk_lease_snapshots")),
    )
    op.create_index("ix_lease_snapshots_table_id", "lease_snapshots", ["table_id"], unique=False)


def downgrade() -> None:

    op.drop_index("ix_lease_snapshots_table_id", table_name="lease_snapshots")
    op.drop_table("lease_snapshots")
    op.drop_index("ix_leases_expires_at", table_name="leases")
    op.drop_table("leases")
