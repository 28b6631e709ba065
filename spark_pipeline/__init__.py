"""Bulk load and audit jobs on Spark (issue: data pipeline) — not built yet."""
