"""Transaction ids: UUIDs of version 7 (RFC 9562, 5.7), time-ordered.

Why not version 4: the log indexes transactions by id (``transactions``' primary key,
``sync_agreed``'s unique index), and random ids put each new one on a random leaf page of
that index, so every group commit rewrote a page per transaction in the WAL. Ids that
start with the time in milliseconds land on the index's last pages, as the seqs do. The
rest is random (74 bits): ids of two masters, or of one master within a millisecond,
still never meet. An id's time is not used for anything: the order of transactions is
the log's (seq) or the agreed one (timestamp, then id: sync-protocol.md).
"""

from __future__ import annotations

import os
import time
import uuid


def new_txid() -> str:
    """A new transaction id: the 36-character form of a version 7 UUID."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")  # 80 bits: 74 are kept
    value = (ms & (1 << 48) - 1) << 80 | 0x7 << 76 | (rand >> 68) << 64 \
        | 0b10 << 62 | rand & (1 << 62) - 1
    return str(uuid.UUID(int=value))
