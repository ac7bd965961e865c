"""OpenLineage events in: a job's input and output datasets become its sources and sinks.

An event's edges are registered by the registry's own function (`registry.register_in`: the same checks and
problems as `/register/...`) in one transaction, so an answer of 4xx means nothing was registered. Edges are
only ever added: OpenLineage producers send partial events (a START with the inputs, a COMPLETE with the
outputs), so a dataset missing from an event says nothing. Removing an edge stays `DELETE /register/...`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from metaservice.db.database import Connection, Database
from metaservice.db.transaction import in_transaction
from metaservice.errors import Forbidden, InvalidRequest
from metaservice.openlineage.events import (
    IgnoredDataset,
    IngestedEvent,
    OpenLineageDataset,
    OpenLineageDatasetEvent,
    OpenLineageEvent,
)
from metaservice.openlineage.mapping import DatasetMapping, InvalidMapping
from metaservice.schemas import Registration
from metaservice.services import registry
from metaservice.services.tokens import Principal

Unmapped = Literal["ignore", "reject"]


async def ingest_event(
    db: Database, *, event: OpenLineageEvent, mapping: DatasetMapping, unmapped: Unmapped, principal: Principal
) -> IngestedEvent:
    """Register the edges the event names for its job (idempotent: the same event again changes nothing)."""
    if isinstance(event, OpenLineageDatasetEvent):
        reason = "a dataset event names no job: nothing to register"
        dataset = IgnoredDataset(
            namespace=event.dataset.namespace, name=event.dataset.name, role="dataset", reason=reason
        )
        return IngestedEvent(job_id=None, registered=[], ignored=[dataset])
    job_id = event.job.name
    if not principal.may_act_for(job_id):
        raise Forbidden(
            f"token {principal.name!r} ({principal.role}) may not act for job {job_id!r}",
            role=principal.role,
            job_id=job_id,
        )
    plan = _plan(event.inputs, event.outputs, mapping, unmapped)
    if not plan.edges:
        return IngestedEvent(job_id=job_id, registered=[], ignored=plan.ignored)

    async def work(conn: Connection) -> list[Registration]:
        await registry.lock_change(conn, job_id=job_id, tables=[table for table, _ in plan.edges])
        return [
            await registry.register_in(conn, job_id=job_id, table=table, role=role, principal=principal)
            for table, role in plan.edges
        ]

    registered = await in_transaction(db, work)
    return IngestedEvent(job_id=job_id, registered=registered, ignored=plan.ignored)


@dataclass
class _Plan:
    edges: list[tuple[str, registry.Role]] = field(default_factory=list)  # sources first, then sinks
    ignored: list[IgnoredDataset] = field(default_factory=list)


def _plan(
    inputs: list[OpenLineageDataset], outputs: list[OpenLineageDataset], mapping: DatasetMapping, unmapped: Unmapped
) -> _Plan:
    """Map every dataset to a table and decide each one's edge, before anything is written (422 for all the
    datasets that cannot be mapped at once)."""
    plan = _Plan()
    errors: list[dict[str, Any]] = []
    tables: dict[str, dict[str, None]] = {"input": {}, "output": {}}  # ordered sets
    sides: tuple[tuple[Literal["input", "output"], list[OpenLineageDataset]], ...] = (
        ("output", outputs),
        ("input", inputs),
    )
    for role, datasets in sides:
        for index, dataset in enumerate(datasets):
            loc = ["body", f"{role}s", index, "name"]
            try:
                mapped = mapping.table_for(dataset.namespace, dataset.name)
            except InvalidMapping as exc:
                errors.append({"loc": loc, "msg": str(exc), "type": "invalid_mapping"})
                continue

            reason: str
            if mapped.table is None and mapped.rule is None:
                reason = f"no dataset mapping rule matches namespace {dataset.namespace!r}, name {dataset.name!r}"
                if unmapped == "reject":
                    errors.append({"loc": loc, "msg": reason, "type": "unmapped_dataset"})
                    continue
            elif mapped.table is None:
                reason = f"ignored by dataset mapping rule {mapped.rule}"
            elif mapped.table in tables[role]:
                reason = f"the same table as an earlier {role} of this event"
            elif role == "input" and mapped.table in tables["output"]:
                reason = "also an output of this event: registered as a sink only (a job never reads its sink)"
            else:
                tables[role][mapped.table] = None
                continue
            plan.ignored.append(
                IgnoredDataset(
                    namespace=dataset.namespace, name=dataset.name, role=role, reason=reason, table=mapped.table
                )
            )
    if errors:
        raise InvalidRequest(
            f"{len(errors)} dataset(s) of the event map to no table; nothing was registered",
            errors=errors,
        )
    plan.edges = [(t, "source") for t in tables["input"]] + [(t, "sink") for t in tables["output"]]
    return plan
