"""The invariant behind the seal's marks (migration 2026-11-24-2200), read straight from the database."""

from __future__ import annotations

import psycopg

# Tables a barrier would seal now (the seal's own predicate, over every table) that carry no mark.
_UNMARKED = """
    SELECT t.name FROM tables t
      LEFT JOIN snapshot_ranges o ON o.table_id = t.id AND o.last_barrier IS NULL
     WHERE NOT t.seal_candidate AND t.sealable AND t.latest_snapshot_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM lineage_edges e
                        WHERE e.table_id = t.id AND e.role = 'sink' AND e.removed_at IS NULL)
       AND (o.id IS NULL OR o.snapshot_id IS DISTINCT FROM t.latest_snapshot_id)
     ORDER BY t.name
"""


def unmarked_tables_needing_a_seal(database_url: str) -> list[str]:
    """Roots whose newest snapshot no barrier sealed although nothing marks them: the next seal would miss them."""
    with psycopg.connect(database_url) as conn:
        return [str(row[0]) for row in conn.execute(_UNMARKED).fetchall()]
