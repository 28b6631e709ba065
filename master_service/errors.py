"""The exceptions the master's parts raise to each other and to its APIs.

Each carries the HTTP status the client API answers it with (``status``): the cluster's
write path, the sync driver and the admin API raise the same ones, so they are defined
once here, below all of them.
"""

from __future__ import annotations


class NotWritable(Exception):
    """No write can be taken now (read-only, muted, no worker in sync, shutting down...):
    nothing was changed, the client may send it again later."""

    status = 503


class WriteFailed(Exception):
    """A write was taken but refused or lost on the way; ``status`` says which (the
    worker's refusal, 503, 504 for one logged but not yet executed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class NoWorkerAvailable(Exception):
    """No worker can do what was asked (a backup) now."""

    status = 503


class BulkLoadRefused(Exception):
    """An initial bulk load cannot be committed on this cluster (not new, data present)."""

    status = 409
