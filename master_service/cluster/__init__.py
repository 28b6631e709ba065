"""Worker pool, read routing, write path, smart replication, backup/restore."""
