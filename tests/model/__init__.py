"""The model-based test of a changing lineage (issue 12): a seeded random walk against the real server."""
