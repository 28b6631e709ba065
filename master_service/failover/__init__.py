"""Failover between the masters of one data centre (docs/design/failover.md): the pure
core. ``node.py`` is the state machine of a master, ``messages.py`` what it takes and
gives; the workers' half of the rule is ``worker_service/epochs.py``. Both are modelled
together in ``tests/failover_sim.py`` before anything runs on processes."""

from master_service.failover.messages import (
    AskGrant,
    Durable,
    Entry,
    Ready,
    Replicate,
    Replicated,
    Role,
    Send,
    Timing,
    WorkerReply,
    WriteEntries,
)
from master_service.failover.node import FailoverNode, last_of, last_of_runs, shared_prefix

__all__ = [
    "AskGrant", "Durable", "Entry", "FailoverNode", "Ready", "Replicate", "Replicated",
    "Role", "Send", "Timing", "WorkerReply", "WriteEntries", "last_of", "last_of_runs",
    "shared_prefix",
]
