"""The values a ``SyncNode`` takes and gives (protocol.py): its configuration, what it
persists, and the ``Ready`` of each step (its working values: core_state.py).

The Ready contract (etcd raft's Ready)
--------------------------------------
Handle Readies in order. For each: persist, in one durable transaction, first
``truncated`` (drop the synchronised entries after ``truncated.after_seq``; they are
upserted as incoming, they are also in ``incoming``), then ``counter``, ``incoming``
(upserts), ``synchronised`` (append; those transactions leave the incoming queue) and
``split_point`` when ``split_point_changed``, last ``compacted`` (forget the entries up
to its floor, with their payloads); only then acknowledge ``acknowledge`` to
clients, send ``posts`` and ``tails``, start ``acquire`` fetches, and hand
``synchronised`` to the workers (a transaction whose payload is still being fetched waits
for it). After a truncation the workers are restored to the state at ``after_seq`` (the
backup taken at the split point) before anything after it is executed. After a crash,
``SyncNode.restore`` resumes from what was persisted. What was acknowledged was persisted
in the incoming queue and leaves it only into the persisted synchronised queue (or back
from it, by a truncation), so it is never lost; and nothing is posted before it is
durable, which keeps the promises of (1) and (2) across restarts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from master_service.sync.messages import InvalidMessage, Status, TailSegment, TxMeta

__all__ = [
    "Acquire",
    "Activity",
    "Compaction",
    "ExecutedAt",
    "Fetch",
    "Incoming",
    "Inconsistency",
    "PersistentState",
    "Post",
    "Ready",
    "Refused",
    "Relayed",
    "Retention",
    "SplitRecovery",
    "Tail",
    "Timing",
    "Truncation",
    "UnknownPeer",
]


class Refused(Exception):
    """A client transaction this master does not take (read-only, muted, duplicate id)."""


class UnknownPeer(InvalidMessage):
    """A message from a node that is not a configured peer (spec: not synchronised with)."""


class SplitRecovery(enum.Enum):
    """What a node does when a split ends (module docstring, "Split recovery")."""

    NONE = "None"  # report divergence, never repair it
    SIMPLE = "Simple"  # every split node goes back to its split point and re-negotiates
    SMART = "Smart"  # the majority side keeps its state, the others go back

    @classmethod
    def parse(cls, value: str) -> SplitRecovery:
        """The configuration value, case-insensitive (spec: None, Simple, Smart)."""
        for member in cls:
            if isinstance(value, str) and value.strip().lower() == member.value.lower():
                return member
        raise ValueError(f"split recovery must be one of None, Simple, Smart, got {value!r}")


class Activity(enum.Enum):
    BUSY = "busy"
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class Timing:
    """Round timing, in the driver's time unit (the simulator uses milliseconds)."""

    round_timeout: int = 500  # a busy round ends here if some peer did not post
    idle_interval: int = 5_000  # spec: "once a second to once a minute"
    max_peer_lag: int | None = None  # no progress for this long -> continue without missing
    acquire_retry: int = 1_000  # ask again for a payload that did not arrive
    max_tail: int = 1_000  # entries per tail segment
    # A peer's counter or timestamp further ahead of our clock than this is refused: the
    # clock follows every timestamp it sees, so one forged or badly skewed message would
    # move every master's clock for good.
    max_drift: int = 86_400_000
    # An ask for a payload not answered in this long is not waited for alone: the next
    # source is asked too (acquisition.py). Well above a fetch across data centres (tens
    # of ms), well below a request timeout.
    fetch_hedge: int = 500

    def __post_init__(self) -> None:
        for name in ("round_timeout", "idle_interval", "acquire_retry", "max_tail",
                     "max_drift", "fetch_hedge"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.max_peer_lag is not None and (
                not isinstance(self.max_peer_lag, int) or self.max_peer_lag < 1):
            raise ValueError(f"max_peer_lag must be None or >= 1, got {self.max_peer_lag!r}")


@dataclass(frozen=True, slots=True)
class Retention:
    """How long agreed entries are kept (module docstring, "Compaction"): entries every
    node has executed are forgotten anyway; ``max_entries`` (LogMaxSize) and ``max_age``
    (LogMaxDepth, in the driver's time unit, against the entries' timestamps) are the
    horizon past which they are forgotten even if some peer has not executed them (it
    then needs seeding). None: no horizon. ``batch``: forget in steps of at least this
    many entries (a list's front is dropped by copying the rest)."""

    max_entries: int | None = None
    max_age: int | None = None
    batch: int = 1

    def __post_init__(self) -> None:
        for name in ("max_entries", "max_age"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < 1):
                raise ValueError(f"{name} must be None or an integer >= 1, got {value!r}")
        if not isinstance(self.batch, int) or isinstance(self.batch, bool) or self.batch < 1:
            raise ValueError(f"batch must be an integer >= 1, got {self.batch!r}")


@dataclass(frozen=True, slots=True)
class Incoming:
    """An incoming-queue entry as persisted: the transaction and whether we hold its payload."""

    tx: TxMeta
    acquired: bool


@dataclass(frozen=True)
class PersistentState:
    """What a node needs to resume after a crash: exactly what its Readies asked to persist."""

    synchronised: tuple[TxMeta, ...] = ()  # the entries after ``floor``
    incoming: tuple[Incoming, ...] = ()
    counter: int = 0
    split_point: int | None = None  # the last known good position, while split
    # Compaction: the entries up to position ``floor`` are forgotten; ``floor_txid`` was
    # the one at ``floor`` (None exactly when floor is 0), ``floor_chain`` the hash chain
    # up to it.
    floor: int = 0
    floor_txid: str | None = None
    floor_chain: str = ""
    floor_newest: int = 0  # the newest timestamp of a forgotten entry

    def __post_init__(self) -> None:
        if not isinstance(self.counter, int) or self.counter < 0:
            raise ValueError(f"counter must be an integer >= 0, got {self.counter!r}")
        if (not isinstance(self.floor, int) or isinstance(self.floor, bool) or self.floor < 0
                or (self.floor == 0) != (self.floor_txid is None)
                or (self.floor == 0) != (self.floor_chain == "")):
            raise ValueError(f"floor {self.floor!r} needs a txid and a chain exactly when > 0 "
                             f"(got {self.floor_txid!r}, {self.floor_chain!r})")
        top = self.floor + len(self.synchronised)
        if self.split_point is not None and (
                not isinstance(self.split_point, int) or isinstance(self.split_point, bool)
                or not self.floor <= self.split_point <= top):
            raise ValueError(f"split_point must be None or a position in the synchronised "
                             f"queue ({self.floor}..{top}), got {self.split_point!r}")
        seen: set[str] = set()
        for tx in self.synchronised:
            if tx.txid in seen:
                raise ValueError(f"{tx.txid!r} is twice in the synchronised queue")
            seen.add(tx.txid)
        previous: tuple[int, str] | None = None
        for item in self.incoming:
            tx = item.tx
            if tx.txid in seen:
                raise ValueError(f"{tx.txid!r} is both synchronised and incoming, or twice")
            seen.add(tx.txid)
            if previous is not None and tx.key <= previous:
                raise ValueError(f"incoming queue not sorted at {tx.txid!r}")
            previous = tx.key
        newest = max((t.timestamp for t in self.synchronised), default=0)
        if previous is not None:
            newest = max(newest, previous[0])
        if newest > self.counter:
            raise ValueError(f"counter {self.counter} is behind a stored timestamp {newest}: "
                             "it must be persisted with everything it has seen")


@dataclass(frozen=True, slots=True)
class Truncation:
    """A split recovery undid the synchronised entries after position ``after_seq``:
    ``entries`` (in their old order) left the synchronised queue and are incoming again."""

    after_seq: int
    entries: tuple[TxMeta, ...]


@dataclass(frozen=True, slots=True)
class Compaction:
    """The agreed entries up to position ``floor`` are forgotten, with their payloads:
    every node executed them, or they are past the retention horizon. ``txid`` and
    ``chain``: the entry at ``floor`` and the hash chain up to it (what a restarted node
    compares statuses and tail segments at ``floor`` with). ``ids_after``: the ids of
    forgotten entries after this position are kept (only the ids, with their positions),
    those up to it may go — a peer behind our floor may hold a transaction agreed there
    in its incoming queue, and seeding it from our image must tell whether the image
    holds it (compaction.py, "Seeding and the incoming queue")."""

    floor: int
    txid: str
    chain: str
    newest: int  # the newest timestamp of every entry forgotten so far
    ids_after: int = 0


@dataclass(frozen=True, slots=True)
class Relayed:
    """A peer's latest direct status passed on to a peer that does not hear it, with the
    payloads of its queue that we hold (relaying.py)."""

    status: Status
    payloads: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Post:
    """A status for ``to``, and what goes with it (relaying.py): the payloads of our own
    transactions in it (``push``), statuses ``to`` does not hear (``relayed``), and the
    peers we do not hear directly (``silent``)."""

    to: str
    status: Status
    push: tuple[str, ...] = ()
    relayed: tuple[Relayed, ...] = ()
    silent: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Tail:
    to: str
    segment: TailSegment


@dataclass(frozen=True, slots=True)
class Acquire:
    """Fetch the payload of ``tx``; ``sources`` hold it, in order of preference (origin
    first, then peers that posted it or sent it in a tail segment)."""

    tx: TxMeta
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Fetch:
    """Ask ``source`` for the payload of ``tx`` now (acquisition.py: one ``Acquire``
    becomes one or more asks; the answer comes back as ``acquired`` or
    ``fetch_failed``)."""

    tx: TxMeta
    source: str


@dataclass(frozen=True, slots=True)
class ExecutedAt:
    """What a peer's status says it executed: the agreed position and the repository
    fingerprint after it; ``ours``: our fingerprint at that position (None when we have
    not executed it, or no longer know it cheaply)."""

    pos: int
    fingerprint: str
    ours: str | None


@dataclass(frozen=True, slots=True)
class Inconsistency:
    """Something that can't happen between consistent nodes; it was not applied.

    kinds: ``diverged`` (a status whose merge base is not ours at its position),
    ``tail-diverged`` (a tail segment that does not extend our synchronised queue),
    ``conflicting-transaction`` (one id, two different transactions),
    ``mode-mismatch`` (a peer posts with another mode than we have configured for it).
    Two are reports, not divergences: ``beyond-horizon`` (a peer behind our floor needs
    seeding) and ``lost-at-origin`` (an incoming transaction nobody holds any more was
    dropped: acquisition.py, ``lost_at_origin``).
    """

    peer: str
    kind: str
    detail: str


@dataclass(frozen=True)
class Ready:
    """The outcome of one step. Persist first, then act (see the module docstring)."""

    # -- persist, in one durable transaction --
    truncated: Truncation | None = None  # first: drop the synchronised entries after
    #                                      after_seq (they are upserted in incoming too)
    counter: int | None = None  # the timestamp counter, when it moved
    incoming: tuple[Incoming, ...] = ()  # incoming entries added or changed (upsert by txid)
    synchronised: tuple[TxMeta, ...] = ()  # appended to the synchronised queue, in order;
    #                                        they leave the incoming queue
    seq: int = 0  # the agreed length after this step: synchronised ends at this position
    split_point: int | None = None  # the current split point (last known good position)
    split_point_changed: bool = False  # persist split_point
    compacted: Compaction | None = None  # last: forget the agreed entries up to its floor
    # -- then (after a truncation, restore the workers to after_seq first) --
    acknowledge: tuple[str, ...] = ()  # client transactions now durable: answer the clients
    posts: tuple[Post, ...] = ()
    tails: tuple[Tail, ...] = ()
    acquire: tuple[Acquire, ...] = ()
    fetches: tuple[Fetch, ...] = ()  # the asks for payloads to start now
    activity: Activity | None = None  # when busy/idle mode changed
    split_suspected: frozenset[str] | None = None  # when the set of excluded peers changed
    inconsistencies: tuple[Inconsistency, ...] = ()
    # Peers behind our floor, when that set changed: we can't serve them any more by
    # replay (they need seeding from a peer's worker image) and no longer wait for them.
    beyond_horizon: frozenset[str] | None = None
    needs_seeding: bool | None = None  # when it changed: no peer can serve *us* any more
    next_round_at: int = 0  # call tick() at this time
    next_fetch_at: int | None = None  # and at this one (a payload ask to hedge)
    # peers whose repository fingerprint agrees with ours again, at these positions
    fingerprint_agrees: tuple[tuple[str, int], ...] = ()

    @property
    def must_persist(self) -> bool:
        return (self.counter is not None or bool(self.incoming) or bool(self.synchronised)
                or self.truncated is not None or self.split_point_changed
                or self.compacted is not None)


def check_time(now: object) -> None:
    check_position("now", now)


def check_position(what: str, value: object) -> None:
    """A time or a queue position: an integer >= 0 (else ValueError, naming ``what``)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} must be an integer >= 0, got {value!r}")
