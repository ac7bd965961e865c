"""The wheel is a complete server: installed outside the checkout, `metaservice migrate` finds its Alembic scripts.

Builds the wheel with pip (build isolation, setuptools from the package index), installs it without
dependencies into a fresh virtual environment, and runs the installed `metaservice migrate` against a fresh
database, borrowing the dependencies of the test environment through PYTHONPATH (they are not under test).
"""

from __future__ import annotations

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


def test_wheel_ships_every_migration(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {Path(n).name for n in names if "/share/metaservice/migrations/" in n}
    expected = {p.name for p in (REPO / "migrations" / "versions").glob("*.py")} | {"env.py", "script.py.mako"}
    assert expected <= shipped, sorted(expected - shipped)


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
    # pip --target puts data files under <target>/share; a wheel installed normally puts them under <prefix>/share
    share = Path(site) / "share"
    if share.is_dir():
        share.rename(venv / "share")
    env = {"PYTHONPATH": sysconfig.get_paths()["purelib"], "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    located = subprocess.run(
        [str(python), "-c", "from metaservice.db import migrate; print(migrate.MIGRATIONS_DIR)"],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(located) == venv / "share" / "metaservice" / "migrations", located
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
