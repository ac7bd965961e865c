"""Indexes for lineage through time: snapshot lineage and the list of lineage changes.

- `ix_snapshot_ranges_table_snapshot`: snapshot lineage finds the range that first held a table's snapshot (and
  so the run that produced it) with one index probe per snapshot instead of a scan of the table's history.
- `ix_lineage_edges_created_at` / `ix_lineage_edges_removed_at`: `GET /lineage/changes` lists additions and
  removals newest first, a page at a time.

`lineage_edges` already carries `created_at` and `removed_at` (the times a change committed), so "lineage as of a
time" needs no new column.

Revision ID: 9a2b6c4d1e70
Revises: 7c4e91d2ab35
Create Date: 2026-11-24 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "9a2b6c4d1e70"
down_revision: str | None = "7c4e91d2ab35"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_snapshot_ranges_table_snapshot", "snapshot_ranges", ["table_id", "snapshot_id", "first_barrier"]
    )
    op.create_index("ix_lineage_edges_created_at", "lineage_edges", ["created_at"])
    op.create_index(
        "ix_lineage_edges_removed_at",
        "lineage_edges",
        ["removed_at"],
        postgresql_where=sa.text("removed_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_lineage_edges_removed_at", table_name="lineage_edges")
    op.drop_index("ix_lineage_edges_created_at", table_name="lineage_edges")
    op.drop_index("ix_snapshot_ranges_table_snapshot", table_name="snapshot_ranges")
