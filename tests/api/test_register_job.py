"""A job's whole lineage in one request (`POST /register/{job_id}`), unknown sources, and retired tables, over HTTP
against the real server.

One request, one outcome: a refusal for any edge leaves the lineage exactly as it was. A source MetaService does
not know is refused unless declared a new root (a typo would otherwise become a root that never gets data). An
admin retires a table no job uses: it leaves the lists, delays, lineage and reads; naming it again is refused
until it is revived.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.support import assert_problem, table_path

RAW, TYPO, MART, OTHER = "lake.raw.events", "lake.raw.evnts", "lake.mart.sessions", "lake.mart.users"


def snapshot(api: httpx.Client) -> dict[str, Any]:
    """Everything a registration can change, as the API shows it."""
    jobs = api.get("/jobs").json()
    tables = api.get("/tables", params={"include_retired": "true"}).json()
    lineage = api.get("/lineage").json()
    histories = {j["job_id"]: api.get(f"/jobs/{j['job_id']}/barriers").json() for j in jobs["jobs"]}
    return {"jobs": jobs, "tables": tables, "lineage": lineage["nodes"], "edges": lineage["edges"], "h": histories}


def register(api: httpx.Client, job: str, *, sources: list[str], sinks: list[str], **extra: Any) -> httpx.Response:
    body = {"sources": [{"table": t} for t in sources], "sinks": [{"table": t} for t in sinks], **extra}
    return api.post(f"/register/{job}", json=body)


def test_a_refused_edge_leaves_none_of_the_job_registered(api: httpx.Client) -> None:
    assert register(api, "ingest", sources=[], sinks=[RAW]).status_code == 201
    assert register(api, "users", sources=[], sinks=[OTHER]).status_code == 201
    api.post("/barriers")
    before = snapshot(api)

    refused = register(api, "sessionize", sources=[RAW], sinks=[MART, OTHER])  # OTHER has a writer
    body = assert_problem(refused, 409, "table_has_writer", names=(OTHER,))
    assert body["writer"] == "users"

    assert snapshot(api) == before  # neither the source nor the first sink was registered
    assert_problem(api.get("/jobs/sessionize"), 404, "not_found")
    assert_problem(api.get(f"/tables/{table_path(MART)}"), 404, "not_found")


def test_a_job_registers_in_one_request_and_a_repeat_changes_nothing(api: httpx.Client) -> None:
    register(api, "ingest", sources=[], sinks=[RAW])
    body = {
        "sources": [{"table": RAW, "format": "delta", "location": "/lake/raw/events"}],
        "sinks": [{"table": MART, "format": "delta"}],
    }
    first = api.post("/register/sessionize", json=body)
    assert first.status_code == 201, first.text
    assert first.json()["created"] is True
    assert [(e["table"], e["role"], e["created"]) for e in first.json()["edges"]] == [
        (RAW, "source", True),
        (MART, "sink", True),
    ]
    job = api.get("/jobs/sessionize").json()
    assert (job["sources"], job["sinks"]) == ([RAW], [MART])
    assert api.get(f"/tables/{table_path(RAW)}").json()["location"] == "/lake/raw/events"

    again = api.post("/register/sessionize", json=body)
    assert again.status_code == 200
    assert again.json()["created"] is False


def test_an_unknown_source_is_refused_by_name_unless_declared_a_new_root(api: httpx.Client) -> None:
    register(api, "ingest", sources=[], sinks=[RAW])
    before = snapshot(api)

    refused = register(api, "sessionize", sources=[RAW, TYPO], sinks=[MART])
    body = assert_problem(refused, 409, "unknown_source", names=(TYPO,))
    assert body["tables"] == [TYPO]
    assert snapshot(api) == before
    assert_problem(api.get(f"/tables/{table_path(TYPO)}"), 404, "not_found")

    declared = register(api, "sessionize", sources=[RAW, TYPO], sinks=[MART], new_roots=[TYPO])
    assert declared.status_code == 201, declared.text
    assert api.get(f"/tables/{table_path(TYPO)}").json()["kind"] == "root"


def test_register_body_mistakes_are_invalid_requests(api: httpx.Client) -> None:
    for body, field in (
        ({"sources": [{"table": RAW}], "sinks": []}, "sinks"),
        ({"sources": [{"table": RAW}], "sinks": [{"table": RAW}]}, "both read and write"),
        ({"sources": [], "sinks": [{"table": MART}], "new_roots": [RAW]}, "new_roots"),
        ({"sources": [{"table": RAW}, {"table": RAW}], "sinks": [{"table": MART}]}, "twice"),
    ):
        problem = assert_problem(api.post("/register/j", json=body), 422, "invalid_request")
        assert field in str(problem["errors"]), problem
    assert api.get("/jobs").json()["jobs"] == []


def test_a_retired_table_leaves_lists_and_reads_and_is_refused_until_revived(api: httpx.Client) -> None:
    register(api, "sessionize", sources=[TYPO], sinks=[MART], new_roots=[TYPO])
    api.post(f"/tables/{table_path(TYPO)}/snapshots", json={"snapshot_id": 0})
    api.post("/barriers")
    retire = f"/tables/{table_path(TYPO)}/retire"

    in_use = assert_problem(api.post(retire), 409, "table_in_use", names=("sessionize",))
    assert in_use["jobs"] == ["sessionize"]
    api.delete(f"/register/source/sessionize/{table_path(TYPO)}")

    retired = api.post(retire)
    assert retired.status_code == 200, retired.text
    assert retired.json()["retired"] is True and retired.json()["changed"] is True
    assert api.post(retire).json()["changed"] is False  # idempotent

    assert TYPO not in [t["table"] for t in api.get("/tables").json()["tables"]]
    listed = {t["table"]: t for t in api.get("/tables", params={"include_retired": "true"}).json()["tables"]}
    assert listed[TYPO]["retired_at"] is not None
    assert api.get(f"/tables/{table_path(TYPO)}").json()["retired_at"] is not None  # its history stays
    assert f"table:{TYPO}" not in [n["id"] for n in api.get("/lineage").json()["nodes"]]
    assert TYPO not in [d["table"] for d in api.get("/delays").json()["delays"]]
    assert_problem(api.post("/versions", json={"tables": [TYPO], "consistency": "weak"}), 404, "not_found")

    before = snapshot(api)
    assert_problem(register(api, "again", sources=[TYPO], sinks=[OTHER], new_roots=[TYPO]), 409, "table_retired")
    assert_problem(api.post(f"/register/sink/again/{table_path(TYPO)}"), 409, "table_retired")
    report = api.post(f"/tables/{table_path(TYPO)}/snapshots", json={"snapshot_id": 1})
    assert_problem(report, 409, "table_retired", names=(TYPO,))
    assert snapshot(api) == before

    revived = api.post(f"/tables/{table_path(TYPO)}/revive")
    assert revived.status_code == 200 and revived.json()["changed"] is True
    assert TYPO in [t["table"] for t in api.get("/tables").json()["tables"]]
    assert register(api, "again", sources=[TYPO], sinks=[OTHER]).status_code == 201


def test_retiring_an_unknown_table_is_not_found(api: httpx.Client) -> None:
    assert_problem(api.post(f"/tables/{table_path(TYPO)}/retire"), 404, "not_found", names=(TYPO,))
    assert_problem(api.post(f"/tables/{table_path(TYPO)}/revive"), 404, "not_found", names=(TYPO,))
