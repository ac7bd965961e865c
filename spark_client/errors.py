"""Exceptions raised by the client, one class per problem `code` the server reports.

The errors of a job's own logic (not answers of the server) are at the end: `PermanentFailure`,
`InvalidTransformResult`, `UnsafeWriteMode` and `UnexpectedSinkCommit`.

Every error answer of MetaService is an RFC 9457 problem document
(`{"type", "title", "status", "detail", "code", ...}`); `error_from_problem` turns one into the matching
exception. Errors that never reached the server (connection failures) and answers of unknown outcome are
`Unavailable` and `OutcomeUnknown`.

Example:
    try:
        client.register_sink("enrich", "lake.mart.orders")
    except TableHasWriter as exc:
        print(f"{exc.writer} already writes lake.mart.orders")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any


class MetaServiceError(Exception):
    """Base of every error the client raises.

    Attributes:
        detail: human-readable sentence.
        status: HTTP status of the answer, or None when there was no answer (connection failures).
        code: machine-readable problem code (`"not_found"`, `"cycle"`, ...); `"http_<status>"` when the
            server's answer had none.
        body: the whole problem document (empty when there was none).

    Example:
        try:
            client.version("lake.mart.orders")
        except MetaServiceError as exc:
            print(exc.status, exc.code, exc.detail)
    """

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str = "error",
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.code = code
        self.body: dict[str, Any] = dict(body or {})

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


class NotFound(MetaServiceError):
    """404: unknown job, table, barrier, lease or rollback.

    Example:
        with contextlib.suppress(NotFound):
            client.unregister("retired-job")
    """


class NoConsistentVersion(NotFound):
    """404 `no_consistent_version`: no barrier is complete in every requested table yet.

    Example:
        try:
            versions = client.versions(["lake.mart.a", "lake.mart.b"])
        except NoConsistentVersion:
            versions = None  # the pipeline has not completed its first barrier
    """


class InvalidRequest(MetaServiceError):
    """400, 413 or 422: the request was malformed; nothing happened on the server.

    Attributes:
        errors: the offending fields as the server lists them (`[{"loc": [...], "msg": "..."}]`).

    Example:
        try:
            client.version("lake.mart.orders", "eventual")  # type: ignore[arg-type]
        except InvalidRequest as exc:
            print(exc.errors)
    """

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str = "invalid_request",
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail, status=status, code=code, body=body)
        raw = self.body.get("errors")
        items: list[Any] = raw if isinstance(raw, list) else []
        self.errors: list[dict[str, Any]] = [
            dict(item) if isinstance(item, Mapping) else {"msg": str(item)} for item in items
        ]


class Unauthorized(MetaServiceError):
    """401: the bearer token is missing or not accepted.

    Example:
        MetaServiceClient(url, token=os.environ["METASERVICE_TOKEN"])  # avoids Unauthorized
    """


class Forbidden(MetaServiceError):
    """403: the token is valid but does not allow this call.

    Example:
        try:
            client.plan_rollback("lake.mart.orders", barrier)
        except Forbidden:
            print("ask an admin")
    """


class Conflict(MetaServiceError):
    """409: the request breaks a rule of the protocol. Subclasses name the rule; other codes stay `Conflict`.

    Example:
        try:
            client.commit_barrier("enrich", barrier, snapshots)
        except Conflict as exc:
            print(exc.code)
    """


class CycleError(Conflict):
    """409 `cycle`: the registration would close a loop in the lineage graph.

    Attributes:
        cycle: names of the nodes along the loop, as the server reports them.

    Example:
        try:
            client.register_source("enrich", "lake.mart.orders_enriched")
        except CycleError as exc:
            print(" -> ".join(exc.cycle))
    """

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str = "cycle",
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail, status=status, code=code, body=body)
        raw = self.body.get("cycle")
        self.cycle: list[str] = [str(node) for node in raw] if isinstance(raw, list) else []


class TableHasWriter(Conflict):
    """409 `table_has_writer`: another job already writes the table.

    Attributes:
        writer: the job that writes the table ("" when the server did not say).

    Example:
        try:
            client.register_sink("enrich-v2", "lake.mart.orders")
        except TableHasWriter as exc:
            client.unregister(exc.writer)
    """

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str = "table_has_writer",
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail, status=status, code=code, body=body)
        writer = self.body.get("writer")
        self.writer: str = "" if writer is None else str(writer)


class NotInFlight(Conflict):
    """409 `not_in_flight`: the barrier was never handed to the job, or it was aborted.

    Example:
        try:
            client.commit_barrier("enrich", barrier, snapshots)
        except NotInFlight:
            pass  # ask next_barrier again
    """


class SnapshotConflict(Conflict):
    """409 `snapshot_conflict`: the barrier was already committed with other snapshots.

    Example:
        try:
            client.commit_barrier("enrich", barrier, {"lake.mart.x": 8})
        except SnapshotConflict as exc:
            print(exc.detail)
    """


class SnapshotRegressed(Conflict):
    """409 `snapshot_regressed`: a snapshot id lower than the one committed at an earlier barrier.

    Example:
        try:
            client.commit_barrier("enrich", barrier, {"lake.mart.x": 3})
        except SnapshotRegressed as exc:
            print(exc.detail)
    """


class AlreadyCommitted(Conflict):
    """409 `already_committed`: an abort arrived after the barrier was committed.

    Example:
        with contextlib.suppress(AlreadyCommitted):
            client.abort_barrier("enrich", barrier, reason="cancelled")
    """


class NotFreshEnough(Conflict):
    """409 `not_fresh_enough`: no consistent version met the freshness bound within the wait.

    Attributes:
        best_barrier: barrier of the freshest consistent version there was (None when the server did not say).
        best_issued_at: when that barrier was issued (timezone-aware), or None.
        staleness_seconds: its age by the database clock when the server gave up, or None.
        min_barrier: the bound asked (None when the bound was a staleness).
        max_staleness_seconds: the bound asked (None when the bound was a barrier).

    Example:
        try:
            versions = client.versions(["lake.mart.a"], max_staleness_seconds=300, wait_seconds=30)
        except NotFreshEnough as exc:
            print(f"freshest is barrier {exc.best_barrier}, {exc.staleness_seconds:.0f} s old")
    """

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str = "not_fresh_enough",
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail, status=status, code=code, body=body)
        self.best_barrier: int | None = _optional_int(self.body.get("best_barrier"))
        self.best_issued_at: datetime | None = _optional_time(self.body.get("best_issued_at"))
        self.staleness_seconds: float | None = _optional_float(self.body.get("staleness_seconds"))
        self.min_barrier: int | None = _optional_int(self.body.get("min_barrier"))
        self.max_staleness_seconds: float | None = _optional_float(self.body.get("max_staleness_seconds"))


def _optional_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _optional_float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _optional_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


class NotRoot(Conflict):
    """409 `not_root`: snapshots of a table written by a job cannot be reported from outside.

    Example:
        try:
            client.report_snapshot("lake.mart.orders_enriched", 12)
        except NotRoot:
            pass  # the writer job commits this table's snapshots
    """


class Unavailable(MetaServiceError):
    """The server stayed unreachable or busy through every retry (connection errors, 429, 502, 503, 504).

    Attributes:
        retry_after: seconds the server asked to wait (its `Retry-After` header), when it said.

    Example:
        try:
            client.next_barrier("enrich")
        except Unavailable:
            time.sleep(60)  # and run again later; the barrier stays in flight
    """

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str = "unavailable",
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(detail, status=status, code=code, body=body)
        self.retry_after = retry_after


class ServerError(MetaServiceError):
    """500 (and other 5xx without a retry meaning): a bug in the server. Never retried.

    Example:
        try:
            client.versions(["lake.mart.a"])
        except ServerError as exc:
            logger.error("report this: %s", exc.body)
    """


class OutcomeUnknown(MetaServiceError):
    """A call that is not idempotent may or may not have taken effect, so it was not retried.

    Raised by `create_lease` and `plan_rollback` when the request may have reached the server
    but no answer came back (read timeout, connection dropped after sending, 502, 504). Check the server's
    state before calling again (pyiceberg's CommitStateUnknown).

    Example:
        try:
            lease = client.create_lease("dashboard", snapshots)
        except OutcomeUnknown:
            lease = None  # an orphan lease, if created, expires on its own
    """


class PermanentFailure(Exception):
    """Raise from a transform to give the barrier up (abort) instead of retrying it on the next run.

    The job aborts the barrier on the server, then restores the sinks it had already written for it to their
    baseline, so none of the barrier's rows stay behind.

    Example:
        def transform(inputs):
            if inputs["lake.raw.orders"].isEmpty():
                raise PermanentFailure("the upstream export is empty")
            ...
    """


class DuplicateMergeKeys(PermanentFailure):
    """A `Merge` whose data holds a key more than once: which row should win is the job's decision, so the job
    gives the barrier up (a permanent failure: aborted, sinks restored, raised) instead of retrying it as is.

    The barrier's input stays unprocessed: the job's next barrier reads it again, so once the transform
    decides, nothing is lost.

    Attributes:
        job_id: the job.
        table: the sink written with `Merge`.
        barrier: the barrier given up.
        keys: the Merge key columns.
        sample: up to five duplicate keys, each `{column: value, ..., "rows": how many rows hold it}`.

    Example:
        try:
            job.run_once(transform, mode={"lake.mart.state": Merge(keys=("id",))})
        except DuplicateMergeKeys as exc:
            print(exc.table, exc.sample)
    """

    def __init__(
        self, *, job_id: str, table: str, barrier: int, keys: Sequence[str], sample: Sequence[Mapping[str, Any]]
    ) -> None:
        self.job_id, self.table, self.barrier = job_id, table, barrier
        self.keys, self.sample = tuple(keys), [dict(s) for s in sample]
        shown = "; ".join(
            ", ".join(f"{k}={v!r}" for k, v in s.items() if k != "rows") + f" ({s['rows']} rows)" for s in self.sample
        )
        columns = ", ".join(repr(k) for k in self.keys)
        super().__init__(
            f"job {job_id!r}, barrier {barrier}: the data for sink {table!r}, written with Merge(keys=({columns},)), "
            f"holds a key more than once, e.g. {shown}. Which row wins is the job's choice: keep one row per key "
            "in the transform (e.g. the newest, with a window over the keys ordered by a time column, or "
            f"df.dropDuplicates([{columns}]) when the rows are equal), or write the sink with Append if every row "
            "is wanted, or widen the keys if they do not identify a row. The barrier was aborted and nothing it "
            "wrote stays; its input is read again at the job's next barrier"
        )


class InvalidTransformResult(TypeError):
    """The transform returned something other than one DataFrame per declared sink; nothing was written.

    Example:
        try:
            job.run_once(lambda inputs: inputs["lake.raw.orders"])   # a bare DataFrame, not {sink: df}
        except InvalidTransformResult as exc:
            print(exc)
    """


class UnsafeWriteMode(ValueError):
    """A write mode that would lose rows with how the transform read its inputs: an incremental read
    (`inputs.changes`) written with a whole-table `Overwrite`. Nothing was written.

    Example:
        job.run_once(transform, mode=Append())   # instead of "overwrite" when transform uses inputs.changes
    """


class UnexpectedSinkCommit(RuntimeError):
    """A sink holds a commit after MetaService's baseline that this job did not make (another writer, or a
    restore to another snapshot). The job will not guess: restore the table to the baseline, or roll the
    pipeline back. Nothing was written.

    Attributes:
        table: the sink.
        baseline: the snapshot MetaService holds for it before the barrier.
        snapshot_id: the unexpected commit.

    Example:
        try:
            job.run_once(transform, mode="append")
        except UnexpectedSinkCommit as exc:
            catalog.restore(exc.table, exc.baseline)
    """

    def __init__(self, detail: str, *, table: str, baseline: int | None, snapshot_id: int) -> None:
        super().__init__(detail)
        self.table, self.baseline, self.snapshot_id = table, baseline, snapshot_id


_CONFLICTS: dict[str, type[Conflict]] = {
    "cycle": CycleError,
    "table_has_writer": TableHasWriter,
    "not_in_flight": NotInFlight,
    "snapshot_conflict": SnapshotConflict,
    "snapshot_regressed": SnapshotRegressed,
    "already_committed": AlreadyCommitted,
    "not_root": NotRoot,
    "not_fresh_enough": NotFreshEnough,
}
_BUSY_STATUSES = frozenset({429, 502, 503, 504})


def error_from_problem(
    status: int,
    body: Mapping[str, Any],
    *,
    retry_after: float | None = None,
) -> MetaServiceError:
    """The exception for an error answer, from its status and problem document.

    Args:
        status: the HTTP status (4xx or 5xx).
        body: the problem document; may be empty or lack fields when the answer was not problem+json.
        retry_after: the answer's Retry-After in seconds, kept on `Unavailable`.

    Returns:
        The most specific exception for the status and `code`.

    Example:
        exc = error_from_problem(409, {"code": "table_has_writer", "detail": "...", "writer": "enrich"})
        assert isinstance(exc, TableHasWriter) and exc.writer == "enrich"
    """
    code = str(body.get("code") or f"http_{status}")
    detail = str(body.get("detail") or body.get("title") or f"HTTP {status}")
    cls: type[MetaServiceError]
    if status == 404:
        cls = NoConsistentVersion if code == "no_consistent_version" else NotFound
    elif status == 409:
        cls = _CONFLICTS.get(code, Conflict)
    elif status in (400, 413, 422):
        cls = InvalidRequest
    elif status == 401:
        cls = Unauthorized
    elif status == 403:
        cls = Forbidden
    elif status in _BUSY_STATUSES:
        return Unavailable(detail, status=status, code=code, body=body, retry_after=retry_after)
    elif status >= 500:
        cls = ServerError
    else:
        cls = MetaServiceError
    return cls(detail, status=status, code=code, body=body)


__all__ = [
    "AlreadyCommitted",
    "Conflict",
    "CycleError",
    "DuplicateMergeKeys",
    "Forbidden",
    "InvalidRequest",
    "InvalidTransformResult",
    "MetaServiceError",
    "NoConsistentVersion",
    "NotFound",
    "NotFreshEnough",
    "NotInFlight",
    "NotRoot",
    "OutcomeUnknown",
    "PermanentFailure",
    "ServerError",
    "SnapshotConflict",
    "SnapshotRegressed",
    "TableHasWriter",
    "Unauthorized",
    "Unavailable",
    "UnexpectedSinkCommit",
    "UnsafeWriteMode",
    "error_from_problem",
]
