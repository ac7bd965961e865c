"""EtlJob: one ETL job's side of the FLIP-276 protocol, crash-safe at every step and in every write mode."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from spark_client import _failpoints
from spark_client._http import MetaServiceClient, StartAt, check_openlineage_parent, check_start
from spark_client.catalog._writes import DuplicateKeys
from spark_client.catalog.base import Catalog, CommitRecord
from spark_client.errors import (
    AlreadyCommitted,
    DuplicateMergeKeys,
    InvalidTransformResult,
    MetaServiceError,
    NotInFlight,
    NotRoot,
    PermanentFailure,
    UnexpectedSinkCommit,
    UnsafeWriteMode,
)
from spark_client.inputs import Inputs
from spark_client.models import BarrierDecision
from spark_client.modes import ModeSpec, Overwrite, WriteMode, resolve

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger("spark_client.job")

Transform = Callable[[Inputs], Mapping[str, "DataFrame"]]
_JOB_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}")
UNDO_KEY = "metaservice.undoes_barrier"  # metadata of a restore that undoes an aborted attempt


class _AbortedMeanwhile(Exception):
    """The server no longer holds the barrier in flight for the job (an abort: a lineage change, an admin)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


__all__ = [
    "EtlJob",
    "PermanentFailure",
    "RunResult",
    "SinkPlan",
    "Transform",
    "plan_sink",
]


@dataclass(frozen=True)
class RunResult:
    """What one `run_once` did.

    Attributes:
        action: "process" (a barrier was processed and committed), "idle" or "wait" (nothing to do now), or
            "aborted" (the server gave the barrier up while the job worked on it, e.g. its lineage changed;
            what the job had written for it was undone, and the next run goes on).
        barrier: the barrier processed, or the one being waited for.
        snapshots: sink name → snapshot id committed for the barrier.
        skipped: barriers passed over because an input aborted them.
        reused: sinks whose snapshot was found already written by an earlier, crashed run.
        seconds: how long the run took.
        undone: sinks restored to their baseline: commits of aborted attempts found before writing, or what
            this run had written for a barrier that ended aborted.
        reason: why the barrier was aborted (action "aborted").

    Example:
        result = job.run_once(transform, mode="append")
        if result.action == "process":
            print(result.barrier, result.snapshots)
    """

    action: Literal["process", "idle", "wait", "aborted"]
    barrier: int | None
    snapshots: Mapping[str, int] = field(default_factory=dict)
    skipped: tuple[int, ...] = ()
    reused: tuple[str, ...] = ()
    seconds: float = 0.0
    undone: tuple[str, ...] = ()
    reason: str | None = None


@dataclass(frozen=True)
class SinkPlan:
    """What storage needs before a sink is written for a barrier (design rule 11).

    Attributes:
        reuse: the snapshot this job already committed for the barrier (a crash after the commit): report it.
        undo: when commits of this job for other barriers (aborted attempts) follow the baseline, every
            commit the restore to the baseline drops; then write.

    Example:
        plan = plan_sink(catalog.commits_after(sink, 4), table=sink, baseline=4, job_id="enrich", barrier=b)
    """

    reuse: int | None = None
    undo: tuple[int, ...] = ()


def plan_sink(
    records: Sequence[CommitRecord], *, table: str, baseline: int | None, job_id: str, barrier: int
) -> SinkPlan:
    """Decide, from the commits after the baseline, how to make a sink agree with MetaService.

    Commits older than the newest restore to the baseline are undone already and do not count. Of the rest,
    commits that change no rows ("other") are ignored; this job's commits for `barrier` are reused; its
    commits for other barriers are aborted attempts to undo, and so are its undos back to one of its own
    commits after the baseline (the baseline an earlier attempt was given was a commit MetaService lost since,
    with an asynchronous standby's tail at a failover). Anything else (another writer, a restore to another
    snapshot) raises, since neither undoing nor keeping it is known to be right.

    Args:
        records: `Catalog.commits_after(table, baseline)`, newest first.
        table: the sink, named in errors.
        baseline: the snapshot MetaService holds for the sink before the barrier (None: none).
        job_id: the job.
        barrier: the barrier about to be written.

    Raises:
        UnexpectedSinkCommit: a commit the job did not make.

    Example:
        plan = plan_sink([], table="lake.mart.x", baseline=4, job_id="enrich", barrier=7)
        assert plan == SinkPlan()
    """
    effective: list[CommitRecord] = []
    for record in records:
        if record.kind == "restore" and record.restored_snapshot_id == baseline:
            break  # the table held exactly the baseline again here
        effective.append(record)
    changing = [r for r in reversed(effective) if r.kind != "other"]
    own: set[int] = set()  # snapshots after the baseline that hold only the baseline and this job's writes
    for record in changing:
        if record.kind == "restore" and record.job_id == job_id and record.restored_snapshot_id in own:
            # This job's undo of an attempt back to an earlier commit of its own after the baseline: its baseline
            # then was that commit, which MetaService no longer holds (a failover of an asynchronously replicated
            # database lost the commit with the tail). Restoring the baseline drops it all.
            own.add(record.snapshot_id)
            continue
        if record.job_id == job_id and record.kind != "restore":
            own.add(record.snapshot_id)
        if record.job_id != job_id or record.kind == "restore":
            what = (
                f"a restore to {record.restored_snapshot_id}"
                if record.kind == "restore"
                else f"a {record.kind} by {record.job_id or 'an unknown writer'}"
                + (f" for barrier {record.barrier}" if record.barrier is not None else "")
            )
            raise UnexpectedSinkCommit(
                f"job {job_id!r}, barrier {barrier}: sink {table!r} holds snapshot {record.snapshot_id} ({what}) "
                f"after snapshot {baseline}, which MetaService holds for it; only this job writes the table, so "
                f"the job cannot tell whether to keep or undo it. Restore {table!r} to {baseline} (or roll the "
                "pipeline back) and run again; nothing was written",
                table=table,
                baseline=baseline,
                snapshot_id=record.snapshot_id,
            )
    if any(r.barrier != barrier for r in changing):  # restoring the baseline drops all of them, b's too
        return SinkPlan(undo=tuple(r.snapshot_id for r in changing))
    mine = [r.snapshot_id for r in changing if r.kind == "write"]
    return SinkPlan(reuse=mine[-1] if mine else None)


class EtlJob:
    """One ETL job: registers its lineage, then processes barriers with inputs at aligned snapshots.

    Every step is safe to repeat: a crash anywhere leaves the barrier in flight, the next run is offered the
    same barrier with the same inputs, and finds the sink commits it already made (Delta app transactions).
    Before writing a sink, the job makes storage agree with the snapshot MetaService holds for it: commits
    an aborted attempt left behind are undone, so no row lands twice across an abort.

    When barriers come: a job that reads root tables reports their newest snapshots with each `next`, and the
    server issues a barrier sealing new ones (so appending to a root and calling `run_once` processes a new
    barrier without anyone calling `issue_barrier`). A job without sources is an ingestion step: `run_once`
    issues a barrier itself (`client.issue_barrier()`, an admin call) and processes it.

    Args:
        spark: the session that reads and writes.
        client: the MetaService client.
        catalog: where the tables live (`DeltaCatalog`, ...).
        job_id: `[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}`.
        sources: tables the job reads (`catalog.database.table`); empty for an ingestion step.
        sinks: tables the job writes; at least one.
        start: where the job's first barrier is: "newest" (default: the newest barrier its inputs settled;
            earlier data is not processed), "earliest" (the first barrier at which every input holds data: a
            backfill) or a barrier value (the first barrier at or after it). Ignored once the job has
            settled a barrier.
        future_roots: sources that may not exist yet, neither in storage nor in MetaService: roots an outside
            writer will create. `register` refuses any other source that MetaService does not know and storage
            does not hold (a misspelt name would become a root that never gets data).
        openlineage_parent: the OpenLineage run that started this job (an Airflow task instance's run), as
            `<namespace>/<job name>/<run id>`; default: the environment variable `OPENLINEAGE_PARENT_ID`
            (`metaservice_airflow.spark_env(context)` sets it), "" for none. Sent with `next`, commit and abort,
            so MetaService's OpenLineage event of each run the job ends names it as the run's parent.

    Raises:
        ValueError: a malformed job id or table name, a table both read and written, no sinks, a future root
            that is not a source, a malformed `openlineage_parent` (or `OPENLINEAGE_PARENT_ID`).

    Example:
        job = EtlJob(spark, client, catalog, job_id="enrich",
                     sources=["lake.raw.orders"], sinks=["lake.mart.orders_enriched"], start="earliest")
        job.register()
        result = job.run_once(lambda inputs: {"lake.mart.orders_enriched": inputs.changes("lake.raw.orders")},
                              mode="append")
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
        start: StartAt = "newest",
        future_roots: Sequence[str] = (),
        openlineage_parent: str | None = None,
    ) -> None:
        if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
            raise ValueError(f"job ids match {_JOB_ID.pattern}, got {job_id!r}")
        for role, tables in (("sources", sources), ("sinks", sinks)):
            if isinstance(tables, str):
                raise TypeError(f"job {job_id!r}: {role} is a list of table names, got the string {tables!r}")
            for table in tables:
                try:
                    catalog.location(table)
                except (ValueError, TypeError) as exc:
                    what = f"job {job_id!r}: {role[:-1]} {table!r}"
                    raise ValueError(f"{what} is not a valid table name: {exc}") from None
            if len(set(tables)) != len(tables):
                raise ValueError(f"job {job_id!r}: {role} name a table twice: {list(tables)}")
        if not sinks:
            raise ValueError(f"job {job_id!r} needs at least one sink")
        overlap = set(sources) & set(sinks)
        if overlap:
            raise ValueError(f"job {job_id!r} cannot read and write the same table: {sorted(overlap)}")
        self.spark, self.client, self.catalog = spark, client, catalog
        self.job_id, self.sources, self.sinks = job_id, list(sources), list(sinks)
        self.start: StartAt = check_start(start)
        stray = sorted(set(future_roots) - set(sources))
        if stray or isinstance(future_roots, str):
            raise ValueError(f"job {job_id!r}: future_roots must be a list of its sources, got {future_roots!r}")
        self.future_roots = list(future_roots)
        self.openlineage_parent = check_openlineage_parent(openlineage_parent)
        self._roots: list[str] | None = None

    def __repr__(self) -> str:
        return f"EtlJob({self.job_id!r}, sources={self.sources}, sinks={self.sinks})"

    def register(self) -> None:
        """Register every source and sink in one request: all of them or none (idempotent: safe on every start).

        A source that storage holds, or that `future_roots` lists, may be new to MetaService; any other must be
        known to it (a job's sink, a reported root), else nothing is registered.

        Raises:
            Conflict: `code` "unknown_source" (`tables` names them) or "table_retired"; nothing was registered.
            TableHasWriter: another job writes a sink; nothing was registered.

        Example:
            job.register()
        """
        tables = [*self.sources, *self.sinks]
        in_storage = [
            t for t in self.sources if t not in self.future_roots and self.catalog.latest_snapshot(t) is not None
        ]
        self.client.register_job(
            self.job_id,
            sources=self.sources,
            sinks=self.sinks,
            new_roots=[*self.future_roots, *in_storage],
            formats={t: self._format_of(t) for t in tables},
            locations={t: self.catalog.location(t) for t in tables},
        )
        self._roots = None

    def _format_of(self, table: str) -> str:
        """The table's format: a catalog of several formats (`RoutingCatalog`) knows it per table."""
        format_of = getattr(self.catalog, "format_of", None)
        return str(format_of(table)) if callable(format_of) else self.catalog.format

    def unregister(self) -> None:
        """The job is retired: its edges and writer claims go; its history stays.

        Example:
            job.unregister()
        """
        self.client.unregister(self.job_id)

    @property
    def is_ingestion(self) -> bool:
        """A job without sources: it issues its own barriers (`run_once` calls `issue_barrier`)."""
        return not self.sources

    def run_once(
        self,
        transform: Transform,
        *,
        mode: ModeSpec = "overwrite",
        abort_on: tuple[type[BaseException], ...] = (),
    ) -> RunResult:
        """Process at most one barrier.

        Args:
            transform: builds one DataFrame per sink, `{sink: DataFrame}`, from the inputs at the barrier's
                snapshots; exactly the declared sinks.
            mode: one write mode for every sink, or a mapping sink → mode (`spark_client.modes`: `Append`,
                `Overwrite`, `ReplaceWhere`, `OverwritePartitions`, `Merge`; "append"/"overwrite" are
                shorthands). The default "overwrite" is refused for a transform that read an input with
                `inputs.changes`, since it would keep only this barrier's rows.
            abort_on: exception types (besides `PermanentFailure`) that abort the barrier instead of leaving it
                in flight for a retry.

        Returns:
            What happened; `action == "process"` when a barrier was committed, "aborted" when the server gave
            it up meanwhile (what was written for it is undone).

        Raises:
            InvalidTransformResult: the transform did not return one DataFrame per sink; nothing was written.
            UnsafeWriteMode: an incremental read written with a whole-table Overwrite; nothing was written.
            UnexpectedSinkCommit: a sink holds a commit this job did not make after its baseline.
            PermanentFailure: the transform gave up; the barrier was aborted and the sinks restored.

        Example:
            job.run_once(transform, mode={"lake.mart.readings": Append(),
                                          "lake.mart.sensor_state": Merge(keys=("sensor_id",))})
        """
        return self._run(transform, mode=mode, abort_on=abort_on, issue=self.is_ingestion)

    def run_pending(
        self,
        transform: Transform,
        *,
        mode: ModeSpec = "overwrite",
        abort_on: tuple[type[BaseException], ...] = (),
        max_barriers: int = 10_000,
    ) -> list[RunResult]:
        """Process barriers until the job is idle or must wait; returns one result per barrier asked for.

        An ingestion step (no sources) issues one barrier and processes it: one run per call.

        Example:
            results = job.run_pending(transform, mode="append")
            processed = [r.barrier for r in results if r.action == "process"]
        """
        results: list[RunResult] = []
        for n in range(max_barriers):
            result = self._run(transform, mode=mode, abort_on=abort_on, issue=self.is_ingestion and n == 0)
            results.append(result)
            if result.action not in ("process", "aborted"):
                break
        return results

    def _run(
        self, transform: Transform, *, mode: ModeSpec, abort_on: tuple[type[BaseException], ...], issue: bool
    ) -> RunResult:
        modes = resolve(mode, self.sinks, job_id=self.job_id)  # a bad mode fails before anything happens
        started = time.monotonic()
        if issue:
            issued = self.client.issue_barrier()
            logger.info("job %s (ingestion): issued barrier %d", self.job_id, issued.barrier)
        decision = self._next()
        if decision.action != "process" or decision.barrier is None:
            logger.info("job %s: %s (barrier %s)", self.job_id, decision.action, decision.barrier)
            return RunResult(decision.action, decision.barrier, skipped=tuple(decision.skipped))
        barrier = decision.barrier
        logger.info("job %s: processing barrier %d with %s", self.job_id, barrier, dict(decision.inputs))
        written: dict[str, int] = {}
        undone: list[str] = []
        try:
            try:
                reused = self._write_sinks(transform, decision, modes, written=written, undone=undone)
            except (PermanentFailure, *abort_on) as exc:  # type: ignore[misc]
                self._give_up(decision, written, reason=f"{type(exc).__name__}: {exc}"[:2000])
                raise
            _failpoints.hit("before_metaservice_commit")
            self.client.commit_barrier(self.job_id, barrier, written, openlineage_parent=self.openlineage_parent)
        except (NotInFlight, _AbortedMeanwhile) as exc:
            reason = exc.detail if isinstance(exc, NotInFlight) else exc.reason
            restored = self._undo(decision, written)
            logger.warning(
                "job %s: barrier %d was aborted by the server while the job worked on it (%s); restored %s",
                self.job_id,
                barrier,
                reason,
                restored,
            )
            return RunResult(
                "aborted",
                barrier,
                skipped=tuple(decision.skipped),
                seconds=time.monotonic() - started,
                undone=tuple(restored),
                reason=reason,
            )
        elapsed = time.monotonic() - started
        logger.info("job %s: committed barrier %d → %s in %.2fs", self.job_id, barrier, written, elapsed)
        return RunResult(
            "process", barrier, dict(written), tuple(decision.skipped), tuple(reused), elapsed, tuple(undone)
        )

    def _next(self) -> BarrierDecision:
        """`next` with the root sources' snapshots. The roots are asked of the server on every run, so the job
        follows lineage changes (a source whose writer job was retired becomes a root, one whose writer comes
        back stops being one); a `NotRoot` answer (the lineage changed in between) is asked again once."""
        self._roots = None
        try:
            return self.client.next_barrier(
                self.job_id, self._root_snapshots(), start=self.start, openlineage_parent=self.openlineage_parent
            )
        except NotRoot as exc:
            logger.info("job %s: %s; asking the server for its roots again", self.job_id, exc.detail)
            self._roots = None
            return self.client.next_barrier(
                self.job_id, self._root_snapshots(), start=self.start, openlineage_parent=self.openlineage_parent
            )

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
        self,
        transform: Transform,
        decision: BarrierDecision,
        modes: Mapping[str, WriteMode],
        *,
        written: dict[str, int],
        undone: list[str],
    ) -> list[str]:
        """Write every sink for the barrier (filling `written` as commits land); returns the reused sinks."""
        barrier = decision.barrier
        assert barrier is not None
        reused: list[str] = []
        pending: list[str] = []
        for sink in self.sinks:
            existing = self._prepare_sink(decision, sink, undone)
            if existing is None:
                pending.append(sink)
            else:
                written[sink] = existing
                reused.append(sink)
        if not pending:
            return reused
        inputs = Inputs(self.spark, self.catalog, decision.inputs, barrier=barrier, job_id=self.job_id)
        frames = self._checked_result(transform(inputs), barrier)
        self._check_overwrites(inputs, {sink: modes[sink] for sink in pending})
        for sink in pending:
            mode = modes[sink]
            self._check_in_flight(barrier, before=sink)  # work the server gave up is not done
            try:
                written[sink] = self.catalog.write(
                    self.spark, frames[sink], sink, mode=mode, app_id=self.job_id, barrier=barrier
                )
            except DuplicateKeys as exc:  # the write groups the data by key once; nothing was written
                raise DuplicateMergeKeys(
                    job_id=self.job_id, table=sink, barrier=barrier, keys=list(exc.keys), sample=exc.sample
                ) from exc
        return reused

    def _check_overwrites(self, inputs: Inputs, modes: Mapping[str, WriteMode]) -> None:
        """Refuse a whole-table `Overwrite` of a sink when the transform read an input incrementally."""
        for sink, mode in modes.items():
            if isinstance(mode, Overwrite) and inputs.incremental:
                raise UnsafeWriteMode(
                    f"job {self.job_id!r}, barrier {inputs.barrier}: the transform read "
                    f"{sorted(inputs.incremental)} incrementally (inputs.changes) but sink {sink!r} is written with "
                    "Overwrite, which would replace the whole table with this barrier's changes and lose the rows of "
                    "earlier barriers. Write it with Append, Merge, OverwritePartitions or ReplaceWhere, or read the "
                    "input whole with inputs[name]; nothing was written"
                )

    def _check_in_flight(self, barrier: int, *, before: str) -> None:
        """Raise `_AbortedMeanwhile` when the server no longer holds `barrier` in flight for the job."""
        in_flight = self.client.get_job(self.job_id).get("in_flight_barrier")
        if in_flight == barrier:
            return
        why = ""
        with contextlib.suppress(MetaServiceError):
            runs = self.client._object("GET", f"/jobs/{quote(self.job_id, safe='')}/barriers", params={"limit": 20})
            for run in runs.get("runs", []):
                if run.get("barrier") == barrier and run.get("status") == "aborted" and run.get("reason"):
                    why = f": {run['reason']}"
        raise _AbortedMeanwhile(f"barrier {barrier} was aborted on the server before sink {before!r} was written{why}")

    def _prepare_sink(self, decision: BarrierDecision, sink: str, undone: list[str]) -> int | None:
        """Make `sink` agree with its baseline (rule 11); the snapshot to reuse, or None to write."""
        barrier = decision.barrier
        assert barrier is not None
        if sink not in decision.sinks:  # a server that does not name baselines: find our own commit only
            return self.catalog.committed_snapshot(sink, app_id=self.job_id, barrier=barrier)
        baseline = decision.sinks[sink].previous_snapshot_id
        plan = plan_sink(
            self.catalog.commits_after(sink, baseline),
            table=sink,
            baseline=baseline,
            job_id=self.job_id,
            barrier=barrier,
        )
        if plan.undo:
            version = self.catalog.restore(sink, baseline, metadata=self._undo_tags(barrier))
            logger.warning(
                "job %s: %s held snapshots %s of aborted attempts after its baseline %s; restored it as %d",
                self.job_id,
                sink,
                list(plan.undo),
                baseline,
                version,
            )
            undone.append(sink)
        return plan.reuse

    def _give_up(self, decision: BarrierDecision, written: Mapping[str, int], *, reason: str) -> None:
        """Abort the barrier on the server, then undo what this run wrote for it."""
        assert decision.barrier is not None
        try:
            self.client.abort_barrier(
                self.job_id, decision.barrier, reason=reason, openlineage_parent=self.openlineage_parent
            )
        except AlreadyCommitted:
            logger.error("job %s: barrier %d was committed already; not undoing it", self.job_id, decision.barrier)
            return
        except NotInFlight:
            pass  # aborted already (e.g. by a lineage change): undo all the same
        self._undo(decision, written)

    def _undo(self, decision: BarrierDecision, written: Mapping[str, int]) -> list[str]:
        """Restore each sink written for an aborted barrier to its baseline; returns the sinks restored.

        A crash before this finishes is harmless: the next barrier's `_prepare_sink` finds the commits."""
        assert decision.barrier is not None
        restored = []
        for sink in written:
            if sink not in decision.sinks:
                logger.warning("job %s: no baseline known for %s; its commit stays", self.job_id, sink)
                continue
            baseline = decision.sinks[sink].previous_snapshot_id
            self.catalog.restore(sink, baseline, metadata=self._undo_tags(decision.barrier))
            restored.append(sink)
        return restored

    def _undo_tags(self, barrier: int) -> dict[str, str]:
        return {"metaservice.job_id": self.job_id, UNDO_KEY: str(barrier)}

    def _checked_result(self, result: Any, barrier: int) -> Mapping[str, DataFrame]:
        """The transform's result, if it is exactly one DataFrame per declared sink."""
        from pyspark.sql import DataFrame

        where = f"job {self.job_id!r}, barrier {barrier}: the transform"
        expected = f"a mapping {{sink name: DataFrame}} with one entry per sink {self.sinks}"
        if result is None:
            raise InvalidTransformResult(f"{where} returned None; it must return {expected}")
        if isinstance(result, DataFrame):
            example = f"{{{self.sinks[0]!r}: df}}"
            raise InvalidTransformResult(f"{where} returned a bare DataFrame; return {expected}, e.g. {example}")
        if not isinstance(result, Mapping):
            raise InvalidTransformResult(f"{where} returned a {type(result).__name__}; it must return {expected}")
        undeclared = sorted(set(result) - set(self.sinks), key=str)
        missing = sorted(set(self.sinks) - set(result))
        if undeclared or missing:
            problems = []
            if undeclared:
                problems.append(f"DataFrames for tables that are not sinks of the job: {undeclared}")
            if missing:
                problems.append(f"no DataFrame for sinks {missing}")
            raise InvalidTransformResult(
                f"{where} returned {'; '.join(problems)}; declared sinks: {self.sinks} (declare a new sink in "
                "EtlJob(sinks=...) and register the job again); nothing was written"
            )
        for sink in self.sinks:
            if not isinstance(result[sink], DataFrame):
                raise InvalidTransformResult(
                    f"{where} returned a {type(result[sink]).__name__} for sink {sink!r}; every value must be a "
                    "Spark DataFrame; nothing was written"
                )
        return result
