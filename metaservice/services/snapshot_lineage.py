"""Snapshot lineage: the run that produced a table's snapshot and the input snapshots it read, recursively.

Every committed run records the snapshot of each input it was handed (`job_runs.inputs`), and the range that
first held a snapshot names the job that committed it, so the answer is exact, not inferred from the current
lineage: a writer that handed its table over, or a job since retired and revived, still shows as the producer of
the snapshots it committed. One recursive statement fetches every (table, snapshot) once; the answer is the tree
built from them (a snapshot read by two runs appears under both), cut at `depth` levels and at `MAX_ENTRIES`
entries, each cut marked `truncated`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict

from metaservice.db.database import Connection, Database
from metaservice.db.transaction import in_transaction
from metaservice.errors import NotFound
from metaservice.repositories import history
from metaservice.repositories import tables as table_rows
from metaservice.repositories.history import SnapshotNode

DEFAULT_DEPTH, MAX_DEPTH = 10, 50
MAX_ENTRIES = 10_000


class SnapshotLineageData(TypedDict):
    table: str
    snapshot_id: int
    job: str | None
    barrier: int | None
    started_at: datetime | None
    finished_at: datetime | None
    inputs: list[SnapshotLineageData]
    truncated: bool


async def snapshot_lineage(db: Database, *, table: str, snapshot_id: int, depth: int) -> SnapshotLineageData:
    """The lineage of `table`'s snapshot `snapshot_id`; 404 for an unknown table or a snapshot it never held."""

    async def work(s: Connection) -> SnapshotLineageData:
        row = await table_rows.get(s, name=table)
        if row is None:
            raise NotFound(f"table {table!r} is not registered", table=table)
        nodes = await history.snapshot_lineage(s, table_id=row.id, snapshot_id=snapshot_id, depth=depth)
        by_key = {(n.table, n.snapshot_id): n for n in nodes}
        top = by_key.get((table, snapshot_id))
        # a root's newest report is known before a barrier seals it
        if top is None or (top.barrier is None and row.latest_snapshot_id != snapshot_id):
            raise NotFound(f"table {table!r} never held snapshot {snapshot_id}", table=table, snapshot_id=snapshot_id)
        return _Tree(by_key, depth).build(top, 0)

    return await in_transaction(db, work, isolation="REPEATABLE READ", read_only=True)


class _Tree:
    def __init__(self, by_key: dict[tuple[str, int], SnapshotNode], depth: int) -> None:
        self.by_key = by_key
        self.depth = depth
        self.left = MAX_ENTRIES

    def build(self, node: SnapshotNode, level: int) -> SnapshotLineageData:
        self.left -= 1
        entry: SnapshotLineageData = {
            "table": node.table,
            "snapshot_id": node.snapshot_id,
            "job": node.job,
            "barrier": node.barrier,
            "started_at": node.started_at,
            "finished_at": node.finished_at,
            "inputs": [],
            "truncated": False,
        }
        if not node.inputs:
            return entry
        if level >= self.depth:
            entry["truncated"] = True
            return entry
        for name, read in sorted(node.inputs.items()):
            child = self.by_key.get((name, int(read["snapshot_id"])))
            if child is None:
                continue  # the input table was dropped from the catalog since
            if self.left <= 0:
                entry["truncated"] = True
                break
            sub = self.build(child, level + 1)
            entry["inputs"].append(sub)
            entry["truncated"] = entry["truncated"] or sub["truncated"]
        return entry
