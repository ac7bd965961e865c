"""The offset a `metaservice` stream source hands Spark: one barrier, the snapshot range of every input, the
baseline of every sink. Spark journals it in the checkpoint's offset log before the micro-batch runs, so a
restart re-reads exactly the same rows and the sink finds which barrier the micro-batch stands for."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_client.models import BarrierDecision

MARK = "metaservice"
"""Key present (value: the offset format version) in every offset this package writes."""
_NONE = -1  # JSON offsets hold primitive values; -1 stands for "no snapshot" (snapshot ids are >= 0)


@dataclass(frozen=True)
class InputRange:
    """An input's rows for a barrier: added after `previous` (None: from the beginning) up to `snapshot`."""

    snapshot: int
    previous: int | None


@dataclass(frozen=True)
class BarrierOffset:
    """One source's offset: the barrier (0 before the first one) and what `next` handed out with it.

    Attributes:
        job_id: the streaming job.
        table: the input this source reads.
        barrier: the barrier of the micro-batch; 0 is the initial offset (nothing read yet).
        inputs: every input of the job → its snapshot range at the barrier.
        sinks: every sink → the snapshot MetaService holds for it before the barrier (None: none).
    """

    job_id: str
    table: str
    barrier: int = 0
    inputs: Mapping[str, InputRange] = field(default_factory=dict)
    sinks: Mapping[str, int | None] = field(default_factory=dict)

    @classmethod
    def of(cls, decision: BarrierDecision, table: str) -> BarrierOffset:
        """The offset of a "process" answer of `next`."""
        assert decision.barrier is not None
        return cls(
            job_id=decision.job_id,
            table=table,
            barrier=decision.barrier,
            inputs={
                name: InputRange(snapshot.snapshot_id, snapshot.previous_snapshot_id)
                for name, snapshot in decision.inputs.items()
            },
            sinks={name: sink.previous_snapshot_id for name, sink in decision.sinks.items()},
        )

    def to_json(self) -> dict[str, Any]:
        """The dict Spark journals (primitive values only)."""
        return {
            MARK: 1,
            "job_id": self.job_id,
            "table": self.table,
            "barrier": self.barrier,
            "inputs": {
                name: {"snapshot": r.snapshot, "previous": _NONE if r.previous is None else r.previous}
                for name, r in sorted(self.inputs.items())
            },
            "sinks": {name: _NONE if b is None else b for name, b in sorted(self.sinks.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BarrierOffset:
        """The offset back from what Spark journaled; ValueError for an offset of another source."""
        if data.get(MARK) != 1:
            raise ValueError(f"not an offset of the metaservice stream source: {dict(data)!r}")
        return cls(
            job_id=str(data["job_id"]),
            table=str(data["table"]),
            barrier=int(data["barrier"]),
            inputs={
                name: InputRange(int(r["snapshot"]), None if int(r["previous"]) == _NONE else int(r["previous"]))
                for name, r in data.get("inputs", {}).items()
            },
            sinks={name: None if int(b) == _NONE else int(b) for name, b in data.get("sinks", {}).items()},
        )


def journaled_offsets(checkpoint: str, batch_id: int) -> list[BarrierOffset]:
    """The offsets of this package's sources that Spark journaled for micro-batch `batch_id`.

    Spark writes `<checkpoint>/offsets/<batch_id>` before it runs the micro-batch (a header line, the batch
    metadata, then one line per source: its offset JSON, or "-" when it has none yet).

    Raises:
        FileNotFoundError: no offset log entry for the batch (not a local checkpoint of this query).
    """
    path = os.path.join(_local(checkpoint), "offsets", str(batch_id))
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    found: list[BarrierOffset] = []
    for line in lines[2:]:
        line = line.strip()
        if not line or line == "-":
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and data.get(MARK) == 1:
            found.append(BarrierOffset.from_json(data))
    return found


def _local(checkpoint: str) -> str:
    """A local path of a `file:` URI or a plain path."""
    if checkpoint.startswith("file:"):
        return "/" + checkpoint[len("file:") :].lstrip("/")
    return checkpoint
