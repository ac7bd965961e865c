"""The admin command line (`metaservice lineage|delays|job|abort|barrier|retire|rollback`) answers the everyday
questions from a real server over HTTP: typer's runner in this process, the server in its own.

Each command is checked against what the server holds after it (an abort aborted, a retirement retired), its
`--json` against the API's own answer, and its refusals are one line on stderr with exit status 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from metaservice.cli import app
from tests import support
from tests.support import Token, table_path
from tests.support.pipelines import Flow

R, X, Y, TYPO = "lake.raw.r", "lake.mart.x", "lake.mart.y", "lake.raw.rr"


def run(base_url: str, *args: str, env: dict[str, str] | None = None, ok: bool = True) -> tuple[str, str]:
    """`metaservice <args> --url <server>`; stdout and stderr. With `ok`, it must succeed; else fail in one line."""
    result = CliRunner().invoke(app, [*args, "--url", base_url], env=env)
    if ok:
        assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    else:
        assert result.exit_code == 1, (result.stdout, result.stderr)
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: "), result.stderr
    return result.stdout, result.stderr


@pytest.fixture(name="pipeline")
def fx_pipeline(api: httpx.Client) -> tuple[Flow, int]:
    """R → J → X → K → Y, with J and K through one barrier: (the flow, that barrier)."""
    flow = Flow(api)
    flow.register("J", sources=[R], sinks=[X])
    flow.register("K", sources=[X], sinks=[Y])
    flow.report(R, 1)
    b1 = flow.issue()
    flow.run("J", {X: 10})
    flow.run("K", {Y: 20})
    return flow, b1


def test_lineage_shows_writers_readers_and_barriers_and_json_is_the_apis_answer(
    pipeline: tuple[Flow, int], api: httpx.Client, server: support.ServerProcess
) -> None:
    _, b1 = pipeline
    out, _ = run(server.base_url, "lineage", X)
    lines = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert lines[X][:4] == [X, "intermediate", "J", "K"] and lines[X][4] == str(b1)
    assert lines[R][:4] == [R, "root", "-", "J"]

    as_json, _ = run(server.base_url, "lineage", X, "--json")
    nodes = json.loads(as_json)["nodes"]
    assert [(n["id"], n.get("newest_complete_barrier")) for n in nodes] == [
        (n["id"], n.get("newest_complete_barrier")) for n in api.get("/lineage", params={"table": X}).json()["nodes"]
    ]


def test_delays_job_and_barrier_answer_from_the_server(
    pipeline: tuple[Flow, int], api: httpx.Client, server: support.ServerProcess
) -> None:
    flow, b1 = pipeline
    out, _ = run(server.base_url, "delays")
    tables = [line.split()[0] for line in out.splitlines()[2:]]
    assert sorted(tables) == sorted([R, X, Y])
    one, _ = run(server.base_url, "delays", Y)
    assert one.startswith(f"{Y}: barrier {b1}") and "J" in one and "K" in one  # the critical path

    history, _ = run(server.base_url, "job", "J")
    assert f"reads:     {R}" in history and f"{b1}  committed" in history
    assert json.loads(run(server.base_url, "job", "J", "--json")[0])["job"] == api.get("/jobs/J").json()

    issued = json.loads(run(server.base_url, "barrier", "issue", "--json")[0])
    assert flow.barriers()[0] == issued["barrier"] > b1
    listed, _ = run(server.base_url, "barrier", "list")
    assert listed.splitlines()[2].split()[0] == str(issued["barrier"])
    shown, _ = run(server.base_url, "barrier", "show", str(b1))
    assert any(line.split()[:3] == [X, "complete", "10"] for line in shown.splitlines())


def test_abort_ends_the_barrier_in_flight_and_says_when_there_is_none(
    pipeline: tuple[Flow, int], api: httpx.Client, server: support.ServerProcess
) -> None:
    flow, _ = pipeline
    flow.report(R, 2)
    in_flight = flow.process("J")["barrier"]
    out, _ = run(server.base_url, "abort", "J")
    assert out.strip() == f"aborted barrier {in_flight} of job J"
    assert flow.job("J")["in_flight_barrier"] is None
    commit = api.post(f"/jobs/J/barriers/{in_flight}/commit", json={"snapshots": {X: 11}})
    assert commit.json()["code"] == "not_in_flight"  # it stays aborted

    _, err = run(server.base_url, "abort", "J", ok=False)
    assert "no barrier in flight" in err
    _, err = run(server.base_url, "abort", "J", str(in_flight + 1), ok=False)
    assert "[not_in_flight]" in err


def test_retire_refuses_a_table_in_use_and_retires_and_revives_one_no_job_uses(
    pipeline: tuple[Flow, int], api: httpx.Client, server: support.ServerProcess
) -> None:
    flow, _ = pipeline
    _, err = run(server.base_url, "retire", X, ok=False)
    assert "[table_in_use]" in err and "J" in err and "K" in err
    flow.register("L", sources=[TYPO], sinks=["lake.mart.z"])
    flow.unregister("L")

    out, _ = run(server.base_url, "retire", TYPO)
    assert out.strip() == f"{TYPO} retired"
    assert api.get(f"/tables/{table_path(TYPO)}").json()["retired_at"] is not None
    assert TYPO not in run(server.base_url, "lineage")[0]
    out, _ = run(server.base_url, "retire", TYPO, "--revive")
    assert out.strip() == f"{TYPO} revived"
    assert api.get(f"/tables/{table_path(TYPO)}").json()["retired_at"] is None


def test_rollback_plan_show_and_apply(
    pipeline: tuple[Flow, int], api: httpx.Client, server: support.ServerProcess
) -> None:
    flow, b1 = pipeline
    flow.report(R, 2)
    flow.run("J", {X: 11})
    flow.run("K", {Y: 21})

    plan = json.loads(run(server.base_url, "rollback", "plan", X, str(b1), "--json")[0])
    assert plan["tables"] == {X: {"restore_snapshot_id": 10}, Y: {"restore_snapshot_id": 20}}
    shown, _ = run(server.base_url, "rollback", "show", plan["rollback_id"])
    assert "planned" in shown and f"rollback apply {plan['rollback_id']}" in shown
    applied, _ = run(server.base_url, "rollback", "apply", plan["rollback_id"])
    assert applied.splitlines()[0].endswith("completed")
    assert api.get(f"/rollbacks/{plan['rollback_id']}").json()["status"] == "completed"


def test_mistakes_are_one_line(server: support.ServerProcess, api: httpx.Client) -> None:
    del api  # the tables are emptied afterwards
    _, err = run(server.base_url, "job", "nobody", ok=False)
    assert "[not_found]" in err and "nobody" in err
    _, err = run(server.base_url, "lineage", "not-a-table", ok=False)
    assert "catalog.database.table" in err
    _, err = run(f"http://127.0.0.1:{support.free_port()}", "delays", ok=False)
    assert "cannot reach" in err


@pytest.fixture(scope="module", name="secured")
def fx_secured(
    admin_url: str, worker_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[support.ServerProcess, dict[str, str]]]:
    tokens = {"admin": Token("ops", "admin"), "reader": Token("dash", "reader")}
    log = Path(tmp_path_factory.mktemp("admin-cli")) / "server.log"
    with support.secured_server(admin_url, f"ms_admin_cli_{worker_id}", tokens, log_path=log) as secured:
        yield secured


def test_the_token_comes_from_the_option_or_the_environment(
    secured: tuple[support.ServerProcess, dict[str, str]],
) -> None:
    server, secrets = secured
    _, err = run(server.base_url, "barrier", "list", ok=False)
    assert "[unauthorized]" in err and "METASERVICE_TOKEN" in err
    run(server.base_url, "barrier", "list", "--token", secrets["reader"])
    _, err = run(server.base_url, "barrier", "issue", env={"METASERVICE_TOKEN": secrets["reader"]}, ok=False)
    assert "[forbidden]" in err
    out, _ = run(server.base_url, "barrier", "issue", env={"METASERVICE_TOKEN": secrets["admin"]})
    assert out.startswith("issued barrier ")
