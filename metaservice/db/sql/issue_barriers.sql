-- metaservice_issue_barriers: barrier allocation for a batch of requests (called by metaservice/db/allocator.py).
--
-- This file holds the function's current text; the database gets it only through migrations. To change it:
--   1. edit the statement below (keep CREATE OR REPLACE, so that a migration can install it over the previous one);
--   2. add a migration (migrations/versions/) that embeds a frozen copy of the new statement as `ISSUE_BARRIERS`
--      and of the previous one as `PREVIOUS_ISSUE_BARRIERS`, executing the first on upgrade and the second on
--      downgrade (as 2026-11-25-1000_allocation_probes.py does); a migration never loads this file or another
--      migration, so that what each revision installs stays fixed;
--   3. run tests/migrations/test_allocation_function.py: it fails while the newest migration's copy differs from
--      this statement, and while the function a migrated database holds differs from it.
-- Everything from the CREATE line on is the statement; these comment lines above it are not part of the copies.

CREATE OR REPLACE FUNCTION metaservice_issue_barriers(p_requests jsonb, p_floor bigint DEFAULT 0) RETURNS jsonb
LANGUAGE plpgsql VOLATILE AS $fn$
-- Serves a batch of requests (the server coalesces concurrent callers):
--   {"kind": "barrier" | "seal" | "report", "by": text, "key": text | null, "roots": {"<table>": snapshot},
--    "when_unsealed": [table ids], "unless_after": barrier | null, "min_interval": seconds, "job": name | null}
-- First every request is checked and its root snapshots are recorded, as if in request order (they only move
-- forward; an orphan becomes a root again when reported at or above its newest known snapshot). A request naming
-- an unknown table or a table a job writes, and a replay of a key already issued (or carried by an earlier
-- accepted request of the batch), records nothing. A seal request naming a `job` (the job's `next` reporting its
-- roots) is also refused when the job is unknown or inactive or a reported table is not one of its current
-- sources; it records only snapshots newer than the known ones, seals when any root the job reads has an unsealed
-- snapshot (its `when_unsealed` are those roots); while the job has a barrier in flight (a repeated `next`, whose
-- barrier and inputs are fixed) it records the newer snapshots and seals nothing, like a report. A job's report
-- of a root in a group (`tables.root_group`) records nothing: the group's ingestion reports its roots together.
-- Then, in request order:
--   report:  answers the newest known snapshots;
--   barrier: issues a barrier sealing every root's newest snapshot; a key issued before answers that barrier
--            again (`replayed`) and changes nothing;
--   seal:    issues a barrier only when a table of `when_unsealed` has a snapshot no barrier sealed, or
--            `unless_after` is given and no barrier was issued after it; never within `min_interval` seconds of
--            the newest barrier (the answer then says how long to wait).
-- Answers, in request order: {"barrier", "issued_at", "replayed", "sealed", "wait_seconds", "latest", "error"}.
-- `p_floor`: the highest barrier the calling server process has handed to any client. No barrier at or below it is
-- issued, whatever this database's clock row and clock say: after a failover that lost the unreplicated tail of an
-- asynchronous standby, the lost barriers' numbers are never issued again with other meanings.
#variable_conflict use_column
DECLARE
    v_req jsonb;
    v_reqs jsonb[];
    v_ok boolean[];
    v_record boolean[];
    v_latests jsonb[];
    v_names text[];
    v_locked bigint[];
    v_recorded jsonb;
    v_out jsonb := '[]'::jsonb;
    v_i int;
    v_start bigint;
    v_last bigint;
    v_barrier bigint;
    v_at timestamptz;
    v_head_at timestamptz;
    v_sealed jsonb;
    v_latest jsonb;
    v_need boolean;
    v_wait double precision;
    v_key text;
    v_kind text;
BEGIN
    -- Lock order of every transaction that takes the clock (docs/design.md, "Lock order"): jobs, tables by id, then
    -- the clock, and after it no row not locked before. The tables locked are those the batch reports and every
    -- seal candidate, and a seal touches no other (`v_locked`): it opens ranges of candidates (the foreign key
    -- check takes their row), and taking one after the clock, while another allocation held it and waited for the
    -- clock, deadlocked two servers' allocations. A table marked meanwhile is sealed by the next barrier. FOR NO
    -- KEY UPDATE is what the updates below need (no key of `tables` changes): a foreign key check's KEY SHARE on
    -- these rows, by any transaction, never waits for an allocation.
    SELECT array_agg(DISTINCT n.k) INTO v_names
      FROM jsonb_array_elements(p_requests) r CROSS JOIN LATERAL jsonb_object_keys(coalesce(r -> 'roots', '{}')) n(k);
    SELECT coalesce(array_agg(l.id), '{}') INTO v_locked
      FROM (SELECT t.id FROM tables t WHERE t.name = ANY(v_names) OR t.seal_candidate ORDER BY t.id
            FOR NO KEY UPDATE) l;
    SELECT c.last_barrier INTO v_start FROM barrier_clock c WHERE c.id = 1 FOR UPDATE;
    v_last := v_start;

    -- Phase 1: check every request (one statement for the batch), then record the accepted ones' snapshots.
    -- `verdict`: 'replay' | 'error' | 'in_flight' (a repeated `next`: its barrier and inputs are fixed) | 'record'.
    -- Lookups are lateral (`OFFSET 0` keeps them so): one index probe per name, whatever the catalog's size.
    WITH req AS (
        SELECT e.value AS r, e.ordinality AS i, e.value ->> 'key' AS key, e.value ->> 'job' AS job,
               coalesce(e.value -> 'roots', '{}'::jsonb) AS roots, j.id AS job_id, j.is_active
          FROM jsonb_array_elements(p_requests) WITH ORDINALITY AS e
          LEFT JOIN LATERAL (SELECT j.id, j.is_active FROM jobs j WHERE j.name = e.value ->> 'job' OFFSET 0) j ON true
    ), named AS (
        SELECT q.i, n.k, t.id AS table_id, t.latest_snapshot_id AS latest, w.name AS writer,
               q.job_id IS NULL OR EXISTS (SELECT 1 FROM lineage_edges e
                                            WHERE e.job_id = q.job_id AND e.table_id = t.id
                                              AND e.role = 'source' AND e.removed_at IS NULL OFFSET 0) AS read
          FROM req q CROSS JOIN LATERAL jsonb_object_keys(q.roots) AS n(k)
          LEFT JOIN LATERAL (SELECT t.id, t.latest_snapshot_id FROM tables t WHERE t.name = n.k OFFSET 0) t ON true
          LEFT JOIN LATERAL (SELECT wj.name FROM lineage_edges e JOIN jobs wj ON wj.id = e.job_id
                              WHERE e.table_id = t.id AND e.role = 'sink' AND e.removed_at IS NULL OFFSET 0) w ON true
    ), per_request AS (
        SELECT n.i,
               array_agg(n.k ORDER BY n.k) FILTER (WHERE n.table_id IS NULL) AS missing,
               jsonb_object_agg(n.k, n.writer) FILTER (WHERE n.writer IS NOT NULL) AS written,
               array_agg(n.k ORDER BY n.k) FILTER (WHERE NOT n.read) AS unread,
               jsonb_object_agg(n.k, n.latest) FILTER (WHERE n.table_id IS NOT NULL) AS latest
          FROM named n GROUP BY n.i
    ), judged AS (
        SELECT q.i, q.r, q.key, q.job, q.job_id, coalesce(p.latest, '{}'::jsonb) AS latest,
               q.key IS NOT NULL AND EXISTS (SELECT 1 FROM barriers b WHERE b.request_key = q.key OFFSET 0) AS issued,
               q.job_id IS NOT NULL
                   AND EXISTS (SELECT 1 FROM job_runs r WHERE r.job_id = q.job_id AND r.status = 'in_flight' OFFSET 0)
                   AS in_flight,
               CASE WHEN q.job IS NOT NULL AND q.job_id IS NULL
                    THEN jsonb_build_object('code', 'job_not_found', 'job', q.job)
                    WHEN q.job IS NOT NULL AND NOT q.is_active
                    THEN jsonb_build_object('code', 'job_inactive', 'job', q.job)
                    WHEN p.missing IS NOT NULL
                    THEN jsonb_build_object('code', 'not_found', 'tables', to_jsonb(p.missing))
                    WHEN p.written IS NOT NULL THEN jsonb_build_object('code', 'not_root', 'writers', p.written)
                    WHEN p.unread IS NOT NULL
                    THEN jsonb_build_object('code', 'not_source', 'job', q.job, 'tables', to_jsonb(p.unread)) END AS error
          FROM req q LEFT JOIN per_request p ON p.i = q.i
    ), verdicts AS (
        SELECT d.*,
               CASE WHEN d.key IS NOT NULL
                         AND (d.issued OR coalesce(bool_or(d.error IS NULL AND NOT d.in_flight)
                                                   OVER (PARTITION BY d.key ORDER BY d.i
                                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), false))
                    THEN 'replay'
                    WHEN d.error IS NOT NULL THEN 'error'
                    WHEN d.in_flight THEN 'in_flight'
                    ELSE 'record' END AS verdict
          FROM judged d
    )
    SELECT array_agg(v.verdict <> 'error' ORDER BY v.i), array_agg(v.verdict IN ('record', 'in_flight') ORDER BY v.i),
           array_agg(CASE WHEN v.verdict IN ('record', 'replay', 'in_flight') THEN v.latest ELSE '{}'::jsonb END
                     ORDER BY v.i),
           array_agg(CASE v.verdict
                         WHEN 'error' THEN v.r || jsonb_build_object('error', v.error)
                         WHEN 'in_flight' THEN v.r || jsonb_build_object('kind', 'report')
                         WHEN 'record' THEN
                             CASE WHEN v.job_id IS NULL THEN v.r
                                  ELSE v.r || jsonb_build_object('when_unsealed', (
                                      SELECT coalesce(jsonb_agg(e.table_id), '[]'::jsonb) FROM lineage_edges e
                                       WHERE e.job_id = v.job_id AND e.role = 'source' AND e.removed_at IS NULL
                                         AND NOT EXISTS (SELECT 1 FROM lineage_edges w
                                                          WHERE w.table_id = e.table_id AND w.role = 'sink'
                                                            AND w.removed_at IS NULL))) END
                         ELSE v.r END
                     ORDER BY v.i)
      INTO v_ok, v_record, v_latests, v_reqs
      FROM verdicts v;

    -- Every accepted report at once: a table's newest snapshot is the greatest reported; a job's report counts
    -- only above the known one (see the migration 2026-11-25-0900 for why this equals recording in order).
    WITH top AS (
        SELECT s.key AS name, max(s.value::bigint) AS top,
               max(s.value::bigint) FILTER (WHERE u.r ->> 'job' IS NULL) AS top_any,
               max(s.value::bigint) FILTER (WHERE u.r ->> 'job' IS NOT NULL) AS top_job
          FROM unnest(v_reqs) WITH ORDINALITY AS u(r, i)
          CROSS JOIN LATERAL jsonb_each_text(u.r -> 'roots') AS s
         WHERE v_record[u.i]
         GROUP BY s.key
    ), recorded AS (
        -- A root of a group (`tables.root_group`) takes no job's report: its ingestion reports the group's
        -- snapshots together, so that no barrier seals a part of it.
        UPDATE tables t
           SET latest_snapshot_id = greatest(coalesce(t.latest_snapshot_id, -1),
                                             CASE WHEN t.root_group IS NULL THEN r.top ELSE r.top_any END),
               latest_snapshot_at = now(),
               sealable = t.sealable OR coalesce(r.top_any >= coalesce(t.latest_snapshot_id, -1), false)
                                     OR (t.root_group IS NULL
                                         AND coalesce(r.top_job > coalesce(t.latest_snapshot_id, -1), false)),
               seal_candidate = true
          FROM top r
         WHERE t.name = r.name AND t.name = ANY(ARRAY(SELECT name FROM top))
           AND (r.top_any IS NOT NULL
                OR (t.root_group IS NULL AND r.top_job > coalesce(t.latest_snapshot_id, -1)))
        RETURNING t.name, t.latest_snapshot_id
    )
    SELECT coalesce(jsonb_object_agg(name, latest_snapshot_id), '{}'::jsonb) INTO v_recorded FROM recorded;

    -- The newest snapshot of every table an answer names: recorded now, or as it was (phase 2 changes none).
    IF v_recorded <> '{}'::jsonb THEN
        SELECT array_agg((SELECT coalesce(jsonb_object_agg(l.key, coalesce(v_recorded -> l.key, l.value)), '{}'::jsonb)
                            FROM jsonb_each(u.latest) l) ORDER BY u.i)
          INTO v_latests
          FROM unnest(v_latests) WITH ORDINALITY AS u(latest, i);
    END IF;

    -- Phase 2: answer in order, issuing barriers.
    FOR v_i IN 1 .. coalesce(array_length(v_reqs, 1), 0) LOOP
        v_req := v_reqs[v_i];
        v_kind := v_req ->> 'kind';
        v_key := v_req ->> 'key';
        v_barrier := NULL; v_at := NULL; v_sealed := '{}'::jsonb; v_wait := NULL; v_latest := v_latests[v_i];

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
                     WHERE t.id = ANY(ARRAY(SELECT value::bigint
                                            FROM jsonb_array_elements_text(coalesce(v_req -> 'when_unsealed', '[]'))))
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

        v_barrier := greatest(v_last + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint,
                              coalesce(p_floor, 0) + 1);
        v_at := clock_timestamp();
        INSERT INTO barriers (barrier, issued_at, issued_by, request_key)
        VALUES (v_barrier, v_at, v_req ->> 'by', v_key);

        -- Seal: every sealable root whose newest known snapshot differs from its open range gets a new open
        -- range from this barrier; the previous open range ends at the barrier before it.
        WITH changed AS (
            SELECT t.id, t.name, t.latest_snapshot_id, o.id AS open_id
              FROM tables t
              LEFT JOIN snapshot_ranges o ON o.table_id = t.id AND o.last_barrier IS NULL
             WHERE t.seal_candidate AND t.id = ANY(v_locked) AND t.sealable AND t.latest_snapshot_id IS NOT NULL
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
        -- Every marked table this call locked now holds its newest snapshot in its open range, or needs no seal.
        -- Another keeps its mark (a rollback marking its scope before it takes the clock, a report committed
        -- since the lock): waiting for it here, after the clock, would lock in the wrong order.
        UPDATE tables SET seal_candidate = false WHERE id = ANY(v_locked) AND seal_candidate;

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
