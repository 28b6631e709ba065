"""TxLog sync protocol between peer masters: a pure state machine (``protocol.py``).

See ``protocol.py`` for the theory of operation; the driver that runs rounds, posts over
HTTP and persists through ``txlog/`` is a thin shell around ``SyncNode``.
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
from master_service.sync.protocol import (
    Acquire,
    Activity,
    Compaction,
    Incoming,
    Inconsistency,
    PersistentState,
    Post,
    Ready,
    Refused,
    Retention,
    SplitRecovery,
    SyncNode,
    Tail,
    Timing,
    Truncation,
    UnknownPeer,
)

__all__ = [
    "Acquire",
    "Activity",
    "Compaction",
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
