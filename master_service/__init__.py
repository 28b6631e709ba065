"""The master node: transaction log, worker pool, sync with peer masters, APIs (ARCHITECTURE.md,
"The rooms")."""
