"""API tokens: hashed bearer tokens with roles (admin, job, reader) and job-id patterns.

Revision ID: 5b7c0e2a9f41
Revises: d999ddbcf837
Create Date: 2026-11-22 21:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "5b7c0e2a9f41"
down_revision: str | None = "d999ddbcf837"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("token_sha256", sa.Text(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("job_patterns", postgresql.ARRAY(sa.Text()), server_default=sa.text("'{}'::text[]"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("role IN ('admin', 'job', 'reader')", name=op.f("ck_api_tokens_known_role")),
        sa.CheckConstraint(
            "role = 'job' OR cardinality(job_patterns) = 0", name=op.f("ck_api_tokens_patterns_only_for_jobs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_api_tokens_name")),
        sa.UniqueConstraint("token_sha256", name=op.f("uq_api_tokens_token_sha256")),
    )


def downgrade() -> None:
    op.drop_table("api_tokens")
