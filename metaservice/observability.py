"""Observability: request ids, structured logs, and Prometheus metrics.

- Every HTTP request gets an id: the client's `X-Request-ID` when it is a plain token, else a fresh one. It is
  echoed in the response header and attached to every log line written while the request runs.
- Logs are JSON lines when `settings.log_json` is true (one object per line: ts, level, logger, message,
  request_id and, for access lines, method/path/route/status/duration_ms), text lines otherwise. Uvicorn's own
  access log is replaced by ours, which carries the request id.
- Metrics come from two places. Figures read from the database at scrape time (table delays, job lag and last
  barrier timings, barriers issued, commits/aborts per job) are the same whichever server process answers.
  Request counters/latency histograms and DB pool use are per process: with several uvicorn workers a scrape sees
  the worker that served it (run one worker per scrape target, or aggregate with care). We do not use
  prometheus_client's multiprocess mode: it needs an environment variable before import and a shared directory.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from fastapi import FastAPI

    from metaservice.services.delays import MetricFigures
    from metaservice.settings import Settings

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_ID_HEADER = "X-Request-ID"

request_id: ContextVar[str | None] = ContextVar("metaservice_request_id", default=None)

_ACCEPTED_ID = re.compile(r"[A-Za-z0-9._:/+=-]{1,128}")
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_HANDLER_MARK = "_metaservice_handler"
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "request_id"}

access_log = logging.getLogger("metaservice.access")


# --- logging ---------------------------------------------------------------------------------------------------


class RequestIdFilter(logging.Filter):
    """Stamp every record with the id of the request being served ("-" outside requests)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get() or "-"
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line; `extra={...}` fields become top-level keys."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or request_id.get(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(settings: Settings) -> None:
    """Install our handler on the root logger (idempotent) and route uvicorn's loggers through it."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    setattr(handler, _HANDLER_MARK, True)
    handler.addFilter(RequestIdFilter())
    if settings.log_json:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    uvicorn_access = logging.getLogger("uvicorn.access")
    uvicorn_access.handlers.clear()  # without handlers uvicorn skips its access line; ours has the request id
    uvicorn_access.propagate = False


# --- per-process HTTP metrics and the middleware -----------------------------------------------------------------


class HttpMetrics:
    """Per-process request counters and latency histograms by route template, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.duration = Histogram(
            "metaservice_http_request_duration_seconds",
            "HTTP request latency by method and route template (this server process).",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.requests = Counter(
            "metaservice_http_requests",
            "HTTP requests by method, route template and status (this server process).",
            ["method", "route", "status"],
            registry=self.registry,
        )
        ProcessCollector(registry=self.registry)
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            children = (self.duration.labels(method, route), self.requests.labels(method, route, str(status)))
            self._children[key] = children
        children[0].observe(seconds)
        children[1].inc()

    def render(self, figures: MetricFigures, *, pool: Any) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of this process's metrics plus the database figures."""
        scrape = CollectorRegistry(auto_describe=False)
        scrape.register(_Families(list(_database_families(figures)) + list(_pool_families(pool))))
        return generate_latest(self.registry) + generate_latest(scrape)


class RequestObservability:
    """Pure ASGI middleware: request id in and out, access log line, request metrics by route template."""

    def __init__(self, app: ASGIApp, *, metrics: HttpMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _incoming_id(scope) or uuid.uuid4().hex
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500
        header = (b"x-request-id", rid.encode())

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None) or "<unmatched>"
            method = scope["method"] if scope["method"] in _METHODS else "OTHER"
            self.metrics.observe(method, route, status, elapsed)
            if access_log.isEnabledFor(logging.INFO):
                access_log.info(
                    '%s "%s %s" %d %.1fms',
                    (scope.get("client") or ("-",))[0],
                    method,
                    scope["path"],
                    status,
                    elapsed * 1000,
                    extra={
                        "method": method,
                        "path": scope["path"],
                        "route": route,
                        "status": status,
                        "duration_ms": round(elapsed * 1000, 3),
                    },
                )
            request_id.reset(token)


def _incoming_id(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            text = value.decode("latin-1")
            return text if _ACCEPTED_ID.fullmatch(text) else None
    return None


def install(app: FastAPI) -> HttpMetrics:
    """Add the request middleware (outermost of ours) and keep the per-process metrics on `app.state`."""
    metrics = HttpMetrics()
    app.state.http_metrics = metrics
    app.add_middleware(RequestObservability, metrics=metrics)
    return metrics


# --- database figures as metric families ----------------------------------------------------------------------


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def _database_families(figures: MetricFigures) -> Iterator[Metric]:
    delay = GaugeMetricFamily(
        "metaservice_table_delay_seconds",
        "Now minus the issue time of the newest barrier the table completed (tables that completed one).",
        labels=["table", "kind"],
    )
    newest = GaugeMetricFamily(
        "metaservice_table_newest_complete_barrier", "Newest barrier the table completed.", labels=["table"]
    )
    for t in figures.tables:
        if t.delay_seconds is not None and t.barrier is not None:
            delay.add_metric([t.name, t.kind], t.delay_seconds)
            newest.add_metric([t.name], float(t.barrier))
    yield delay
    yield newest

    duration = GaugeMetricFamily(
        "metaservice_job_last_barrier_duration_seconds",
        "Processing time (started → finished) of the job's last committed barrier.",
        labels=["job"],
    )
    waiting = GaugeMetricFamily(
        "metaservice_job_last_barrier_waiting_seconds",
        "Waiting time (inputs ready → started) of the job's last committed barrier.",
        labels=["job"],
    )
    lag_barriers = GaugeMetricFamily(
        "metaservice_job_lag_barriers", "Barriers issued after the job's last barrier.", labels=["job"]
    )
    lag_seconds = GaugeMetricFamily(
        "metaservice_job_lag_seconds",
        "Issue time of the newest barrier minus that of the job's last barrier.",
        labels=["job"],
    )
    for job in figures.jobs:
        if job.last_duration_seconds is not None:
            duration.add_metric([job.name], job.last_duration_seconds)
        if job.last_waiting_seconds is not None:
            waiting.add_metric([job.name], job.last_waiting_seconds)
        if job.lag_barriers is not None:
            lag_barriers.add_metric([job.name], float(job.lag_barriers))
        if job.lag_seconds is not None:
            lag_seconds.add_metric([job.name], job.lag_seconds)
    yield from (duration, waiting, lag_barriers, lag_seconds)

    yield CounterMetricFamily(
        "metaservice_barriers_issued", "Global barriers issued (from the database).", value=figures.barriers_issued
    )
    commits = CounterMetricFamily("metaservice_job_commits", "Barriers the job committed.", labels=["job"])
    aborts = CounterMetricFamily("metaservice_job_aborts", "Barriers the job aborted.", labels=["job"])
    skips = CounterMetricFamily(
        "metaservice_job_skips", "Barriers the job skipped because an input aborted them.", labels=["job"]
    )
    for name, committed, aborted, skipped in figures.runs:
        commits.add_metric([name], committed)
        aborts.add_metric([name], aborted)
        skips.add_metric([name], skipped)
    yield from (commits, aborts, skips)


def _pool_families(pool: Any) -> Iterator[Metric]:
    if pool is None or not hasattr(pool, "checkedout"):
        return
    yield GaugeMetricFamily(
        "metaservice_db_pool_in_use", "Database connections checked out (this server process).", value=pool.checkedout()
    )
    yield GaugeMetricFamily(
        "metaservice_db_pool_size", "Configured database pool size (this server process).", value=pool.size()
    )
    yield GaugeMetricFamily(
        "metaservice_db_pool_overflow",
        "Connections open beyond the pool size (this server process).",
        value=max(0, pool.overflow()),
    )
