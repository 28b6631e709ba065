"""TxLog sync protocol between peer masters.

The pure core: ``protocol.py`` (``SyncNode``, the theory of operation) with its parts
``split_recovery.py``, ``compaction.py``, ``acquisition.py`` (which source a payload is
asked from, and when), ``relaying.py`` (what goes with a status: relayed statuses, pushed
payloads), ``fingerprints.py`` (divergence of executed state), and ``ready.py`` (the
values it takes and gives: the Ready contract). Around it: ``driver.py`` (the applier:
inputs in, Readies persisted through ``txlog/`` and acted on), ``transport.py`` (HTTP to
the peers), ``status.py`` (what the admin status shows).
"""

from master_service.sync.hlc import HybridLogicalClock
from master_service.sync.messages import (
    InvalidMessage,
    Message,
    Mode,
    Status,
    TailSegment,
    TxMeta,
    chain_hash,
)
from master_service.sync.protocol import SyncNode
from master_service.sync.ready import (
    Acquire,
    Activity,
    Compaction,
    ExecutedAt,
    Fetch,
    Incoming,
    Inconsistency,
    PersistentState,
    Post,
    Ready,
    Refused,
    Relayed,
    Retention,
    SplitRecovery,
    Tail,
    Timing,
    Truncation,
    UnknownPeer,
)

__all__ = [
    "Acquire",
    "Activity",
    "Compaction",
    "ExecutedAt",
    "Fetch",
    "HybridLogicalClock",
    "Incoming",
    "Inconsistency",
    "InvalidMessage",
    "Message",
    "Mode",
    "PersistentState",
    "Post",
    "Ready",
    "Refused",
    "Relayed",
    "Retention",
    "SplitRecovery",
    "Status",
    "SyncNode",
    "Tail",
    "TailSegment",
    "Timing",
    "Truncation",
    "TxMeta",
    "UnknownPeer",
    "chain_hash",
]
