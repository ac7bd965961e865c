"""Barrier allocation as one statement: `metaservice_issue_barrier()`, and idempotency keys on barriers.

Why a function: allocation serializes on the `barrier_clock` row lock, which PostgreSQL holds until the
transaction ends. Run from the server as BEGIN / UPDATE / seal / COMMIT, the lock was held across three round
trips through a busy event loop, and every concurrent allocator queued behind it. As one autocommit call the
lock is held only while PostgreSQL itself runs the function. In READ COMMITTED every statement of a VOLATILE
function takes a fresh snapshot, so the statements after the clock lock see every allocation committed before
it was granted: sealing reads the current open ranges, never stale ones.

Why keys: `POST /barriers` is not idempotent by nature. A client that sends `Idempotency-Key` gets the first
barrier back when it repeats the call, which makes a lost answer (or a connection lost during the commit)
safe to retry. The lookup runs under the clock lock, so two calls with one key never both allocate.

Revision ID: 3f1d2c9b7a60
Revises: 5b7c0e2a9f41
Create Date: 2026-11-23 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3f1d2c9b7a60"
down_revision: str | None = "5b7c0e2a9f41"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEALED_BY = r"""
CREATE FUNCTION metaservice_sealed_by(p_barrier bigint) RETURNS jsonb
LANGUAGE sql STABLE AS $fn$
    -- {table name: snapshot id} of the root snapshots that barrier p_barrier sealed
    SELECT coalesce(jsonb_object_agg(t.name, r.snapshot_id), '{}'::jsonb)
      FROM snapshot_ranges r JOIN tables t ON t.id = r.table_id
     WHERE r.first_barrier = p_barrier AND r.kind = 'sealed' AND r.snapshot_id IS NOT NULL
$fn$
"""

ISSUE_BARRIER = r"""
CREATE FUNCTION metaservice_issue_barrier(
    p_issued_by text,
    p_request_key text,
    p_root_ids bigint[],
    p_root_snapshots bigint[],
    p_when_unsealed bigint[],
    p_min_interval double precision
) RETURNS TABLE (barrier bigint, issued_at timestamptz, replayed boolean, sealed jsonb, wait_seconds double precision)
LANGUAGE plpgsql VOLATILE AS $fn$
-- Report root snapshots, then issue the next barrier and seal every root table's newest snapshot.
--   p_request_key: an earlier call with this key returns its barrier again (replayed) and nothing else happens
--     (a repeat that races the first call may still report its root snapshots: they only ever move forward);
--   p_when_unsealed: when not NULL, issue only if one of these root tables has a snapshot no barrier sealed;
--   p_min_interval: seconds; when the newest barrier is younger, issue nothing and answer how long to wait.
-- No row comes back when p_when_unsealed found nothing to seal.
#variable_conflict use_column
DECLARE
    v_last bigint;
    v_barrier bigint;
    v_at timestamptz;
    v_head_at timestamptz;
BEGIN
    -- A repeated key: answer what the first call did, and report nothing (the lookup is repeated under the
    -- clock lock below, for a repeat racing the first call).
    IF p_request_key IS NOT NULL THEN
        SELECT b.barrier, b.issued_at INTO v_barrier, v_at FROM barriers b WHERE b.request_key = p_request_key;
        IF FOUND THEN
            RETURN QUERY SELECT v_barrier, v_at, true, metaservice_sealed_by(v_barrier), NULL::double precision;
            RETURN;
        END IF;
    END IF;

    IF cardinality(p_root_ids) > 0 THEN
        PERFORM 1 FROM tables WHERE id = ANY (p_root_ids) ORDER BY id FOR UPDATE;  -- fixed order: no deadlocks
        UPDATE tables t
           SET latest_snapshot_id = greatest(coalesce(t.latest_snapshot_id, -1), r.snapshot_id),
               latest_snapshot_at = now()
          FROM unnest(p_root_ids, p_root_snapshots) AS r (table_id, snapshot_id)
         WHERE t.id = r.table_id;
    END IF;

    SELECT c.last_barrier INTO v_last FROM barrier_clock c WHERE c.id = 1 FOR UPDATE;

    IF p_request_key IS NOT NULL THEN
        SELECT b.barrier, b.issued_at INTO v_barrier, v_at FROM barriers b WHERE b.request_key = p_request_key;
        IF FOUND THEN
            RETURN QUERY SELECT v_barrier, v_at, true, metaservice_sealed_by(v_barrier), NULL::double precision;
            RETURN;
        END IF;
    END IF;

    IF p_when_unsealed IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM tables t
          LEFT JOIN snapshot_ranges r ON r.table_id = t.id AND r.last_barrier IS NULL
         WHERE t.id = ANY (p_when_unsealed) AND t.latest_snapshot_id IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM lineage_edges e WHERE e.table_id = t.id AND e.role = 'sink')
           AND (r.id IS NULL OR r.snapshot_id IS DISTINCT FROM t.latest_snapshot_id)
    ) THEN
        RETURN;
    END IF;

    IF p_min_interval > 0 THEN
        SELECT b.issued_at INTO v_head_at FROM barriers b ORDER BY b.barrier DESC LIMIT 1;
        IF v_head_at IS NOT NULL AND v_head_at + make_interval(secs => p_min_interval) > clock_timestamp() THEN
            RETURN QUERY
            SELECT NULL::bigint, NULL::timestamptz, false, NULL::jsonb,
                   extract(epoch FROM v_head_at + make_interval(secs => p_min_interval) - clock_timestamp())::float8;
            RETURN;
        END IF;
    END IF;

    v_barrier := greatest(v_last + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
    v_at := clock_timestamp();
    UPDATE barrier_clock SET last_barrier = v_barrier WHERE id = 1;
    INSERT INTO barriers (barrier, issued_at, issued_by, request_key)
    VALUES (v_barrier, v_at, p_issued_by, p_request_key);

    -- Seal: every root table whose newest known snapshot differs from its open range gets a new open range
    -- from this barrier; the previous open range is closed at the barrier before it.
    RETURN QUERY
    WITH changed AS (
        SELECT t.id, t.name, t.latest_snapshot_id, r.id AS open_id
          FROM tables t
          LEFT JOIN snapshot_ranges r ON r.table_id = t.id AND r.last_barrier IS NULL
         WHERE t.latest_snapshot_id IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM lineage_edges e WHERE e.table_id = t.id AND e.role = 'sink')
           AND (r.id IS NULL OR r.snapshot_id IS DISTINCT FROM t.latest_snapshot_id)
    ), closed AS (
        UPDATE snapshot_ranges r
           SET last_barrier = (SELECT max(b.barrier) FROM barriers b WHERE b.barrier < v_barrier),
               updated_at = now()
          FROM changed c
         WHERE r.id = c.open_id
    ), opened AS (
        INSERT INTO snapshot_ranges (table_id, first_barrier, last_barrier, snapshot_id, kind)
        SELECT c.id, v_barrier, NULL, c.latest_snapshot_id, 'sealed' FROM changed c
    )
    SELECT v_barrier, v_at, false,
           coalesce((SELECT jsonb_object_agg(c.name, c.latest_snapshot_id) FROM changed c), '{}'::jsonb),
           NULL::double precision;
END
$fn$
"""


def upgrade() -> None:
    op.add_column("barriers", sa.Column("request_key", sa.Text(), nullable=True))
    op.create_check_constraint(
        op.f("ck_barriers_request_key_length"), "barriers", "char_length(request_key) BETWEEN 1 AND 255"
    )
    op.create_index(
        "uq_barriers_request_key",
        "barriers",
        ["request_key"],
        unique=True,
        postgresql_where=sa.text("request_key IS NOT NULL"),
    )
    op.execute(SEALED_BY)
    op.execute(ISSUE_BARRIER)


def downgrade() -> None:
    op.execute("DROP FUNCTION metaservice_issue_barrier(text, text, bigint[], bigint[], bigint[], double precision)")
    op.execute("DROP FUNCTION metaservice_sealed_by(bigint)")
    op.drop_index("uq_barriers_request_key", table_name="barriers")
    op.drop_constraint(op.f("ck_barriers_request_key_length"), "barriers", type_="check")
    op.drop_column("barriers", "request_key")
