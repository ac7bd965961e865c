"""Wire models: request bodies (`*Request`) and the results services return and routes send.

They live outside `api/` because services build them directly; they carry no HTTP types.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

NAME_PART = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,127}"
NAME_PART_PATTERN = f"^{NAME_PART}$"
TABLE_PATTERN = f"^{NAME_PART}\\.{NAME_PART}\\.{NAME_PART}$"
JOB_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}$"
MAX_BODY_ITEMS = 1000
NO_NUL = r"^[^\x00]*$"  # PostgreSQL text cannot hold NUL characters

TableName = Annotated[str, StringConstraints(pattern=TABLE_PATTERN, max_length=386)]
JobId = Annotated[str, StringConstraints(pattern=JOB_PATTERN, max_length=200)]
MAX_BIGINT = 2**63 - 1


def _json_string(value: object) -> object:
    if not isinstance(value, str | datetime):
        raise ValueError("must be an RFC 3339 string")
    return value


SnapshotId = Annotated[int, Field(ge=0, le=MAX_BIGINT)]
BarrierValue = Annotated[int, Field(ge=1, le=2**63 - 1)]
Consistency = Literal["strong", "weak"]
TableFormat = Literal["delta", "paimon", "iceberg"]


def _bounded(mapping: dict[str, int]) -> dict[str, int]:
    if len(mapping) > MAX_BODY_ITEMS:
        raise ValueError(f"at most {MAX_BODY_ITEMS} entries")
    return mapping


def _storable_time(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("give a time zone (RFC 3339, e.g. 2026-11-22T10:00:00Z)")
    try:
        year = value.astimezone(UTC).year
    except OverflowError:
        year = 0
    if year == 0:  # before year 1 or after 9999 once in UTC: Python cannot read it back
        raise ValueError("must lie between years 1 and 9999 in UTC")
    return value


# Not strict: a JSON body holds times as strings (`_json_string` admits nothing else).
CommitTime = Annotated[datetime, Field(strict=False), BeforeValidator(_json_string), AfterValidator(_storable_time)]


def _not_empty(mapping: dict[str, int]) -> dict[str, int]:
    if not mapping:
        raise ValueError("name at least one table")
    return mapping


SnapshotMap = Annotated[
    dict[TableName, SnapshotId],
    AfterValidator(_bounded),
    Field(json_schema_extra={"additionalProperties": False, "maxProperties": MAX_BODY_ITEMS}),
]


class Request(BaseModel):
    """Request bodies: unknown fields and values of another JSON type are rejected, never coerced.

    Strict for every body at once: an integer field (ids, snapshots, barriers) takes JSON integers only, so
    `1.0` and `1e3` (floats once parsed) are 422, as are `"1"` and `true`; a float field still takes `1`.
    """

    model_config = ConfigDict(extra="forbid", strict=True)


class RegisterRequest(Request):
    format: TableFormat | None = None
    location: Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=NO_NUL)] | None = None


class TableDeclaration(RegisterRequest):
    table: TableName


class RegisterJobRequest(Request):
    """A job's whole lineage in one request: every edge is registered, or none (one transaction)."""

    sources: Annotated[list[TableDeclaration], Field(max_length=MAX_BODY_ITEMS)] = Field(default_factory=list)
    sinks: Annotated[list[TableDeclaration], Field(min_length=1, max_length=MAX_BODY_ITEMS)]
    new_roots: Annotated[list[TableName], Field(max_length=MAX_BODY_ITEMS)] = Field(
        default_factory=list,
        description="sources MetaService may not know yet: roots an outside writer created or will create. Any "
        "other source must be a table MetaService knows, else 409 `unknown_source` (a misspelt name would "
        "otherwise become a root that never gets data)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> RegisterJobRequest:
        sources = [d.table for d in self.sources]
        sinks = [d.table for d in self.sinks]
        for role, names in (("sources", sources), ("sinks", sinks)):
            if len(set(names)) != len(names):
                raise ValueError(f"{role} name a table twice: {sorted({n for n in names if names.count(n) > 1})}")
        both = sorted(set(sources) & set(sinks))
        if both:
            raise ValueError(f"a job cannot both read and write a table: {both}")
        stray = sorted(set(self.new_roots) - set(sources))
        if stray:
            raise ValueError(f"new_roots must be sources of the job: {stray}")
        return self


class RootGroupRequest(Request):
    tables: Annotated[list[TableName], Field(min_length=1, max_length=MAX_BODY_ITEMS)] = Field(
        description="the roots one ingestion writes together; the group holds exactly these afterwards"
    )


StartAt = Literal["newest", "earliest"] | BarrierValue


class NextBarrierRequest(Request):
    root_snapshots: SnapshotMap = Field(default_factory=dict)
    start: StartAt | None = Field(
        default=None,
        description="where a job that never settled a barrier starts: `newest` (default: the newest barrier all "
        "its inputs settled), `earliest` (the first barrier at which every input holds data: a backfill) or a "
        "barrier value (the first barrier at or after it). Ignored once the job has settled a barrier.",
    )


class IssueBarrierRequest(Request):
    root_snapshots: SnapshotMap = Field(default_factory=dict)


class CommitRequest(Request):
    snapshots: SnapshotMap


class AbortRequest(Request):
    reason: Annotated[str, StringConstraints(max_length=2000, pattern=NO_NUL)] | None = None


class SnapshotReportRequest(Request):
    snapshot_id: SnapshotId
    committed_at: CommitTime | None = None


MinBarrier = Annotated[
    int | None,
    Field(ge=0, le=MAX_BIGINT, description="answer only a version at this barrier or later (waiting for one)"),
]
MaxStaleness = Annotated[
    float | None,
    Field(
        gt=0,
        le=10**9,
        allow_inf_nan=False,
        description="answer only a version whose barrier was issued at most this many seconds ago (database clock)",
    ),
]
WaitSeconds = Annotated[
    float | None,
    Field(
        ge=0,
        allow_inf_nan=False,
        description="with a bound: wait up to this long for a version that meets it (at most the server's "
        "max_wait_seconds); default 0, answer at once. Without a bound there is nothing to wait for",
    ),
]


class FreshnessBound(BaseModel):
    """How fresh a consistent version must be: `min_barrier` or `max_staleness_seconds` (not both), and how long
    to wait for one. Without a bound nothing is waited for (a `wait_seconds` alone is checked against the maximum,
    then has no effect) and any consistent version is answered."""

    min_barrier: MinBarrier = None
    max_staleness_seconds: MaxStaleness = None
    wait_seconds: WaitSeconds = None

    @model_validator(mode="after")
    def _one_bound(self) -> FreshnessBound:
        if self.min_barrier is not None and self.max_staleness_seconds is not None:
            raise ValueError("give min_barrier or max_staleness_seconds, not both")
        return self

    @property
    def bounded(self) -> bool:
        return self.min_barrier is not None or self.max_staleness_seconds is not None


class FreshnessQuery(FreshnessBound):
    """The bound as query parameters of `GET /version/...` (strings parsed as numbers, unknown names refused)."""

    model_config = ConfigDict(extra="forbid")


class VersionsRequest(Request, FreshnessBound):
    tables: Annotated[list[TableName], Field(min_length=1, max_length=MAX_BODY_ITEMS)]
    consistency: Consistency = "strong"

    def bound(self) -> FreshnessBound:
        return FreshnessBound(
            min_barrier=self.min_barrier,
            max_staleness_seconds=self.max_staleness_seconds,
            wait_seconds=self.wait_seconds,
        )


class Registration(BaseModel):
    job_id: str
    table: str
    role: Literal["source", "sink"]
    created: bool


class JobRegistration(BaseModel):
    job_id: str
    edges: list[Registration] = Field(description="every edge of the request; `created` is false for those it had")
    created: bool = Field(description="true when any edge was new (201), false when nothing changed (200)")


class TableRetirement(BaseModel):
    table: str
    retired: bool = Field(description="true when the table is retired (after `retire`), false after `revive`")
    retired_at: datetime | None
    changed: bool = Field(description="false when the table was already in that state (nothing changed)")


class RootGroup(BaseModel):
    group: str
    tables: list[str]


class RootGroupList(BaseModel):
    groups: list[RootGroup]


class EdgeRemoval(BaseModel):
    job_id: str
    table: str
    role: Literal["source", "sink"]
    removed: bool = Field(description="false when the job had no such edge (nothing changed)")


class Unregistration(BaseModel):
    job_id: str
    status: Literal["unregistered"] = "unregistered"


class InputSnapshot(BaseModel):
    snapshot_id: int
    previous_snapshot_id: int | None


class SinkSnapshot(BaseModel):
    previous_snapshot_id: int | None = Field(
        description="the sink's snapshot as MetaService recorded it before this barrier (null: none): what storage "
        "must hold before the job writes; anything committed after it (an aborted attempt) is to be undone"
    )


class BarrierDecision(BaseModel):
    job_id: str
    action: Literal["process", "wait", "idle"]
    barrier: int | None
    inputs: dict[str, InputSnapshot] = Field(default_factory=dict)
    sinks: dict[str, SinkSnapshot] = Field(default_factory=dict, description="with `process`: each sink's baseline")
    waiting_for: list[str] = Field(
        default_factory=list, description="with `wait`: the inputs that have not settled `barrier` yet"
    )
    skipped: list[int] = Field(default_factory=list)
    retry_after_seconds: float | None = None


class CommitResult(BaseModel):
    job_id: str
    barrier: int
    status: Literal["committed"] = "committed"
    snapshots: dict[str, int]


class AbortResult(BaseModel):
    job_id: str
    barrier: int
    status: Literal["aborted"] = "aborted"


class IssuedBarrier(BaseModel):
    barrier: int
    issued_at: datetime
    sealed: dict[str, int]


class BarrierSummary(BaseModel):
    barrier: int
    issued_at: datetime
    issued_by: str | None


class BarrierList(BaseModel):
    barriers: list[BarrierSummary]


class TableAtBarrier(BaseModel):
    state: Literal["complete", "aborted", "pending", "absent"]
    snapshot_id: int | None


class BarrierDetail(BarrierSummary):
    tables: dict[str, TableAtBarrier]


class SnapshotReport(BaseModel):
    table: str
    latest_snapshot_id: int


class TableVersion(BaseModel):
    table: str
    consistency: Consistency
    barrier: int
    snapshot_id: int


class ConsistentVersions(BaseModel):
    consistency: Consistency
    barrier: int
    versions: dict[str, int]


class JobInfo(BaseModel):
    job_id: str
    is_active: bool
    sources: list[str]
    sinks: list[str]
    last_barrier: int | None
    in_flight_barrier: int | None
    registered_at: datetime
    last_seen_at: datetime


class JobList(BaseModel):
    jobs: list[JobInfo]


class JobRunInfo(BaseModel):
    first_barrier: int
    barrier: int
    status: Literal["in_flight", "committed", "idle", "aborted"]
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    reason: str | None
    inputs_ready_at: datetime | None
    started_at: datetime
    finished_at: datetime | None
    duration_seconds: float | None


class JobHistory(BaseModel):
    job_id: str
    runs: list[JobRunInfo]


class TableInfo(BaseModel):
    table: str
    kind: Literal["root", "intermediate"]
    writer: str | None
    readers: list[str]
    format: str | None
    location: str | None
    latest_snapshot_id: int | None
    newest_complete_barrier: int | None
    newest_complete_snapshot_id: int | None
    retired_at: datetime | None = Field(
        default=None, description="set when an admin retired the table (it is out of lists and reads)"
    )


class TableList(BaseModel):
    tables: list[TableInfo]


class SnapshotRangeInfo(BaseModel):
    first_barrier: int
    last_barrier: int | None = Field(description="null: holds through the newest barrier (root tables)")
    snapshot_id: int | None
    how: Literal["sealed", "committed", "idle", "aborted", "gap", "restored"] = Field(
        description="sealed (a root), committed, idle (inputs unchanged), aborted (the writer gave the barrier up, "
        "or an input did), gap (barriers the table never completes because it changed writers), restored (a "
        "rollback's restore snapshot)"
    )


class TableHistory(BaseModel):
    table: str
    ranges: list[SnapshotRangeInfo]


class Problem(BaseModel):
    """RFC 9457 problem document with a machine-readable `code`."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    code: str
    instance: str | None = None


MIN_LEASE_TTL, MAX_LEASE_TTL = 1.0, 7 * 24 * 3600.0
LeaseTtl = Annotated[
    float, Field(ge=MIN_LEASE_TTL, le=MAX_LEASE_TTL, description="seconds, between 1 and 604800 (7 days)")
]


class LeaseRequest(Request):
    holder: Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=NO_NUL)] = Field(
        description="who holds the lease (1-200 characters), shown in retention reasons"
    )
    snapshots: Annotated[SnapshotMap, AfterValidator(_not_empty), Field(json_schema_extra={"minProperties": 1})] = (
        Field(description="table → snapshot id to protect; 1 to 1000 registered tables")
    )
    ttl_seconds: LeaseTtl = 600.0


class RenewLeaseRequest(Request):
    ttl_seconds: LeaseTtl | None = None


class LeaseInfo(BaseModel):
    lease_id: str
    holder: str
    owner: str | None = Field(default=None, description="the token that created it (null: authentication off)")
    expires_at: datetime
    snapshots: dict[str, int]


class LeaseList(BaseModel):
    leases: list[LeaseInfo] = Field(description="live leases, soonest to expire first")


class ProtectedSnapshot(BaseModel):
    snapshot_id: int
    reason: str = Field(
        description="in_flight:<job>@<barrier>:<key>, lease:<holder>, rollback:<id>, strong_version@<barrier> or newest"
    )


class Retention(BaseModel):
    table: str
    oldest_protected_snapshot_id: int | None = Field(
        description="snapshots at or above this id must be kept; null when nothing is known about the table"
    )
    protected: list[ProtectedSnapshot]


# --- admin insight: lineage, delays (issue 4) ------------------------------------------------------------------

LineageDirection = Literal["upstream", "downstream", "both"]


class RunTiming(BaseModel):
    """One barrier of a job with where its time went (seconds; null while unknown)."""

    first_barrier: int
    barrier: int
    status: Literal["in_flight", "committed", "idle", "aborted"]
    inputs_ready_at: datetime | None
    started_at: datetime
    finished_at: datetime | None
    waiting_seconds: float | None = Field(description="inputs ready → started")
    processing_seconds: float | None = Field(description="started → finished")


class TableNode(BaseModel):
    id: str = Field(description="`table:<catalog.database.table>`")
    kind: Literal["table"] = "table"
    name: str
    table_kind: Literal["root", "intermediate"]
    format: str | None
    latest_snapshot_id: int | None
    newest_complete_barrier: int | None
    newest_complete_snapshot_id: int | None
    newest_complete_issued_at: datetime | None
    delay_seconds: float | None = Field(
        description="deprecated alias of `freshness_seconds`", json_schema_extra={"deprecated": True}
    )
    freshness_seconds: float | None = Field(
        description="now (or the `as_of` time) minus the issue time of the newest complete barrier; null: none"
    )
    lag_seconds: float | None = Field(
        description=(
            "how far the table is behind the newest root data: 0 when its newest complete barrier includes the newest"
            " snapshot of every root upstream of it, else now minus when a barrier first sealed the oldest root data"
            " it lacks; null: it completed nothing, or the graph is `as_of`"
        )
    )


class JobNode(BaseModel):
    id: str = Field(description="`job:<job id>`")
    kind: Literal["job"] = "job"
    name: str
    is_active: bool
    last_barrier: int | None
    lag_seconds: float | None = Field(description="issue time of the newest barrier minus that of the job's last one")
    recent_runs: list[RunTiming] = Field(description="newest first; idle stretches are left out")


class LineageEdge(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    from_: str = Field(alias="from")
    to: str


class LineageAsOf(BaseModel):
    barrier: int | None = Field(
        description="node states are as of this barrier (for a time: the newest barrier issued by then; null: none)"
    )
    time: datetime = Field(description="the time asked for, or the issue time of the barrier asked for")


class LineageGraph(BaseModel):
    table: str | None
    direction: LineageDirection
    depth: int | None
    nodes: list[Annotated[TableNode | JobNode, Field(discriminator="kind")]]
    edges: list[LineageEdge]
    truncated: bool = Field(description="true when the node cap cut the graph short")
    as_of: LineageAsOf | None = Field(description="the moment the graph is of; null: the current graph")


class SnapshotLineage(BaseModel):
    """A snapshot, the run that produced it and, recursively, the input snapshots that run read."""

    table: str
    snapshot_id: int
    job: str | None = Field(description="the job whose committed run produced it; null: a root's snapshot")
    barrier: int | None = Field(
        description="the barrier the run committed (a root: the barrier that first sealed it; null: not sealed yet)"
    )
    started_at: datetime | None
    finished_at: datetime | None
    inputs: list[SnapshotLineage] = Field(description="the input snapshots the run read, by table name")
    truncated: bool = Field(description="true when the depth or the entry cap cut inputs below this entry")


class LineageChange(BaseModel):
    job_id: str
    table: str
    role: Literal["source", "sink"]
    change: Literal["added", "removed"]
    barrier: int = Field(
        description="the newest barrier issued when the change committed (0: none); it takes effect after it"
    )
    effective_barrier: int | None = Field(description="the first barrier issued after the change; null: none yet")
    at: datetime = Field(description="when the change committed")


class LineageChangeList(BaseModel):
    changes: list[LineageChange] = Field(description="newest first")
    next: str | None = Field(description="cursor for the next page (`cursor=`); null: this is the last page")


class CriticalStep(BaseModel):
    job_id: str
    table: str = Field(description="the table this step completed the barrier in")
    barrier: int
    status: Literal["committed", "idle"]
    inputs_ready_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    waiting_seconds: float
    processing_seconds: float


class TableDelay(BaseModel):
    table: str
    table_kind: Literal["root", "intermediate"]
    as_of: datetime = Field(description="the database clock the delay is measured against")
    barrier: int | None = Field(description="newest barrier the table completed; null: none yet")
    issued_at: datetime | None
    delay_seconds: float | None = Field(
        description="deprecated alias of `freshness_seconds`", json_schema_extra={"deprecated": True}
    )
    freshness_seconds: float | None = Field(
        description="`as_of` minus `issued_at` (age of the newest complete barrier)"
    )
    lag_seconds: float | None = Field(
        description="how far the table is behind the newest root data (0: caught up); see the lineage graph's nodes"
    )
    completed_at: datetime | None = Field(description="when the table completed `barrier`")
    end_to_end_seconds: float | None = Field(description="completed_at minus issued_at")
    critical_path: list[CriticalStep] = Field(description="from the roots to the table")
    bottleneck_job: str | None = Field(
        description="the job contributing most (waiting + processing) along the critical path; for a table that "
        "completed no barrier yet, its writer (the job that has to run first; `bottleneck_seconds` null)"
    )
    bottleneck_seconds: float | None
    path_truncated: bool = False


class DelaySummary(BaseModel):
    table: str
    table_kind: Literal["root", "intermediate"]
    barrier: int | None
    issued_at: datetime | None
    delay_seconds: float | None = Field(
        description="deprecated alias of `freshness_seconds`", json_schema_extra={"deprecated": True}
    )
    freshness_seconds: float | None = Field(description="age of the newest complete barrier")
    lag_seconds: float | None = Field(description="how far the table is behind the newest root data (0: caught up)")
    bottleneck_job: str | None = Field(
        description="the job contributing most (waiting + processing) along the critical path; for a table that "
        "completed no barrier yet, its writer (the job that has to run first; `bottleneck_seconds` null)"
    )
    bottleneck_seconds: float | None


class DelayList(BaseModel):
    as_of: datetime
    delays: list[DelaySummary] = Field(description="worst first: tables that completed nothing, then by delay")


class RollbackRequest(Request):
    table: TableName = Field(description="the table whose data after `barrier` is bad (catalog.database.table)")
    barrier: BarrierValue = Field(description="the barrier to roll back to; must have been issued")


class CompleteRollbackRequest(Request):
    root_snapshots: SnapshotMap = Field(
        default_factory=dict,
        description=(
            "optional: the snapshot id the rolled-back root table has in storage now (the version the restore"
            " wrote, or a correction written since); it is sealed by the next barrier. Without it the root's"
            " newest known snapshot is reset to its restore snapshot until the next report."
        ),
    )


class RestorePoint(BaseModel):
    restore_snapshot_id: int = Field(description="restore the table in storage to this snapshot (its state at B)")


class ResumePoint(BaseModel):
    resume_after_barrier: int = Field(description="the job recomputes the barriers after this one")


class Rollback(BaseModel):
    rollback_id: str
    table: str
    barrier: int
    tables: dict[str, RestorePoint] = Field(description="the table and everything downstream of it")
    jobs: dict[str, ResumePoint] = Field(description="the jobs that recompute the affected tables")
    status: Literal["planned", "completed", "cancelled"]
    created_at: datetime
    completed_at: datetime | None = None
    cancelled_at: datetime | None = None
