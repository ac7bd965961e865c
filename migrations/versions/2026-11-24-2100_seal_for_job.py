"""A job's `next` reports its roots and has them sealed in one allocation call, with no gather before it.

`next` with `root_snapshots` used to gather the job's state, check the reported tables against it, call the
allocator and gather again to plan on the sealed ranges: two gathers per `next`. The allocation function now
does the checks itself for a seal request that names its `job` (the job exists and is active, every reported
table is one of its current sources, as well as registered and not written by a job), finds the roots the job
reads, records only snapshots newer than the known ones, and does nothing while the job has a barrier in flight
(a repeated `next` changes nothing). The server then gathers once, after the call, and plans.

Revision ID: 2b8d4e6f1a73
Revises: 5d7e2f0a9c31
Create Date: 2026-11-24 21:00:00
"""

# ruff: noqa: E501  (the function's SQL lines are quoted as they stand in it)

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from alembic import op

revision: str = "2b8d4e6f1a73"
down_revision: str | None = "5d7e2f0a9c31"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The previous revision's function (migration 2026-11-24-1300), changed where each `old` occurs exactly once.
_CHANGES = (
    (
        '--    "when_unsealed": [table ids], "unless_after": barrier | null, "min_interval": seconds}\n',
        '--    "when_unsealed": [table ids], "unless_after": barrier | null, "min_interval": seconds, "job": name | null}\n',
    ),
    (
        "-- request of the batch), records nothing. Then, in request order:\n",
        "-- request of the batch), records nothing. A seal request naming a `job` (the job's `next` reporting its roots) is\n"
        "-- also refused when the job is unknown or inactive or a reported table is not one of its current sources; it\n"
        "-- records only snapshots newer than the known ones, seals when any root the job reads has an unsealed snapshot\n"
        "-- (its `when_unsealed` are those roots), and does nothing at all while the job has a barrier in flight.\n"
        "-- Then, in request order:\n",
    ),
    (
        "    v_kind text;\nBEGIN\n",
        "    v_kind text;\n"
        "    v_job text;\n"
        "    v_job_id bigint;\n"
        "    v_job_active boolean;\n"
        "    v_unread text[];\n"
        "BEGIN\n",
    ),
    (
        "        SELECT array_agg(k ORDER BY k) INTO v_missing\n",
        """        v_job := v_req ->> 'job';
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
""",
    ),
    (
        "            CONTINUE;\n        END IF;\n        v_ok := v_ok || true;\n",
        """            CONTINUE;
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
""",
    ),
    (
        "             WHERE t.name = r.name;\n",
        "             WHERE t.name = r.name\n"
        "               AND (v_job IS NULL OR r.snapshot_id > coalesce(t.latest_snapshot_id, -1));\n",
    ),
)


def load(filename: str) -> ModuleType:
    """A sibling migration module (migrations cannot import each other by name)."""
    path = Path(__file__).with_name(filename)
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def patched(text: str, changes: Sequence[tuple[str, str]]) -> str:
    """`text` with each (old, new) applied; each `old` must occur exactly once (the previous text is fixed)."""
    for old, new in changes:
        if text.count(old) != 1:
            raise RuntimeError(f"the previous function text changed; cannot apply: {old!r}")
        text = text.replace(old, new)
    return text


_PREVIOUS = "2026-11-24-1300_one_seal_per_batch.py"
ISSUE_BARRIERS = patched(str(load(_PREVIOUS).ISSUE_BARRIERS), _CHANGES)


def upgrade() -> None:
    op.execute(ISSUE_BARRIERS)


def downgrade() -> None:
    op.execute(load(_PREVIOUS).ISSUE_BARRIERS)
