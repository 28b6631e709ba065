"""Values of the TxLog sync protocol: transaction metadata and the two peer messages.

Everything here is a frozen dataclass validated at construction, so a malformed message is
refused where it is parsed (the driver answers 400) and the state machine only ever sees
well-formed values. Times and timestamps are integers in the driver's unit (milliseconds
in the simulator; any fixed unit works, the protocol only compares them).
"""

from __future__ import annotations

import enum
import hashlib
import re
from dataclasses import dataclass

__all__ = ["MAX_INT", "InvalidMessage", "Message", "Mode", "SeedPoint", "Status", "TailSegment",
           "TxMeta", "applies_agreed", "chain_hash", "mode_of"]


class InvalidMessage(ValueError):
    """A value that breaks a rule of the protocol; nothing was changed."""


class Mode(enum.Enum):
    """Master modes (docs/design/sync-protocol.md#master-modes)."""

    READ_WRITE = "read-write"  # takes client transactions; others wait for it
    READ_ONLY = "read-only"  # refuses client transactions; others still wait for it
    MUTED = "muted"  # refuses client transactions; others do not wait for it


def mode_of(read_only: bool, mode: str) -> Mode:
    """The protocol mode of a master from its ReadOnly and Mode attributes."""
    if mode == "MUTE":
        return Mode.MUTED
    return Mode.READ_ONLY if read_only else Mode.READ_WRITE


def applies_agreed(read_only: bool, mode: Mode) -> bool:
    """Whether a master executes the agreed transactions on its workers: a read-only
    master applies none, also when muted (ReadOnly=true with Mode=MUTE is muted in the
    agreement, nobody waits for it, and read-only in execution;
    docs/design/sync-protocol.md#master-modes)."""
    return not read_only and mode is not Mode.READ_ONLY


def _check_id(what: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidMessage(f"{what} must be a non-empty string, got {value!r}")


# Integers of a message (timestamps, counters, sizes, positions) stay below 2**62: they are
# stored as SQLite INTEGERs (64-bit signed) and a counter must still be able to grow. A
# larger one would overflow the column and stop peering on both masters.
MAX_INT = 2**62
# Transaction ids travel in URLs (payload fetches): letters, digits and . _ ~ : @ + = -
_TXID = re.compile(r"[A-Za-z0-9._~:@+=-]{1,200}")


def _check_int(what: str, value: object, minimum: int = 0) -> None:
    if (not isinstance(value, int) or isinstance(value, bool) or value < minimum
            or value >= MAX_INT):
        raise InvalidMessage(f"{what} must be an integer >= {minimum} and < 2**62, "
                             f"got {value!r}")


def _check_txid(what: str, value: object) -> None:
    if not isinstance(value, str) or not _TXID.fullmatch(value):
        raise InvalidMessage(f"{what} must be 1 to 200 letters, digits or . _ ~ : @ + = -, "
                             f"got {value!r}")


def chain_hash(previous: str, txid: str) -> str:
    """The synchronised queue's hash chain: one link per entry, "" before the first."""
    return hashlib.blake2b(f"{previous}\0{txid}".encode(), digest_size=16).hexdigest()


def _check_chain(seq: object, chain: object) -> None:
    if not isinstance(chain, str) or (seq == 0) != (chain == ""):
        raise InvalidMessage(f"chain must be a hash exactly when seq > 0, got {chain!r}")


def _check_sorted(what: str, txs: tuple[TxMeta, ...]) -> None:
    if not isinstance(txs, tuple) or not all(isinstance(t, TxMeta) for t in txs):
        raise InvalidMessage(f"{what} must be a tuple of TxMeta")
    seen: set[str] = set()
    previous: tuple[int, str] | None = None
    for tx in txs:
        if tx.txid in seen:
            raise InvalidMessage(f"{what}: transaction {tx.txid!r} is listed twice")
        seen.add(tx.txid)
        if previous is not None and tx.key <= previous:
            raise InvalidMessage(f"{what} is not sorted by (timestamp, transaction id) at "
                                 f"{tx.txid!r}")
        previous = tx.key


@dataclass(frozen=True, slots=True)
class TxMeta:
    """What the protocol exchanges about a transaction: never its payload.

    ``digest`` and ``size`` describe the payload that a node acquires from the origin
    (docs/design/sync-protocol.md#transaction-exchange); the order of transactions is (timestamp,
    txid).
    """

    txid: str
    timestamp: int
    origin: str
    size: int
    digest: str

    def __post_init__(self) -> None:
        _check_txid("transaction id", self.txid)
        _check_int(f"timestamp of {self.txid}", self.timestamp)
        _check_id(f"origin of {self.txid}", self.origin)
        _check_int(f"size of {self.txid}", self.size)
        _check_id(f"digest of {self.txid}", self.digest)

    @property
    def key(self) -> tuple[int, str]:
        """The incoming queue's sort key (timestamp, then transaction id:
        docs/design/sync-protocol.md#state-of-a-node)."""
        return (self.timestamp, self.txid)


@dataclass(frozen=True, slots=True)
class Status:
    """The message a node POSTs to its peers at the start of each round.

    Spec fields: ``merge_base`` (id of the last synchronised transaction, None before the
    first), ``counter`` (the sender's timestamp counter) and ``queue`` (its incoming queue,
    acquired transactions only, sorted by (timestamp, txid)).

    Extensions, see the theory of operation in ``protocol.py``: ``seq`` — the length of
    the sender's synchronised queue (the position of the merge base), so that a divergence
    is reported instead of mistaken for a lag; ``mode`` — the sender's master mode, so
    that a mode misconfiguration is reported; ``split_point`` and ``split_chain`` — while
    the sender is split, its split point and the hash chain up to it, i.e. its *good
    prefix* (protocol.py, "Split recovery": a SMART node never keeps post-split entries
    that contradict another node's good prefix). Not split: None and "" (the whole queue
    is good).

    Bounded state (protocol.py, "Compaction"): ``executed`` — the sender's data centre
    has executed the agreed transactions up to that position (so the peers may forget
    them once everybody has); ``floor`` — the sender forgot its agreed entries and their
    payloads up to that position: it can serve a lagger (tail segments, payloads) only
    from there on. A sender from before these fields posts 0 for both (it forgets
    nothing, and nothing is forgotten on its account).

    ``heard``: per peer, the newest counter of that peer's statuses the sender received
    (sorted by peer; a peer not heard is left out). An acknowledgement: a receiver whose
    floor is past the sender's position takes the status for the sender's current
    position only if the sender had heard a status of the receiver that carried that
    floor — else it may be a late one, posted before the sender caught up (compaction.py,
    ``_knew_our_floor``; the simulator found it). A sender from before this field posts
    none: behind our floor, it is waited for as if its status were a late one.
    """

    sender: str
    mode: Mode
    merge_base: str | None
    seq: int
    counter: int
    queue: tuple[TxMeta, ...]
    chain: str = ""
    split_point: int | None = None  # the sender's last known good position, while split
    split_chain: str = ""  # chain_hash of the sender's queue up to split_point
    executed: int = 0  # the sender's data centre executed the agreed queue up to here
    floor: int = 0  # the sender forgot its agreed entries (and payloads) up to here
    heard: tuple[tuple[str, int], ...] = ()  # peer -> newest counter of its statuses we got

    def __post_init__(self) -> None:
        _check_id("sender", self.sender)
        if not isinstance(self.mode, Mode):
            raise InvalidMessage(f"mode must be a Mode, got {self.mode!r}")
        _check_int("seq", self.seq)
        if self.merge_base is None:
            if self.seq != 0:
                raise InvalidMessage("a merge base of None means an empty synchronised queue "
                                     f"(seq 0), got seq {self.seq}")
        else:
            _check_txid("merge base", self.merge_base)
            if self.seq == 0:
                raise InvalidMessage("seq 0 means an empty synchronised queue: no merge base")
        _check_int("counter", self.counter)
        _check_sorted("incoming queue", self.queue)
        if self.queue and self.queue[-1].timestamp > self.counter:
            raise InvalidMessage("the counter must have moved past every queued timestamp: "
                                 f"{self.queue[-1].timestamp} > counter {self.counter}")
        _check_chain(self.seq, self.chain)
        if self.split_point is None:
            if self.split_chain != "":
                raise InvalidMessage("split_chain without a split_point")
        else:
            _check_int("split_point", self.split_point)
            if self.split_point > self.seq:
                raise InvalidMessage(f"split_point {self.split_point} is past the merge base "
                                     f"(seq {self.seq})")
            _check_chain(self.split_point, self.split_chain)
        _check_int("executed", self.executed)
        _check_int("floor", self.floor)
        if not self.floor <= self.executed <= self.seq:
            raise InvalidMessage(f"floor {self.floor} <= executed {self.executed} <= seq "
                                 f"{self.seq} does not hold")
        for i, pair in enumerate(self.heard):
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise InvalidMessage(f"heard[{i}] must be a (peer, counter) pair, got {pair!r}")
            _check_id("heard peer", pair[0])
            _check_int(f"heard counter of {pair[0]}", pair[1])
            if i and pair[0] <= self.heard[i - 1][0]:
                raise InvalidMessage("heard must be sorted by peer, each peer once")


@dataclass(frozen=True, slots=True)
class TailSegment:
    """Synchronised-queue entries a forerunner sends to a lagger
    (docs/design/sync-protocol.md#laggers).

    ``entries`` follow the entry at position ``after_seq`` whose id is ``after`` (None and
    0 for the start of the queue).

    ``split_point`` and ``excluded``: the sender's split point and the peers it went on
    without (excluded or rejoining) when it sent the segment, if it was split. A node
    that appends entries past ``split_point`` joins the sender's side of the split
    (protocol.py, "Split recovery"). Optional: a sender that is not split leaves them out.
    Under split recovery NONE ``split_point`` stays None while ``excluded`` names whom
    the sender excluded: a receiver taking its entries excludes them too once silent
    (split_recovery.py, ``check_stall``).
    """

    sender: str
    after_seq: int
    after: str | None
    entries: tuple[TxMeta, ...]
    after_chain: str = ""  # chain_hash of the sender's queue up to after_seq
    split_point: int | None = None  # the sender's split point, while split
    excluded: tuple[str, ...] = ()  # whom the sender went on without (under NONE too)

    def __post_init__(self) -> None:
        _check_id("sender", self.sender)
        _check_int("after_seq", self.after_seq)
        if self.split_point is not None:
            _check_int("split_point", self.split_point)
        if not isinstance(self.excluded, tuple):
            raise InvalidMessage(f"excluded must be a tuple, got {self.excluded!r}")
        for peer in self.excluded:
            _check_id("excluded peer", peer)
        if (self.after is None) != (self.after_seq == 0):
            raise InvalidMessage("after is None exactly when after_seq is 0")
        if self.after is not None:
            _check_txid("after", self.after)
        _check_chain(self.after_seq, self.after_chain)
        if not isinstance(self.entries, tuple) or not self.entries:
            raise InvalidMessage("a tail segment carries at least one entry")
        seen: set[str] = set()
        for tx in self.entries:
            if not isinstance(tx, TxMeta):
                raise InvalidMessage("tail entries must be TxMeta")
            if tx.txid in seen or tx.txid == self.after:
                raise InvalidMessage(f"tail segment lists {tx.txid!r} twice")
            seen.add(tx.txid)


Message = Status | TailSegment


_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_IMAGE_NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")


@dataclass(frozen=True)
class SeedPoint:
    """What a peer's worker image stands for (seeding, master_service/sync/seeding.py):
    the donor's agreed position ``pos`` with the id of the entry there, the hash chain up
    to it and the newest timestamp up to it (the seeded node's floor: compaction.py), and
    the data centre state after it (its log's seq, fingerprint, quads) that the image
    holds; ``name`` names the image to fetch. ``sha256`` and ``bytes`` are None when
    the donor streams the image while it writes it (it is fixed by its checkpoint, not
    yet written): the recipient asks for them once the body ended. ``ids``: the ids of
    the entries agreed in (known_after, pos], in order, which the donor still knows
    (``known_after`` None: a donor that did not say; compaction.py, "Seeding and the
    incoming queue")."""

    name: str
    pos: int
    txid: str | None
    chain: str
    newest: int
    seq: int
    fingerprint: str
    quads: int
    sha256: str | None
    bytes: int | None
    ids: tuple[str, ...] = ()
    known_after: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _IMAGE_NAME.fullmatch(self.name):
            raise InvalidMessage(f"image name must be 1 to 100 letters, digits or . _ -, "
                                 f"got {self.name!r}")
        for what in ("pos", "newest", "seq", "quads"):
            _check_int(what, getattr(self, what))
        if (self.sha256 is None) != (self.bytes is None):
            raise InvalidMessage("sha256 and bytes are given together or not at all")
        if self.bytes is not None:
            _check_int("bytes", self.bytes)
        if (self.pos == 0) != (self.txid is None):
            raise InvalidMessage(f"txid must be given exactly when pos > 0, got {self.txid!r}")
        if self.txid is not None:
            _check_txid("txid", self.txid)
        _check_chain(self.pos, self.chain)
        if not isinstance(self.fingerprint, str) or not _HEX32.fullmatch(self.fingerprint):
            raise InvalidMessage(f"fingerprint must be 32 hex digits, got {self.fingerprint!r}")
        if self.sha256 is not None and (not isinstance(self.sha256, str)
                                        or not _HEX64.fullmatch(self.sha256)):
            raise InvalidMessage(f"sha256 must be 64 hex digits, got {self.sha256!r}")
        if not isinstance(self.ids, tuple):
            raise InvalidMessage("ids must be a list of transaction ids")
        for txid in self.ids:
            _check_txid("agreed transaction id", txid)
        if self.known_after is not None:
            _check_int("known_after", self.known_after)
            if len(self.ids) != self.pos - self.known_after:
                raise InvalidMessage(f"ids must name the {self.pos - self.known_after} "
                                     f"entries in ({self.known_after}, {self.pos}], got "
                                     f"{len(self.ids)}")
        elif self.ids:
            raise InvalidMessage("ids come with known_after")
