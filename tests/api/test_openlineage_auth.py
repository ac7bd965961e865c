"""OpenLineage events under `--auth`: a job token posts events only for the jobs it acts for and registers sinks
only inside its table namespaces; readers may not post events. Tokens travel as OpenLineage's own API key
auth (`Authorization: Bearer`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.transport.http import ApiKeyTokenProvider, HttpConfig, HttpTransport, TokenProvider

from tests import support
from tests.support import Token, request_as

pytestmark = pytest.mark.xdist_group("auth")


@pytest.fixture(scope="module", name="secured")
def fx_secured(
    admin_url: str, worker_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    tokens = {
        "admin": Token("ops", "admin"),
        "job": Token("team-a", "job", ("team-a.*",), tables=("lake.team_a.*",)),
        "reader": Token("dashboards", "reader"),
    }
    database, log = f"ms_ol_auth_{worker_id}", tmp_path_factory.mktemp("ol-auth") / "server.log"
    with support.secured_server(admin_url, database, tokens, log_path=log) as (server, secrets):
        yield server.base_url, secrets


def emit(base: str, token: str | None, job: str, inputs: list[str], outputs: list[str]) -> requests.Response:
    auth = ApiKeyTokenProvider({"apiKey": token}) if token else TokenProvider({})
    config = HttpConfig(url=base, retry={"total": 0}, auth=auth)
    event = RunEvent(
        eventType=RunState.START,
        eventTime="2026-11-24T08:00:00+00:00",
        run=Run(runId=str(uuid.uuid4())),
        job=Job(namespace="spark", name=job),
        inputs=[InputDataset(namespace="hive", name=name) for name in inputs],
        outputs=[OutputDataset(namespace="hive", name=name) for name in outputs],
        producer="https://example.org/test",
    )
    try:
        return HttpTransport(config).emit(event)
    except requests.HTTPError as exc:
        assert exc.response is not None
        return exc.response


def refused(response: requests.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    return body


def test_a_job_token_posts_events_for_its_own_jobs_only(secured: tuple[str, dict[str, str]]) -> None:
    base, tokens = secured
    answer = emit(base, tokens["job"], "team-a.enrich", ["lake.raw.orders"], ["lake.team_a.orders"])
    assert answer.status_code == 201, answer.text
    body = refused(emit(base, tokens["job"], "team-b.enrich", ["lake.raw.x"], []), 403, "forbidden")
    assert body["job_id"] == "team-b.enrich" and "team-b.enrich" in body["detail"]
    assert request_as(base, tokens["admin"], "GET", "/jobs/team-b.enrich").status_code == 404
    assert request_as(base, tokens["admin"], "GET", "/tables/lake/raw/x").status_code == 404


def test_a_job_token_registers_sinks_only_inside_its_namespaces(secured: tuple[str, dict[str, str]]) -> None:
    base, tokens = secured
    body = refused(emit(base, tokens["job"], "team-a.spill", ["lake.raw.y"], ["lake.team_b.spill"]), 403, "forbidden")
    assert body["tables"] == ["lake.team_b.spill"]
    assert request_as(base, tokens["admin"], "GET", "/jobs/team-a.spill").status_code == 404  # the source neither
    assert request_as(base, tokens["admin"], "GET", "/tables/lake/raw/y").status_code == 404


def test_readers_and_anonymous_callers_may_not_post_events(secured: tuple[str, dict[str, str]]) -> None:
    base, tokens = secured
    refused(emit(base, tokens["reader"], "team-a.read", ["lake.raw.z"], []), 403, "forbidden")
    refused(emit(base, None, "team-a.read", ["lake.raw.z"], []), 401, "unauthorized")
    assert request_as(base, tokens["admin"], "GET", "/jobs/team-a.read").status_code == 404
    assert emit(base, tokens["admin"], "anyone", ["lake.raw.z"], ["lake.any.where"]).status_code == 201
