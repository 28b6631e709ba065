"""Worker statuses, exactly as documented (docs/design/cluster-basics.md#worker-statuses)."""

from __future__ import annotations

from enum import StrEnum


class WorkerStatus(StrEnum):
    UNINITIALIZED = "UNINITIALIZED"  # added, not yet contacted
    ON = "ON"  # in sync: takes reads and writes
    OFF = "OFF"  # unreachable
    REPLICATION_SERVER = "REPLICATION_SERVER"  # streaming its image to another worker
    REPLICATION_CLIENT = "REPLICATION_CLIENT"  # receiving an image
    OUT_OF_SYNC = "OUT_OF_SYNC"  # behind or in an unknown state: being recovered
    OUT_OF_SYNC_FORCED = "OUT_OF_SYNC_FORCED"  # diverged after a reportedly good operation
    WAITING_WRITE = "WAITING_WRITE"  # in sync, a write is queued for it
    WRITING = "WRITING"  # in sync, applying a write


# Statuses whose worker holds the newest state and may serve reads.
READABLE = frozenset({WorkerStatus.ON, WorkerStatus.WAITING_WRITE, WorkerStatus.WRITING})
# Statuses whose worker receives forwarded writes. A replication server keeps taking
# writes: its image is a checkpoint taken in milliseconds, so it never falls behind.
IN_SYNC = READABLE | {WorkerStatus.REPLICATION_SERVER}
