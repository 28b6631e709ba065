"""Transaction ids (master_service/txlog/txids.py): version 7 UUIDs, ordered by the
millisecond they were made in, so that the log's indexes on them grow at their end."""

from __future__ import annotations

import time
import uuid

from master_service.sync.messages import TxMeta
from master_service.txlog.txids import new_txid


def test_an_id_is_a_version_7_uuid_that_carries_its_millisecond():
    before = time.time_ns() // 1_000_000
    txid = new_txid()
    after = time.time_ns() // 1_000_000
    u = uuid.UUID(txid)
    assert str(u) == txid and len(txid) == 36
    assert (u.version, u.variant) == (7, uuid.RFC_4122)
    assert before <= u.int >> 80 <= after
    TxMeta(txid, 1, "m1", 1, "d")  # a valid id for the sync protocol's messages


def test_ids_of_later_milliseconds_sort_after_and_none_repeats():
    first = [new_txid() for _ in range(2000)]
    time.sleep(0.002)
    later = [new_txid() for _ in range(2000)]
    assert max(first) < min(later)
    assert len(set(first + later)) == 4000
    # What is not time is random: the 74 bits after it differ across ids of one moment.
    assert len({uuid.UUID(t).int & ((1 << 80) - 1) for t in first}) == 2000
