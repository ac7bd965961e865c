"""Applying a rollback plan: restore storage, then let MetaService forget what came after the barrier."""

from __future__ import annotations

import logging

from spark_client._http import MetaServiceClient
from spark_client.catalog.base import Catalog
from spark_client.models import RollbackPlan

logger = logging.getLogger("spark_client.rollback")


def apply_rollback(client: MetaServiceClient, catalog: Catalog, plan: RollbackPlan) -> RollbackPlan:
    """Restore every table of `plan` to its snapshot at the plan's barrier, then complete the rollback.

    Works for any `Catalog`, each with its format's own mechanism: Delta `RESTORE` (a new version holding
    the old data), Iceberg's snapshot management (the current snapshot moves back to the old one), Paimon's
    `rollback_to` (later snapshots are deleted). Root tables are reported with the snapshot id `restore`
    returns, so the next barrier seals the restored data; the jobs of the plan then recompute every barrier
    after it. Safe to call again after a crash: restoring twice leaves the same data (Delta adds a version),
    and completing twice is a no-op on the server.

    Example:
        plan = client.plan_rollback("lake.raw.orders", barrier)
        apply_rollback(client, catalog, plan)
        job.run_pending(transform)   # recompute downstream
    """
    roots: dict[str, int] = {}
    for table, snapshot_id in sorted(plan.tables.items()):
        version = catalog.restore(table, snapshot_id, metadata={"metaservice.rollback": str(plan.rollback_id)})
        logger.info("restored %s to snapshot %d (now snapshot %d)", table, snapshot_id, version)
        if client.get_table(table).get("kind") == "root":
            roots[table] = version
    return client.complete_rollback(plan.rollback_id, root_snapshots=roots)
