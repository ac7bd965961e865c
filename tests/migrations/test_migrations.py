"""Alembic migrations on a real PostgreSQL: one head, reversible, in step with the models, safe to run concurrently."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import CheckConstraint, create_engine
from sqlalchemy.dialects.postgresql import ExcludeConstraint

from metaservice.db import migrate
from metaservice.db.models import Base
from metaservice.settings import to_sqlalchemy_url
from tests import support

MIGRATION_LOCK_KEY = 0x6D657461  # migrations/env.py takes this transaction-scoped advisory lock
REVISION_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}-\d{4}_[a-z0-9_]+\.py$")


def head() -> str:
    heads = ScriptDirectory.from_config(migrate.alembic_config("postgresql://unused/unused")).get_heads()
    assert len(heads) == 1, f"migrations have several heads: {heads}"
    return heads[0]


def current_revision(url: str) -> str | None:
    with psycopg.connect(url) as conn:
        exists = conn.execute("SELECT to_regclass('alembic_version') IS NOT NULL").fetchone()
        if exists is None or not exists[0]:
            return None
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        return None if row is None else str(row[0])


def user_tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {str(r[0]) for r in rows}


def metaservice_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "metaservice", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen[str]) -> tuple[int, str]:
    stdout, stderr = process.communicate(timeout=120)
    return process.returncode, stdout + stderr


@pytest.fixture(name="fresh_url")
def fx_fresh_url(admin_url: str, worker_id: str) -> Iterator[str]:
    """An empty database of this test's own (never the shared test database)."""
    name = f"ms_migr_{worker_id}"
    url = support.fresh_database(admin_url, name)
    yield url
    support.drop_database(admin_url, name)


def test_revisions_form_one_chain_with_dated_file_names() -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config("postgresql://unused/unused"))
    revisions = list(script.walk_revisions())
    assert revisions[0].revision == head()  # walked from the head down
    assert sum(1 for r in revisions if r.down_revision is None) == 1  # one base
    for revision in revisions:
        assert revision.path is not None
        assert REVISION_FILE.match(revision.path.rsplit("/", 1)[-1]), revision.path


def test_upgrade_downgrade_to_base_and_upgrade_again(fresh_url: str) -> None:
    migrate.upgrade(fresh_url)
    assert current_revision(fresh_url) == head()
    assert set(Base.metadata.tables) <= user_tables(fresh_url)
    with psycopg.connect(fresh_url) as conn:
        assert conn.execute("SELECT id, last_barrier FROM barrier_clock").fetchall() == [(1, 0)]

    migrate.downgrade(fresh_url, "base")
    assert current_revision(fresh_url) is None
    assert user_tables(fresh_url) <= {"alembic_version"}  # every table of every revision is dropped again

    migrate.upgrade(fresh_url)
    assert current_revision(fresh_url) == head()
    assert set(Base.metadata.tables) <= user_tables(fresh_url)


def functions(url: str) -> dict[str, str]:
    """Every function the migrations define (not an extension's), by signature, as PostgreSQL defines it."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) FROM pg_proc p"
            " JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public' AND p.prokind = 'f'"
            " AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')"
        ).fetchall()
    return {str(signature): str(text) for signature, text in rows}


def test_every_revision_steps_down_and_up_one_at_a_time(fresh_url: str) -> None:
    """Each downgrade restores the functions its revision found: migrations embed frozen copies of the function
    texts they replace, and a wrong copy would leave another function behind than the upgrade replaced."""
    script = ScriptDirectory.from_config(migrate.alembic_config(fresh_url))
    chain = [r.revision for r in reversed(list(script.walk_revisions()))]  # base first
    installed: dict[str | None, dict[str, str]] = {None: functions(fresh_url)}
    for revision in chain:
        migrate.upgrade(fresh_url, revision)
        assert current_revision(fresh_url) == revision
        installed[revision] = functions(fresh_url)
    assert "metaservice_issue_barriers(jsonb,bigint)" in installed[chain[-1]]
    for below in [*reversed(chain[:-1]), "base"]:
        migrate.downgrade(fresh_url, "-1")
        now = None if below == "base" else below
        assert current_revision(fresh_url) == now
        assert functions(fresh_url) == installed[now], f"stepping down to {below}"


def test_migrated_schema_matches_the_models(fresh_url: str) -> None:
    """Autogenerate finds nothing to do: the migrations and `db/models.py` describe the same schema.

    Nothing is ignored. The `btree_gist` extension (needed by the exclusion constraint) is not part of what
    autogenerate compares, so it is asserted separately below together with the CHECK and EXCLUDE constraints,
    which autogenerate does not compare either.
    """
    migrate.upgrade(fresh_url)
    engine = create_engine(to_sqlalchemy_url(fresh_url))
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
            diff: list[Any] = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_check_and_exclusion_constraints_match_the_models(fresh_url: str) -> None:
    migrate.upgrade(fresh_url)
    declared: set[tuple[str, str, str]] = set()
    for table in Base.metadata.tables.values():
        for constraint in table.constraints:
            if isinstance(constraint, ExcludeConstraint):
                declared.add((table.name, str(constraint.name), "x"))
            elif isinstance(constraint, CheckConstraint):
                declared.add((table.name, str(constraint.name), "c"))
    with psycopg.connect(fresh_url) as conn:
        rows = conn.execute(
            "SELECT rel.relname, con.conname, con.contype::text FROM pg_constraint con"
            " JOIN pg_class rel ON rel.oid = con.conrelid JOIN pg_namespace ns ON ns.oid = rel.relnamespace"
            " WHERE ns.nspname = 'public' AND con.contype IN ('c', 'x')"
        ).fetchall()
        extensions = {str(r[0]) for r in conn.execute("SELECT extname FROM pg_extension").fetchall()}
    assert {(str(t), str(n), str(k)) for t, n, k in rows} == declared
    assert "btree_gist" in extensions


def test_migrate_command_brings_a_database_to_head_and_is_idempotent(fresh_url: str) -> None:
    for _ in range(2):
        code, output = finished(metaservice_cli("migrate", "--database-url", fresh_url))
        assert code == 0, output
        assert "newest schema revision" in output
        assert current_revision(fresh_url) == head()
    assert set(Base.metadata.tables) <= user_tables(fresh_url)


def test_two_concurrent_migrations_both_succeed(fresh_url: str) -> None:
    """Both processes start while the migration lock is held, so they really contend for it; both must succeed."""
    with psycopg.connect(fresh_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        processes = [metaservice_cli("migrate", "--database-url", fresh_url) for _ in range(2)]

        def both_waiting() -> bool:
            for process in processes:
                if process.poll() is not None:
                    raise AssertionError(f"migrate exited early: {finished(process)}")
            row = holder.execute(  # advisory locks are per database; servers of other tests use the same key
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = %s"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                (MIGRATION_LOCK_KEY,),
            ).fetchone()
            return row is not None and row[0] == 2

        support.wait_until(both_waiting, timeout=60, what="both migrations to wait for the migration lock")
        holder.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))

    results = [finished(p) for p in processes]
    assert [code for code, _ in results] == [0, 0], results
    assert current_revision(fresh_url) == head()
    with psycopg.connect(fresh_url) as conn:
        assert conn.execute("SELECT count(*) FROM barrier_clock").fetchone() == (1,)  # seeded once, not twice
