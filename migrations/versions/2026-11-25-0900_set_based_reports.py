"""The allocation function checks and records a batch's reports in a few statements, not nine per request.

In the next+commit cycle every `next` reports its root's snapshot, so every request of a coalesced batch went
through phase 1's loop: a statement each for the key, the job, unknown tables, written tables, unread tables, a
barrier in flight, the roots the job reads and the recorded snapshots, and one more in phase 2 for the newest
snapshots it answers. This revision checks every request in one statement over the whole batch, records every
accepted snapshot in one UPDATE, and takes the newest snapshots it answers from what the check read and the
UPDATE returned; phase 2 (the barriers) is unchanged. The function called directly on the cycle benchmark's
database (100 jobs), a batch of N `next` reports, medians of 300 alternating calls: N = 1 1.16 ms either way,
N = 7 3.16 -> 2.38 ms, N = 20 7.09 -> 4.76 ms.

The contract and the answers are the same (tests/concurrency/test_allocation_equivalence.py runs both functions on
drawn batches and compares answers, tables, ranges and barriers):
- Checks are per request and read nothing phase 1 writes (jobs, edges, runs, barriers, which tables exist), so
  they may run together. The one dependency between requests is the key: a request is a replay when its key was
  issued before or an earlier request of the batch carrying it was accepted (checked, and not a `next` of a job
  with a barrier in flight), which a window over the batch in request order computes.
- Recording in request order is the same as recording the batch at once: a table's newest snapshot becomes the
  greatest reported (a job's snapshot is recorded only when newer, which `greatest` makes no difference to), and
  it becomes sealable when an unconditional report is at or above, or a job's above, the snapshot it had before
  the batch (a later report can only be compared with a newer one, which an earlier report of the batch at or
  above the old one made true already). A table only a job reported, at or below what is known, is untouched.
- Every lookup by name is a lateral index probe (`OFFSET 0` keeps the planner from turning it into a hash join
  over the whole catalog, which the generic plan's estimate of 100 keys per request would otherwise choose).

Revision ID: 8c4a2e6d0f15
Revises: 6e1f3a5b7c92
Create Date: 2026-11-25 09:00:00
"""

# ruff: noqa: E501  (the function's SQL lines are quoted as they stand in it)

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "8c4a2e6d0f15"
down_revision: str | None = "6e1f3a5b7c92"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The previous revision's function (migration 2026-11-24-2200) with its comment's first part and its DECLARE and
# phase 1 replaced (`_between`: from a marker that occurs once up to the next), and phase 2 taking the newest
# snapshots from phase 1 (`patched`: each `old` occurs exactly once).
_COMMENT = r"""-- First every request is checked and its root snapshots are recorded, as if in request order (they only move
-- forward; an orphan becomes a root again when reported at or above its newest known snapshot). A request naming
-- an unknown table or a table a job writes, and a replay of a key already issued (or carried by an earlier
-- accepted request of the batch), records nothing. A seal request naming a `job` (the job's `next` reporting its
-- roots) is also refused when the job is unknown or inactive or a reported table is not one of its current
-- sources; it records only snapshots newer than the known ones, seals when any root the job reads has an unsealed
-- snapshot (its `when_unsealed` are those roots), and does nothing at all while the job has a barrier in flight.
"""

_DECLARE_AND_PHASE_1 = r"""DECLARE
    v_req jsonb;
    v_reqs jsonb[];
    v_ok boolean[];
    v_record boolean[];
    v_latests jsonb[];
    v_names text[];
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
    -- Lock order for everything that writes tables rows and the clock: tables by id, then the clock.
    SELECT array_agg(DISTINCT n.k) INTO v_names
      FROM jsonb_array_elements(p_requests) r CROSS JOIN LATERAL jsonb_object_keys(coalesce(r -> 'roots', '{}')) n(k);
    PERFORM 1 FROM tables t WHERE t.name = ANY(v_names) ORDER BY t.id FOR UPDATE;
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
                                              AND e.role = 'source' AND e.removed_at IS NULL) AS read
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
               q.key IS NOT NULL AND EXISTS (SELECT 1 FROM barriers b WHERE b.request_key = q.key) AS issued,
               q.job_id IS NOT NULL
                   AND EXISTS (SELECT 1 FROM job_runs r WHERE r.job_id = q.job_id AND r.status = 'in_flight')
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
    SELECT array_agg(v.verdict <> 'error' ORDER BY v.i), array_agg(v.verdict = 'record' ORDER BY v.i),
           array_agg(CASE WHEN v.verdict IN ('record', 'replay') THEN v.latest ELSE '{}'::jsonb END ORDER BY v.i),
           array_agg(CASE v.verdict
                         WHEN 'error' THEN v.r || jsonb_build_object('error', v.error)
                         WHEN 'in_flight' THEN v.r || jsonb_build_object('kind', 'report', 'roots', '{}'::jsonb)
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
        UPDATE tables t
           SET latest_snapshot_id = greatest(coalesce(t.latest_snapshot_id, -1), r.top),
               latest_snapshot_at = now(),
               sealable = t.sealable OR coalesce(r.top_any >= coalesce(t.latest_snapshot_id, -1), false)
                                     OR coalesce(r.top_job > coalesce(t.latest_snapshot_id, -1), false),
               seal_candidate = true
          FROM top r
         WHERE t.name = r.name
           AND (r.top_any IS NOT NULL OR r.top_job > coalesce(t.latest_snapshot_id, -1))
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

"""

_CHANGES = (
    (
        "v_wait := NULL; v_latest := '{}'::jsonb;\n",
        "v_wait := NULL; v_latest := v_latests[v_i];\n",
    ),
    (
        """        IF v_req -> 'roots' IS NOT NULL AND v_req -> 'roots' <> '{}'::jsonb THEN
            SELECT coalesce(jsonb_object_agg(t.name, t.latest_snapshot_id), '{}'::jsonb) INTO v_latest
              FROM tables t WHERE t.name IN (SELECT jsonb_object_keys(v_req -> 'roots'));
        END IF;

""",
        "",
    ),
)


def _previous() -> ModuleType:
    """Migration 2026-11-24-2200, which defines the previous function (and loads 2100's `load` and `patched`)."""
    path = Path(__file__).with_name("2026-11-24-2200_seal_candidates.py")  # migrations cannot import each other
    spec = importlib.util.spec_from_file_location("seal_candidates", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _between(text: str, start: str, end: str, new: str) -> str:
    """`text` with the part from `start` up to (not including) the `end` after it replaced by `new`."""
    if text.count(start) != 1 or text.count(end) != 1 or text.index(end) < text.index(start):
        raise RuntimeError(f"the previous function text changed; cannot replace from {start!r} to {end!r}")
    return text[: text.index(start)] + new + text[text.index(end) :]


def issue_barriers() -> str:
    """This revision's `metaservice_issue_barriers`."""
    previous = _previous()
    text = _between(previous.issue_barriers(), "-- First", "-- Then, in request order:\n", _COMMENT)
    text = _between(text, "DECLARE\n", "    -- Phase 2: answer in order, issuing barriers.\n", _DECLARE_AND_PHASE_1)
    return str(previous._previous().patched(text, _CHANGES))


def upgrade() -> None:
    op.execute(issue_barriers())


def downgrade() -> None:
    op.execute(_previous().issue_barriers())
