"""The revisions (Alembic skips this file when it reads the directory)."""
