"""Changing lineage, compare-and-set protocol steps, ownership, and coalesced barrier allocation.

- `lineage_edges` keep their history: `added_after` / `removed_after` hold the newest barrier issued when the edge
  was added / removed, so the lineage at any barrier can be rebuilt (strong reads use the lineage at the barrier
  they answer; "lineage as of"). Current edges are those with `removed_at` NULL; the one-writer and one-role rules
  hold over current edges.
- `jobs.version` grows with every change of a job's planning state: `next`, `commit` and `abort` read, decide in
  Python and write in one statement that checks the version (no transaction held across round trips).
- `tables.sealable`: an orphan (its writer went) is not sealed as a root until an external writer reports it.
  Table names are unique regardless of case.
- `snapshot_ranges.kind` 'gap': barriers a table never completes because it changed writers.
- `leases.owner` (the token that created a lease) and `api_tokens.table_patterns` (a job token's namespaces).
- `metaservice_issue_barriers(jsonb)`: one call serves a batch of concurrent allocation requests (POST /barriers,
  `next` seals, snapshot reports) as if they ran one after another: one clock lock, one clock update, each caller
  its own answer. It replaces `metaservice_issue_barrier`.

Revision ID: 7c4e91d2ab35
Revises: 3f1d2c9b7a60
Create Date: 2026-11-24 09:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "7c4e91d2ab35"
down_revision: str | None = "3f1d2c9b7a60"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ISSUE_BARRIERS = r"""
CREATE FUNCTION metaservice_issue_barriers(p_requests jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $fn$
-- Serves a batch of requests in order, as if each ran on its own (the server coalesces concurrent callers):
--   {"kind": "barrier" | "seal" | "report", "by": text, "key": text | null, "roots": {"<table>": snapshot},
--    "when_unsealed": [table ids], "unless_after": barrier | null, "min_interval": seconds}
--   report:  record the root snapshots (they only move forward; an orphan becomes a root again when reported
--            at or above its newest known snapshot);
--   barrier: report, then issue a barrier and seal every root's newest snapshot; a key issued before answers
--            that barrier again (`replayed`) and changes nothing;
--   seal:    report, then issue a barrier only when a table of `when_unsealed` has a snapshot no barrier sealed,
--            or `unless_after` is given and no barrier was issued after it; never within `min_interval` seconds
--            of the newest barrier (the answer then says how long to wait).
-- A request naming an unknown table or a table a job writes changes nothing and answers an error.
-- Answers, in request order: {"barrier", "issued_at", "replayed", "sealed", "wait_seconds", "latest", "error"}.
#variable_conflict use_column
DECLARE
    v_req jsonb;
    v_out jsonb := '[]'::jsonb;
    v_start bigint;
    v_last bigint;
    v_barrier bigint;
    v_at timestamptz;
    v_head_at timestamptz;
    v_missing text[];
    v_written jsonb;
    v_sealed jsonb;
    v_latest jsonb;
    v_need boolean;
    v_wait double precision;
    v_key text;
    v_kind text;
BEGIN
    -- Lock order for everything that writes tables rows and the clock: tables by id, then the clock.
    PERFORM 1 FROM tables t
     WHERE t.name IN (SELECT jsonb_object_keys(coalesce(r -> 'roots', '{}')) FROM jsonb_array_elements(p_requests) r)
     ORDER BY t.id FOR UPDATE;
    SELECT c.last_barrier INTO v_start FROM barrier_clock c WHERE c.id = 1 FOR UPDATE;
    v_last := v_start;

    FOR v_req IN SELECT value FROM jsonb_array_elements(p_requests) LOOP
        v_kind := v_req ->> 'kind';
        v_key := v_req ->> 'key';
        v_barrier := NULL; v_at := NULL; v_sealed := '{}'::jsonb; v_wait := NULL; v_latest := '{}'::jsonb;

        IF v_key IS NOT NULL THEN
            SELECT b.barrier, b.issued_at INTO v_barrier, v_at FROM barriers b WHERE b.request_key = v_key;
            IF FOUND THEN
                v_out := v_out || jsonb_build_array(jsonb_build_object(
                    'barrier', v_barrier, 'issued_at', v_at, 'replayed', true,
                    'sealed', metaservice_sealed_by(v_barrier), 'wait_seconds', NULL, 'latest', '{}'::jsonb,
                    'error', NULL));
                CONTINUE;
            END IF;
        END IF;

        SELECT array_agg(k ORDER BY k) INTO v_missing
          FROM jsonb_object_keys(coalesce(v_req -> 'roots', '{}')) k
         WHERE NOT EXISTS (SELECT 1 FROM tables t WHERE t.name = k);
        SELECT jsonb_object_agg(t.name, j.name) INTO v_written
          FROM tables t
          JOIN lineage_edges e ON e.table_id = t.id AND e.role = 'sink' AND e.removed_at IS NULL
          JOIN jobs j ON j.id = e.job_id
         WHERE t.name IN (SELECT jsonb_object_keys(coalesce(v_req -> 'roots', '{}')));
        IF v_missing IS NOT NULL OR v_written IS NOT NULL THEN
            v_out := v_out || jsonb_build_array(jsonb_build_object(
                'barrier', NULL, 'issued_at', NULL, 'replayed', false, 'sealed', '{}'::jsonb, 'wait_seconds', NULL,
                'latest', '{}'::jsonb,
                'error', CASE WHEN v_missing IS NOT NULL
                              THEN jsonb_build_object('code', 'not_found', 'tables', to_jsonb(v_missing))
                              ELSE jsonb_build_object('code', 'not_root', 'writers', v_written) END));
            CONTINUE;
        END IF;

        UPDATE tables t
           SET latest_snapshot_id = greatest(coalesce(t.latest_snapshot_id, -1), r.snapshot_id),
               latest_snapshot_at = now(),
               sealable = t.sealable OR r.snapshot_id >= coalesce(t.latest_snapshot_id, -1)
          FROM (SELECT key AS name, value::bigint AS snapshot_id
                  FROM jsonb_each_text(coalesce(v_req -> 'roots', '{}'))) r
         WHERE t.name = r.name;
        SELECT coalesce(jsonb_object_agg(t.name, t.latest_snapshot_id), '{}'::jsonb) INTO v_latest
          FROM tables t WHERE t.name IN (SELECT jsonb_object_keys(coalesce(v_req -> 'roots', '{}')));

        IF v_kind = 'report' THEN
            v_out := v_out || jsonb_build_array(jsonb_build_object(
                'barrier', NULL, 'issued_at', NULL, 'replayed', false, 'sealed', '{}'::jsonb, 'wait_seconds', NULL,
                'latest', v_latest, 'error', NULL));
            CONTINUE;
        END IF;

        IF v_kind = 'seal' THEN
            v_need := (v_req ->> 'unless_after' IS NOT NULL AND v_last <= (v_req ->> 'unless_after')::bigint)
                OR EXISTS (
                    SELECT 1 FROM tables t
                      LEFT JOIN snapshot_ranges o ON o.table_id = t.id AND o.last_barrier IS NULL
                     WHERE t.id IN (SELECT value::bigint
                                      FROM jsonb_array_elements_text(coalesce(v_req -> 'when_unsealed', '[]')))
                       AND t.sealable AND t.latest_snapshot_id IS NOT NULL
                       AND NOT EXISTS (SELECT 1 FROM lineage_edges e
                                        WHERE e.table_id = t.id AND e.role = 'sink' AND e.removed_at IS NULL)
                       AND (o.id IS NULL OR o.snapshot_id IS DISTINCT FROM t.latest_snapshot_id));
            IF NOT v_need THEN
                v_out := v_out || jsonb_build_array(jsonb_build_object(
                    'barrier', NULL, 'issued_at', NULL, 'replayed', false, 'sealed', '{}'::jsonb,
                    'wait_seconds', NULL, 'latest', v_latest, 'error', NULL));
                CONTINUE;
            END IF;
            IF coalesce((v_req ->> 'min_interval')::double precision, 0) > 0 THEN
                SELECT b.issued_at INTO v_head_at FROM barriers b WHERE b.barrier = v_last;
                IF v_head_at IS NOT NULL AND v_head_at + make_interval(secs => (v_req ->> 'min_interval')::float8)
                                             > clock_timestamp() THEN
                    v_wait := extract(epoch FROM v_head_at + make_interval(secs => (v_req ->> 'min_interval')::float8)
                                                 - clock_timestamp())::float8;
                    v_out := v_out || jsonb_build_array(jsonb_build_object(
                        'barrier', NULL, 'issued_at', NULL, 'replayed', false, 'sealed', '{}'::jsonb,
                        'wait_seconds', v_wait, 'latest', v_latest, 'error', NULL));
                    CONTINUE;
                END IF;
            END IF;
        END IF;

        v_barrier := greatest(v_last + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
        v_at := clock_timestamp();
        INSERT INTO barriers (barrier, issued_at, issued_by, request_key)
        VALUES (v_barrier, v_at, v_req ->> 'by', v_key);

        -- Seal: every sealable root whose newest known snapshot differs from its open range gets a new open
        -- range from this barrier; the previous open range ends at the barrier before it.
        WITH changed AS (
            SELECT t.id, t.name, t.latest_snapshot_id, o.id AS open_id
              FROM tables t
              LEFT JOIN snapshot_ranges o ON o.table_id = t.id AND o.last_barrier IS NULL
             WHERE t.sealable AND t.latest_snapshot_id IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM lineage_edges e
                                WHERE e.table_id = t.id AND e.role = 'sink' AND e.removed_at IS NULL)
               AND (o.id IS NULL OR o.snapshot_id IS DISTINCT FROM t.latest_snapshot_id)
        ), closed AS (
            UPDATE snapshot_ranges r SET last_barrier = v_last, updated_at = now()
              FROM changed c WHERE r.id = c.open_id
        ), opened AS (
            INSERT INTO snapshot_ranges (table_id, first_barrier, last_barrier, snapshot_id, kind)
            SELECT c.id, v_barrier, NULL, c.latest_snapshot_id, 'sealed' FROM changed c
        )
        SELECT coalesce(jsonb_object_agg(c.name, c.latest_snapshot_id), '{}'::jsonb) INTO v_sealed FROM changed c;

        v_last := v_barrier;
        v_out := v_out || jsonb_build_array(jsonb_build_object(
            'barrier', v_barrier, 'issued_at', v_at, 'replayed', false, 'sealed', v_sealed, 'wait_seconds', NULL,
            'latest', v_latest, 'error', NULL));
    END LOOP;

    IF v_last <> v_start THEN
        UPDATE barrier_clock SET last_barrier = v_last WHERE id = 1;
    END IF;
    RETURN v_out;
END
$fn$
"""

OLD_ISSUE_BARRIER_SIGNATURE = "metaservice_issue_barrier(text, text, bigint[], bigint[], bigint[], double precision)"


def upgrade() -> None:
    # lineage_edges: a surrogate key and the edge's history
    op.drop_constraint("pk_lineage_edges", "lineage_edges", type_="primary")
    op.add_column("lineage_edges", sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False))
    op.create_primary_key("pk_lineage_edges", "lineage_edges", ["id"])
    op.add_column("lineage_edges", sa.Column("added_after", sa.BigInteger(), nullable=True))
    op.execute("UPDATE lineage_edges SET added_after = 0")
    op.alter_column("lineage_edges", "added_after", nullable=False)
    op.add_column("lineage_edges", sa.Column("removed_after", sa.BigInteger(), nullable=True))
    op.add_column("lineage_edges", sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True))
    op.create_check_constraint(
        op.f("ck_lineage_edges_removed_together"), "lineage_edges", "(removed_at IS NULL) = (removed_after IS NULL)"
    )
    op.create_check_constraint(
        op.f("ck_lineage_edges_removed_after_added"), "lineage_edges", "removed_after >= added_after"
    )
    op.drop_index("uq_lineage_edges_one_writer", table_name="lineage_edges")
    op.create_index(
        "uq_lineage_edges_one_writer",
        "lineage_edges",
        ["table_id"],
        unique=True,
        postgresql_where=sa.text("role = 'sink' AND removed_at IS NULL"),
    )
    op.create_index(
        "uq_lineage_edges_current",
        "lineage_edges",
        ["job_id", "table_id"],
        unique=True,
        postgresql_where=sa.text("removed_at IS NULL"),
    )
    op.create_index("ix_lineage_edges_job_id", "lineage_edges", ["job_id"])
    op.create_index("ix_lineage_edges_added_after", "lineage_edges", ["added_after"])
    op.create_index("ix_lineage_edges_removed_after", "lineage_edges", ["removed_after"])

    op.add_column("jobs", sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False))
    op.create_check_constraint(op.f("ck_jobs_version_non_negative"), "jobs", "version >= 0")

    op.add_column("tables", sa.Column("sealable", sa.Boolean(), server_default=sa.text("true"), nullable=False))
    # tables a job wrote (or writes) are not sealed as roots unless reported again
    op.execute(
        "UPDATE tables t SET sealable = false WHERE EXISTS "
        "(SELECT 1 FROM lineage_edges e WHERE e.table_id = t.id AND e.role = 'sink')"
    )
    op.create_index("uq_tables_name_folded", "tables", [sa.text("lower(name)")], unique=True)

    op.drop_constraint(op.f("ck_snapshot_ranges_aborted_has_no_snapshot"), "snapshot_ranges", type_="check")
    op.drop_constraint(op.f("ck_snapshot_ranges_known_kind"), "snapshot_ranges", type_="check")
    op.create_check_constraint(
        op.f("ck_snapshot_ranges_known_kind"),
        "snapshot_ranges",
        "kind IN ('sealed', 'committed', 'idle', 'aborted', 'gap', 'restored')",
    )
    op.create_check_constraint(
        op.f("ck_snapshot_ranges_never_has_no_snapshot"),
        "snapshot_ranges",
        "(snapshot_id IS NULL) = (kind IN ('aborted', 'gap'))",
    )

    op.add_column("leases", sa.Column("owner", sa.Text(), nullable=True))
    op.add_column(
        "api_tokens",
        sa.Column(
            "table_patterns",
            postgresql.ARRAY(sa.Text()),
            server_default=sa.text("'{}'::text[]"),
            nullable=False,
        ),
    )
    op.create_check_constraint(
        op.f("ck_api_tokens_tables_only_for_jobs"), "api_tokens", "role = 'job' OR cardinality(table_patterns) = 0"
    )

    op.execute(f"DROP FUNCTION {OLD_ISSUE_BARRIER_SIGNATURE}")
    op.execute(ISSUE_BARRIERS)


def downgrade() -> None:
    op.execute("DROP FUNCTION metaservice_issue_barriers(jsonb)")
    op.execute(PREVIOUS_ISSUE_BARRIER)
    op.drop_constraint(op.f("ck_api_tokens_tables_only_for_jobs"), "api_tokens", type_="check")
    op.drop_column("api_tokens", "table_patterns")
    op.drop_column("leases", "owner")
    op.drop_constraint(op.f("ck_snapshot_ranges_never_has_no_snapshot"), "snapshot_ranges", type_="check")
    op.drop_constraint(op.f("ck_snapshot_ranges_known_kind"), "snapshot_ranges", type_="check")
    op.execute("UPDATE snapshot_ranges SET kind = 'aborted' WHERE kind = 'gap'")
    op.create_check_constraint(
        op.f("ck_snapshot_ranges_known_kind"),
        "snapshot_ranges",
        "kind IN ('sealed', 'committed', 'idle', 'aborted', 'restored')",
    )
    op.create_check_constraint(
        op.f("ck_snapshot_ranges_aborted_has_no_snapshot"),
        "snapshot_ranges",
        "(snapshot_id IS NULL) = (kind = 'aborted')",
    )
    op.drop_index("uq_tables_name_folded", table_name="tables")
    op.drop_column("tables", "sealable")
    op.drop_constraint(op.f("ck_jobs_version_non_negative"), "jobs", type_="check")
    op.drop_column("jobs", "version")
    op.execute("DELETE FROM lineage_edges WHERE removed_at IS NOT NULL")
    op.drop_index("ix_lineage_edges_removed_after", table_name="lineage_edges")
    op.drop_index("ix_lineage_edges_added_after", table_name="lineage_edges")
    op.drop_index("ix_lineage_edges_job_id", table_name="lineage_edges")
    op.drop_index("uq_lineage_edges_current", table_name="lineage_edges")
    op.drop_index("uq_lineage_edges_one_writer", table_name="lineage_edges")
    op.create_index(
        "uq_lineage_edges_one_writer",
        "lineage_edges",
        ["table_id"],
        unique=True,
        postgresql_where=sa.text("role = 'sink'"),
    )
    op.drop_constraint(op.f("ck_lineage_edges_removed_after_added"), "lineage_edges", type_="check")
    op.drop_constraint(op.f("ck_lineage_edges_removed_together"), "lineage_edges", type_="check")
    op.drop_column("lineage_edges", "removed_at")
    op.drop_column("lineage_edges", "removed_after")
    op.drop_column("lineage_edges", "added_after")
    op.drop_constraint("pk_lineage_edges", "lineage_edges", type_="primary")
    op.drop_column("lineage_edges", "id")
    op.create_primary_key("pk_lineage_edges", "lineage_edges", ["job_id", "table_id"])


# `metaservice_issue_barrier`, which this revision replaces, as the previous revision installed it (the downgrade
# recreates it): a frozen copy (a migration never loads another).
PREVIOUS_ISSUE_BARRIER = r"""
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
