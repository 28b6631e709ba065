"""Smart replication: replay the log, or copy a whole storage folder?
(docs/design/smart-replication.md)

Pure decisions, no IO. The documented rule: prefer full replication when BOTH

    incrementalDurationS > replicationDurationS * FullReplicationTimeFactor   (the speed-up)
    incrementalDurationS > MinTimeToConsiderFullReplicationS                  (absolute floor)

where the replication estimate is the storage size over the network speed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Reason(StrEnum):
    # The documented log messages, verbatim.
    OUT_OF_SYNC = "Replicating (out of sync)"
    OUT_OF_SYNC_FORCED = "Replicating (out of sync), forced"
    EMPTY = "Replicating (empty)"
    CATCH_UP = "Replicating (catch up)"


NO_STORAGE_SIZE = "Couldn't find storage size"


@dataclass(frozen=True)
class Parameters:
    net_speed_bits_per_sec: int = 104_857_600
    full_replication_time_factor: float = 1.3
    min_time_to_consider_full_replication_s: int = 600
    # replication.compression: images (replication, backups) snappy-framed, or plain tar
    compression: bool = True


@dataclass(frozen=True)
class Estimate:
    incremental_s: float
    replication_s: float | None  # None: no worker could report its storage size

    def prefers_replication(self, p: Parameters) -> bool:
        if self.replication_s is None:
            return False
        return (
            self.incremental_s > self.replication_s * p.full_replication_time_factor
            and self.incremental_s > p.min_time_to_consider_full_replication_s
        )

    def explain(self, p: Parameters) -> str:
        """The smart-replication message that precedes "Replicating (catch up)"."""
        return (
            f"Smart replication: incremental update estimated at {self.incremental_s:.1f}s, "
            f"full replication at {self.replication_s or 0:.1f}s x factor "
            f"{p.full_replication_time_factor} (minimum "
            f"{p.min_time_to_consider_full_replication_s}s): full replication is faster"
        )


def replication_seconds(storage_bytes: int | None, p: Parameters) -> float | None:
    if storage_bytes is None:
        return None
    return storage_bytes * 8 / p.net_speed_bits_per_sec


@dataclass(frozen=True)
class WorkerView:
    """What the master knows of a worker when it decides how to recover it."""

    seq: int
    fingerprint: str
    quads: int
    forced: bool = False  # diverged after a reportedly successful operation


@dataclass(frozen=True)
class LogView:
    """What the transaction log can offer."""

    head_seq: int
    base_seq: int  # the oldest state the log can replay from
    known: bool  # the worker's (seq, fingerprint) is a state the log recorded
    replay_seconds: float  # measured apply durations of the entries the worker misses


@dataclass(frozen=True)
class Decision:
    action: str  # "in_sync" | "replay" | "replicate"
    reason: Reason | None = None
    explanation: str | None = None
    # The decision needed a storage size and none was known: the spec's "Couldn't find
    # storage size" is logged then, and only then (not for a decision that never weighs it).
    no_storage_size: bool = False


def decide(worker: WorkerView, log: LogView, storage_bytes: int | None,
           params: Parameters, other_worker_has_data: bool) -> Decision:
    """How to bring one worker to the head of the log
    (docs/design/smart-replication.md#the-decision).

    ``other_worker_has_data``: some other worker attached to the cluster is not empty. The
    spec gives "Replicating (empty)" for "the worker was empty upon initialization, and
    there was at least one non-empty worker attached to the cluster": both halves are
    about workers, not about the log.
    """
    empty = worker.seq == 0 and worker.quads == 0
    as_empty_or_out_of_sync = Reason.EMPTY if empty and other_worker_has_data \
        else Reason.OUT_OF_SYNC
    if worker.forced:
        return Decision("replicate", Reason.OUT_OF_SYNC_FORCED)
    if not log.known:
        return Decision("replicate", as_empty_or_out_of_sync)
    if worker.seq == log.head_seq:
        return Decision("in_sync")
    if worker.seq < log.base_seq:  # pruned past it: the log cannot replay
        return Decision("replicate", as_empty_or_out_of_sync)
    estimate = Estimate(log.replay_seconds, replication_seconds(storage_bytes, params))
    if estimate.replication_s is None:
        return Decision("replay", no_storage_size=True)
    if estimate.prefers_replication(params):
        reason = Reason.EMPTY if empty and other_worker_has_data else Reason.CATCH_UP
        return Decision("replicate", reason, estimate.explain(params))
    return Decision("replay")
