"""Frozen results of API calls, parsed from the wire (extra fields are ignored)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class InputSnapshot:
    """The snapshot of one input to read at a barrier, and the one read at the job's previous barrier."""

    snapshot_id: int
    previous_snapshot_id: int | None


@dataclass(frozen=True)
class BarrierDecision:
    """The answer of `next`: process `barrier`, wait for it, or nothing to do (idle)."""

    job_id: str
    action: Literal["process", "wait", "idle"]
    barrier: int | None
    inputs: Mapping[str, InputSnapshot] = field(default_factory=dict)
    skipped: tuple[int, ...] = ()
    retry_after_seconds: float | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BarrierDecision:
        inputs = {
            name: InputSnapshot(
                int(v["snapshot_id"]),
                None if v.get("previous_snapshot_id") is None else int(v["previous_snapshot_id"]),
            )
            for name, v in (data.get("inputs") or {}).items()
        }
        return cls(
            job_id=str(data["job_id"]),
            action=data["action"],
            barrier=data.get("barrier"),
            inputs=inputs,
            skipped=tuple(int(b) for b in data.get("skipped") or ()),
            retry_after_seconds=data.get("retry_after_seconds"),
        )


@dataclass(frozen=True)
class Registration:
    job_id: str
    table: str
    role: str
    created: bool


@dataclass(frozen=True)
class Commit:
    job_id: str
    barrier: int
    status: str
    snapshots: Mapping[str, int]


@dataclass(frozen=True)
class IssuedBarrier:
    barrier: int
    issued_at: datetime
    sealed: Mapping[str, int]


@dataclass(frozen=True)
class TableVersion:
    table: str
    consistency: str
    barrier: int
    snapshot_id: int


@dataclass(frozen=True)
class ConsistentVersions:
    """One barrier and one snapshot per table."""

    consistency: str
    barrier: int
    versions: Mapping[str, int]


@dataclass(frozen=True)
class Lease:
    lease_id: str
    expires_at: datetime


@dataclass(frozen=True)
class ProtectedSnapshot:
    snapshot_id: int
    reason: str


@dataclass(frozen=True)
class Retention:
    table: str
    oldest_protected_snapshot_id: int | None
    protected: tuple[ProtectedSnapshot, ...]


@dataclass(frozen=True)
class RollbackPlan:
    rollback_id: str
    barrier: int
    tables: Mapping[str, int]
    jobs: Mapping[str, int]
    status: str

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RollbackPlan:
        return cls(
            rollback_id=str(data["rollback_id"]),
            barrier=int(data["barrier"]),
            tables={k: int(v["restore_snapshot_id"]) for k, v in data.get("tables", {}).items()},
            jobs={k: int(v["resume_after_barrier"]) for k, v in data.get("jobs", {}).items()},
            status=str(data.get("status")),
        )
