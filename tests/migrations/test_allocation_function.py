"""The allocation function's current text lives in one file, `metaservice/db/sql/issue_barriers.sql`; migrations
install frozen copies of it. These checks fail when the file and the migrations part ways: the file changed without
a migration that embeds the new text, or a migration installs something else than the file says.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import psycopg
from alembic.script import ScriptDirectory

from metaservice.db import migrate

FUNCTION = "metaservice_issue_barriers(jsonb, bigint)"
HOW_TO_CHANGE = "see the header of metaservice/db/sql/issue_barriers.sql for how to change the function"


def file_statement() -> str:
    """The statement of the file (shipped in the server package): everything from its CREATE line on."""
    text = resources.files("metaservice").joinpath("db/sql/issue_barriers.sql").read_text(encoding="utf-8")
    start = text.index("\nCREATE OR REPLACE FUNCTION metaservice_issue_barriers(") + 1
    assert all(line.startswith("--") or not line for line in text[:start].splitlines()), "only comments before it"
    return text[start:]


def newest_frozen_copy() -> tuple[str, str]:
    """(revision, text) of the newest migration that installs the function (walking down from the head)."""
    script = ScriptDirectory.from_config(migrate.alembic_config("postgresql://unused/unused"))
    for revision in script.walk_revisions():
        text = getattr(revision.module, "ISSUE_BARRIERS", None)
        if text is not None:
            return revision.revision, str(text)
    raise AssertionError("no migration installs metaservice_issue_barriers")


def definition(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT pg_get_functiondef(%s::regprocedure)", [FUNCTION]).fetchone()
    assert row is not None
    return str(row[0])


def test_the_newest_migration_embeds_the_file() -> None:
    revision, frozen = newest_frozen_copy()
    assert frozen.strip() == file_statement().strip(), (
        f"metaservice/db/sql/issue_barriers.sql differs from the copy migration {revision} installs: "
        f"add a migration that embeds the file's text ({HOW_TO_CHANGE})"
    )


def test_the_function_a_migrated_database_holds_is_the_file(database_url: str) -> None:
    """Installing the file's statement over the function at head changes nothing PostgreSQL can tell: the same
    definition (`pg_get_functiondef`: signature, result, language, volatility, body). Rolled back."""
    with psycopg.connect(database_url) as conn, conn.transaction(force_rollback=True):
        installed = definition(conn)
        conn.execute(file_statement())
        changed = definition(conn)
    assert changed == installed, f"the head migration installs another text than the file ({HOW_TO_CHANGE})"
