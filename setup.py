"""What the distribution holds: the packages under metaservice/ and spark_client/, and the Alembic scripts at the
top of the repository (migrations/), which ship inside the server package as `metaservice.migrations`.

Everything else (metadata, dependencies, extras, package data) is in pyproject.toml. This file exists only because
a mapped package cannot be added to an automatic package discovery there.
"""

from setuptools import find_namespace_packages, setup

PACKAGES = find_namespace_packages(include=["metaservice", "metaservice.*", "spark_client", "spark_client.*"])
MIGRATIONS = ["metaservice.migrations", "metaservice.migrations.versions"]

setup(
    packages=[*PACKAGES, *MIGRATIONS],
    package_dir={"metaservice.migrations": "migrations"},
)
