"""The orchestrator packages (integrations/airflow, integrations/dagster) against the real server.

Each package is installed from this checkout into a virtualenv of its own (`make venv-airflow`, `make
venv-dagster`: made when missing or when a pyproject changed, then cached by a stamp file), so that the pins of
Airflow and Dagster never constrain the server's. This test starts the real server on the embedded PostgreSQL
(the worker's `server` fixture) and runs the package's own suite (integrations/<name>/tests) in that virtualenv
as a subprocess, with the server's URL in `METASERVICE_TEST_URL`: real Airflow (`dag.test()`, the triggerer
inline, and the trigger in a process that is killed and restarted) and real Dagster (a real instance, sensor
ticks, `materialize`, Pipes in a subprocess).
"""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests import support

REPO = support.REPO
PACKAGES = {"airflow": "metaservice-airflow", "dagster": "metaservice-dagster"}


def _venv(name: str) -> Path:
    """`make venv-<name>`: the package's virtualenv, made or brought up to date (a no-op when it is)."""
    done = subprocess.run(
        ["make", "--no-print-directory", f"venv-{name}"], cwd=REPO, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, f"make venv-{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    python = REPO / f".venv-{name}" / "bin" / "python"
    assert python.exists()
    return python


def test_each_package_is_versioned_with_the_project() -> None:
    root = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for name, dist in PACKAGES.items():
        project = tomllib.loads((REPO / "integrations" / name / "pyproject.toml").read_text())["project"]
        assert project["name"] == dist
        assert project["version"] == root["version"], f"{dist} is {project['version']}, the project {root['version']}"
        requirements = [r.replace(" ", "") for r in project["dependencies"]]
        assert any(r.startswith("metaservice>=") or r == "metaservice" for r in requirements), requirements
        assert not any(r.startswith("metaservice[") for r in requirements), "the client's HTTP part only: no extras"
        assert not any(r.startswith("pyspark") for r in requirements)
    airflow = tomllib.loads((REPO / "integrations" / "airflow" / "pyproject.toml").read_text())["project"]
    assert airflow["entry-points"]["apache_airflow_provider"] == {
        "provider_info": "metaservice_airflow:get_provider_info"
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PACKAGES))
@pytest.mark.usefixtures("api")  # the tables the suite made are emptied afterwards
def test_package_suite_against_the_real_server(name: str, server: support.ServerProcess) -> None:
    python = _venv(name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("METASERVICE_", "PYTEST_", "AIRFLOW", "DAGSTER"))}
    env["METASERVICE_TEST_URL"] = server.base_url
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-x", "tests"],
        cwd=REPO / "integrations" / name,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    summary = done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else []
    print(f"integrations/{name}: {' '.join(summary)}")
    assert done.returncode == 0, f"integrations/{name}/tests failed:\n{done.stdout[-8000:]}\n{done.stderr[-4000:]}"
    assert " passed" in done.stdout and " failed" not in done.stdout
