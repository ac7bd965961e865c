"""Checked HTTP calls against a real server, shared by the changing-lineage regression tests and the model walk.

Every answer is checked on arrival: no 5xx, ever; every 4xx is an RFC 9457 problem document with a `code`
(API.md "Errors"). A call names the outcomes it accepts, so an unexpected status fails where it happened.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

PROBLEM_JSON = "application/problem+json"


class ContractBroken(AssertionError):
    """The server answered something the API contract or the caller's expectation does not allow."""


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: status, parsed JSON body (None when empty) and, for a problem, its `code`."""

    method: str
    url: str
    status: int
    body: Any
    code: str | None = None

    @property
    def ok(self) -> bool:
        return self.status < 300

    def json(self) -> dict[str, Any]:
        assert isinstance(self.body, dict), f"{self.method} {self.url}: not a JSON object: {self.body!r}"
        return self.body

    def outcome(self) -> str:
        """`201`, `409 cycle`, …: what the walk's log and counters show."""
        return str(self.status) if self.code is None else f"{self.status} {self.code}"


@dataclass
class Wire:
    """An httpx client whose every answer is checked against the error contract and counted by outcome."""

    client: httpx.Client
    outcomes: Counter[str] = field(default_factory=Counter)

    def call(
        self,
        method: str,
        url: str,
        *,
        json: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        expect: Collection[int | str] = (),
    ) -> Answer:
        """Send one request. `expect` lists accepted outcomes: a status (`200`) or a problem code (`"cycle"`);
        empty accepts any status below 500."""
        response = self.client.request(method, url, json=json, params=params)
        answer = _checked(method, url, response)
        self.outcomes[f"{method} {_route(url)} → {answer.outcome()}"] += 1
        if expect and answer.status not in expect and answer.code not in expect:
            raise ContractBroken(
                f"{method} {url} {dict(json) if json is not None else ''}: expected {sorted(map(str, expect))}, "
                f"got {answer.outcome()}: {answer.body}"
            )
        return answer

    def get(self, url: str, *, params: Mapping[str, Any] | None = None, expect: Collection[int | str] = ()) -> Answer:
        return self.call("GET", url, params=params, expect=expect)

    def post(self, url: str, json: Mapping[str, Any] | None = None, *, expect: Collection[int | str] = ()) -> Answer:
        return self.call("POST", url, json=json, expect=expect)

    def delete(self, url: str, *, expect: Collection[int | str] = ()) -> Answer:
        return self.call("DELETE", url, expect=expect)


def _checked(method: str, url: str, response: httpx.Response) -> Answer:
    where = f"{method} {url}"
    if response.status_code >= 500:
        raise ContractBroken(f"{where}: server error {response.status_code}: {response.text}")
    body: Any = response.json() if response.content else None
    if response.status_code < 400:
        return Answer(method, url, response.status_code, body)
    media_type = response.headers.get("content-type", "").split(";")[0].strip()
    if media_type != PROBLEM_JSON:
        raise ContractBroken(f"{where}: {response.status_code} is not {PROBLEM_JSON} ({media_type}): {response.text}")
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("code"), str)
        or body.get("status") != response.status_code
    ):
        raise ContractBroken(f"{where}: {response.status_code} problem without a code or status: {response.text}")
    return Answer(method, url, response.status_code, body, code=body["code"])


def _route(url: str) -> str:
    """A URL with its names and numbers replaced, so outcomes are counted per route."""
    parts = url.split("?")[0].strip("/").split("/")
    if parts[0] in ("register", "version") and len(parts) >= 2:
        return f"/{parts[0]}/{parts[1]}/…"
    if parts[0] == "jobs" and len(parts) >= 4:
        return f"/jobs/…/barriers/{'next' if parts[3] == 'next' else '…/' + parts[-1]}"
    if parts[0] == "tables" and len(parts) >= 5:
        return "/tables/…/" + parts[4]
    if parts[0] == "rollbacks" and len(parts) >= 3:
        return "/rollbacks/…/" + parts[2]
    return "/" + "/".join(parts[:1]) + ("/…" if len(parts) > 1 else "")
