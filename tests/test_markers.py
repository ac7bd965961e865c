"""Markers follow the directory, so that `make test-fast` starts no JVM, drives no browser and kills no process."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from tests import support
from tests.conftest import DIRECTORY_MARKERS, directory_marker

REPO = support.REPO


def test_make_test_fast_selects_no_test_of_the_marked_directories(admin_url: str) -> None:
    """Collects what `make test-fast` runs (its `-m` expression, read from the Makefile) and finds no test under
    tests/spark, tests/browser, tests/crash or tests/faults, each of which has tests."""
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^test-fast:.*\n\t(.+)$", makefile, re.M)
    assert recipe is not None, "the Makefile has a test-fast target"
    words = shlex.split(recipe.group(1))
    expression = words[words.index("-m") + 1]
    env = {**os.environ, "METASERVICE_TEST_DATABASE_URL": admin_url}  # collection only: no PostgreSQL of its own
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", expression],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    selected = [line.split("::")[0] for line in collected.stdout.splitlines() if "::" in line]
    assert len(selected) > 100, collected.stdout[-2000:]
    for directory in DIRECTORY_MARKERS:
        assert list((REPO / "tests" / directory).glob("test_*.py")), f"tests/{directory} has tests"
        assert not [f for f in selected if f.startswith(f"tests/{directory}/")], f"test-fast runs tests/{directory}"


@pytest.mark.parametrize(
    ("path", "marker"),
    [
        ("tests/spark/test_job.py", "spark"),
        ("tests/streaming/test_streaming_job.py", "spark"),
        ("tests/browser/test_ui.py", "browser"),
        ("tests/crash/test_server_crash.py", "crash"),
        ("tests/faults/test_history.py", "crash"),
        ("tests/api/test_protocol.py", None),
        ("tests/test_cli.py", None),
        ("bench/cycle.py", None),
    ],
)
def test_the_marker_of_a_test_is_its_directory(path: str, marker: str | None) -> None:
    assert directory_marker(REPO / path) == marker
