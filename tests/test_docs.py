"""The documentation matches the code: the site builds strictly, the README stays a five-minute read whose code
blocks parse, and the reference pages name every endpoint, problem code and setting the code has (and none it
lacks)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from metaservice import errors
from metaservice.app import create_app
from metaservice.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
# Fenced blocks: ```lang, the body, the closing fence at the same indentation.
_VARIABLE = re.compile(r"\bMETASERVICE_[A-Z0-9_]*[A-Z0-9]\b")
_FENCE = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>[a-z]*)\n(?P<body>.*?)^(?P=indent)```$", re.MULTILINE | re.DOTALL)


def _blocks(path: Path) -> list[tuple[str, str]]:
    """(language, code) of each fenced block, with the block's indentation removed."""
    found = []
    for match in _FENCE.finditer(path.read_text(encoding="utf-8")):
        indent = len(match["indent"])
        body = "".join(line[indent:] for line in match["body"].splitlines(keepends=True))
        found.append((match["lang"], body))
    return found


def _source_text() -> str:
    """Everything that can define a name the docs mention: the packages, tests, Makefile and CI script."""
    files = [p for d in ("metaservice", "spark_client", "tests") for p in (ROOT / d).rglob("*.py")]
    parts = [p.read_text(encoding="utf-8") for p in files]
    parts += [(ROOT / "Makefile").read_text(encoding="utf-8"), (ROOT / ".ci" / "run").read_text(encoding="utf-8")]
    return "\n".join(parts)


def test_site_builds_with_strict_link_and_nav_checks(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The benchmark table and the changelog are spliced in from outside docs/ (docs/_hooks.py).
    performance = (tmp_path / "site" / "performance" / "index.html").read_text(encoding="utf-8")
    first_row = (ROOT / "bench" / "results" / "summary.md").read_text(encoding="utf-8").splitlines()[2]
    assert first_row.split("|")[2].strip() in performance
    changelog = (tmp_path / "site" / "changelog" / "index.html").read_text(encoding="utf-8")
    assert "Unreleased" in changelog


def test_readme_is_a_five_minute_read() -> None:
    size = len(README.read_bytes())
    assert size < 12 * 1024, f"README.md is {size} bytes; move detail to a docs page and link it"


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: p.name)
def test_code_blocks_parse(path: Path) -> None:
    checked = 0
    for lang, code in _blocks(path):
        if lang == "python":
            ast.parse(code, filename=f"{path.name} block")
        elif lang == "json":
            json.loads(code)
        elif lang == "bash":
            result = subprocess.run(["bash", "-n"], input=code, capture_output=True, text=True, check=False)
            assert result.returncode == 0, f"{path.name}: {result.stderr}\n{code}"
        else:
            continue
        checked += 1
    if path == README:
        assert checked >= 4, "the README's demo, curl round and Python example are code blocks"


def test_readme_links_to_files_that_exist() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [link for link in links if "://" not in link]
    assert local, "the README links the docs pages"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
    linked = {Path(link).name for link in local}
    unlinked = [p.name for p in PAGES if p.name not in linked and p.name not in ("index.md", "changelog.md")]
    assert not unlinked, f"README.md's documentation list lacks {unlinked}"


def test_every_endpoint_is_documented_and_no_other() -> None:
    app = create_app(Settings(database_url="postgresql://docs@127.0.0.1:1/docs"))
    paths = app.openapi()["paths"]
    operations = {f"{method.upper()} {path}" for path, ops in paths.items() for method in ops if method != "parameters"}
    page = (DOCS / "protocol.md").read_text(encoding="utf-8")
    missing = sorted(op for op in operations if f"`{op}`" not in page)
    assert not missing, f"docs/protocol.md does not list {missing}"
    rows = set(re.findall(r"^\| `((?:GET|POST|PUT|PATCH|DELETE) /[^`]*)` \|", page, re.MULTILINE))
    assert rows == operations, f"rows without an endpoint: {sorted(rows - operations)}"


def _problem_codes() -> set[str]:
    codes: set[str] = set()
    pending: list[type[errors.MetaServiceError]] = [errors.MetaServiceError]
    while pending:
        cls = pending.pop()
        codes.add(cls.code)
        pending.extend(cls.__subclasses__())
    return codes


def test_every_problem_code_is_documented_and_no_other() -> None:
    page = (DOCS / "problems.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z_]+)` \| (?:\d{3}|other) \|", page, re.MULTILINE))
    missing = sorted(_problem_codes() - documented)
    assert not missing, f"docs/problems.md does not list {missing}"
    source = "".join((ROOT / "metaservice" / p).read_text(encoding="utf-8") for p in ("errors.py", "api/problems.py"))
    stale = sorted(code for code in documented if f'"{code}"' not in source)
    assert not stale, f"docs/problems.md lists codes the server never answers: {stale}"


def test_every_setting_is_documented_and_every_variable_exists() -> None:
    page = (DOCS / "operations.md").read_text(encoding="utf-8")
    settings = {f"METASERVICE_{name.upper()}" for name in Settings.model_fields}
    missing = sorted(name for name in settings if f"| `{name}` |" not in page)
    assert not missing, f"docs/operations.md's settings table lacks {missing}"
    mentioned: set[str] = set()
    for path in [README, *PAGES]:
        mentioned |= set(_VARIABLE.findall(path.read_text(encoding="utf-8")))
    known = settings | set(_VARIABLE.findall(_source_text()))
    unknown = sorted(mentioned - known)
    assert not unknown, f"the docs name variables nothing reads: {unknown}"
