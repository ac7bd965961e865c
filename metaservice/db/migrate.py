"""Alembic driven from code: `metaservice migrate`, `serve` start-up and the tests use the same path."""

from __future__ import annotations

import sys
from pathlib import Path

from alembic import command
from alembic.config import Config


def _migrations_dir() -> Path:
    """The repository's `migrations/` (a checkout, an editable install), else the copy a wheel installs under
    `<prefix>/share/metaservice/migrations` (pyproject.toml, `data-files`)."""
    checkout = Path(__file__).resolve().parents[2] / "migrations"
    installed = Path(sys.prefix) / "share" / "metaservice" / "migrations"
    return checkout if (checkout / "env.py").is_file() else installed


MIGRATIONS_DIR = _migrations_dir()


def alembic_config(url: str) -> Config:
    """An Alembic config pointing at the repository's `migrations/` with `url` as the target."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("file_template", "%%(year)d-%%(month).2d-%%(day).2d-%%(hour).2d%%(minute).2d_%%(slug)s")
    config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at `url` to `revision` (idempotent; safe to run from several processes at once)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Step the database at `url` down to `revision`."""
    command.downgrade(alembic_config(url), revision)
