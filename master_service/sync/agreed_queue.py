"""The agreed (synchronised) queue of a node: its entries after the floor, their positions,
the hash chain, and what is kept of the forgotten prefix (compaction.py, "Compaction").

Positions are absolute (1 is the first transaction ever agreed); the entries up to
``floor`` are forgotten, ``entries`` holds the rest. The core (protocol.py) owns one;
compaction forgets a prefix of it (``forget``), split recovery drops a suffix
(``truncate``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from master_service.sync.core_state import AHEAD, BEHIND, DIVERGED, FORGOTTEN, SAME
from master_service.sync.messages import TailSegment, TxMeta, chain_hash
from master_service.sync.ready import PersistentState

__all__ = ["AgreedQueue"]


class AgreedQueue:
    """The agreed entries after ``floor``, their 0-based absolute positions and chain."""

    def __init__(self, *, floor: int, floor_txid: str | None, floor_chain: str,
                 floor_newest: int, entries: Iterable[TxMeta]) -> None:
        self.floor = floor
        self.floor_txid = floor_txid  # the id of the entry at the floor (None at 0)
        self.floor_newest = floor_newest  # the newest timestamp forgotten
        self.entries: list[TxMeta] = list(entries)
        # txid -> 0-based absolute position (the entry at position pos + 1)
        self.positions = {tx.txid: floor + i for i, tx in enumerate(self.entries)}
        # chain[k]: hash chain of the first floor + k agreed entries
        self.chain = [floor_chain]
        for tx in self.entries:
            self.chain.append(chain_hash(self.chain[-1], tx.txid))

    @classmethod
    def restore(cls, state: PersistentState) -> AgreedQueue:
        return cls(floor=state.floor, floor_txid=state.floor_txid,
                   floor_chain=state.floor_chain, floor_newest=state.floor_newest,
                   entries=state.synchronised)

    @property
    def seq(self) -> int:
        return self.floor + len(self.entries)

    @property
    def merge_base(self) -> str | None:
        return self.entries[-1].txid if self.entries else self.floor_txid

    def __contains__(self, txid: object) -> bool:
        return txid in self.positions

    def get(self, txid: str) -> TxMeta | None:
        pos = self.positions.get(txid)
        return None if pos is None else self.entries[pos - self.floor]

    def txid_at(self, pos: int) -> str | None:
        """The id of the entry at position ``pos`` (floor <= pos <= seq; None at 0)."""
        if pos == self.floor:
            return self.floor_txid
        return self.entries[pos - self.floor - 1].txid

    def chain_at(self, pos: int) -> str:
        """The hash chain of the first ``pos`` entries (floor <= pos <= seq)."""
        return self.chain[pos - self.floor]

    def newest_up_to(self, pos: int) -> int:
        """The newest timestamp of the entries up to ``pos``, forgotten ones included."""
        newest = max((tx.timestamp for tx in self.entries[:pos - self.floor]), default=0)
        return max(newest, self.floor_newest)

    def append(self, tx: TxMeta) -> None:
        self.positions[tx.txid] = self.seq
        self.entries.append(tx)
        self.chain.append(chain_hash(self.chain[-1], tx.txid))

    def forget(self, target: int) -> list[TxMeta]:
        """Forget the entries up to ``target`` (floor < target <= seq); returns them."""
        k = target - self.floor
        gone = self.entries[:k]
        for tx in gone:
            del self.positions[tx.txid]
            self.floor_newest = max(self.floor_newest, tx.timestamp)
        self.floor_txid = gone[-1].txid
        del self.entries[:k]
        del self.chain[:k]
        self.floor = target
        return gone

    def relation(self, seq: int, base: str | None, chain: str) -> str:
        """How a peer's position ``seq`` (merge base ``base``, hash chain ``chain``)
        relates to this queue (core_state.py: AHEAD, FORGOTTEN, DIVERGED, SAME, BEHIND)."""
        if seq > self.seq:
            return AHEAD
        if seq < self.floor:
            return FORGOTTEN
        if seq and (self.txid_at(seq) != base or self.chain_at(seq) != chain):
            return DIVERGED
        return SAME if seq == self.seq else BEHIND

    def truncate(self, point: int) -> list[TxMeta]:
        """Drop the entries after ``point`` (floor <= point); returns them."""
        removed = self.entries[point - self.floor:]
        del self.entries[point - self.floor:]
        del self.chain[point - self.floor + 1:]
        for tx in removed:
            del self.positions[tx.txid]
        return removed

    def segment(self, sender: str, start: int, end: int, split_point: int | None,
                excluded: tuple[str, ...]) -> TailSegment:
        """A tail segment of ``sender`` with the entries at positions start + 1 .. end
        (floor <= start <= end <= seq) and its split (``TailSegment``)."""
        return TailSegment(sender, start, self.txid_at(start),
                           tuple(self.entries[start - self.floor:end - self.floor]),
                           self.chain_at(start), split_point, excluded)

    def from_floor(self, seg: TailSegment) -> tuple[TailSegment | None, str | None]:
        """A tail segment that starts before our floor, cut to start at our floor (None
        when it ends at or before it), and the divergence found (None: consistent). Its
        entry at our floor and the hash chain up to it must be ours: else it diverged
        from us, which is reported and not applied. A segment that ends exactly at our
        floor is still compared there: a diverged tail (``send_diverged``) ends at the
        position we posted, which is our floor once we executed and forgot everything (a
        diverged peer ahead of us posts an executed position past our queue), and it is
        then the only way we learn of the divergence
        (docs/design/sync-protocol.md#split-recovery: under None it is reported on every
        side)."""
        skip = self.floor - seg.after_seq
        if len(seg.entries) < skip:
            return None, None
        chain = seg.after_chain
        for tx in seg.entries[:skip]:
            chain = chain_hash(chain, tx.txid)
        if seg.entries[skip - 1].txid != self.floor_txid or chain != self.chain[0]:
            return None, (f"segment has {seg.entries[skip - 1].txid} at seq {self.floor}, "
                          f"ours there is {self.floor_txid}")
        if len(seg.entries) == skip:
            return None, None  # consistent, and nothing past our floor
        return replace(seg, after_seq=self.floor, after=self.floor_txid,
                       entries=seg.entries[skip:], after_chain=chain), None
