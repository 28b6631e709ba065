"""The incoming queue of a node (docs/design/sync-protocol.md#state-of-a-node): the
transactions it knows and has not agreed yet, sorted by (timestamp, txid), each with
whether its payload is held and who holds it (``Entry``). Owned by the core (protocol.py),
the only one that changes it; the parts read it."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from master_service.sync.core_state import Entry

__all__ = ["IncomingQueue"]


class IncomingQueue:
    __slots__ = ("_entries", "_order")

    def __init__(self, entries: Iterable[Entry] = ()) -> None:
        self._entries: dict[str, Entry] = {}
        self._order: list[tuple[int, str]] = []  # keys of _entries, sorted
        for entry in entries:
            self.add(entry)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, txid: str) -> bool:
        return txid in self._entries

    def __getitem__(self, txid: str) -> Entry:
        return self._entries[txid]

    def get(self, txid: str) -> Entry | None:
        return self._entries.get(txid)

    def values(self) -> Iterable[Entry]:
        """The entries in the order they were added (not sorted)."""
        return self._entries.values()

    def sorted(self) -> Iterator[Entry]:
        """The entries in (timestamp, txid) order."""
        return (self._entries[t] for _, t in self._order)

    def add(self, entry: Entry) -> None:
        self._entries[entry.tx.txid] = entry
        bisect.insort(self._order, entry.tx.key)

    def pop(self, txid: str) -> Entry | None:
        """Take ``txid`` out, if it is in."""
        entry = self._entries.pop(txid, None)
        if entry is not None:
            self._order.remove(entry.tx.key)
        return entry

    def take(self, txids: list[str]) -> list[Entry]:
        """Take ``txids`` (all in the queue) out, in one pass over the order."""
        if not txids:
            return []
        gone = set(txids)
        self._order = [k for k in self._order if k[1] not in gone]
        return [self._entries.pop(t) for t in txids]
