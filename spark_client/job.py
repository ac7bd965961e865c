"""EtlJob: one ETL job's side of the FLIP-276 protocol, crash-safe at every step."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from spark_client import _failpoints
from spark_client._http import MetaServiceClient
from spark_client.catalog.base import Catalog
from spark_client.inputs import Inputs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger("spark_client.job")

Transform = Callable[[Inputs], Mapping[str, "DataFrame"]]
WriteMode = Literal["append", "overwrite"]


class PermanentFailure(Exception):
    """Raise from a transform to give the barrier up (abort) instead of retrying it on the next run."""


@dataclass(frozen=True)
class RunResult:
    """What one `run_once` did.

    Attributes:
        action: "process" (a barrier was processed and committed), "idle" or "wait" (nothing to do now).
        barrier: the barrier processed, or the one being waited for.
        snapshots: sink name → snapshot id committed for the barrier.
        skipped: barriers passed over because an input aborted them.
        reused: sinks whose snapshot was found already written by an earlier, crashed run.
    """

    action: Literal["process", "idle", "wait"]
    barrier: int | None
    snapshots: Mapping[str, int] = field(default_factory=dict)
    skipped: tuple[int, ...] = ()
    reused: tuple[str, ...] = ()
    seconds: float = 0.0


class EtlJob:
    """One ETL job: registers its lineage, then processes barriers with inputs at aligned snapshots.

    Every step is safe to repeat: a crash anywhere leaves the barrier in flight, the next run is offered the
    same barrier with the same inputs, and finds the sink commits it already made (Delta app transactions).

    Example:
        job = EtlJob(spark, client, catalog, job_id="enrich",
                     sources=["lake.raw.orders"], sinks=["lake.mart.orders_enriched"])
        job.register()
        result = job.run_once(lambda inputs: {"lake.mart.orders_enriched": inputs["lake.raw.orders"]})
    """

    def __init__(
        self,
        spark: SparkSession,
        client: MetaServiceClient,
        catalog: Catalog,
        *,
        job_id: str,
        sources: Sequence[str],
        sinks: Sequence[str],
    ) -> None:
        if not sinks:
            raise ValueError("a job needs at least one sink")
        overlap = set(sources) & set(sinks)
        if overlap:
            raise ValueError(f"a job cannot read and write the same table: {sorted(overlap)}")
        self.spark, self.client, self.catalog = spark, client, catalog
        self.job_id, self.sources, self.sinks = job_id, list(sources), list(sinks)
        self._roots: list[str] | None = None

    def register(self) -> None:
        """Register every source and sink (idempotent: safe on every start)."""
        for table in self.sources:
            self.client.register_source(
                self.job_id, table, format=self.catalog.format, location=self.catalog.location(table)
            )
        for table in self.sinks:
            self.client.register_sink(
                self.job_id, table, format=self.catalog.format, location=self.catalog.location(table)
            )
        self._roots = None

    def unregister(self) -> None:
        """The job is retired: its edges and writer claims go; its history stays."""
        self.client.unregister(self.job_id)

    def run_once(
        self,
        transform: Transform,
        *,
        mode: WriteMode = "overwrite",
        abort_on: tuple[type[BaseException], ...] = (),
    ) -> RunResult:
        """Process at most one barrier.

        Args:
            transform: builds one DataFrame per sink from the inputs at the barrier's snapshots.
            mode: "overwrite" replaces each sink's contents; "append" adds the rows.
            abort_on: exception types (besides `PermanentFailure`) that abort the barrier instead of leaving it
                in flight for a retry.

        Returns:
            What happened; `action == "process"` when a barrier was committed.
        """
        started = time.monotonic()
        decision = self.client.next_barrier(self.job_id, self._root_snapshots())
        if decision.action != "process" or decision.barrier is None:
            logger.info("job %s: %s (barrier %s)", self.job_id, decision.action, decision.barrier)
            return RunResult(decision.action, decision.barrier, skipped=tuple(decision.skipped))
        barrier = decision.barrier
        logger.info("job %s: processing barrier %d with %s", self.job_id, barrier, dict(decision.inputs))
        try:
            snapshots, reused = self._write_sinks(transform, decision.inputs, barrier=barrier, mode=mode)
        except (PermanentFailure, *abort_on) as exc:  # type: ignore[misc]
            self.client.abort_barrier(self.job_id, barrier, reason=f"{type(exc).__name__}: {exc}"[:2000])
            raise
        _failpoints.hit("before_metaservice_commit")
        self.client.commit_barrier(self.job_id, barrier, snapshots)
        elapsed = time.monotonic() - started
        logger.info("job %s: committed barrier %d → %s in %.2fs", self.job_id, barrier, snapshots, elapsed)
        return RunResult("process", barrier, snapshots, tuple(decision.skipped), tuple(reused), elapsed)

    def run_pending(
        self, transform: Transform, *, mode: WriteMode = "overwrite", max_barriers: int = 10_000
    ) -> list[RunResult]:
        """Process barriers until the job is idle or must wait; returns one result per call made."""
        results: list[RunResult] = []
        for _ in range(max_barriers):
            result = self.run_once(transform, mode=mode)
            results.append(result)
            if result.action != "process":
                break
        return results

    def _root_snapshots(self) -> dict[str, int]:
        """The latest storage snapshot of each root source, for the server to seal in a new barrier."""
        if self._roots is None:
            self._roots = [t for t in self.sources if self.client.get_table(t).get("kind") == "root"]
        snapshots = {}
        for table in self._roots:
            latest = self.catalog.latest_snapshot(table)
            if latest is not None:
                snapshots[table] = latest
        return snapshots

    def _write_sinks(
        self, transform: Transform, inputs: Mapping[str, object], *, barrier: int, mode: WriteMode
    ) -> tuple[dict[str, int], list[str]]:
        snapshots: dict[str, int] = {}
        reused: list[str] = []
        pending = []
        for sink in self.sinks:
            existing = self.catalog.committed_snapshot(sink, app_id=self.job_id, barrier=barrier)
            if existing is not None:
                snapshots[sink] = existing
                reused.append(sink)
            else:
                pending.append(sink)
        if pending:
            frames = transform(Inputs(self.spark, self.catalog, inputs, barrier=barrier))  # type: ignore[arg-type]
            missing = sorted(set(self.sinks) - set(frames))
            if missing:
                raise ValueError(f"transform returned no DataFrame for sinks {missing}")
            for sink in pending:
                snapshots[sink] = self.catalog.write(
                    self.spark, frames[sink], sink, mode=mode, app_id=self.job_id, barrier=barrier
                )
        return snapshots, reused
