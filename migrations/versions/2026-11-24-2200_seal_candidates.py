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

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "6e1f3a5b7c92"
down_revision: str | None = "2b8d4e6f1a73"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tables", sa.Column("seal_candidate", sa.Boolean(), server_default=sa.text("true"), nullable=False))
    op.create_index("ix_tables_seal_candidate", "tables", ["id"], postgresql_where=sa.text("seal_candidate"))
    op.execute(ISSUE_BARRIERS)


def downgrade() -> None:
    op.execute(PREVIOUS_ISSUE_BARRIERS)
    op.drop_index("ix_tables_seal_candidate", table_name="tables")
    op.drop_column("tables", "seal_candidate")


# Frozen copies of `metaservice_issue_barriers`: the text this revision installs and the text its downgrade
# restores (the previous revision's). A migration never loads another, and a later change of the current text
# (metaservice/db/sql/issue_barriers.sql) must not change what this revision installs.
ISSUE_BARRIERS = r"""
CREATE OR REPLACE FUNCTION metaservice_issue_barriers(p_requests jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $fn$
-- Serves a batch of requests (the server coalesces concurrent callers):
--   {"kind": "barrier" | "seal" | "report", "by": text, "key": text | null, "roots": {"<table>": snapshot},
--    "when_unsealed": [table ids], "unless_after": barrier | null, "min_interval": seconds, "job": name | null}
-- First, in request order, every request is checked and its root snapshots are recorded (they only move
-- forward; an orphan becomes a root again when reported at or above its newest known snapshot). A request naming
-- an unknown table or a table a job writes, and a replay of a key already issued (or carried by an earlier
-- request of the batch), records nothing. A seal request naming a `job` (the job's `next` reporting its roots) is
-- also refused when the job is unknown or inactive or a reported table is not one of its current sources; it
-- records only snapshots newer than the known ones, seals when any root the job reads has an unsealed snapshot
-- (its `when_unsealed` are those roots), and does nothing at all while the job has a barrier in flight.
-- Then, in request order:
--   report:  answers the newest known snapshots;
--   barrier: issues a barrier sealing every root's newest snapshot; a key issued before answers that barrier
--            again (`replayed`) and changes nothing;
--   seal:    issues a barrier only when a table of `when_unsealed` has a snapshot no barrier sealed, or
--            `unless_after` is given and no barrier was issued after it; never within `min_interval` seconds of
--            the newest barrier (the answer then says how long to wait).
-- Answers, in request order: {"barrier", "issued_at", "replayed", "sealed", "wait_seconds", "latest", "error"}.
#variable_conflict use_column
DECLARE
    v_req jsonb;
    v_reqs jsonb[];
    v_ok boolean[] := '{}';
    v_keys text[] := '{}';
    v_out jsonb := '[]'::jsonb;
    v_i int;
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
    v_job text;
    v_job_id bigint;
    v_job_active boolean;
    v_unread text[];
BEGIN
    -- Lock order for everything that writes tables rows and the clock: tables by id, then the clock.
    PERFORM 1 FROM tables t
     WHERE t.name IN (SELECT jsonb_object_keys(coalesce(r -> 'roots', '{}')) FROM jsonb_array_elements(p_requests) r)
     ORDER BY t.id FOR UPDATE;
    SELECT c.last_barrier INTO v_start FROM barrier_clock c WHERE c.id = 1 FOR UPDATE;
    v_last := v_start;
    SELECT coalesce(array_agg(value ORDER BY ordinality), '{}') INTO v_reqs
      FROM jsonb_array_elements(p_requests) WITH ORDINALITY;

    -- Phase 1: check every request, record the root snapshots of those that may change something.
    FOR v_i IN 1 .. coalesce(array_length(v_reqs, 1), 0) LOOP
        v_req := v_reqs[v_i];
        v_key := v_req ->> 'key';
        IF v_key IS NOT NULL AND (v_key = ANY(v_keys) OR EXISTS (SELECT 1 FROM barriers b WHERE b.request_key = v_key))
        THEN
            v_ok := v_ok || true;  -- a replay: answered in phase 2, records nothing
            CONTINUE;
        END IF;
        v_job := v_req ->> 'job';
        IF v_job IS NOT NULL THEN
            v_job_id := NULL;
            SELECT j.id, j.is_active INTO v_job_id, v_job_active FROM jobs j WHERE j.name = v_job;
            IF v_job_id IS NULL OR NOT v_job_active THEN
                v_ok := v_ok || false;
                v_reqs[v_i] := v_req || jsonb_build_object('error', jsonb_build_object(
                    'code', CASE WHEN v_job_id IS NULL THEN 'job_not_found' ELSE 'job_inactive' END, 'job', v_job));
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
            v_ok := v_ok || false;
            v_reqs[v_i] := v_req || jsonb_build_object('error',
                CASE WHEN v_missing IS NOT NULL
                     THEN jsonb_build_object('code', 'not_found', 'tables', to_jsonb(v_missing))
                     ELSE jsonb_build_object('code', 'not_root', 'writers', v_written) END);
            CONTINUE;
        END IF;
        IF v_job IS NOT NULL THEN
            SELECT array_agg(k ORDER BY k) INTO v_unread
              FROM jsonb_object_keys(coalesce(v_req -> 'roots', '{}')) k
             WHERE NOT EXISTS (SELECT 1 FROM lineage_edges e JOIN tables t ON t.id = e.table_id
                                WHERE e.job_id = v_job_id AND e.role = 'source' AND e.removed_at IS NULL
                                  AND t.name = k);
            IF v_unread IS NOT NULL THEN
                v_ok := v_ok || false;
                v_reqs[v_i] := v_req || jsonb_build_object('error',
                    jsonb_build_object('code', 'not_source', 'job', v_job, 'tables', to_jsonb(v_unread)));
                CONTINUE;
            END IF;
            IF EXISTS (SELECT 1 FROM job_runs r WHERE r.job_id = v_job_id AND r.status = 'in_flight') THEN
                v_ok := v_ok || true;  -- a repeated `next`: its barrier and inputs are fixed, nothing to record
                v_reqs[v_i] := v_req || jsonb_build_object('kind', 'report', 'roots', '{}'::jsonb);
                CONTINUE;
            END IF;
            v_req := v_req || jsonb_build_object('when_unsealed', (
                SELECT coalesce(jsonb_agg(e.table_id), '[]'::jsonb) FROM lineage_edges e
                 WHERE e.job_id = v_job_id AND e.role = 'source' AND e.removed_at IS NULL
                   AND NOT EXISTS (SELECT 1 FROM lineage_edges w
                                    WHERE w.table_id = e.table_id AND w.role = 'sink' AND w.removed_at IS NULL)));
            v_reqs[v_i] := v_req;
        END IF;
        v_ok := v_ok || true;
        IF v_key IS NOT NULL THEN
            v_keys := v_keys || v_key;
        END IF;
        IF v_req -> 'roots' IS NOT NULL AND v_req -> 'roots' <> '{}'::jsonb THEN
            UPDATE tables t
               SET latest_snapshot_id = greatest(coalesce(t.latest_snapshot_id, -1), r.snapshot_id),
                   latest_snapshot_at = now(),
                   sealable = t.sealable OR r.snapshot_id >= coalesce(t.latest_snapshot_id, -1),
                   seal_candidate = true
              FROM (SELECT key AS name, value::bigint AS snapshot_id
                      FROM jsonb_each_text(v_req -> 'roots')) r
             WHERE t.name = r.name
               AND (v_job IS NULL OR r.snapshot_id > coalesce(t.latest_snapshot_id, -1));
        END IF;
    END LOOP;

    -- Phase 2: answer in order, issuing barriers.
    FOR v_i IN 1 .. coalesce(array_length(v_reqs, 1), 0) LOOP
        v_req := v_reqs[v_i];
        v_kind := v_req ->> 'kind';
        v_key := v_req ->> 'key';
        v_barrier := NULL; v_at := NULL; v_sealed := '{}'::jsonb; v_wait := NULL; v_latest := '{}'::jsonb;

        IF NOT v_ok[v_i] THEN
            v_out := v_out || jsonb_build_array(jsonb_build_object(
                'barrier', NULL, 'issued_at', NULL, 'replayed', false, 'sealed', '{}'::jsonb, 'wait_seconds', NULL,
                'latest', '{}'::jsonb, 'error', v_req -> 'error'));
            CONTINUE;
        END IF;

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

        IF v_req -> 'roots' IS NOT NULL AND v_req -> 'roots' <> '{}'::jsonb THEN
            SELECT coalesce(jsonb_object_agg(t.name, t.latest_snapshot_id), '{}'::jsonb) INTO v_latest
              FROM tables t WHERE t.name IN (SELECT jsonb_object_keys(v_req -> 'roots'));
        END IF;

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
             WHERE t.seal_candidate AND t.sealable AND t.latest_snapshot_id IS NOT NULL
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
        -- Every marked table now holds its newest snapshot in its open range, or needs no seal. A row another
        -- transaction holds (a rollback marking its scope before it takes the clock) keeps its mark: waiting
        -- for it here, after the clock, would lock in the wrong order.
        UPDATE tables SET seal_candidate = false
         WHERE id IN (SELECT id FROM tables WHERE seal_candidate ORDER BY id FOR UPDATE SKIP LOCKED);

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

PREVIOUS_ISSUE_BARRIERS = r"""
CREATE OR REPLACE FUNCTION metaservice_issue_barriers(p_requests jsonb) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $fn$
-- Serves a batch of requests (the server coalesces concurrent callers):
--   {"kind": "barrier" | "seal" | "report", "by": text, "key": text | null, "roots": {"<table>": snapshot},
--    "when_unsealed": [table ids], "unless_after": barrier | null, "min_interval": seconds, "job": name | null}
-- First, in request order, every request is checked and its root snapshots are recorded (they only move
-- forward; an orphan becomes a root again when reported at or above its newest known snapshot). A request naming
-- an unknown table or a table a job writes, and a replay of a key already issued (or carried by an earlier
-- request of the batch), records nothing. A seal request naming a `job` (the job's `next` reporting its roots) is
-- also refused when the job is unknown or inactive or a reported table is not one of its current sources; it
-- records only snapshots newer than the known ones, seals when any root the job reads has an unsealed snapshot
-- (its `when_unsealed` are those roots), and does nothing at all while the job has a barrier in flight.
-- Then, in request order:
--   report:  answers the newest known snapshots;
--   barrier: issues a barrier sealing every root's newest snapshot; a key issued before answers that barrier
--            again (`replayed`) and changes nothing;
--   seal:    issues a barrier only when a table of `when_unsealed` has a snapshot no barrier sealed, or
--            `unless_after` is given and no barrier was issued after it; never within `min_interval` seconds of
--            the newest barrier (the answer then says how long to wait).
-- Answers, in request order: {"barrier", "issued_at", "replayed", "sealed", "wait_seconds", "latest", "error"}.
#variable_conflict use_column
DECLARE
    v_req jsonb;
    v_reqs jsonb[];
    v_ok boolean[] := '{}';
    v_keys text[] := '{}';
    v_out jsonb := '[]'::jsonb;
    v_i int;
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
    v_job text;
    v_job_id bigint;
    v_job_active boolean;
    v_unread text[];
BEGIN
    -- Lock order for everything that writes tables rows and the clock: tables by id, then the clock.
    PERFORM 1 FROM tables t
     WHERE t.name IN (SELECT jsonb_object_keys(coalesce(r -> 'roots', '{}')) FROM jsonb_array_elements(p_requests) r)
     ORDER BY t.id FOR UPDATE;
    SELECT c.last_barrier INTO v_start FROM barrier_clock c WHERE c.id = 1 FOR UPDATE;
    v_last := v_start;
    SELECT coalesce(array_agg(value ORDER BY ordinality), '{}') INTO v_reqs
      FROM jsonb_array_elements(p_requests) WITH ORDINALITY;

    -- Phase 1: check every request, record the root snapshots of those that may change something.
    FOR v_i IN 1 .. coalesce(array_length(v_reqs, 1), 0) LOOP
        v_req := v_reqs[v_i];
        v_key := v_req ->> 'key';
        IF v_key IS NOT NULL AND (v_key = ANY(v_keys) OR EXISTS (SELECT 1 FROM barriers b WHERE b.request_key = v_key))
        THEN
            v_ok := v_ok || true;  -- a replay: answered in phase 2, records nothing
            CONTINUE;
        END IF;
        v_job := v_req ->> 'job';
        IF v_job IS NOT NULL THEN
            v_job_id := NULL;
            SELECT j.id, j.is_active INTO v_job_id, v_job_active FROM jobs j WHERE j.name = v_job;
            IF v_job_id IS NULL OR NOT v_job_active THEN
                v_ok := v_ok || false;
                v_reqs[v_i] := v_req || jsonb_build_object('error', jsonb_build_object(
                    'code', CASE WHEN v_job_id IS NULL THEN 'job_not_found' ELSE 'job_inactive' END, 'job', v_job));
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
            v_ok := v_ok || false;
            v_reqs[v_i] := v_req || jsonb_build_object('error',
                CASE WHEN v_missing IS NOT NULL
                     THEN jsonb_build_object('code', 'not_found', 'tables', to_jsonb(v_missing))
                     ELSE jsonb_build_object('code', 'not_root', 'writers', v_written) END);
            CONTINUE;
        END IF;
        IF v_job IS NOT NULL THEN
            SELECT array_agg(k ORDER BY k) INTO v_unread
              FROM jsonb_object_keys(coalesce(v_req -> 'roots', '{}')) k
             WHERE NOT EXISTS (SELECT 1 FROM lineage_edges e JOIN tables t ON t.id = e.table_id
                                WHERE e.job_id = v_job_id AND e.role = 'source' AND e.removed_at IS NULL
                                  AND t.name = k);
            IF v_unread IS NOT NULL THEN
                v_ok := v_ok || false;
                v_reqs[v_i] := v_req || jsonb_build_object('error',
                    jsonb_build_object('code', 'not_source', 'job', v_job, 'tables', to_jsonb(v_unread)));
                CONTINUE;
            END IF;
            IF EXISTS (SELECT 1 FROM job_runs r WHERE r.job_id = v_job_id AND r.status = 'in_flight') THEN
                v_ok := v_ok || true;  -- a repeated `next`: its barrier and inputs are fixed, nothing to record
                v_reqs[v_i] := v_req || jsonb_build_object('kind', 'report', 'roots', '{}'::jsonb);
                CONTINUE;
            END IF;
            v_req := v_req || jsonb_build_object('when_unsealed', (
                SELECT coalesce(jsonb_agg(e.table_id), '[]'::jsonb) FROM lineage_edges e
                 WHERE e.job_id = v_job_id AND e.role = 'source' AND e.removed_at IS NULL
                   AND NOT EXISTS (SELECT 1 FROM lineage_edges w
                                    WHERE w.table_id = e.table_id AND w.role = 'sink' AND w.removed_at IS NULL)));
            v_reqs[v_i] := v_req;
        END IF;
        v_ok := v_ok || true;
        IF v_key IS NOT NULL THEN
            v_keys := v_keys || v_key;
        END IF;
        IF v_req -> 'roots' IS NOT NULL AND v_req -> 'roots' <> '{}'::jsonb THEN
            UPDATE tables t
               SET latest_snapshot_id = greatest(coalesce(t.latest_snapshot_id, -1), r.snapshot_id),
                   latest_snapshot_at = now(),
                   sealable = t.sealable OR r.snapshot_id >= coalesce(t.latest_snapshot_id, -1)
              FROM (SELECT key AS name, value::bigint AS snapshot_id
                      FROM jsonb_each_text(v_req -> 'roots')) r
             WHERE t.name = r.name
               AND (v_job IS NULL OR r.snapshot_id > coalesce(t.latest_snapshot_id, -1));
        END IF;
    END LOOP;

    -- Phase 2: answer in order, issuing barriers.
    FOR v_i IN 1 .. coalesce(array_length(v_reqs, 1), 0) LOOP
        v_req := v_reqs[v_i];
        v_kind := v_req ->> 'kind';
        v_key := v_req ->> 'key';
        v_barrier := NULL; v_at := NULL; v_sealed := '{}'::jsonb; v_wait := NULL; v_latest := '{}'::jsonb;

        IF NOT v_ok[v_i] THEN
            v_out := v_out || jsonb_build_array(jsonb_build_object(
                'barrier', NULL, 'issued_at', NULL, 'replayed', false, 'sealed', '{}'::jsonb, 'wait_seconds', NULL,
                'latest', '{}'::jsonb, 'error', v_req -> 'error'));
            CONTINUE;
        END IF;

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

        IF v_req -> 'roots' IS NOT NULL AND v_req -> 'roots' <> '{}'::jsonb THEN
            SELECT coalesce(jsonb_object_agg(t.name, t.latest_snapshot_id), '{}'::jsonb) INTO v_latest
              FROM tables t WHERE t.name IN (SELECT jsonb_object_keys(v_req -> 'roots'));
        END IF;

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
