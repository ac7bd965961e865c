"""Tables an admin retired: `tables.retired_at`.

A table that no job uses (a misspelt source, a root nobody reads any more) can be retired: it leaves the lists,
the delays and the whole-graph lineage, reads naming it are refused, and registrations naming it are refused until
an admin revives it. Its history stays (past views and rollbacks still see it).

Revision ID: 9e4b1c7d2a60
Revises: 5d2c8e0a9b17
Create Date: 2026-11-27 10:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "9e4b1c7d2a60"
down_revision: str | None = "5d2c8e0a9b17"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tables", sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("tables", "retired_at")
