"""MetaServiceClient: typed access to the MetaService HTTP API, with retries that are safe by construction."""

from __future__ import annotations

import contextlib
import email.utils
import functools
import importlib.metadata
import logging
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, NoReturn, Self
from urllib.parse import quote

import httpx
from tenacity import RetryCallState

from spark_client._retry import RetryPolicy
from spark_client.errors import (
    MetaServiceError,
    NotFound,
    OutcomeUnknown,
    Unavailable,
    error_from_problem,
)
from spark_client.models import (
    BarrierDecision,
    Commit,
    ConsistentVersions,
    IssuedBarrier,
    Lease,
    Registration,
    Retention,
    RollbackPlan,
    StartAt,
    TableVersion,
    check_start,
)

logger = logging.getLogger("spark_client")

TOKEN_ENV = "METASERVICE_TOKEN"
OPENLINEAGE_PARENT_ENV = "OPENLINEAGE_PARENT_ID"  # what Airflow's OpenLineage provider and openlineage-dbt use
OPENLINEAGE_PARENT_HEADER = "X-OpenLineage-Parent"
# <namespace>/<job name>/<run id> in visible ASCII: the namespace ends at the first '/', the run id (a UUID) starts
# after the last. The server's pattern (metaservice.openlineage.runs.ParentRun.PATTERN, in its OpenAPI document).
_OPENLINEAGE_PARENT = re.compile(
    r"[\x21-\x2e\x30-\x7e]+/[\x21-\x7e]+/[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
Consistency = Literal["strong", "weak"]
Direction = Literal["upstream", "downstream", "both"]

# The request provably never reached the server: safe to repeat even when the call is not idempotent.
_NOT_SENT: tuple[type[httpx.TransportError], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
)
# The request may have reached the server, and its effect is unknown.
_MAYBE_SENT: tuple[type[httpx.TransportError], ...] = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)
# Answers of a gateway that may have forwarded the request: the effect is unknown.
_GATEWAY_STATUSES = frozenset({502, 504})
_MAX_DETAIL = 500


@functools.cache
def _user_agent() -> str:
    try:
        version = importlib.metadata.version("metaservice")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return f"metaservice-spark-client/{version}"


def _table_path(table: str) -> str:
    """`catalog.database.table` as three quoted path segments."""
    parts = table.split(".")
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"table names are catalog.database.table, got {table!r}")
    return "/".join(quote(part, safe="") for part in parts)


def _segment(value: str | int) -> str:
    """One path segment; job ids may hold `.`, `:` and `-`, and nothing may escape the segment."""
    return quote(str(value), safe="")


def _check_base_url(base_url: str) -> None:
    """An absolute http(s) URL with a host: anything else fails only later, and less clearly."""
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ValueError(f"base_url {base_url!r} is not a URL: {exc}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError(
            f"base_url must be an absolute http(s) URL with a host, e.g. 'http://127.0.0.1:8080'; got {base_url!r}"
        )


def check_openlineage_parent(value: str | None) -> str | None:
    """The OpenLineage parent run of a job's runs: `value`, else the environment variable `OPENLINEAGE_PARENT_ID`
    (an empty string: none). The form is `<namespace>/<job name>/<run id>`, as Airflow's `lineage_parent_id`
    macro gives it: the namespace ends at the first '/', the run id (a UUID) starts after the last.

    Raises:
        ValueError: not of that form, naming it.

    Example:
        check_openlineage_parent("default/daily.enrich/0192f7a4-7c1e-7d3a-9b1e-2f4c6a8e0d11")
    """
    source = "openlineage_parent"
    if value is None:
        value, source = os.environ.get(OPENLINEAGE_PARENT_ENV), f"the environment variable {OPENLINEAGE_PARENT_ENV}"
    if not value:
        return None
    if _OPENLINEAGE_PARENT.fullmatch(value) is None:
        raise ValueError(
            f"{source} must be <namespace>/<job name>/<run id>, the run id a UUID (what Airflow's OpenLineage "
            f"macro lineage_parent_id gives), in visible ASCII; got {value!r}"
        )
    return value


def _parent_header(openlineage_parent: str | None) -> dict[str, str]:
    return {OPENLINEAGE_PARENT_HEADER: openlineage_parent} if openlineage_parent else {}


def _rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError("committed_at must be timezone-aware (RFC 3339 needs an offset)")
    return moment.astimezone(UTC).isoformat()


def _retry_after(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (delta-seconds or HTTP-date), None when absent or unreadable."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        return max(float(value), 0.0)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def _problem(response: httpx.Response) -> dict[str, Any]:
    """The problem document of an error answer; a non-JSON body becomes a `detail` of its first characters."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    text = response.text.strip()
    return {"status": response.status_code, "detail": text[:_MAX_DETAIL] or response.reason_phrase}


class MetaServiceClient:
    """Typed access to the MetaService HTTP API.

    Retries. Transient failures are retried with exponential backoff and full jitter, within the total time
    budget of the `RetryPolicy` (two minutes by default, long enough to ride out a rolling restart of the
    server). Transient means a connection error (connect, read or write failure or timeout, pool timeout,
    connection dropped) or an answer 429, 502, 503 or 504; a `Retry-After` header is honoured, capped by the
    policy. Other 4xx answers are never retried, nor is 500 (a server bug: `ServerError`). When the budget runs
    out, `Unavailable` is raised, saying how many attempts were made over how long.

    Idempotency. Every protocol call (register, unregister, next, commit, abort, report_snapshot, version(s),
    reads, renew/release lease, complete rollback) is idempotent by protocol: repeating it after a lost answer
    returns the first answer, so it is retried on every transient failure; `issue_barrier` is made idempotent
    by an `Idempotency-Key` header. Two calls are not idempotent: `create_lease` and `plan_rollback`. They are
    retried only when the request provably had no effect (connection refused or connect timeout, pool timeout,
    503, 429). When the outcome is unknown (read timeout, connection dropped after sending, 502 or 504) they
    raise `OutcomeUnknown` instead of risking a second lease or plan (pyiceberg's CommitStateUnknown).

    Errors. Error answers are RFC 9457 problem documents and become `MetaServiceError` subclasses
    (`NotFound`, `Conflict` and its per-code subclasses, `InvalidRequest`, ...) carrying `status`, `code`,
    `detail` and `body`.

    Args:
        base_url: the server, e.g. "http://127.0.0.1:8080" (a path prefix is kept); the scheme is required.
        token: bearer token; defaults to the environment variable `METASERVICE_TOKEN`. No token: no
            Authorization header.
        retry: the retry policy (default: retries for up to 120 s, backoff 0.1 s doubling up to 5 s).
        timeout: seconds allowed for each request (connecting: at most 5 s of it).
        transport: an httpx transport to use instead of the network (proxies, tests).

    Example:
        with MetaServiceClient("http://127.0.0.1:8080") as client:
            decision = client.next_barrier("enrich", {"lake.raw.orders": 12})
            if decision.action == "process":
                ...
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
        _check_base_url(base_url)
        self._retry = retry or RetryPolicy()
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        headers = {"User-Agent": _user_agent(), "Accept": "application/json, application/problem+json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=base_url,
            headers=headers,
            transport=transport,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
        )

    @property
    def base_url(self) -> str:
        """The server's base URL.

        Example:
            print(client.base_url)  # "http://127.0.0.1:8080"
        """
        return str(self._http.base_url).rstrip("/")

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy in force.

        Example:
            assert client.retry.deadline == 120
        """
        return self._retry

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections. The client cannot be used afterwards.

        Example:
            client = MetaServiceClient(url)
            try:
                client.health()
            finally:
                client.close()
        """
        self._http.close()

    # --- lineage ------------------------------------------------------------------------------------------

    def register_source(
        self, job_id: str, table: str, *, format: str | None = None, location: str | None = None
    ) -> Registration:
        """Declare that `job_id` reads `table`; creates the job and the table on first sight. Idempotent.

        Args:
            job_id: the job.
            table: `catalog.database.table`.
            format: the table's storage format ("delta", "paimon", "iceberg"), when known.
            location: where the table lives, when known.

        Returns:
            The edge; `created` is False when it already existed.

        Raises:
            CycleError: the edge would close a loop in the lineage graph.

        Example:
            client.register_source("enrich", "lake.raw.orders", format="delta", location="/data/lake/...")
        """
        return self._register("source", job_id, table, format=format, location=location)

    def register_sink(
        self, job_id: str, table: str, *, format: str | None = None, location: str | None = None
    ) -> Registration:
        """Declare that `job_id` writes `table`. Idempotent.

        Args:
            job_id: the job.
            table: `catalog.database.table`.
            format: the table's storage format, when known.
            location: where the table lives, when known.

        Returns:
            The edge; `created` is False when it already existed.

        Raises:
            TableHasWriter: another job writes the table (`writer` names it).
            CycleError: the edge would close a loop in the lineage graph.

        Example:
            client.register_sink("enrich", "lake.mart.orders_enriched", format="delta")
        """
        return self._register("sink", job_id, table, format=format, location=location)

    def register_job(
        self,
        job_id: str,
        *,
        sources: Sequence[str],
        sinks: Sequence[str],
        new_roots: Sequence[str] = (),
        formats: Mapping[str, str] | None = None,
        locations: Mapping[str, str] | None = None,
    ) -> list[Registration]:
        """Register every source and sink of a job in one request: all edges, or none. Idempotent.

        Args:
            job_id: the job.
            sources: tables the job reads. Each must be known to MetaService (a job's sink, a reported root, a
                table registered before) unless `new_roots` lists it.
            sinks: tables the job writes; at least one.
            new_roots: sources MetaService may not know yet: roots an outside writer created or will create.
            formats: table → storage format, for the tables whose format is known.
            locations: table → where it lives, for the tables whose location is known.

        Returns:
            One edge per table, sources first; `created` is False for those already registered.

        Raises:
            Conflict: a source MetaService does not know (`code` "unknown_source", `tables` names them) or a
                retired table ("table_retired"); nothing was registered.
            TableHasWriter: another job writes a sink; nothing was registered.
            CycleError: the edges would close a loop; nothing was registered.

        Example:
            client.register_job("enrich", sources=["lake.raw.orders"], sinks=["lake.mart.orders_enriched"])
        """
        formats, locations = formats or {}, locations or {}

        def declare(table: str) -> dict[str, str]:
            extra = {"format": formats.get(table), "location": locations.get(table)}
            return {"table": table, **{k: v for k, v in extra.items() if v}}

        body = {
            "sources": [declare(t) for t in sources],
            "sinks": [declare(t) for t in sinks],
            "new_roots": list(new_roots),
        }
        response = self._request("POST", f"/register/{_segment(job_id)}", json=body)
        data = self._decode_object(response)
        return [Registration.from_json(e, created=bool(e.get("created"))) for e in data.get("edges", [])]

    def unregister(self, job_id: str) -> None:
        """Retire a job: drop its edges and writer claims; its barrier history stays.

        Raises:
            NotFound: the job is unknown.

        Example:
            client.unregister("enrich")
        """
        self._call("POST", f"/unregister/{_segment(job_id)}")

    # --- barrier protocol ---------------------------------------------------------------------------------

    def next_barrier(
        self,
        job_id: str,
        root_snapshots: Mapping[str, int] | None = None,
        *,
        start: StartAt | None = None,
        openlineage_parent: str | None = None,
    ) -> BarrierDecision:
        """Ask what the job must do now. Until commit or abort, the same barrier and inputs come back.

        Args:
            job_id: the job.
            root_snapshots: the latest storage snapshot of each root input; newer ones lead to a new barrier.
            start: for a job that never settled a barrier: "newest" (the server's default: the newest barrier
                its inputs settled), "earliest" (the first barrier at which every input holds data: a
                backfill) or a barrier value (the first barrier at or after it). Ignored afterwards.
            openlineage_parent: the OpenLineage run that started this one, `<namespace>/<job name>/<run id>`
                (header `X-OpenLineage-Parent`); `next` ends no run, so the server only checks it here.

        Returns:
            "process" a barrier with the given inputs, "wait" for one, or "idle".

        Raises:
            NotFound: the job is not registered.

        Example:
            decision = client.next_barrier("enrich", {"lake.raw.orders": 12})
        """
        body: dict[str, Any] = {"root_snapshots": dict(root_snapshots or {})}
        if start is not None:
            body["start"] = check_start(start)
        path = f"/jobs/{_segment(job_id)}/barriers/next"
        headers = _parent_header(openlineage_parent)
        return BarrierDecision.from_json(self._object("POST", path, json=body, headers=headers))

    def commit_barrier(
        self, job_id: str, barrier: int, snapshots: Mapping[str, int], *, openlineage_parent: str | None = None
    ) -> Commit:
        """Record the snapshot written to each sink for `barrier`. The same commit again is a no-op.

        Args:
            job_id: the job.
            barrier: the barrier in flight for the job.
            snapshots: one snapshot id for each sink of the job.
            openlineage_parent: the OpenLineage run that started this one, `<namespace>/<job name>/<run id>`:
                the run's COMPLETE event names it as its parent.

        Returns:
            The commit as recorded.

        Raises:
            NotInFlight: the barrier was never handed to the job, or was aborted.
            SnapshotConflict: the barrier was already committed with other snapshots.
            SnapshotRegressed: a snapshot id is lower than at an earlier barrier.
            InvalidRequest: the sinks listed are not exactly the job's sinks, or `openlineage_parent` is malformed.

        Example:
            client.commit_barrier("enrich", decision.barrier, {"lake.mart.orders_enriched": 7})
        """
        path = f"/jobs/{_segment(job_id)}/barriers/{int(barrier)}/commit"
        body = {"snapshots": dict(snapshots)}
        return Commit.from_json(self._object("POST", path, json=body, headers=_parent_header(openlineage_parent)))

    def abort_barrier(
        self, job_id: str, barrier: int, *, reason: str | None = None, openlineage_parent: str | None = None
    ) -> None:
        """Give a barrier up: it never completes in the job's sinks, and downstream jobs skip it.

        Args:
            job_id: the job.
            barrier: the barrier in flight for the job.
            reason: why, shown to admins.
            openlineage_parent: the OpenLineage run that started this one, `<namespace>/<job name>/<run id>`:
                the run's FAIL event names it as its parent.

        Raises:
            AlreadyCommitted: the barrier was committed already.

        Example:
            client.abort_barrier("enrich", barrier, reason="input file is corrupt")
        """
        body = {"reason": reason} if reason is not None else {}
        path = f"/jobs/{_segment(job_id)}/barriers/{int(barrier)}/abort"
        self._call("POST", path, json=body, headers=_parent_header(openlineage_parent))

    def issue_barrier(
        self, root_snapshots: Mapping[str, int] | None = None, *, idempotency_key: str | None = None
    ) -> IssuedBarrier:
        """Issue a global barrier now, sealing the newest snapshot of every root table.

        Each call sends an `Idempotency-Key` (a new UUID unless given), so the client retries it like any
        idempotent call: a repeat after a lost answer returns the barrier the first attempt issued. Pass your
        own key to make a call repeatable across processes (an orchestrator restarting a task).

        Args:
            root_snapshots: newest snapshots of root tables that the server may not know yet.
            idempotency_key: 1-255 visible ASCII characters identifying this call.

        Returns:
            The barrier, when it was issued and what it sealed.

        Example:
            issued = client.issue_barrier({"lake.raw.orders": 12})
            again = client.issue_barrier(idempotency_key="load-2026-11-23")  # same key: same barrier
        """
        body = {"root_snapshots": dict(root_snapshots or {})}
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        return IssuedBarrier.from_json(self._object("POST", "/barriers", json=body, headers=headers))

    def set_root_group(self, group: str, tables: Sequence[str]) -> list[str]:
        """Declare the roots one ingestion writes together: barriers seal all of them or none (admin). Idempotent.

        A job's `next` report of one of them records nothing (it may see one appended and not the others); the
        ingestion appends to every root of the group, then reports them together with `issue_barrier`.

        Args:
            group: the group's name (a job id's characters).
            tables: the roots; the group holds exactly these afterwards.

        Returns:
            The group's tables, sorted.

        Raises:
            Conflict: `code` "root_group_conflict": a table a job writes, or one in another group.

        Example:
            client.set_root_group("ingest", ["lake.raw.events", "lake.raw.users"])
            ...  # append to both tables, then:
            client.issue_barrier({"lake.raw.events": 23, "lake.raw.users": 23})
        """
        data = self._object("PUT", f"/root-groups/{_segment(group)}", json={"tables": list(tables)})
        return [str(t) for t in data["tables"]]

    def report_snapshot(self, table: str, snapshot_id: int, *, committed_at: datetime | None = None) -> None:
        """Report a new snapshot of a root table, written outside MetaService; the next barrier seals it.

        Args:
            table: a root table, `catalog.database.table`.
            snapshot_id: the new snapshot.
            committed_at: when the snapshot was committed; must be timezone-aware.

        Raises:
            NotRoot: the table is written by a job.
            ValueError: `committed_at` has no timezone.

        Example:
            client.report_snapshot("lake.raw.orders", 13, committed_at=datetime.now(UTC))
        """
        body: dict[str, Any] = {"snapshot_id": int(snapshot_id)}
        if committed_at is not None:
            body["committed_at"] = _rfc3339(committed_at)
        self._call("POST", f"/tables/{_table_path(table)}/snapshots", json=body)

    # --- reads --------------------------------------------------------------------------------------------

    def version(
        self,
        table: str,
        consistency: Consistency = "strong",
        *,
        min_barrier: int | None = None,
        max_staleness_seconds: float | None = None,
        wait_seconds: float | None = None,
    ) -> TableVersion:
        """The snapshot of one table to read now, or (with a bound) one at least that fresh.

        Args:
            table: `catalog.database.table`.
            consistency: "strong" (agrees with every other strong read of the pipeline) or "weak" (freshest).
            min_barrier: only a version at this barrier or later (see `versions`).
            max_staleness_seconds: only a version whose barrier is at most this old (see `versions`).
            wait_seconds: how long the server may wait for one (see `versions`).

        Raises:
            NoConsistentVersion: no barrier has completed in the table yet.
            NotFreshEnough: no version met the bound within `wait_seconds`.
            NotFound: the table is unknown.

        Example:
            snapshot = client.version("lake.mart.orders_enriched").snapshot_id
        """
        bound = _bound(min_barrier, max_staleness_seconds, wait_seconds)
        path = f"/version/{_segment(consistency)}/{_table_path(table)}"
        return TableVersion.from_json(self._object("GET", path, params=bound, **self._waiting(wait_seconds)))

    def versions(
        self,
        tables: Sequence[str],
        consistency: Consistency = "strong",
        *,
        min_barrier: int | None = None,
        max_staleness_seconds: float | None = None,
        wait_seconds: float | None = None,
    ) -> ConsistentVersions:
        """One barrier and one snapshot per table, to read the tables together.

        With a freshness bound (`min_barrier` or `max_staleness_seconds`, not both) only a version meeting it is
        answered; the server waits up to `wait_seconds` (at most its `max_wait_seconds`, 30 s by default) for one
        to be committed and answers as soon as it is. This call's HTTP timeout is extended by `wait_seconds`.

        Args:
            tables: `catalog.database.table` names.
            consistency: "strong" or "weak".
            min_barrier: only a version at this barrier or later (e.g. the barrier your job just committed).
            max_staleness_seconds: only a version whose barrier was issued at most this many seconds ago
                (by the database's clock).
            wait_seconds: how long the server may wait for a version meeting the bound (default 0: answer now).

        Raises:
            NoConsistentVersion: no barrier is complete in all of them yet.
            NotFreshEnough: no version met the bound within `wait_seconds` (its attributes say how stale the
                freshest one was).
            InvalidRequest: both bounds, or a negative or too long wait.

        Example:
            versions = client.versions(["lake.mart.a", "lake.mart.b"], "weak").versions
            fresh = client.versions(["lake.mart.a"], min_barrier=committed.barrier, wait_seconds=20)
        """
        if isinstance(tables, str):
            raise TypeError("tables must be a sequence of table names, not one string")
        body = {"tables": list(tables), "consistency": consistency}
        body.update(_bound(min_barrier, max_staleness_seconds, wait_seconds))
        return ConsistentVersions.from_json(self._object("POST", "/versions", json=body, **self._waiting(wait_seconds)))

    def _waiting(self, wait_seconds: float | None) -> dict[str, Any]:
        """Request options for a call the server may hold for `wait_seconds`: a read timeout that outlasts it."""
        if not wait_seconds or wait_seconds <= 0:
            return {}
        base = self._http.timeout
        read = (base.read or 30.0) + float(wait_seconds)
        return {"timeout": httpx.Timeout(read, connect=base.connect, write=base.write, pool=base.pool)}

    # --- leases and retention -----------------------------------------------------------------------------

    def create_lease(self, holder: str, snapshots: Mapping[str, int], *, ttl_seconds: float = 600) -> Lease:
        """Protect snapshots from expiry while a reader uses them. Not idempotent.

        Args:
            holder: who holds the lease, shown to admins.
            snapshots: table → snapshot id to protect.
            ttl_seconds: lifetime; renew before it runs out.

        Raises:
            OutcomeUnknown: the lease may have been created, but no answer came back (it expires on its own).

        Example:
            lease = client.create_lease("dashboard-7", {"lake.mart.a": 5}, ttl_seconds=300)
        """
        body = {"holder": holder, "snapshots": dict(snapshots), "ttl_seconds": ttl_seconds}
        return Lease.from_json(self._object("POST", "/leases", json=body, idempotent=False))

    def renew_lease(self, lease_id: str, ttl_seconds: float | None = None) -> Lease:
        """Extend a live lease to now + `ttl_seconds` (default: its previous ttl).

        Raises:
            NotFound: the lease expired or was released.

        Example:
            lease = client.renew_lease(lease.lease_id, 300)
        """
        body = {"ttl_seconds": ttl_seconds} if ttl_seconds is not None else None
        return Lease.from_json(self._object("POST", f"/leases/{_segment(lease_id)}/renew", json=body))

    def release_lease(self, lease_id: str) -> None:
        """End a lease now. A lease that is already gone (404) is not an error.

        Example:
            client.release_lease(lease.lease_id)
        """
        with contextlib.suppress(NotFound):
            self._call("DELETE", f"/leases/{_segment(lease_id)}")

    def retention(self, table: str) -> Retention:
        """Which snapshots of `table` must be kept, and why.

        Example:
            floor = client.retention("lake.mart.a").oldest_protected_snapshot_id
        """
        return Retention.from_json(self._object("GET", f"/tables/{_table_path(table)}/retention"))

    # --- rollback -----------------------------------------------------------------------------------------

    def plan_rollback(self, table: str, barrier: int) -> RollbackPlan:
        """Plan a rollback of `table` and everything downstream of it to `barrier`. Not idempotent.

        Returns:
            The snapshot to restore in each table and the barrier each job resumes after.

        Raises:
            OutcomeUnknown: a plan may have been made, but no answer came back.

        Example:
            plan = client.plan_rollback("lake.raw.orders", 1763800000123456)
        """
        body = {"table": table, "barrier": int(barrier)}
        return RollbackPlan.from_json(self._object("POST", "/rollbacks", json=body, idempotent=False))

    def complete_rollback(
        self, rollback_id: str | int, root_snapshots: Mapping[str, int] | None = None
    ) -> RollbackPlan:
        """Tell MetaService storage was restored: completions after the barrier are forgotten, jobs resume.

        Idempotent: completing again returns the same plan.

        Args:
            rollback_id: the plan's id.
            root_snapshots: for a rolled-back root table, the snapshot it has in storage now (the version the
                restore wrote); without it the server takes the restore snapshot.

        Example:
            client.complete_rollback(plan.rollback_id, {"lake.raw.orders": 14})
        """
        body = {"root_snapshots": dict(root_snapshots)} if root_snapshots else None
        path = f"/rollbacks/{_segment(rollback_id)}/complete"
        return RollbackPlan.from_json(self._object("POST", path, json=body))

    # --- inspection and operations ------------------------------------------------------------------------

    def get_job(self, job_id: str) -> dict[str, Any]:
        """A job's sources, sinks, last barrier, barrier in flight and last contact, as the server says.

        Example:
            in_flight = client.get_job("enrich")["in_flight_barrier"]
        """
        return self._object("GET", f"/jobs/{_segment(job_id)}")

    def get_table(self, table: str) -> dict[str, Any]:
        """A table's kind, writer, readers, format, location and newest complete barrier.

        Example:
            is_root = client.get_table("lake.raw.orders")["kind"] == "root"
        """
        return self._object("GET", f"/tables/{_table_path(table)}")

    def delay(self, table: str) -> dict[str, Any]:
        """A table's delay: `freshness_seconds`, `lag_seconds`, the critical path and its `bottleneck_job`.

        Raises:
            NotFound: the table is unknown.

        Example:
            late = client.delay("lake.mart.revenue")["freshness_seconds"] > 3600
        """
        return self._object("GET", f"/tables/{_table_path(table)}/delay")

    def delays(self) -> list[dict[str, Any]]:
        """Every table's delay (as `delay`), worst first.

        Example:
            worst = client.delays()[0]["table"]
        """
        data = self._object("GET", "/delays")
        items = data.get("delays")
        if not isinstance(items, list):
            raise MetaServiceError(f"GET /delays: expected a list: {data!r:.200}", code="invalid_response")
        return [dict(item) for item in items]

    def lineage(
        self, table: str | None = None, *, direction: Direction = "both", depth: int | None = None
    ) -> dict[str, Any]:
        """The lineage graph around `table` (the whole graph without one): `{"nodes", "edges", "truncated"}`.

        Example:
            upstream = client.lineage("lake.mart.revenue", direction="upstream", depth=2)
        """
        params: dict[str, str | int] = {"direction": direction}
        if table is not None:
            params["table"] = table
        if depth is not None:
            params["depth"] = depth
        return self._object("GET", "/lineage", params=params)

    def health(self) -> bool:
        """Whether the server is ready (`GET /readyz` answers 200). One try: a probe must be quick.

        Example:
            assert client.health()
        """
        logger.debug("GET /readyz")
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    # --- transport ----------------------------------------------------------------------------------------

    def _register(
        self,
        role: Literal["source", "sink"],
        job_id: str,
        table: str,
        *,
        format: str | None,
        location: str | None,
    ) -> Registration:
        body = {name: value for name, value in (("format", format), ("location", location)) if value}
        path = f"/register/{role}/{_segment(job_id)}/{_table_path(table)}"
        response = self._request("POST", path, json=body or None)
        return Registration.from_json(self._decode_object(response), created=response.status_code == 201)

    def _call(self, method: str, path: str, *, idempotent: bool = True, **kwargs: Any) -> Any:
        """Send with retries; the parsed JSON answer, None when it has no body."""
        response = self._request(method, path, idempotent=idempotent, **kwargs)
        return self._decode(response) if response.content else None

    def _object(self, method: str, path: str, *, idempotent: bool = True, **kwargs: Any) -> dict[str, Any]:
        return self._decode_object(self._request(method, path, idempotent=idempotent, **kwargs))

    def _request(self, method: str, path: str, *, idempotent: bool = True, **kwargs: Any) -> httpx.Response:
        clock = self._retry.clock
        started = clock()

        def log_retry(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            if state.attempt_number == 1:  # one warning per call; the following attempts only at debug level
                logger.warning(
                    "%s %s%s failed (%s); retrying %s",
                    method,
                    self.base_url,
                    path,
                    exc,
                    self._retry.describe(),
                )
            else:
                logger.debug(
                    "%s %s failed on attempt %d after %.1fs of a %gs budget (%s); retrying in %.2fs",
                    method,
                    path,
                    state.attempt_number,
                    clock() - started,
                    self._retry.deadline,
                    exc,
                    state.upcoming_sleep,
                )

        def give_up(state: RetryCallState) -> NoReturn:
            exc = state.outcome.exception() if state.outcome is not None else None
            if exc is None:
                raise AssertionError("retries stop only after a failed attempt")
            elapsed = clock() - started
            spent = f"gave up after {state.attempt_number} attempt(s) in {elapsed:.1f}s"
            if isinstance(exc, MetaServiceError) and state.attempt_number > 1:
                exc.detail = (
                    f"{exc.detail}; {spent}, the retry budget being {self._retry.describe()} "
                    "(RetryPolicy(deadline=...) sets it)"
                )
                exc.args = (exc.detail,)
            exc.add_note(spent)
            raise exc

        retrying = self._retry.retrying(
            retry=lambda state: isinstance(state.outcome and state.outcome.exception(), Unavailable),
            before_sleep=log_retry,
            retry_error_callback=give_up,
        )
        for attempt in retrying:
            with attempt:
                response = self._send(method, path, idempotent=idempotent, **kwargs)
                if attempt.retry_state.attempt_number > 1:
                    logger.info("%s %s succeeded on attempt %d", method, path, attempt.retry_state.attempt_number)
                return response
        raise AssertionError("unreachable: the last attempt either returns or raises")

    def _send(self, method: str, path: str, *, idempotent: bool, **kwargs: Any) -> httpx.Response:
        """One attempt. Raises `Unavailable` exactly when another attempt is allowed."""
        logger.debug("%s %s", method, path)
        try:
            response = self._http.request(method, path, **kwargs)
        except _NOT_SENT as exc:
            raise Unavailable(
                f"{method} {self.base_url}{path}: cannot reach the MetaService server at {self.base_url} "
                f"({type(exc).__name__}: {exc})",
                code="connection_failed",
            ) from exc
        except _MAYBE_SENT as exc:
            if idempotent:
                raise Unavailable(
                    f"{method} {self.base_url}{path}: the connection to {self.base_url} was lost "
                    f"({type(exc).__name__}: {exc})",
                    code="connection_lost",
                ) from exc
            raise OutcomeUnknown(
                f"{method} {self.base_url}{path}: {type(exc).__name__} after the request may have been sent; "
                "it may or may not have taken effect",
                code="outcome_unknown",
            ) from exc
        except httpx.TransportError as exc:  # proxy and local protocol errors
            raise MetaServiceError(
                f"{method} {self.base_url}{path}: {type(exc).__name__}: {exc}", code="transport_error"
            ) from exc
        if response.is_success:
            return response
        retry_after = _retry_after(response)
        error = error_from_problem(response.status_code, _problem(response), retry_after=retry_after)
        if not idempotent and response.status_code in _GATEWAY_STATUSES:
            raise OutcomeUnknown(
                f"{method} {path}: HTTP {response.status_code} from a gateway; "
                f"it may or may not have taken effect ({error.detail})",
                status=response.status_code,
                code="outcome_unknown",
                body=error.body,
            )
        raise error

    @staticmethod
    def _decode(response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise MetaServiceError(
                f"{response.request.method} {response.request.url.path}: HTTP {response.status_code} "
                f"with a body that is not JSON: {response.text[:_MAX_DETAIL]!r}",
                status=response.status_code,
                code="invalid_response",
            ) from exc

    @classmethod
    def _decode_object(cls, response: httpx.Response) -> dict[str, Any]:
        data = cls._decode(response)
        if not isinstance(data, dict):
            raise MetaServiceError(
                f"{response.request.method} {response.request.url.path}: expected an object: {data!r:.200}",
                status=response.status_code,
                code="invalid_response",
            )
        return data


def _bound(min_barrier: int | None, max_staleness_seconds: float | None, wait_seconds: float | None) -> dict[str, Any]:
    """The freshness bound's fields that are set (the server checks their combination and ranges)."""
    fields = {"min_barrier": min_barrier, "max_staleness_seconds": max_staleness_seconds, "wait_seconds": wait_seconds}
    return {name: value for name, value in fields.items() if value is not None}


__all__ = ["MetaServiceClient", "StartAt", "check_openlineage_parent", "check_start"]
