"""txcluster: shared pieces of the cluster (CLI, configuration files, credentials)."""

__version__ = "0.1.0"
