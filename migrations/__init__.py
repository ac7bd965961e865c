"""The Alembic scripts, shipped inside the server package as `metaservice.migrations` (setup.py maps this directory
there); metaservice/db/migrate.py and the `alembic` command line (pyproject.toml, `[tool.alembic]`) find them."""
