"""Frozen results of API calls, parsed from the wire.

Parsing tolerates fields it does not know (a newer server may add some) and raises `ValueError` when a field
it needs is missing or has the wrong type. Times are RFC 3339 strings; they become timezone-aware datetimes.

Example:
    decision = BarrierDecision.from_json({"job_id": "enrich", "action": "idle", "barrier": None})
    assert decision.inputs == {}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, cast

Action = Literal["process", "wait", "idle"]
Consistency = Literal["strong", "weak"]
Role = Literal["source", "sink"]

StartAt = Literal["newest", "earliest"] | int
"""Where a job's first barrier is: the newest its inputs settled, the earliest (a backfill), or a barrier."""

_ACTIONS: frozenset[str] = frozenset({"process", "wait", "idle"})
_CONSISTENCIES: frozenset[str] = frozenset({"strong", "weak"})
_ROLES: frozenset[str] = frozenset({"source", "sink"})


def check_start(start: object) -> StartAt:
    """`start` as the server takes it: "newest", "earliest" or a positive barrier value.

    Example:
        check_start("earliest")
    """
    if start in ("newest", "earliest") or (isinstance(start, int) and not isinstance(start, bool) and start > 0):
        return start
    raise ValueError(f"start must be 'newest', 'earliest' or a barrier (a positive integer), got {start!r}")


def parse_time(value: str) -> datetime:
    """Parse an RFC 3339 time; a trailing `Z` means UTC, and a time without offset is taken as UTC.

    Args:
        value: e.g. "2026-11-22T21:00:00.123Z".

    Returns:
        A timezone-aware datetime.

    Raises:
        ValueError: `value` is not an ISO 8601 / RFC 3339 time.

    Example:
        assert parse_time("2026-11-22T21:00:00Z").tzinfo is not None
    """
    text = value.strip()
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _get(data: Mapping[str, Any], key: str) -> Any:
    try:
        return data[key]
    except KeyError:
        raise ValueError(f"field {key!r} is missing from the server's answer") from None


def _int(data: Mapping[str, Any], key: str) -> int:
    value = _get(data, key)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"field {key!r} must be an integer, got {value!r}")
    return int(value)


def _opt_int(data: Mapping[str, Any], key: str) -> int | None:
    return None if data.get(key) is None else _int(data, key)


def _str(data: Mapping[str, Any], key: str) -> str:
    value = _get(data, key)
    if not isinstance(value, str):
        raise ValueError(f"field {key!r} must be a string, got {value!r}")
    return value


def _choice(data: Mapping[str, Any], key: str, allowed: frozenset[str]) -> str:
    value = _str(data, key)
    if value not in allowed:
        raise ValueError(f"field {key!r} must be one of {sorted(allowed)}, got {value!r}")
    return value


def _time(data: Mapping[str, Any], key: str) -> datetime:
    return parse_time(_str(data, key))


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be an object, got {value!r}")
    return cast(Mapping[str, Any], value)


def _int_map(data: Mapping[str, Any], key: str) -> dict[str, int]:
    return {str(name): _int({key: v}, key) for name, v in _object(data.get(key), repr(key)).items()}


@dataclass(frozen=True)
class InputSnapshot:
    """The snapshot of one input to read at a barrier, and the one the job read at its previous barrier.

    Attributes:
        snapshot_id: read the input at exactly this snapshot.
        previous_snapshot_id: what the job read at its previous barrier; None the first time.

    Example:
        changes_since = decision.inputs["lake.raw.orders"].previous_snapshot_id
    """

    snapshot_id: int
    previous_snapshot_id: int | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InputSnapshot:
        """Parse `{"snapshot_id", "previous_snapshot_id"}`.

        Example:
            InputSnapshot.from_json({"snapshot_id": 12, "previous_snapshot_id": 9})
        """
        return cls(_int(data, "snapshot_id"), _opt_int(data, "previous_snapshot_id"))


@dataclass(frozen=True)
class SinkBaseline:
    """What a sink holds in MetaService before the barrier: storage must agree before the job writes.

    Attributes:
        previous_snapshot_id: the sink's snapshot before this barrier; None when it has none yet. Commits
            after it that an aborted attempt left are undone before writing (design rule 11).

    Example:
        baseline = decision.sinks["lake.mart.orders_enriched"].previous_snapshot_id
    """

    previous_snapshot_id: int | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SinkBaseline:
        """Parse `{"previous_snapshot_id"}`.

        Example:
            SinkBaseline.from_json({"previous_snapshot_id": 4})
        """
        return cls(_opt_int(data, "previous_snapshot_id"))


@dataclass(frozen=True)
class BarrierDecision:
    """The answer of `next_barrier`: process `barrier`, wait for it, or nothing to do (idle).

    Attributes:
        job_id: the job asking.
        action: "process" (read `inputs`, write, commit), "wait" (an input has not completed `barrier`
            yet) or "idle" (nothing newer than the job's last barrier).
        barrier: the barrier to process or wait for; None when idle.
        inputs: source table → snapshots to read (only for "process").
        sinks: sink table → its baseline before the barrier (only for "process"; empty from older servers).
        skipped: barriers passed over because an input aborted them.
        retry_after_seconds: a hint for how long to wait before asking again.

    Example:
        decision = client.next_barrier("enrich", {"lake.raw.orders": 12})
        if decision.action == "process":
            snapshot = decision.inputs["lake.raw.orders"].snapshot_id
    """

    job_id: str
    action: Action
    barrier: int | None
    inputs: Mapping[str, InputSnapshot] = field(default_factory=dict)
    skipped: tuple[int, ...] = ()
    retry_after_seconds: float | None = None
    sinks: Mapping[str, SinkBaseline] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BarrierDecision:
        """Parse the body of `POST /jobs/{job_id}/barriers/next`.

        Example:
            BarrierDecision.from_json({"job_id": "j", "action": "wait", "barrier": 7})
        """
        inputs = {
            str(name): InputSnapshot.from_json(_object(value, f"input {name!r}"))
            for name, value in _object(data.get("inputs"), "inputs").items()
        }
        sinks = {
            str(name): SinkBaseline.from_json(_object(value, f"sink {name!r}"))
            for name, value in _object(data.get("sinks"), "sinks").items()
        }
        skipped = data.get("skipped") or []
        if not isinstance(skipped, list):
            raise ValueError(f"field 'skipped' must be a list, got {skipped!r}")
        retry_after = data.get("retry_after_seconds")
        return cls(
            job_id=_str(data, "job_id"),
            action=cast(Action, _choice(data, "action", _ACTIONS)),
            barrier=_opt_int(data, "barrier"),
            inputs=inputs,
            skipped=tuple(_int({"skipped": b}, "skipped") for b in skipped),
            retry_after_seconds=None if retry_after is None else float(retry_after),
            sinks=sinks,
        )


@dataclass(frozen=True)
class Registration:
    """A registered edge between a job and a table.

    Attributes:
        job_id: the job.
        table: the table, `catalog.database.table`.
        role: "source" (the job reads the table) or "sink" (the job writes it).
        created: True when this call created the edge (HTTP 201), False when it already existed (200). A call
            retried after a lost answer reports False although its first attempt created the edge.

    Example:
        registration = client.register_source("enrich", "lake.raw.orders")
        print("new" if registration.created else "already registered")
    """

    job_id: str
    table: str
    role: Role
    created: bool

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, created: bool) -> Registration:
        """Parse a registration answer; `created` comes from the status code, not the body.

        Example:
            Registration.from_json({"job_id": "j", "table": "a.b.c", "role": "sink"}, created=True)
        """
        role = cast(Role, _choice(data, "role", _ROLES))
        return cls(_str(data, "job_id"), _str(data, "table"), role, created)


@dataclass(frozen=True)
class Commit:
    """A barrier committed for a job, with the snapshot of each of its sinks.

    Example:
        commit = client.commit_barrier("enrich", barrier, {"lake.mart.orders_enriched": 7})
        assert commit.status == "committed"
    """

    job_id: str
    barrier: int
    status: str
    snapshots: Mapping[str, int]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Commit:
        """Parse the body of `POST /jobs/{job_id}/barriers/{barrier}/commit`.

        Example:
            Commit.from_json({"job_id": "j", "barrier": 5, "status": "committed", "snapshots": {"a.b.c": 7}})
        """
        return cls(
            _str(data, "job_id"),
            _int(data, "barrier"),
            str(data.get("status", "committed")),
            _int_map(data, "snapshots"),
        )


@dataclass(frozen=True)
class IssuedBarrier:
    """A global barrier issued on request, with the root snapshots it sealed.

    Example:
        issued = client.issue_barrier({"lake.raw.orders": 12})
        print(issued.barrier, issued.sealed)
    """

    barrier: int
    issued_at: datetime
    sealed: Mapping[str, int]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IssuedBarrier:
        """Parse the body of `POST /barriers`.

        Example:
            IssuedBarrier.from_json({"barrier": 5, "issued_at": "2026-11-22T21:00:00Z", "sealed": {}})
        """
        return cls(_int(data, "barrier"), _time(data, "issued_at"), _int_map(data, "sealed"))


@dataclass(frozen=True)
class TableVersion:
    """The snapshot of one table to read now, and the barrier it belongs to.

    Example:
        version = client.version("lake.mart.orders", "strong")
        df = catalog.read_at(spark, version.table, version.snapshot_id)
    """

    table: str
    consistency: Consistency
    barrier: int
    snapshot_id: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TableVersion:
        """Parse the body of `GET /version/{consistency}/{catalog}/{database}/{table}`.

        Example:
            TableVersion.from_json({"table": "a.b.c", "consistency": "weak", "barrier": 5, "snapshot_id": 7})
        """
        return cls(
            _str(data, "table"),
            cast(Consistency, _choice(data, "consistency", _CONSISTENCIES)),
            _int(data, "barrier"),
            _int(data, "snapshot_id"),
        )


@dataclass(frozen=True)
class ConsistentVersions:
    """One barrier and one snapshot per requested table: read them together.

    Example:
        versions = client.versions(["lake.mart.a", "lake.mart.b"])
        frames = {t: catalog.read_at(spark, t, s) for t, s in versions.versions.items()}
    """

    consistency: Consistency
    barrier: int
    versions: Mapping[str, int]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ConsistentVersions:
        """Parse the body of `POST /versions`.

        Example:
            ConsistentVersions.from_json({"consistency": "strong", "barrier": 5, "versions": {"a.b.c": 7}})
        """
        return cls(
            cast(Consistency, _choice(data, "consistency", _CONSISTENCIES)),
            _int(data, "barrier"),
            _int_map(data, "versions"),
        )


@dataclass(frozen=True)
class Lease:
    """A lease protecting snapshots from expiry until `expires_at`.

    Example:
        lease = client.create_lease("dashboard-7", {"lake.mart.a": 5}, ttl_seconds=300)
        client.release_lease(lease.lease_id)
    """

    lease_id: str
    expires_at: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Lease:
        """Parse the body of `POST /leases` or `POST /leases/{id}/renew`.

        Example:
            Lease.from_json({"lease_id": "L1", "expires_at": "2026-11-22T21:10:00Z"})
        """
        return cls(str(_get(data, "lease_id")), _time(data, "expires_at"))


@dataclass(frozen=True)
class ProtectedSnapshot:
    """One snapshot that must be kept, and why (in-flight input, lease, strong version, ...).

    Example:
        reasons = {p.snapshot_id: p.reason for p in client.retention("lake.mart.a").protected}
    """

    snapshot_id: int
    reason: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProtectedSnapshot:
        """Parse `{"snapshot_id", "reason"}`.

        Example:
            ProtectedSnapshot.from_json({"snapshot_id": 5, "reason": "lease:L1"})
        """
        return cls(_int(data, "snapshot_id"), str(data.get("reason", "")))


@dataclass(frozen=True)
class Retention:
    """Which snapshots of a table must be kept: every one at or above `oldest_protected_snapshot_id`.

    Example:
        floor = client.retention("lake.mart.a").oldest_protected_snapshot_id
        # vacuum only snapshots below `floor` (nothing when it is None)
    """

    table: str
    oldest_protected_snapshot_id: int | None
    protected: tuple[ProtectedSnapshot, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Retention:
        """Parse the body of `GET /tables/{catalog}/{database}/{table}/retention`.

        Example:
            Retention.from_json({"table": "a.b.c", "oldest_protected_snapshot_id": 5, "protected": []})
        """
        protected = data.get("protected") or []
        if not isinstance(protected, list):
            raise ValueError(f"field 'protected' must be a list, got {protected!r}")
        return cls(
            _str(data, "table"),
            _opt_int(data, "oldest_protected_snapshot_id"),
            tuple(ProtectedSnapshot.from_json(_object(p, "protected snapshot")) for p in protected),
        )


@dataclass(frozen=True)
class RollbackPlan:
    """A rollback of a table and everything downstream of it to a barrier.

    Attributes:
        rollback_id: the plan's id (as the server spells it: string or integer).
        barrier: the barrier rolled back to.
        tables: table → snapshot id to restore in storage.
        jobs: job → barrier after which it resumes.
        status: "planned", then "completed".

    Example:
        plan = client.plan_rollback("lake.raw.orders", barrier)
        # restore every table in plan.tables to its snapshot, then:
        client.complete_rollback(plan.rollback_id)
    """

    rollback_id: str | int
    barrier: int
    tables: Mapping[str, int]
    jobs: Mapping[str, int]
    status: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RollbackPlan:
        """Parse the body of `POST /rollbacks` or `POST /rollbacks/{id}/complete`.

        Example:
            RollbackPlan.from_json({"rollback_id": 1, "barrier": 5, "tables": {}, "jobs": {}})
        """
        rollback_id = _get(data, "rollback_id")
        if isinstance(rollback_id, bool) or not isinstance(rollback_id, int | str):
            raise ValueError(f"field 'rollback_id' must be a string or an integer, got {rollback_id!r}")
        tables = {
            str(name): _int(_object(entry, f"table {name!r}"), "restore_snapshot_id")
            for name, entry in _object(data.get("tables"), "tables").items()
        }
        jobs = {
            str(name): _int(_object(entry, f"job {name!r}"), "resume_after_barrier")
            for name, entry in _object(data.get("jobs"), "jobs").items()
        }
        return cls(rollback_id, _int(data, "barrier"), tables, jobs, str(data.get("status", "planned")))


__all__ = [
    "BarrierDecision",
    "Commit",
    "ConsistentVersions",
    "InputSnapshot",
    "IssuedBarrier",
    "Lease",
    "ProtectedSnapshot",
    "Registration",
    "Retention",
    "RollbackPlan",
    "SinkBaseline",
    "StartAt",
    "TableVersion",
    "check_start",
    "parse_time",
]
