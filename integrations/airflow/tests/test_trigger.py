"""MetaServiceConsistencyTrigger as an asset watcher: one event per new consistent barrier, the cursor in the
watched asset's state store (Airflow's metadata database), across a triggerer killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from metaservice_airflow.triggers import MetaServiceConsistencyTrigger, cursor_key
from metaservice_pipeline import Chain

RUNNER = Path(__file__).resolve().parent / "trigger_runner.py"


def deploy_watcher(tables: list[str]) -> tuple[str, str]:
    """A DAG file scheduled on an asset watched by the trigger, parsed and written to the metadata database as
    the DAG processor does. Returns the asset's name and URI."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    uid = uuid.uuid4().hex[:8]
    name, uri = f"metaservice_inputs_{uid}", f"metaservice://inputs/{uid}"
    folder = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"watch_{uid}.py").write_text(
        "from airflow.sdk import DAG, Asset, AssetWatcher\n"
        "from metaservice_airflow import MetaServiceConsistencyTrigger\n\n"
        f"inputs = Asset(name={name!r}, uri={uri!r}, watchers=[AssetWatcher(\n"
        f"    name='watch_{uid}', trigger=MetaServiceConsistencyTrigger(tables={tables!r}, poll_seconds=10))])\n\n"
        f"with DAG('consume_{uid}', schedule=[inputs]):\n    pass\n"
    )
    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=str(folder / f"watch_{uid}.py"))
    assert not bag.import_errors, bag.import_errors
    sync_bag_to_db(bag, "dags-folder", None)
    return name, uri


class Triggerer:
    """trigger_runner.py in its own process: the events it hands on, one JSON line each."""

    def __init__(self, asset: tuple[str, str], kwargs: dict[str, Any]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(RUNNER), *asset, json.dumps(kwargs)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )

    def next_event(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                return dict(json.loads(line))
        raise AssertionError(f"the triggerer exited ({self.process.wait()}) without an event")

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)


@pytest.fixture
def triggerers() -> Iterator[list[Triggerer]]:
    started: list[Triggerer] = []
    yield started
    for triggerer in started:
        if triggerer.process.poll() is None:
            triggerer.kill()


def stored_cursor(asset: tuple[str, str], tables: list[str]) -> Any:
    """The barrier the trigger recorded in the asset's state store, read from the metadata database."""
    from airflow.utils.session import create_session
    from sqlalchemy import text

    with create_session() as session:
        rows = session.execute(
            text(
                "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id "
                "WHERE a.name = :name AND s.key = :key"
            ),
            {"name": asset[0], "key": cursor_key(tables, "strong")},
        ).fetchall()
    return json.loads(rows[0][0]) if rows else None


def test_one_event_per_barrier_across_a_killed_triggerer(chain: Chain, triggerers: list[Triggerer]) -> None:
    asset = deploy_watcher(chain.tables)
    kwargs = {"tables": chain.tables, "poll_seconds": 10}
    first, snapshots = chain.commit_round()
    triggerers.append(Triggerer(asset, kwargs))
    event = triggerers[-1].next_event()
    assert (event["barrier"], event["snapshots"]) == (first, snapshots)

    second, snapshots2 = chain.commit_round()
    event = triggerers[-1].next_event()
    assert (event["barrier"], event["snapshots"]) == (second, snapshots2)
    # the triggerer dies after handing the event on, once the trigger recorded it: before any run of it started
    assert _wait_for_cursor(asset, chain.tables, second)
    triggerers[-1].kill()

    third, snapshots3 = chain.commit_round()  # committed while no triggerer runs
    triggerers.append(Triggerer(asset, kwargs))
    event = triggerers[-1].next_event()
    assert (event["barrier"], event["snapshots"]) == (third, snapshots3)  # not `second` again, and not missed
    fourth, _ = chain.commit_round()
    assert triggerers[-1].next_event()["barrier"] == fourth


def _wait_for_cursor(asset: tuple[str, str], tables: list[str], barrier: int) -> bool:
    """The trigger writes its cursor right after the event is handed on: wait for it (with a deadline)."""
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if stored_cursor(asset, tables) == barrier:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tables": []}, "non-empty list"),
        ({"tables": ["lake.mart"]}, "catalog.database.table"),
        ({"tables": ["a.b.c", "a.b.c"]}, "named twice"),
        ({"tables": ["a.b.c"], "consistency": "eventual"}, "'strong' or 'weak'"),
        ({"tables": ["a.b.c"], "min_barrier": 5, "max_staleness_seconds": 60}, "not both"),
        ({"tables": ["a.b.c"], "min_barrier": -1}, "min_barrier"),
        ({"tables": ["a.b.c"], "timeout_seconds": 0}, "timeout_seconds"),
    ],
)
def test_bad_arguments_fail_when_the_dag_is_parsed(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MetaServiceConsistencyTrigger(**kwargs)
