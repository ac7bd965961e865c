"""Wire models of `POST /api/v1/lineage`: the OpenLineage events it takes, and its answer.

Only the fields the server reads are declared (and checked); everything else an event carries (facets,
producer, schemaURL, run details) is accepted and ignored, so events of any OpenLineage producer and spec
version 2 are taken as they are sent. Field names follow the OpenLineage spec (camelCase).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from metaservice.schemas import JOB_PATTERN, MAX_BODY_ITEMS, Registration

Text = Annotated[str, StringConstraints(min_length=1, max_length=4096)]


class _Open(BaseModel):
    """Declared fields are strict (no coercion); undeclared ones are accepted and ignored."""

    model_config = ConfigDict(extra="allow", strict=True)


class OpenLineageDataset(_Open):
    namespace: Text = Field(description="The dataset's namespace (e.g. `s3://bucket`, `hive://metastore`).")
    name: Text = Field(description="The dataset's name within its namespace (e.g. `lake.sales.orders`).")


class OpenLineageJob(_Open):
    namespace: Text = Field(description="Not used: the job id is the job name alone.")
    name: Annotated[str, StringConstraints(pattern=JOB_PATTERN, max_length=200)] = Field(
        description="The MetaService job id (a job id: letters, digits, `_ . : -`)."
    )


class OpenLineageRun(_Open):
    runId: Text


Datasets = Annotated[list[OpenLineageDataset], Field(max_length=MAX_BODY_ITEMS)]
EventType = Literal["START", "RUNNING", "COMPLETE", "ABORT", "FAIL", "OTHER"]


class OpenLineageRunEvent(_Open):
    """A run of a job: its inputs are the job's sources, its outputs its sinks (whatever `eventType`)."""

    eventTime: Text
    run: OpenLineageRun
    job: OpenLineageJob
    eventType: EventType | None = None
    inputs: Datasets = Field(default_factory=list)
    outputs: Datasets = Field(default_factory=list)


class OpenLineageJobEvent(_Open):
    """Static lineage of a job (no run): registered like a run event's datasets."""

    eventTime: Text
    job: OpenLineageJob
    inputs: Datasets = Field(default_factory=list)
    outputs: Datasets = Field(default_factory=list)


class OpenLineageDatasetEvent(_Open):
    """Metadata of one dataset, without a job: nothing to register (answered, the dataset listed as ignored)."""

    eventTime: Text
    dataset: OpenLineageDataset


OpenLineageEvent = OpenLineageRunEvent | OpenLineageJobEvent | OpenLineageDatasetEvent


class IgnoredDataset(BaseModel):
    namespace: str
    name: str
    role: Literal["input", "output", "dataset"]
    reason: str = Field(description="Why nothing was registered for it.")
    table: str | None = Field(default=None, description="The table it maps to, when it maps to one.")


class IngestedEvent(BaseModel):
    """What an OpenLineage event registered (`created`: a new edge) and which datasets it left aside."""

    job_id: str | None = Field(description="The job the event registered edges for (null for a dataset event).")
    registered: list[Registration]
    ignored: list[IgnoredDataset]

    @property
    def created(self) -> bool:
        return any(r.created for r in self.registered)
