"""MetaService: lineage and global timestamp barriers (FLIP-276) for chains of Spark ETL jobs."""

__version__ = "0.1.0"

__all__ = ["__version__"]
