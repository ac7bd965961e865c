"""Rollbacks: planned and applied rollbacks of a table and its downstream; lease holders are 1-200 characters.

Revision ID: d999ddbcf837
Revises: 962acdab254f
Create Date: 2026-11-22 21:20:29.365909
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "d999ddbcf837"
down_revision: str | None = "962acdab254f"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "rollbacks",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("table_id", sa.BigInteger(), nullable=False),
        sa.Column("barrier", sa.BigInteger(), nullable=False),
        sa.Column("plan", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'planned'"), nullable=False),
        sa.Column("forgotten", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "(status = 'cancelled') = (cancelled_at IS NOT NULL)", name=op.f("ck_rollbacks_cancelled_when_cancelled")
        ),
        sa.CheckConstraint(
            "(status = 'completed') = (completed_at IS NOT NULL)", name=op.f("ck_rollbacks_completed_when_completed")
        ),
        sa.CheckConstraint("status IN ('planned', 'completed', 'cancelled')", name=op.f("ck_rollbacks_known_status")),
        sa.ForeignKeyConstraint(["barrier"], ["barriers.barrier"], name=op.f("fk_rollbacks_barrier_barriers")),
        sa.ForeignKeyConstraint(["table_id"], ["tables.id"], name=op.f("fk_rollbacks_table_id_tables")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rollbacks")),
    )
    op.create_index(
        "ix_rollbacks_planned", "rollbacks", ["status"], unique=False, postgresql_where=sa.text("status = 'planned'")
    )
    op.create_check_constraint(op.f("ck_leases_holder_length"), "leases", "char_length(holder) BETWEEN 1 AND 200")


def downgrade() -> None:
    op.drop_constraint(op.f("ck_leases_holder_length"), "leases", type_="check")
    op.drop_index("ix_rollbacks_planned", table_name="rollbacks", postgresql_where=sa.text("status = 'planned'"))
    op.drop_table("rollbacks")
