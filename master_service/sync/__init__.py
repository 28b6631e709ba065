"""TxLog sync protocol between peer masters.

The pure core: ``protocol.py`` (``SyncNode``, the theory of operation) with its parts
``agreed_queue.py``, ``split_recovery.py``, ``compaction.py``, ``acquisition.py`` (which
source a payload is asked from, and when), ``relaying.py`` (what goes with a status:
relayed statuses, pushed payloads), ``fingerprints.py`` (divergence of executed state),
and ``ready.py`` (the values it takes and gives: the Ready contract). Under it:
``storage.py`` (what it needs persisted), ``sqlite_storage.py`` and ``memory_storage.py``,
and ``applier.py`` (a Ready persisted through a storage). Around it: ``driver.py``
(inputs in, Readies persisted through the applier and acted on), ``transport.py`` (HTTP
to the peers), ``status.py`` (what the admin status shows).
"""

# The package's names are the pure core's values and its one class, as the tests and the
# simulator use them; the rooms around the core import from their modules.
from master_service.sync import messages, ready
from master_service.sync.hlc import HybridLogicalClock
from master_service.sync.messages import *  # noqa: F403
from master_service.sync.protocol import SyncNode
from master_service.sync.ready import *  # noqa: F403

__all__ = ["HybridLogicalClock", "SyncNode", *messages.__all__, *ready.__all__]
