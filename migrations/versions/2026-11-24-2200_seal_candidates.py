"""The seal reads the roots that may need one instead of walking every root table.

Every barrier sealed "every sealable root whose newest known snapshot differs from its open range" and found them
by walking every root: one barrier cost 0.33 ms with 100 roots and 3.01 ms with 10,000, and a batch walked once
per barrier (`bench/allocation.py`). `tables.seal_candidate` marks the tables that may need a seal; the seal
walks only those (through a partial index) and then clears every mark.

The invariant: a table that needs a seal is marked. What can make a table need one, and who marks it:
- a report raising its newest snapshot or making it sealable again: the allocation function, in the same
  statement;
- a rollback resetting a root's newest snapshot or its ranges: the rollback marks every table of its scope when
  it locks them;
- a writer leaving the table: nothing to mark. A table gets `sealable = false` when a job registers as its
  writer and keeps it after the writer leaves (an orphan), until a report, which marks it;
- a new table: marked by default.
Clearing the marks after a seal is safe because nothing marks a table concurrently with an allocation and
commits before it: the allocation function holds the clock row FOR UPDATE for its whole transaction, and a
rollback takes that row too (after the tables, the order every writer locks in). The clear skips rows another
transaction holds (they keep their mark, which only costs a look at the next seal): a rollback locks and marks
its tables before it waits for the clock, and waiting for such a row after the clock would deadlock.

Revision ID: 6e1f3a5b7c92
Revises: 2b8d4e6f1a73
Create Date: 2026-11-24 22:00:00
"""

# ruff: noqa: E501  (the function's SQL lines are quoted as they stand in it)

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision: str = "6e1f3a5b7c92"
down_revision: str | None = "2b8d4e6f1a73"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The previous revision's function, changed in three places (`patched`: each `old` occurs exactly once).
_CHANGES = (
    (
        "                   sealable = t.sealable OR r.snapshot_id >= coalesce(t.latest_snapshot_id, -1)\n",
        "                   sealable = t.sealable OR r.snapshot_id >= coalesce(t.latest_snapshot_id, -1),\n"
        "                   seal_candidate = true\n",
    ),
    (
        "              LEFT JOIN snapshot_ranges o ON o.table_id = t.id AND o.last_barrier IS NULL\n"
        "             WHERE t.sealable AND t.latest_snapshot_id IS NOT NULL\n",
        "              LEFT JOIN snapshot_ranges o ON o.table_id = t.id AND o.last_barrier IS NULL\n"
        "             WHERE t.seal_candidate AND t.sealable AND t.latest_snapshot_id IS NOT NULL\n",
    ),
    (
        "        SELECT coalesce(jsonb_object_agg(c.name, c.latest_snapshot_id), '{}'::jsonb) INTO v_sealed FROM changed c;\n",
        "        SELECT coalesce(jsonb_object_agg(c.name, c.latest_snapshot_id), '{}'::jsonb) INTO v_sealed FROM changed c;\n"
        "        -- Every marked table now holds its newest snapshot in its open range, or needs no seal. A row another\n"
        "        -- transaction holds (a rollback marking its scope before it takes the clock) keeps its mark: waiting\n"
        "        -- for it here, after the clock, would lock in the wrong order.\n"
        "        UPDATE tables SET seal_candidate = false\n"
        "         WHERE id IN (SELECT id FROM tables WHERE seal_candidate ORDER BY id FOR UPDATE SKIP LOCKED);\n",
    ),
)


def _previous() -> ModuleType:
    """Migration 2026-11-24-2100, which defines the previous function and the helpers to load and patch it."""
    path = Path(__file__).with_name("2026-11-24-2100_seal_for_job.py")  # migrations cannot import each other
    spec = importlib.util.spec_from_file_location("seal_for_job", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def issue_barriers() -> str:
    """This revision's `metaservice_issue_barriers`."""
    previous = _previous()
    return str(previous.patched(previous.ISSUE_BARRIERS, _CHANGES))


def upgrade() -> None:
    op.add_column("tables", sa.Column("seal_candidate", sa.Boolean(), server_default=sa.text("true"), nullable=False))
    op.create_index("ix_tables_seal_candidate", "tables", ["id"], postgresql_where=sa.text("seal_candidate"))
    op.execute(issue_barriers())


def downgrade() -> None:
    op.execute(_previous().ISSUE_BARRIERS)
    op.drop_index("ix_tables_seal_candidate", table_name="tables")
    op.drop_column("tables", "seal_candidate")
