"""MetaServiceClient against scripted answers: what is retried, how errors map, what goes on the wire.

Only the transport is faked (`httpx.MockTransport`), to produce failures and answers a real server cannot be
made to give on demand. Waits are recorded by the policy's injectable `sleep`, never slept.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from spark_client import MetaServiceClient, OutcomeUnknown, RetryPolicy
from spark_client.errors import (
    AlreadyCommitted,
    Conflict,
    CycleError,
    Forbidden,
    InvalidRequest,
    MetaServiceError,
    NoConsistentVersion,
    NotFound,
    NotInFlight,
    NotRoot,
    ServerError,
    SnapshotConflict,
    SnapshotRegressed,
    TableHasWriter,
    Unauthorized,
    Unavailable,
)
from spark_client.models import InputSnapshot, RollbackPlan, TableVersion, parse_time

Answer = Callable[[httpx.Request], httpx.Response]

DECISION = {
    "job_id": "enrich",
    "action": "process",
    "barrier": 1763800000123456,
    "inputs": {"lake.raw.orders": {"snapshot_id": 12, "previous_snapshot_id": 9, "extra": True}},
    "skipped": [1763800000000001],
    "retry_after_seconds": None,
    "added_in_a_later_version": {"ignored": 1},
}
ISSUED = {"barrier": 5, "issued_at": "2026-11-22T21:00:00Z", "sealed": {"lake.raw.orders": 12}}
LEASE = {"lease_id": "L-1", "holder": "h", "expires_at": "2026-11-22T21:10:00.5Z", "snapshots": {"a.b.c": 5}}
PLAN = {
    "rollback_id": "3f2a",
    "barrier": 5,
    "tables": {"lake.raw.orders": {"restore_snapshot_id": 9}, "lake.mart.x": {"restore_snapshot_id": 4}},
    "jobs": {"enrich": {"resume_after_barrier": 5}},
    "status": "planned",
}

TRANSIENT_TRANSPORT_ERRORS = [
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.ReadTimeout,
    httpx.WriteError,
    httpx.WriteTimeout,
    httpx.PoolTimeout,
]
BUSY_STATUSES = [429, 502, 503, 504]


class FakeClock:
    """A monotonic clock that only the policy's `sleep` advances: budgets in seconds without waiting."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Server:
    """Scripted answers, one per request; the last one repeats. Records every request."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = answers
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answers[min(len(self.requests), len(self.answers)) - 1](request)

    @property
    def paths(self) -> list[bytes]:
        return [request.url.raw_path for request in self.requests]

    def body(self, index: int = -1) -> Any:
        content = self.requests[index].content
        return json.loads(content) if content else None


def ok(body: object = None, status: int = 200, **headers: str) -> Answer:
    def answer(request: httpx.Request) -> httpx.Response:
        del request
        if body is None:
            return httpx.Response(status, headers=headers)
        return httpx.Response(status, json=body, headers=headers)

    return answer


def problem(status: int, code: str, *, retry_after: str | None = None, **extra: object) -> Answer:
    document = {"type": f"/problems/{code}", "title": code, "status": status, "detail": f"{code} happened"}
    headers = {"content-type": "application/problem+json"}
    if retry_after is not None:
        headers["Retry-After"] = retry_after

    def answer(request: httpx.Request) -> httpx.Response:
        del request
        return httpx.Response(status, json={**document, "code": code, **extra}, headers=headers)

    return answer


def fail(error: type[httpx.TransportError]) -> Answer:
    def answer(request: httpx.Request) -> httpx.Response:
        raise error("simulated", request=request)

    return answer


@pytest.fixture(name="unused_port")
def fx_unused_port() -> int:
    """A local port nobody listens on: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(name="sleeps")
def fx_sleeps() -> list[float]:
    """Every wait the client asked for, in order; nothing is slept."""
    return []


@pytest.fixture(name="policy")
def fx_policy(sleeps: list[float]) -> RetryPolicy:
    return RetryPolicy(attempts=4, deadline=60, initial_backoff=0.01, max_backoff=1.0, sleep=sleeps.append)


@pytest.fixture(name="connect")
def fx_connect(policy: RetryPolicy) -> Iterator[Callable[[Server], MetaServiceClient]]:
    """Build clients talking to a scripted server; all are closed after the test."""
    clients: list[MetaServiceClient] = []

    def connect(server: Server) -> MetaServiceClient:
        client = MetaServiceClient("http://metaservice", retry=policy, transport=httpx.MockTransport(server))
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()


Connect = Callable[[Server], MetaServiceClient]


# --- retries -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("error", TRANSIENT_TRANSPORT_ERRORS)
def test_idempotent_call_is_retried_after_a_transport_error(
    connect: Connect, error: type[httpx.TransportError], sleeps: list[float]
) -> None:
    server = Server(fail(error), fail(error), ok(DECISION))
    assert connect(server).next_barrier("enrich").action == "process"
    assert len(server.requests) == 3 and len(sleeps) == 2


@pytest.mark.parametrize("status", BUSY_STATUSES)
def test_idempotent_call_is_retried_on_busy_answers(connect: Connect, status: int) -> None:
    committed = {"job_id": "enrich", "barrier": 5, "status": "committed", "snapshots": {"a.b.c": 7}}
    server = Server(problem(status, "unavailable"), ok(committed))
    assert connect(server).commit_barrier("enrich", 5, {"a.b.c": 7}).barrier == 5
    assert len(server.requests) == 2


def test_every_idempotent_protocol_call_is_retried(connect: Connect) -> None:
    calls: list[tuple[Callable[[MetaServiceClient], object], object]] = [
        (lambda c: c.register_source("j", "a.b.c"), {"job_id": "j", "table": "a.b.c", "role": "source"}),
        (lambda c: c.register_sink("j", "a.b.d"), {"job_id": "j", "table": "a.b.d", "role": "sink"}),
        (lambda c: c.unregister("j"), {"job_id": "j", "status": "unregistered"}),
        (lambda c: c.next_barrier("j"), DECISION),
        (lambda c: c.commit_barrier("j", 5, {}), {"job_id": "j", "barrier": 5, "snapshots": {}}),
        (lambda c: c.abort_barrier("j", 5), {"job_id": "j", "barrier": 5, "status": "aborted"}),
        (lambda c: c.report_snapshot("a.b.c", 3), {"table": "a.b.c", "latest_snapshot_id": 3}),
        (
            lambda c: c.version("a.b.c"),
            {"table": "a.b.c", "consistency": "strong", "barrier": 5, "snapshot_id": 3},
        ),
        (lambda c: c.versions(["a.b.c"]), {"consistency": "strong", "barrier": 5, "versions": {"a.b.c": 3}}),
        (lambda c: c.renew_lease("L-1"), LEASE),
        (lambda c: c.release_lease("L-1"), None),
        (lambda c: c.retention("a.b.c"), {"table": "a.b.c", "oldest_protected_snapshot_id": None}),
        (lambda c: c.complete_rollback("3f2a"), PLAN),
        (lambda c: c.get_job("j"), {"job_id": "j"}),
        (lambda c: c.get_table("a.b.c"), {"table": "a.b.c"}),
        (lambda c: c.lineage(), {"nodes": [], "edges": [], "truncated": False}),
    ]
    for call, answer in calls:
        server = Server(fail(httpx.ReadTimeout), problem(502, "bad_gateway"), ok(answer))
        call(connect(server))
        assert len(server.requests) == 3, server.paths


def test_server_error_is_not_retried(connect: Connect) -> None:
    server = Server(problem(500, "internal_error"))
    with pytest.raises(ServerError) as caught:
        connect(server).next_barrier("enrich")
    assert len(server.requests) == 1
    assert caught.value.status == 500 and caught.value.code == "internal_error"


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (400, "bad_request", InvalidRequest),
        (401, "unauthorized", Unauthorized),
        (403, "forbidden", Forbidden),
        (404, "not_found", NotFound),
        (409, "not_in_flight", NotInFlight),
        (413, "too_large", InvalidRequest),
        (422, "invalid_request", InvalidRequest),
        (405, "method_not_allowed", MetaServiceError),
    ],
)
def test_client_errors_are_not_retried(
    connect: Connect, status: int, code: str, expected: type[MetaServiceError], sleeps: list[float]
) -> None:
    server = Server(problem(status, code))
    with pytest.raises(expected) as caught:
        connect(server).next_barrier("enrich")
    assert type(caught.value) is expected
    assert len(server.requests) == 1 and sleeps == []


def test_attempts_are_bounded_and_the_last_error_is_raised(
    connect: Connect, policy: RetryPolicy, sleeps: list[float]
) -> None:
    server = Server(problem(503, "unavailable"))
    with pytest.raises(Unavailable) as caught:
        connect(server).versions(["a.b.c"])
    assert len(server.requests) == policy.attempts and len(sleeps) == policy.attempts - 1
    assert caught.value.status == 503 and caught.value.code == "unavailable"
    assert any("gave up after 4 attempt(s)" in note for note in caught.value.__notes__)


def test_connection_failures_exhausting_retries_raise_unavailable_without_status(connect: Connect) -> None:
    server = Server(fail(httpx.ConnectError))
    with pytest.raises(Unavailable) as caught:
        connect(server).get_job("enrich")
    assert caught.value.status is None and caught.value.code == "connection_failed"
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


def test_retry_after_is_honoured(connect: Connect, sleeps: list[float]) -> None:
    busy, busier = problem(429, "busy", retry_after="0.75"), problem(503, "busy", retry_after="0")
    server = Server(busy, busier, ok(DECISION))
    connect(server).next_barrier("enrich")
    assert sleeps == [0.75, 0.0]


def test_retry_after_is_capped_by_the_policy(connect: Connect, sleeps: list[float]) -> None:
    server = Server(problem(503, "busy", retry_after="3600"), ok(DECISION))
    connect(server).next_barrier("enrich")
    assert sleeps == [1.0]


def test_retry_after_as_http_date_is_understood(connect: Connect, sleeps: list[float]) -> None:
    past = format_datetime(datetime.now(UTC) - timedelta(minutes=5), usegmt=True)
    future = format_datetime(datetime.now(UTC) + timedelta(hours=1), usegmt=True)
    server = Server(problem(503, "x", retry_after=past), problem(503, "x", retry_after=future), ok(DECISION))
    connect(server).next_barrier("enrich")
    assert sleeps == [0.0, 1.0]


def test_backoff_doubles_up_to_the_cap_without_jitter() -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(attempts=6, initial_backoff=0.1, max_backoff=0.5, jitter=False, sleep=sleeps.append)
    server = Server(problem(503, "busy"))
    with (
        MetaServiceClient("http://ms", retry=policy, transport=httpx.MockTransport(server)) as client,
        pytest.raises(Unavailable),
    ):
        client.next_barrier("enrich")
    assert sleeps == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])


def test_jittered_backoff_stays_under_the_exponential_bound() -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(attempts=8, initial_backoff=0.1, max_backoff=0.5, sleep=sleeps.append)
    server = Server(fail(httpx.ConnectError))
    with (
        MetaServiceClient("http://ms", retry=policy, transport=httpx.MockTransport(server)) as client,
        pytest.raises(Unavailable),
    ):
        client.next_barrier("enrich")
    bounds = [min(0.5, 0.1 * 2**n) for n in range(7)]
    assert len(sleeps) == 7 and all(0 <= s <= b for s, b in zip(sleeps, bounds, strict=True))


def test_no_wait_is_started_that_would_end_after_the_deadline() -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(attempts=8, deadline=1.0, max_backoff=10, sleep=sleeps.append)
    server = Server(problem(503, "busy", retry_after="5"), ok(DECISION))
    with (
        MetaServiceClient("http://ms", retry=policy, transport=httpx.MockTransport(server)) as client,
        pytest.raises(Unavailable),
    ):
        client.next_barrier("enrich")
    assert len(server.requests) == 1 and sleeps == []


def test_total_time_is_bounded_by_the_deadline() -> None:
    policy = RetryPolicy(attempts=100_000, deadline=0.3, initial_backoff=0.005, max_backoff=0.02)
    server = Server(fail(httpx.ConnectError))
    started = time.monotonic()
    with (
        MetaServiceClient("http://ms", retry=policy, transport=httpx.MockTransport(server)) as client,
        pytest.raises(Unavailable),
    ):
        client.next_barrier("enrich")
    assert time.monotonic() - started < 0.3 + 0.5
    assert policy.attempts is not None and 1 < len(server.requests) < policy.attempts


def test_a_retried_call_logs_one_warning_naming_the_server_then_debug_lines(
    connect: Connect,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = Server(fail(httpx.ConnectError), problem(503, "busy"), fail(httpx.ReadError), ok(DECISION))
    with caplog.at_level(logging.DEBUG, logger="spark_client"):
        connect(server).next_barrier("enrich")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # one per call, not one per attempt
    assert "POST http://metaservice/jobs/enrich/barriers/next failed" in warnings[0]
    assert "ConnectError" in warnings[0] and "retrying up to 4 attempts for up to 60s" in warnings[0]
    retries = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and "retrying" in r.getMessage()]
    assert ["attempt 2 after" in retries[0] and "busy" in retries[0], "attempt 3 after" in retries[1]] == [True, True]
    assert all("of a 60s budget" in line for line in retries)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        "POST /jobs/enrich/barriers/next succeeded on attempt 4"
    ]


def test_the_default_budget_is_time_enough_for_a_rolling_restart_and_the_warning_states_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """By default the client retries for 120 s, with no limit on the number of attempts (8 attempts used to
    give up after about 7 s while the warning promised 60 s); the warning says what the policy does."""
    policy = RetryPolicy()
    assert (policy.deadline, policy.attempts) == (120.0, None)
    clock = FakeClock()
    patient = RetryPolicy(initial_backoff=0.1, max_backoff=5.0, jitter=False, sleep=clock.sleep, clock=clock)
    server = Server(*([fail(httpx.ConnectError)] * 25), ok(DECISION))
    with (
        caplog.at_level(logging.WARNING, logger="spark_client"),
        MetaServiceClient("http://metaservice", retry=patient, transport=httpx.MockTransport(server)) as client,
    ):
        client.next_barrier("enrich")
    assert len(server.requests) == 26  # far more than 8 attempts: waits of up to 5 s, 101.3 s in all
    assert clock.now == pytest.approx(101.3)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.endswith("retrying for up to 120s")


def test_when_the_budget_runs_out_the_error_says_how_many_attempts_over_how_long_and_what_sets_it() -> None:
    clock = FakeClock()
    policy = RetryPolicy(deadline=10, initial_backoff=1, max_backoff=1, jitter=False, sleep=clock.sleep, clock=clock)
    server = Server(fail(httpx.ConnectError))
    with (
        MetaServiceClient("http://metaservice", retry=policy, transport=httpx.MockTransport(server)) as client,
        pytest.raises(Unavailable) as caught,
    ):
        client.next_barrier("enrich")
    message = str(caught.value)
    assert len(server.requests) == 10  # at 0 s, 1 s, ... 9 s: a tenth wait would end at the budget
    assert "gave up after 10 attempt(s) in 9.0s" in message
    assert "the retry budget being for up to 10s (RetryPolicy(deadline=...) sets it)" in message
    assert "cannot reach the MetaService server" in message


def test_connection_errors_name_the_server_url_host_and_port(unused_port: int) -> None:
    url = f"http://127.0.0.1:{unused_port}"
    with (
        MetaServiceClient(url, retry=RetryPolicy(attempts=1)) as client,
        pytest.raises(Unavailable) as caught,
    ):
        client.version("lake.raw.orders")
    message = str(caught.value)
    assert f"GET {url}/version/strong/lake/raw/orders" in message
    assert f"cannot reach the MetaService server at {url}" in message and "ConnectError" in message


@pytest.mark.parametrize("url", ["127.0.0.1:8080", "localhost", "ftp://host:21", "http://", "/metaservice"])
def test_a_base_url_without_scheme_or_host_is_a_value_error(url: str) -> None:
    with pytest.raises(ValueError, match=r"absolute http\(s\) URL with a host|is not a URL"):
        MetaServiceClient(url)


def test_next_barrier_sends_start_only_when_given_and_checks_it(connect: Connect) -> None:
    server = Server(ok(DECISION))
    client = connect(server)
    client.next_barrier("enrich")
    client.next_barrier("enrich", start="earliest")
    client.next_barrier("enrich", {"lake.raw.orders": 3}, start=1763800000000001)
    assert [server.body(i).get("start") for i in range(3)] == [None, "earliest", 1763800000000001]
    for bad in ("oldest", 0, -5, True, 1.5):
        with pytest.raises(ValueError, match="start must be 'newest', 'earliest' or a barrier"):
            client.next_barrier("enrich", start=bad)  # type: ignore[arg-type]
    assert len(server.requests) == 3


def test_next_barrier_parses_each_sinks_baseline(connect: Connect) -> None:
    body = {**DECISION, "sinks": {"lake.mart.x": {"previous_snapshot_id": 4}, "lake.mart.y": {}}}
    decision = connect(Server(ok(body))).next_barrier("enrich")
    assert decision.sinks["lake.mart.x"].previous_snapshot_id == 4
    assert decision.sinks["lake.mart.y"].previous_snapshot_id is None


# --- non-idempotent calls ----------------------------------------------------------------------------------

NON_IDEMPOTENT: list[tuple[str, Callable[[MetaServiceClient], object], object]] = [
    ("create_lease", lambda c: c.create_lease("dashboard", {"a.b.c": 5}), LEASE),
    ("plan_rollback", lambda c: c.plan_rollback("lake.raw.orders", 5), PLAN),
]
UNKNOWN_OUTCOME: list[Answer] = [
    fail(httpx.ReadTimeout),
    fail(httpx.ReadError),
    fail(httpx.RemoteProtocolError),
    fail(httpx.WriteError),
    fail(httpx.WriteTimeout),
    problem(502, "bad_gateway"),
    problem(504, "gateway_timeout"),
]
NO_EFFECT: list[Answer] = [
    fail(httpx.ConnectError),
    fail(httpx.ConnectTimeout),
    fail(httpx.PoolTimeout),
    problem(503, "unavailable"),
    problem(429, "busy"),
]


@pytest.mark.parametrize("failure", UNKNOWN_OUTCOME)
@pytest.mark.parametrize(("name", "call", "answer"), NON_IDEMPOTENT, ids=[n for n, _, _ in NON_IDEMPOTENT])
def test_non_idempotent_call_with_unknown_outcome_raises_outcome_unknown(
    connect: Connect, failure: Answer, name: str, call: Callable[[MetaServiceClient], object], answer: object
) -> None:
    del name
    server = Server(failure, ok(answer, 201))
    with pytest.raises(OutcomeUnknown) as caught:
        call(connect(server))
    assert len(server.requests) == 1
    assert caught.value.code == "outcome_unknown"
    assert not isinstance(caught.value, Unavailable)


@pytest.mark.parametrize("failure", NO_EFFECT)
@pytest.mark.parametrize(("name", "call", "answer"), NON_IDEMPOTENT, ids=[n for n, _, _ in NON_IDEMPOTENT])
def test_non_idempotent_call_is_retried_when_the_request_had_no_effect(
    connect: Connect, failure: Answer, name: str, call: Callable[[MetaServiceClient], object], answer: object
) -> None:
    del name
    server = Server(failure, ok(answer, 201))
    assert call(connect(server)) is not None
    assert len(server.requests) == 2


def test_outcome_unknown_after_a_gateway_error_keeps_status_and_body(connect: Connect) -> None:
    server = Server(lambda _r: httpx.Response(504, text="upstream timed out"))
    with pytest.raises(OutcomeUnknown) as caught:
        connect(server).create_lease("dashboard", {"a.b.c": 5})
    assert caught.value.status == 504 and "upstream timed out" in caught.value.detail
    assert str(caught.value).startswith("outcome_unknown: ")


@pytest.mark.parametrize("failure", UNKNOWN_OUTCOME + NO_EFFECT)
def test_issue_barrier_is_retried_with_the_same_idempotency_key(connect: Connect, failure: Answer) -> None:
    server = Server(failure, ok(ISSUED, 201))
    assert connect(server).issue_barrier({"lake.raw.orders": 12}) is not None
    keys = [r.headers.get("Idempotency-Key") for r in server.requests]
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1], keys


def test_each_issue_barrier_call_has_its_own_key_unless_one_is_given(connect: Connect) -> None:
    server = Server(ok(ISSUED, 201), ok(ISSUED, 201), ok(ISSUED, 201))
    client = connect(server)
    client.issue_barrier()
    client.issue_barrier()
    client.issue_barrier(idempotency_key="orchestrator-run-42")
    keys = [r.headers.get("Idempotency-Key") for r in server.requests]
    assert keys[0] != keys[1] and keys[2] == "orchestrator-run-42", keys


# --- error mapping -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("cycle", CycleError),
        ("table_has_writer", TableHasWriter),
        ("not_in_flight", NotInFlight),
        ("snapshot_conflict", SnapshotConflict),
        ("snapshot_regressed", SnapshotRegressed),
        ("already_committed", AlreadyCommitted),
        ("not_root", NotRoot),
        ("some_future_rule", Conflict),
    ],
)
def test_conflicts_map_to_one_class_per_code(connect: Connect, code: str, expected: type[Conflict]) -> None:
    server = Server(problem(409, code, hint="extra fields are kept"))
    with pytest.raises(Conflict) as caught:
        connect(server).commit_barrier("enrich", 5, {"a.b.c": 7})
    error = caught.value
    assert type(error) is expected
    assert (error.status, error.code, error.detail) == (409, code, f"{code} happened")
    assert error.body["hint"] == "extra fields are kept" and error.body["type"] == f"/problems/{code}"
    assert str(error) == f"{code}: {code} happened"
    assert len(server.requests) == 1


def test_cycle_error_names_the_nodes_along_the_loop(connect: Connect) -> None:
    loop = ["table:a.b.c", "job:enrich", "table:a.b.d", "job:back", "table:a.b.c"]
    server = Server(problem(409, "cycle", cycle=loop))
    with pytest.raises(CycleError) as caught:
        connect(server).register_source("back", "a.b.d")
    assert caught.value.cycle == loop


def test_second_writer_is_rejected_with_the_writer_named(connect: Connect) -> None:
    server = Server(problem(409, "table_has_writer", writer="enrich"))
    with pytest.raises(TableHasWriter) as caught:
        connect(server).register_sink("other", "a.b.c")
    assert caught.value.writer == "enrich"


@pytest.mark.parametrize(
    ("code", "expected"), [("not_found", NotFound), ("no_consistent_version", NoConsistentVersion)]
)
def test_not_found_codes(connect: Connect, code: str, expected: type[NotFound]) -> None:
    server = Server(problem(404, code))
    with pytest.raises(NotFound) as caught:
        connect(server).version("a.b.c")
    assert type(caught.value) is expected


def test_invalid_request_lists_the_offending_fields(connect: Connect) -> None:
    fields = [{"loc": ["body", "tables", 0], "msg": "string does not match pattern"}]
    server = Server(problem(422, "invalid_request", errors=fields))
    with pytest.raises(InvalidRequest) as caught:
        connect(server).versions(["not a table"])
    assert caught.value.errors == fields and caught.value.status == 422


def test_non_json_502_body_still_gives_a_sensible_error(connect: Connect, policy: RetryPolicy) -> None:
    html = "<html><body><h1>502 Bad Gateway</h1></body></html>"
    server = Server(lambda _r: httpx.Response(502, text=html, headers={"content-type": "text/html"}))
    with pytest.raises(Unavailable) as caught:
        connect(server).next_barrier("enrich")
    error = caught.value
    assert (error.status, error.code) == (502, "http_502")
    assert "502 Bad Gateway" in error.detail and str(error).startswith("http_502: ")
    assert len(server.requests) == policy.attempts


def test_empty_500_body_uses_the_reason_phrase(connect: Connect) -> None:
    server = Server(lambda _r: httpx.Response(500))
    with pytest.raises(ServerError) as caught:
        connect(server).get_job("enrich")
    assert str(caught.value) == "http_500: Internal Server Error"


def test_success_without_json_is_reported_not_crashed_on(connect: Connect) -> None:
    server = Server(lambda _r: httpx.Response(200, text="<html>captive portal</html>"))
    with pytest.raises(MetaServiceError) as caught:
        connect(server).get_job("enrich")
    assert caught.value.code == "invalid_response"


# --- leases ------------------------------------------------------------------------------------------------


def test_release_lease_swallows_not_found(connect: Connect) -> None:
    server = Server(problem(404, "not_found"))
    connect(server).release_lease("L-gone")
    assert server.requests[0].method == "DELETE" and server.paths == [b"/leases/L-gone"]


def test_release_lease_raises_other_errors(connect: Connect) -> None:
    with pytest.raises(Forbidden):
        connect(Server(problem(403, "forbidden"))).release_lease("L-1")


def test_lease_lifecycle_on_the_wire(connect: Connect) -> None:
    server = Server(ok(LEASE, 201), ok(LEASE), ok(LEASE), ok(status=204))
    client = connect(server)
    lease = client.create_lease("dashboard", {"a.b.c": 5}, ttl_seconds=30)
    assert lease.lease_id == "L-1"
    assert lease.expires_at == datetime(2026, 11, 22, 21, 10, 0, 500000, tzinfo=UTC)
    client.renew_lease(lease.lease_id, 60)
    client.renew_lease(lease.lease_id)
    client.release_lease(lease.lease_id)
    assert server.body(0) == {"holder": "dashboard", "snapshots": {"a.b.c": 5}, "ttl_seconds": 30}
    assert server.body(1) == {"ttl_seconds": 60} and server.body(2) is None
    assert server.paths == [b"/leases", b"/leases/L-1/renew", b"/leases/L-1/renew", b"/leases/L-1"]


# --- headers and paths -------------------------------------------------------------------------------------


def test_token_argument_is_sent_as_bearer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METASERVICE_TOKEN", "from-env")
    server = Server(ok(DECISION))
    with MetaServiceClient("http://ms", "from-arg", transport=httpx.MockTransport(server)) as client:
        client.next_barrier("enrich")
    assert server.requests[0].headers["Authorization"] == "Bearer from-arg"


def test_token_falls_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METASERVICE_TOKEN", "from-env")
    server = Server(ok(DECISION))
    with MetaServiceClient("http://ms", transport=httpx.MockTransport(server)) as client:
        client.next_barrier("enrich")
    assert server.requests[0].headers["Authorization"] == "Bearer from-env"


def test_no_token_sends_no_authorization(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("METASERVICE_TOKEN", raising=False)
    server = Server(ok(DECISION))
    with MetaServiceClient("http://ms", transport=httpx.MockTransport(server)) as client:
        client.next_barrier("enrich")
    headers = server.requests[0].headers
    assert "Authorization" not in headers
    assert headers["User-Agent"].startswith("metaservice-spark-client/")


def test_job_ids_with_colons_and_dots_stay_one_path_segment(connect: Connect) -> None:
    job = "team:etl.enrich-v2"
    everything = {**DECISION, "job_id": job, "barrier": 5, "snapshots": {}, "table": "a.b.c", "role": "sink"}
    server = Server(ok(everything))
    client = connect(server)
    client.register_sink(job, "lake.mart.orders")
    client.next_barrier(job)
    client.commit_barrier(job, 5, {})
    client.abort_barrier(job, 5, reason="bad input")
    client.unregister(job)
    client.get_job(job)
    quoted = b"team%3Aetl.enrich-v2"
    assert server.paths == [
        b"/register/sink/" + quoted + b"/lake/mart/orders",
        b"/jobs/" + quoted + b"/barriers/next",
        b"/jobs/" + quoted + b"/barriers/5/commit",
        b"/jobs/" + quoted + b"/barriers/5/abort",
        b"/unregister/" + quoted,
        b"/jobs/" + quoted,
    ]


def test_a_slash_in_a_job_id_cannot_escape_its_segment(connect: Connect) -> None:
    server = Server(ok({"job_id": "x"}))
    connect(server).get_job("../admin")
    assert server.paths == [b"/jobs/..%2Fadmin"]


@pytest.mark.parametrize("table", ["orders", "a.b", "a.b.c.d", "a..c"])
def test_table_names_need_three_parts(connect: Connect, table: str) -> None:
    server = Server(ok({}))
    with pytest.raises(ValueError, match=r"catalog\.database\.table"):
        connect(server).get_table(table)
    assert server.requests == []


def test_base_url_path_prefix_is_kept() -> None:
    server = Server(ok(status=200))
    with MetaServiceClient("http://ms/metaservice", transport=httpx.MockTransport(server)) as client:
        assert client.health()
    assert server.paths == [b"/metaservice/readyz"]


def test_closed_client_refuses_calls(connect: Connect) -> None:
    client = connect(Server(ok(DECISION)))
    with client:
        client.next_barrier("enrich")
    with pytest.raises(RuntimeError):
        client.next_barrier("enrich")


# --- calls and models --------------------------------------------------------------------------------------


def test_next_barrier_parses_the_decision_and_ignores_unknown_fields(connect: Connect) -> None:
    server = Server(ok(DECISION))
    decision = connect(server).next_barrier("enrich", {"lake.raw.orders": 12})
    assert server.body() == {"root_snapshots": {"lake.raw.orders": 12}}
    assert decision.action == "process" and decision.barrier == 1763800000123456
    assert decision.inputs == {"lake.raw.orders": InputSnapshot(12, 9)}
    assert decision.skipped == (1763800000000001,) and decision.retry_after_seconds is None


def test_next_barrier_without_snapshots_sends_an_empty_mapping(connect: Connect) -> None:
    server = Server(ok({"job_id": "enrich", "action": "idle", "barrier": None}))
    decision = connect(server).next_barrier("enrich")
    assert server.body() == {"root_snapshots": {}}
    assert (decision.action, decision.barrier, decision.inputs, decision.skipped) == ("idle", None, {}, ())


@pytest.mark.parametrize(("status", "created"), [(201, True), (200, False)])
def test_registration_reports_whether_the_edge_is_new(connect: Connect, status: int, created: bool) -> None:
    answer = {"job_id": "j", "table": "a.b.c", "role": "source", "created": not created}
    server = Server(ok(answer, status))
    registration = connect(server).register_source("j", "a.b.c", format="delta", location="/lake/a/b/c")
    assert registration.created is created and registration.role == "source"
    assert server.body() == {"format": "delta", "location": "/lake/a/b/c"}


def test_registration_without_table_details_sends_no_body(connect: Connect) -> None:
    server = Server(ok({"job_id": "j", "table": "a.b.c", "role": "sink"}, 201))
    connect(server).register_sink("j", "a.b.c")
    assert server.requests[0].content == b""


def test_commit_and_abort_bodies(connect: Connect) -> None:
    committed = {"job_id": "j", "barrier": 5, "status": "committed", "snapshots": {"a.b.c": 7}}
    server = Server(ok(committed), ok({"status": "aborted"}), ok({"status": "aborted"}))
    client = connect(server)
    commit = client.commit_barrier("j", 5, {"a.b.c": 7})
    client.abort_barrier("j", 6, reason="bad input")
    client.abort_barrier("j", 7)
    assert (commit.barrier, commit.status, commit.snapshots) == (5, "committed", {"a.b.c": 7})
    assert server.body(0) == {"snapshots": {"a.b.c": 7}}
    assert server.body(1) == {"reason": "bad input"} and server.body(2) == {}


def test_issue_barrier_parses_times_with_z(connect: Connect) -> None:
    server = Server(ok(ISSUED, 201))
    issued = connect(server).issue_barrier()
    assert issued.issued_at == datetime(2026, 11, 22, 21, 0, tzinfo=UTC)
    assert issued.sealed == {"lake.raw.orders": 12} and server.body() == {"root_snapshots": {}}


def test_report_snapshot_sends_rfc3339_times(connect: Connect) -> None:
    server = Server(ok({"table": "a.b.c", "latest_snapshot_id": 3}))
    client = connect(server)
    client.report_snapshot("a.b.c", 3, committed_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert server.paths == [b"/tables/a/b/c/snapshots"]
    assert server.body() == {"snapshot_id": 3, "committed_at": "2026-01-02T03:04:05+00:00"}
    with pytest.raises(ValueError, match="timezone"):
        client.report_snapshot("a.b.c", 4, committed_at=datetime(2026, 1, 2, 3, 4, 5))
    assert len(server.requests) == 1


def test_version_and_versions(connect: Connect) -> None:
    server = Server(
        ok({"table": "a.b.c", "consistency": "weak", "barrier": 5, "snapshot_id": 3}),
        ok({"consistency": "strong", "barrier": 5, "versions": {"a.b.c": 3, "a.b.d": 8}}),
    )
    client = connect(server)
    version = client.version("a.b.c", "weak")
    versions = client.versions(["a.b.c", "a.b.d"])
    assert (version.consistency, version.barrier, version.snapshot_id) == ("weak", 5, 3)
    assert versions.versions == {"a.b.c": 3, "a.b.d": 8}
    assert server.paths == [b"/version/weak/a/b/c", b"/versions"]
    assert server.body() == {"tables": ["a.b.c", "a.b.d"], "consistency": "strong"}


def test_retention(connect: Connect) -> None:
    answer = {
        "table": "a.b.c",
        "oldest_protected_snapshot_id": 4,
        "protected": [
            {"snapshot_id": 4, "reason": "in_flight:enrich"},
            {"snapshot_id": 6, "reason": "lease:L-1"},
        ],
    }
    retention = connect(Server(ok(answer))).retention("a.b.c")
    assert retention.oldest_protected_snapshot_id == 4
    assert [(p.snapshot_id, p.reason) for p in retention.protected] == [
        (4, "in_flight:enrich"),
        (6, "lease:L-1"),
    ]


def test_rollback_plan_and_completion(connect: Connect) -> None:
    server = Server(ok(PLAN, 201), ok({**PLAN, "status": "completed"}))
    client = connect(server)
    plan = client.plan_rollback("lake.raw.orders", 5)
    done = client.complete_rollback(plan.rollback_id, {"lake.raw.orders": 14})
    assert plan.rollback_id == "3f2a" and plan.tables == {"lake.raw.orders": 9, "lake.mart.x": 4}
    assert plan.jobs == {"enrich": 5} and done.status == "completed"
    assert server.body(0) == {"table": "lake.raw.orders", "barrier": 5}
    assert server.body(1) == {"root_snapshots": {"lake.raw.orders": 14}}
    assert server.paths == [b"/rollbacks", b"/rollbacks/3f2a/complete"]


def test_lineage_query_parameters(connect: Connect) -> None:
    server = Server(ok({"nodes": [], "edges": [], "truncated": False}))
    client = connect(server)
    client.lineage("a.b.c", direction="upstream", depth=2)
    client.lineage()
    assert dict(server.requests[0].url.params) == {"table": "a.b.c", "direction": "upstream", "depth": "2"}
    assert dict(server.requests[1].url.params) == {"direction": "both"}


@pytest.mark.parametrize(("answer", "healthy"), [(ok(status=200), True), (problem(503, "not_ready"), False)])
def test_health_reflects_readiness(connect: Connect, answer: Answer, healthy: bool) -> None:
    server = Server(answer)
    assert connect(server).health() is healthy
    assert server.paths == [b"/readyz"]


def test_health_is_false_when_unreachable_without_retrying(connect: Connect) -> None:
    server = Server(fail(httpx.ConnectError))
    assert connect(server).health() is False
    assert len(server.requests) == 1


def test_malformed_answers_are_rejected_clearly(connect: Connect) -> None:
    server = Server(ok({"job_id": "enrich", "action": "explode", "barrier": 1}))
    with pytest.raises(ValueError, match="action"):
        connect(server).next_barrier("enrich")


def test_retry_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="deadline"):
        RetryPolicy(deadline=0)
    with pytest.raises(ValueError, match="backoff"):
        RetryPolicy(initial_backoff=2, max_backoff=1)


def test_models_keep_integer_rollback_ids_and_name_missing_fields() -> None:
    assert RollbackPlan.from_json({**PLAN, "rollback_id": 7}).rollback_id == 7
    with pytest.raises(ValueError, match="'snapshot_id' is missing"):
        TableVersion.from_json({"table": "a.b.c", "consistency": "strong", "barrier": 5})


def test_times_without_offset_are_taken_as_utc() -> None:
    assert parse_time("2026-11-22T21:00:00") == datetime(2026, 11, 22, 21, 0, tzinfo=UTC)
    assert parse_time("2026-11-22T22:00:00+01:00") == datetime(2026, 11, 22, 21, 0, tzinfo=UTC)
