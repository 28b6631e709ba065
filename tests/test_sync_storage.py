"""The two storages under the sync core (master_service/sync/storage.py) mean the same:
the same writes, through the same applier, give the same state to resume from. The
simulator runs on ``MemoryStorage``; what it proves holds for the master only if
``SqliteStorage`` keeps exactly what it keeps."""

from __future__ import annotations

from master_service.sync import Compaction, Incoming, Ready, Truncation, TxMeta, chain_hash
from master_service.sync.applier import Applier
from master_service.sync.memory_storage import MemoryStorage
from master_service.sync.sqlite_storage import COUNTER_LEASE, SqliteStorage
from master_service.sync.storage import CoreStorage
from master_service.sync.wire import canonical_payload, payload_digest
from master_service.txlog import TxLog


def _tx(i: int) -> tuple[TxMeta, list[dict]]:
    ops = [{"type": "update", "update": f"INSERT DATA {{ <urn:a> <urn:p> {i} }}"}]
    payload = canonical_payload(ops)
    return TxMeta(f"t{i}", 1_000 + i, "m2", len(payload), payload_digest(payload)), ops


def _script() -> list[tuple[Ready, list] | int]:
    """Readies as a split node's core gives them: incoming, agreed (one payload
    lacking), a split point, a truncation back to it, agreed again, executed (an int:
    the position), forgotten."""
    (a, pa), (b, pb), (c, _), (d, pd) = (_tx(i) for i in range(4))
    return [
        (Ready(counter=1_003, incoming=(Incoming(a, True), Incoming(b, True),
                                        Incoming(c, False))), [(a, pa), (b, pb)]),
        (Ready(synchronised=(a, c), seq=2, split_point=1, split_point_changed=True), []),
        (Ready(truncated=Truncation(1, (c,)), incoming=(Incoming(c, False),), seq=1,
               split_point=None, split_point_changed=True), []),
        (Ready(counter=1_004, incoming=(Incoming(d, True),)), [(d, pd)]),
        (Ready(synchronised=(b, d), seq=3), []),
        3,
        (Ready(compacted=Compaction(2, b.txid, chain_hash(chain_hash("", a.txid), b.txid),
                                    1_001, ids_after=1)), []),
    ]


def test_memory_and_sqlite_storage_resume_from_the_same_state(tmp_path):
    memory = MemoryStorage()
    with TxLog.open(tmp_path / "txlog.db") as log:
        sqlite = SqliteStorage(log)
        sqlite.enable()

        def execute(storage: CoreStorage, pos: int) -> None:
            if storage is memory:
                memory.mark_executed(pos)
                return
            agreed = [t for t, _ in (_tx(0), _tx(1), _tx(3))][:pos]
            sqlite.record_executed(
                [(i + 1, t.txid, f"{i + 1:032x}", i + 1) for i, t in enumerate(agreed)],
                [(i + 1, t.txid, {}, f"{i + 1:032x}", i + 1, 0.0)
                 for i, t in enumerate(agreed)], [], 1_000.0)

        for storage in (memory, sqlite):
            for step in _script():
                if isinstance(step, int):
                    execute(storage, step)
                else:
                    Applier(storage).apply([step])
        (m_state, m_missing), (s_state, s_missing) = memory.load(), sqlite.load()
        assert m_state.counter == 1_004 and s_state.counter == 1_003 + COUNTER_LEASE
        assert s_state.__dict__ | {"counter": 0} == m_state.__dict__ | {"counter": 0}
        assert (m_state.floor, [t.txid for t in m_state.synchronised]) == (2, ["t3"])
        assert m_state.incoming == () and m_missing == s_missing == []
        assert memory.known_ids(3) == sqlite.known_ids(3) == (1, ["t1", "t3"])
        assert memory.payload("t3") == sqlite.payload("t3") == canonical_payload(_tx(3)[1])
        assert memory.payload("t0") is None and sqlite.payload("t0") is None  # forgotten
