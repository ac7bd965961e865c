"""Which transport failures the client retries. Only the transport is faked (httpx.MockTransport)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from spark_client import MetaServiceClient, OutcomeUnknown, RetryPolicy, TableHasWriter, Unavailable
from spark_client.errors import CycleError, InvalidRequest, NoConsistentVersion, ServerError

FAST = RetryPolicy(attempts=4, deadline=5, initial_backoff=0.001, max_backoff=0.01)
DECISION = {"job_id": "j", "action": "idle", "barrier": None, "inputs": {}, "skipped": []}


def problem(status: int, code: str, **extra: object) -> httpx.Response:
    body = {
        "type": f"/problems/{code}",
        "title": code,
        "status": status,
        "detail": f"{code} happened",
        "code": code,
    }
    return httpx.Response(status, json={**body, **extra}, headers={"content-type": "application/problem+json"})


def client_for(
    answers: list[Callable[[httpx.Request], httpx.Response]], seen: list[httpx.Request]
) -> MetaServiceClient:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[min(len(seen), len(answers)) - 1](request)

    return MetaServiceClient("http://ms", retry=FAST, transport=httpx.MockTransport(handler))


def fail(exc: type[Exception]) -> Callable[[httpx.Request], httpx.Response]:
    def raise_(request: httpx.Request) -> httpx.Response:
        raise exc("boom", request=request)  # type: ignore[call-arg]

    return raise_


def ok(request: httpx.Request) -> httpx.Response:
    del request
    return httpx.Response(200, json=DECISION)


@pytest.mark.parametrize(
    "failure",
    [
        fail(httpx.ConnectError),
        fail(httpx.ReadTimeout),
        fail(httpx.RemoteProtocolError),
        lambda _r: problem(503, "unavailable"),
        lambda _r: problem(429, "busy"),
        lambda _r: httpx.Response(502, text="bad gateway"),
    ],
)
def test_idempotent_calls_are_retried_on_transient_failures(
    failure: Callable[[httpx.Request], httpx.Response],
) -> None:
    seen: list[httpx.Request] = []
    with client_for([failure, failure, ok], seen) as client:
        assert client.next_barrier("j").action == "idle"
    assert len(seen) == 3


def test_retries_are_bounded() -> None:
    seen: list[httpx.Request] = []
    with client_for([lambda _r: problem(503, "unavailable")], seen) as client, pytest.raises(Unavailable):
        client.next_barrier("j")
    assert len(seen) == FAST.attempts


def test_retry_after_is_honoured_within_the_cap() -> None:
    seen: list[httpx.Request] = []

    def slow(_r: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"code": "unavailable", "detail": "x"}, headers={"Retry-After": "0.005"})

    with client_for([slow, ok], seen) as client:
        client.next_barrier("j")
    assert len(seen) == 2


def test_conflicts_are_not_retried_and_carry_their_fields() -> None:
    seen: list[httpx.Request] = []
    answer = [lambda _r: problem(409, "table_has_writer", writer="enrich")]
    with client_for(answer, seen) as client, pytest.raises(TableHasWriter) as caught:
        client.register_sink("other", "a.b.c")
    assert caught.value.writer == "enrich" and caught.value.code == "table_has_writer" and len(seen) == 1
    seen.clear()
    answer = [lambda _r: problem(409, "cycle", cycle=["a.b.c", "j", "a.b.c"])]
    with client_for(answer, seen) as client, pytest.raises(CycleError) as cycle:
        client.register_source("j", "a.b.c")
    assert cycle.value.cycle == ["a.b.c", "j", "a.b.c"]


def test_other_errors_map_to_types_without_retry() -> None:
    for status, code, exc in [
        (422, "invalid_request", InvalidRequest),
        (404, "no_consistent_version", NoConsistentVersion),
        (500, "internal_error", ServerError),
    ]:
        seen: list[httpx.Request] = []
        with client_for([lambda _r, s=status, c=code: problem(s, c)], seen) as client, pytest.raises(exc):
            client.versions(["a.b.c"])
        assert len(seen) == 1


def test_non_idempotent_call_with_unknown_outcome_is_not_retried() -> None:
    seen: list[httpx.Request] = []
    with client_for([fail(httpx.ReadTimeout)], seen) as client, pytest.raises(OutcomeUnknown):
        client.issue_barrier()
    assert len(seen) == 1
    seen.clear()

    def issued(_r: httpx.Request) -> httpx.Response:
        return httpx.Response(201, json={"barrier": 5, "issued_at": "2026-11-22T00:00:00Z", "sealed": {}})

    with client_for([fail(httpx.ConnectError), issued], seen) as client:
        assert client.issue_barrier().barrier == 5  # never reached the server: safe to retry
    assert len(seen) == 2


def test_token_and_quoting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METASERVICE_TOKEN", "secret")
    seen: list[httpx.Request] = []
    with client_for([ok], seen) as client:
        client.next_barrier("team:job.v2")
    assert seen[0].headers["Authorization"] == "Bearer secret"
    assert seen[0].url.raw_path == b"/jobs/team%3Ajob.v2/barriers/next"
