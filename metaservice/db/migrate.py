"""Alembic driven from code: `metaservice migrate`, `serve` start-up and the tests use the same path."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config


def _migrations_dir() -> Path:
    """The Alembic scripts: the package `metaservice.migrations`, which is the repository's `migrations/` (setup.py
    maps it into the server package; an editable install finds it there, a wheel ships it inside the package)."""
    return Path(str(resources.files("metaservice.migrations")))


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
