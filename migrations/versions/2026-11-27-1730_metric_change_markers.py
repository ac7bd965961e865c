"""Change markers for the /metrics refresh: it reads only what changed since its previous read.

Every server process re-read the whole catalog's figures every 5 s (each table's newest complete barrier, the
lag closure, every job's last run and run counts). Now it keeps what it read and asks for the rows written since:

- `changed_xid` (bigint) on `tables`, `jobs`, `lineage_edges`, `snapshot_ranges` and `job_runs`: the id of the
  transaction that last wrote the row (`pg_current_xact_id()`), set by a row trigger, so that no write path can
  forget it. A reader that kept the snapshot of its previous read (`pg_current_snapshot()`) finds what committed
  since as the markers at or above that snapshot's xmin it could not see; commit order, not id or clock order,
  so a transaction that started earlier and committed later is not missed. Indexed (partial: existing rows stay
  NULL and are read by the first, full, read of every process).
- On `tables` and `jobs` the trigger fires only when a column the figures show changes (name, retirement; name,
  activity, last barrier): a job's poll (`last_seen_at`) or a report (`latest_snapshot_id`) marks nothing.
- `metric_removals`: rows deleted from `snapshot_ranges` and `job_runs` (a completed rollback) leave no row to
  mark, so a statement trigger notes their tables and jobs here; a TRUNCATE of a catalog table notes a row with
  neither (read again in full).

Revision ID: 3cd66f5351f3
Revises: 5c3e9a1f7b24
Create Date: 2026-11-27 17:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3cd66f5351f3"
down_revision: str | None = "5c3e9a1f7b24"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MARKED = ("tables", "jobs", "lineage_edges", "snapshot_ranges", "job_runs")
TRUNCATED = ("tables", "jobs", "lineage_edges", "snapshot_ranges", "job_runs", "barriers")

MARK = """
CREATE FUNCTION metaservice_mark_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    NEW.changed_xid := CAST(CAST(pg_current_xact_id() AS text) AS bigint);
    RETURN NEW;
END
$fn$
"""
NOTE_REMOVED = """
CREATE FUNCTION metaservice_note_removed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        INSERT INTO metric_removals (changed_xid) VALUES (CAST(CAST(pg_current_xact_id() AS text) AS bigint));
    ELSIF TG_TABLE_NAME = 'snapshot_ranges' THEN
        INSERT INTO metric_removals (changed_xid, table_id)
        SELECT DISTINCT CAST(CAST(pg_current_xact_id() AS text) AS bigint), table_id FROM removed_rows;
    ELSE
        INSERT INTO metric_removals (changed_xid, job_id)
        SELECT DISTINCT CAST(CAST(pg_current_xact_id() AS text) AS bigint), job_id FROM removed_rows;
    END IF;
    RETURN NULL;
END
$fn$
"""
# Columns the figures show, per table whose UPDATE trigger is conditional (None: every update marks).
WATCHED = {
    "tables": "OLD.name IS DISTINCT FROM NEW.name OR OLD.retired_at IS DISTINCT FROM NEW.retired_at",
    "jobs": "OLD.name IS DISTINCT FROM NEW.name OR OLD.is_active IS DISTINCT FROM NEW.is_active"
    " OR OLD.last_barrier IS DISTINCT FROM NEW.last_barrier",
}


def upgrade() -> None:
    for table in MARKED:
        op.add_column(table, sa.Column("changed_xid", sa.BigInteger(), nullable=True))
        op.create_index(
            f"ix_{table}_changed_xid", table, ["changed_xid"], postgresql_where=sa.text("changed_xid IS NOT NULL")
        )
    op.create_table(
        "metric_removals",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("changed_xid", sa.BigInteger(), nullable=False),
        sa.Column("table_id", sa.BigInteger(), nullable=True),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_removals")),
    )
    op.create_index("ix_metric_removals_changed_xid", "metric_removals", ["changed_xid"])
    op.execute(MARK)
    op.execute(NOTE_REMOVED)
    for table in MARKED:
        watched = WATCHED.get(table)
        if watched is None:
            op.execute(
                f"CREATE TRIGGER metaservice_mark_changed BEFORE INSERT OR UPDATE ON {table}"
                " FOR EACH ROW EXECUTE FUNCTION metaservice_mark_changed()"
            )
        else:
            op.execute(
                f"CREATE TRIGGER metaservice_mark_inserted BEFORE INSERT ON {table}"
                " FOR EACH ROW EXECUTE FUNCTION metaservice_mark_changed()"
            )
            op.execute(
                f"CREATE TRIGGER metaservice_mark_changed BEFORE UPDATE ON {table}"
                f" FOR EACH ROW WHEN ({watched}) EXECUTE FUNCTION metaservice_mark_changed()"
            )
    for table in ("snapshot_ranges", "job_runs"):
        op.execute(
            f"CREATE TRIGGER metaservice_note_removed AFTER DELETE ON {table} REFERENCING OLD TABLE AS removed_rows"
            " FOR EACH STATEMENT EXECUTE FUNCTION metaservice_note_removed()"
        )
    for table in TRUNCATED:
        op.execute(
            f"CREATE TRIGGER metaservice_note_truncated AFTER TRUNCATE ON {table}"
            " FOR EACH STATEMENT EXECUTE FUNCTION metaservice_note_removed()"
        )


def downgrade() -> None:
    for table in TRUNCATED:
        op.execute(f"DROP TRIGGER metaservice_note_truncated ON {table}")
    for table in ("snapshot_ranges", "job_runs"):
        op.execute(f"DROP TRIGGER metaservice_note_removed ON {table}")
    for table in MARKED:
        op.execute(f"DROP TRIGGER metaservice_mark_changed ON {table}")
        if table in WATCHED:
            op.execute(f"DROP TRIGGER metaservice_mark_inserted ON {table}")
    op.execute("DROP FUNCTION metaservice_note_removed()")
    op.execute("DROP FUNCTION metaservice_mark_changed()")
    op.drop_index("ix_metric_removals_changed_xid", table_name="metric_removals")
    op.drop_table("metric_removals")
    for table in reversed(MARKED):
        op.drop_index(f"ix_{table}_changed_xid", table_name=table)
        op.drop_column(table, "changed_xid")
