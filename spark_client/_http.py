"""MetaServiceClient: typed access to the MetaService HTTP API with safe retries."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Self
from urllib.parse import quote

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, stop_after_delay

from spark_client._retry import RetryPolicy
from spark_client.errors import MetaServiceError, NotFound, OutcomeUnknown, Unavailable, error_for
from spark_client.models import (
    BarrierDecision,
    Commit,
    ConsistentVersions,
    IssuedBarrier,
    Lease,
    ProtectedSnapshot,
    Registration,
    Retention,
    RollbackPlan,
    TableVersion,
    parse_time,
)

logger = logging.getLogger("spark_client")

_VERSION = "0.1.0"
# Failures where the request provably had no effect: safe to retry even for non-idempotent calls.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Failures after the request may have reached the server.
_MAYBE_SENT = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
_RETRY_STATUSES = {429, 502, 503, 504}
_REJECTED_STATUSES = {429, 503}  # the server answered without doing anything


def _table_path(table: str) -> str:
    parts = table.split(".")
    if len(parts) != 3:
        raise ValueError(f"table names are catalog.database.table, got {table!r}")
    return "/".join(quote(p, safe="") for p in parts)


def _job(job_id: str) -> str:
    return quote(job_id, safe="")


class MetaServiceClient:
    """Typed access to the MetaService API.

    Every protocol call (register, next, commit, abort, versions, reads…) is idempotent by protocol, so it is
    retried with jittered exponential backoff on connection errors and 429/502/503/504 (honouring Retry-After),
    within the policy's attempts and deadline. Other 4xx are never retried. Calls that are not idempotent
    (`issue_barrier`, `create_lease`, `plan_rollback`) are retried only when the request provably had no effect
    (connection refused, 503/429); when the outcome is unknown they raise `OutcomeUnknown`.

    Args:
        base_url: e.g. "http://127.0.0.1:8080".
        token: bearer token; defaults to $METASERVICE_TOKEN.
        retry: retry policy (default: 8 attempts within 60 s).
        timeout: per-request timeout in seconds.
        transport: custom httpx transport (tests, proxies).

    Example:
        with MetaServiceClient("http://127.0.0.1:8080") as client:
            decision = client.next_barrier("enrich", {"lake.raw.orders": 12})
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        token = token if token is not None else os.environ.get("METASERVICE_TOKEN")
        headers = {"User-Agent": f"metaservice-spark-client/{_VERSION}"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=base_url,
            headers=headers,
            transport=transport,
            timeout=httpx.Timeout(timeout, connect=5.0),
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- lineage ---------------------------------------------------------------------------------------------

    def register_source(
        self, job_id: str, table: str, *, format: str | None = None, location: str | None = None
    ) -> Registration:
        """Declare that `job_id` reads `table` (idempotent)."""
        return self._register("source", job_id, table, format=format, location=location)

    def register_sink(
        self, job_id: str, table: str, *, format: str | None = None, location: str | None = None
    ) -> Registration:
        """Declare that `job_id` writes `table` (idempotent). Raises TableHasWriter, CycleError."""
        return self._register("sink", job_id, table, format=format, location=location)

    def unregister(self, job_id: str) -> None:
        """The job is retired: drop its edges and writer claims."""
        self._call("POST", f"/unregister/{_job(job_id)}")

    # --- barrier protocol ---------------------------------------------------------------------------------------

    def next_barrier(self, job_id: str, root_snapshots: Mapping[str, int] | None = None) -> BarrierDecision:
        """Ask what the job must do now; the same in-flight barrier is returned until commit/abort."""
        data = self._call(
            "POST", f"/jobs/{_job(job_id)}/barriers/next", json={"root_snapshots": dict(root_snapshots or {})}
        )
        return BarrierDecision.from_json(data)

    def commit_barrier(self, job_id: str, barrier: int, snapshots: Mapping[str, int]) -> Commit:
        """Report the sink snapshots written for `barrier` (exactly once; a repeat is a no-op)."""
        data = self._call(
            "POST", f"/jobs/{_job(job_id)}/barriers/{barrier}/commit", json={"snapshots": dict(snapshots)}
        )
        return Commit(str(data["job_id"]), int(data["barrier"]), str(data["status"]), dict(data["snapshots"]))

    def abort_barrier(self, job_id: str, barrier: int, reason: str | None = None) -> None:
        """Give the barrier up: downstream jobs skip it."""
        self._call("POST", f"/jobs/{_job(job_id)}/barriers/{barrier}/abort", json={"reason": reason})

    def issue_barrier(self, root_snapshots: Mapping[str, int] | None = None) -> IssuedBarrier:
        """Issue a global barrier now, sealing the given (and every known) root snapshot. Not idempotent."""
        data = self._call("POST", "/barriers", json={"root_snapshots": dict(root_snapshots or {})}, idempotent=False)
        return IssuedBarrier(int(data["barrier"]), parse_time(data["issued_at"]), dict(data["sealed"]))

    def report_snapshot(self, table: str, snapshot_id: int, *, committed_at: datetime | None = None) -> None:
        """Report a new snapshot of a root table written outside MetaService."""
        body: dict[str, Any] = {"snapshot_id": snapshot_id}
        if committed_at is not None:
            body["committed_at"] = committed_at.isoformat()
        self._call("POST", f"/tables/{_table_path(table)}/snapshots", json=body)

    # --- reads ----------------------------------------------------------------------------------------------

    def version(self, table: str, consistency: Literal["strong", "weak"] = "strong") -> TableVersion:
        """The snapshot of one table to read now."""
        data = self._call("GET", f"/version/{consistency}/{_table_path(table)}")
        return TableVersion(
            str(data["table"]), str(data["consistency"]), int(data["barrier"]), int(data["snapshot_id"])
        )

    def versions(self, tables: Sequence[str], consistency: Literal["strong", "weak"] = "strong") -> ConsistentVersions:
        """One barrier and one snapshot per table. Raises NoConsistentVersion before the first common barrier."""
        data = self._call("POST", "/versions", json={"tables": list(tables), "consistency": consistency})
        return ConsistentVersions(str(data["consistency"]), int(data["barrier"]), dict(data["versions"]))

    def create_lease(self, holder: str, snapshots: Mapping[str, int], ttl_seconds: float = 600) -> Lease:
        """Protect snapshots from expiry while a reader uses them. Not idempotent."""
        data = self._call(
            "POST",
            "/leases",
            json={"holder": holder, "snapshots": dict(snapshots), "ttl_seconds": ttl_seconds},
            idempotent=False,
        )
        return Lease(str(data["lease_id"]), parse_time(data["expires_at"]))

    def renew_lease(self, lease_id: str, ttl_seconds: float | None = None) -> Lease:
        body = {"ttl_seconds": ttl_seconds} if ttl_seconds is not None else None
        data = self._call("POST", f"/leases/{quote(lease_id, safe='')}/renew", json=body)
        return Lease(str(data["lease_id"]), parse_time(data["expires_at"]))

    def release_lease(self, lease_id: str) -> None:
        """End a lease; a lease already gone is fine."""
        with contextlib.suppress(NotFound):
            self._call("DELETE", f"/leases/{quote(lease_id, safe='')}")

    def retention(self, table: str) -> Retention:
        """Which snapshots of `table` must be kept, and why."""
        data = self._call("GET", f"/tables/{_table_path(table)}/retention")
        protected = tuple(ProtectedSnapshot(int(p["snapshot_id"]), str(p["reason"])) for p in data.get("protected", []))
        return Retention(str(data["table"]), data.get("oldest_protected_snapshot_id"), protected)

    def plan_rollback(self, table: str, barrier: int) -> RollbackPlan:
        data = self._call("POST", "/rollbacks", json={"table": table, "barrier": barrier}, idempotent=False)
        return RollbackPlan.from_json(data)

    def complete_rollback(self, rollback_id: str) -> RollbackPlan:
        data = self._call("POST", f"/rollbacks/{quote(str(rollback_id), safe='')}/complete")
        return RollbackPlan.from_json(data)

    def get_job(self, job_id: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/jobs/{_job(job_id)}"))

    def get_table(self, table: str) -> dict[str, Any]:
        return dict(self._call("GET", f"/tables/{_table_path(table)}"))

    def lineage(self, table: str | None = None, *, direction: str = "both", depth: int | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"direction": direction}
        if table is not None:
            params["table"] = table
        if depth is not None:
            params["depth"] = depth
        return dict(self._call("GET", "/lineage", params=params))

    def health(self) -> bool:
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    # --- transport ------------------------------------------------------------------------------------------

    def _register(
        self, role: str, job_id: str, table: str, *, format: str | None, location: str | None
    ) -> Registration:
        body = {k: v for k, v in {"format": format, "location": location}.items() if v is not None}
        response = self._call(
            "POST", f"/register/{role}/{_job(job_id)}/{_table_path(table)}", json=body or None, raw=True
        )
        data = response.json()
        return Registration(str(data["job_id"]), str(data["table"]), str(data["role"]), response.status_code == 201)

    def _call(self, method: str, path: str, *, idempotent: bool = True, raw: bool = False, **kwargs: Any) -> Any:
        def transient(exc: BaseException) -> bool:
            if isinstance(exc, Unavailable):
                return idempotent or exc.status in _REJECTED_STATUSES or exc.body.get("_not_sent") is True
            return False

        retrying = Retrying(
            stop=stop_after_attempt(self.retry.attempts) | stop_after_delay(self.retry.deadline),
            wait=self.retry.wait,
            retry=retry_if_exception(transient),
            reraise=True,
            before_sleep=self._log_retry(method, path),
        )
        for attempt in retrying:
            with attempt:
                return self._send(method, path, idempotent=idempotent, raw=raw, **kwargs)
        raise AssertionError("unreachable: the retry policy re-raises the last error")

    def _send(self, method: str, path: str, *, idempotent: bool, raw: bool, **kwargs: Any) -> Any:
        logger.debug("%s %s", method, path)
        try:
            response = self._http.request(method, path, **kwargs)
        except _NOT_SENT as exc:
            raise Unavailable(
                f"{method} {path}: {type(exc).__name__}: {exc}",
                code="connection_failed",
                body={"_not_sent": True},
            ) from exc
        except _MAYBE_SENT as exc:
            if not idempotent:
                raise OutcomeUnknown(
                    f"{method} {path}: {type(exc).__name__} after sending; it may have taken effect",
                    code="outcome_unknown",
                ) from exc
            raise Unavailable(f"{method} {path}: {type(exc).__name__}: {exc}", code="connection_failed") from exc
        if response.is_success:
            if raw:
                return response
            return response.json() if response.content else None
        error = error_for(response.status_code, _problem(response))
        if (
            response.status_code in _RETRY_STATUSES
            and not idempotent
            and response.status_code not in _REJECTED_STATUSES
        ):
            raise OutcomeUnknown(
                f"{method} {path}: HTTP {response.status_code}; it may have taken effect",
                status=response.status_code,
                code="outcome_unknown",
                body=error.body,
            )
        raise error

    @staticmethod
    def _log_retry(method: str, path: str) -> Any:
        def log(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            logger.warning("%s %s failed (attempt %d): %s; retrying", method, path, state.attempt_number, exc)

        return log


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"detail": response.text[:500] or response.reason_phrase}
    retry_after = response.headers.get("Retry-After")
    if retry_after is not None:
        with contextlib.suppress(ValueError):
            body["_retry_after"] = float(retry_after)
    return body


__all__ = ["MetaServiceClient", "MetaServiceError"]
