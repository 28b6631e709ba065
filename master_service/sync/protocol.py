"""The TxLog sync protocol (docs/design/sync-protocol.md) as a pure state machine.

One ``SyncNode`` per master. Inputs are method calls — a client transaction (``submit``),
a message from a peer (``receive``), the clock (``tick``), a payload that arrived
(``acquired``), membership (``add_peer`` / ``remove_peer``) — each with the current time
as a value. Each call returns a frozen ``Ready``: what to persist, then what to send,
acknowledge, fetch and execute. Nothing here touches a socket, a clock, a file or a
random number; the driver does, and ``tests/sync_sim.py`` drives many nodes over a faulty
simulated network from one seed.

Theory of operation
===================

State per node (docs/design/sync-protocol.md#state-of-a-node): the *synchronised queue* (agreed,
replayed by the workers in order), the *incoming queue* sorted by (timestamp, txid), the *merge
base* (id of the last synchronised transaction; its position is ``seq``), and the
*timestamp counter*, a hybrid logical clock (``hlc.py``): it never goes backwards, moves
past every timestamp it sees, and a new local transaction gets a timestamp above it.

A round (docs/design/sync-protocol.md#a-round): POST ``Status(merge base, seq, counter, incoming
queue)`` to every peer; COLLECT what peers post (a node keeps statuses that arrive before
it posts its own); ADD the longest common prefix of the local queue and the queues
collected this round at the same merge base, limited to timestamps up to the least
collected counter (ours included); MERGE unknown transactions from every received queue
into the local queue in sorted place (we merge on receipt: the same thing, earlier).

The rule we add: **ADD only when this round collected a status at our merge base from
every peer we wait for** (every read-write and read-only peer, unless excluded by a
split, below). The specification lets a round complete with the last known counters of missing
nodes; it diverges in two ways (both are scenarios in tests/test_sync_simulator.py): (a) a "last
known counter" posted at another merge base promises nothing about the transactions between the two
bases — a lagger added a transaction at a position where its peers had already added an older one
it never saw; (b) even with counters taken at our merge base, once one node goes on without a
crashed peer (max peer lag), a second node that completes rounds with the first one's *counter*
instead of its *queue* adds the crashed peer's old transaction where the first node
already added a newer one. With the rule, a missing peer means empty rounds until it
posts again or is excluded, which is what the specification says happens anyway once the
remaining transactions pass its frozen counter.

Why ADD is safe
---------------
(1) *Two nodes that wait for each other agree.* Let A and B both ADD at merge base b, A
using B's status at b and B using A's. A node's incoming queue at a given merge base
only grows (transactions leave it only by being synchronised, which changes the base;
merged transactions are persisted before the next post, so this holds across restarts),
and every status a node posts at b precedes its ADD at b. So B's status that A used is a
subset of B's queue when B added, and vice versa. A's addition L_A is a prefix of A's
sorted queue and of B's status; B's addition L_B a prefix of B's queue and of A's status.
If they first differed at position k, with L_A[k] < L_B[k], then L_A[k] is in B's status,
hence in B's queue, which is sorted with prefix L_B[:k+1] — it would have to sit at
position k, where L_B[k] is. Symmetrically for L_B[k] < L_A[k]. So one is a prefix of
the other: the additions agree, whatever other messages each round saw, and by induction
on merge bases so do the synchronised queues.

(2) *The counter bounds what can still appear.* A posted counter c is a promise: the
sender never originates a transaction with a timestamp <= c afterwards (new timestamps
are above the counter; the counter never goes back, also not across restarts because it
is persisted before it is posted), and every transaction it originated with a timestamp
<= c was in that status (own transactions are always acquired, so always posted) or
already synchronised. When every originator's status at b is in the round, any
transaction z that sorts before the end of L is below every collected counter, so z was
in its originator's status and — L being a common prefix of sorted queues — z is in L.
So L is the first |L| transactions, in (timestamp, txid) order, of *all transactions that
will ever exist* minus the synchronised ones: every synchronised queue is a prefix of
one sequence, all transactions sorted, and timestamps never decrease along it. The
simulator checks exactly this after every event.

(3) *Acquired transactions only* (docs/design/sync-protocol.md#why-add-is-safe): a status lists
only transactions whose payload its sender holds, and L stops at the first local transaction whose
payload we lack; so everything added was acquired by every node in the round (a read-only master
that posted it has acknowledged it) and can be executed.

Where safety ends: the split
----------------------------
When no progress was made for ``max_peer_lag`` while there is work, the waited-for peers
not heard from for that long are *excluded* and reported in ``split_suspected``; the
remaining nodes go on without them (docs/design/sync-protocol.md#maxpeerlag-and-the-split) and ADD
no longer waits for their status or counter, nor for the payloads of their transactions that we
heard of but could not fetch: ADD passes over those (statuses list acquired transactions only, so
the argument of (1) holds for queues without them; without it a side that heard of one write
of the other side before the cut stops for the whole split). (1) still holds between
nodes that wait for each other, and a node that excludes nobody agrees with every node
it waits for, even one that excluded it (the case analysis of (1) with the counters of
(2)). Two nodes can therefore only diverge when one excludes the other and the other
excludes somebody: the split brain (a partition longer than max peer lag;
docs/design/sync-protocol.md#maxpeerlag-and-the-split). An excluded peer is waited for again as
soon as it posts a merge base consistent with ours. A status whose merge base is not ours at its
position, or a tail segment that does not extend our queue, is reported in ``inconsistencies`` and
never applied; what happens next is the split recovery strategy.

Split recovery
--------------
``SplitRecovery`` (docs/design/sync-protocol.md#split-recovery): ``NONE`` reports divergence and
never repairs it; ``SIMPLE`` and ``SMART`` repair it as follows.

*The split point.* When a node that excludes nobody starts excluding peers, it records
``split_point = len(synchronised)``: its last known good state. Its *good prefix* is
``synchronised[:split_point]`` while it has a split point, its whole queue otherwise.
Claim: **the good prefixes of any two nodes are consistent** (one is a prefix of the
other). Everything in a good prefix was added by an ADD of a node that excluded nobody
— which agrees with every node it waits for, so with everybody (paragraph above) — or
while it excluded peers that all came back with merge bases consistent with it, or came
in a tail segment from another good prefix (below: a split node hands out entries past
its split point only to a node of its side, which takes a split point no later than the
sender's with them, so they are not in its good prefix either); a truncation only
shortens a queue to its good prefix.
The simulator checks the claim on every split point change and truncation. The split
point is persisted (``Ready.split_point`` with ``split_point_changed``; ``restore``
takes it back), and the driver takes its backup of the workers' state there. It is
cleared when the node truncates, or when its excluded set becomes empty again (every
excluded peer came back with a merge base consistent with ours — a long crash, or a
partition during which nothing diverged). Muted masters never add, so never split.

*Rejoin* (only with a split point, under SIMPLE or SMART), handled first in its step,
before any tail segment is sent, on a status from

- a peer we exclude (any relation, diverged included);
- a peer whose merge base diverged from ours although we do not exclude it (it went on
  without us): it is excluded now, since we can never ADD with it;
- after a restart with a split point: any status. The excluded set is not persisted, so
  a restarted split node cannot vote; under SMART too it truncates (waiting for
  "consistent" peers instead would end its split on statuses of peers that still exclude
  it, which then diverge from it);
- and on a tail segment that diverges from our queue (see *diverged tails* below).

What the node does:

- ``SIMPLE``: it *truncates*: ``synchronised[split_point:]`` leave the synchronised
  queue and go back into the incoming queue in sorted place (acquired if we hold the
  payload, else fetched again from its origin and the peers), the split point is
  cleared, the excluded set is emptied (we wait for every peer again), and it posts its
  status at once. Every split node does the same at its rejoin, so every post-split
  decision is undone and re-negotiated.
- ``SMART``: majority vote. With ``n`` = 1 + the configured non-muted peers and
  ``side`` = n - the excluded non-muted peers, the node *keeps* its state if
  ``2 * side > n``, or if ``2 * side == n`` and the smallest node id of all n (ourselves
  included) is on our side, i.e. not excluded (deterministic tie-break: of two equal
  halves the one holding the smallest id wins). Otherwise it truncates as in SIMPLE. A
  keeping node stays split: the rejoining peer stays excluded while its statuses are
  diverged (or ahead of us), and is waited for again when it posts a consistent merge
  base (after it truncated it is a lagger of ours); when nobody is excluded any more the
  split point is cleared (recovered) and its tail segments carry everything again. The
  vote is taken again on every such status, so a node whose excluded set grew truncates
  then. The vote is local — each node counts its own excluded set — so two nodes with
  different views of the split can both keep and wait for each other forever; hence: if
  a peer is still diverged (or ahead) ``max_peer_lag`` after the first such vote, the
  node with the larger id of the two truncates.
  And the vote never keeps a post-split entry that *contradicts another node's good
  prefix*: every status of a split node carries its good prefix (``Status.split_point``
  and ``split_chain``; a node that is not split posts none, its whole queue is good), and
  a rejoining peer whose good prefix differs from our queue past our split point (or a
  diverged tail segment that differs inside the sender's good prefix) makes us truncate
  whatever the vote. Good prefixes being consistent, such a difference always lies past
  our split point, and the peer cannot go back before it; without this rule the two
  wait for each other for ever. Example: a node that ended its split when an excluded
  peer came back behind it holds the entries it agreed during the split in its good
  prefix; a peer that later split from it at an earlier position and won the vote would
  otherwise wait for it for ever.

*Tail segments while split*: a node that takes post-split entries joins the sender's
side of the split. To a peer it excludes or counts as rejoining, or to a muted one, a
split node (SIMPLE or SMART) hands out nothing past its split point: it may take those
entries back (SIMPLE, or SMART when the vote goes against it), and even a node that
would keep now may lose a later vote after its excluded set grew. To a peer of its own
side (neither excluded nor rejoining; read-write or read-only) it sends everything, and
every tail segment of a split node carries its ``split_point`` and whom it went on
without (``excluded``: excluded and rejoining peers). The receiver appends entries past
the sender's split point only if it is split itself (it has a split point and excludes
somebody, not the sender, and is not restored-and-rejoining); it then takes ``min(its
split point, its queue length, the sender's split point)`` as split point (persisted
like any split point) and adds the sender's excluded peers to its own. Otherwise it
appends only the entries up to the sender's split point: a node that waits for everybody
— one that truncated at its rejoin, or has not noticed the split yet — re-negotiates
instead of taking back post-split decisions (otherwise SIMPLE nodes of one side hand a
truncated peer its old post-split entries back, over and over); one that
has not noticed the split yet joins once it excludes the missing peers itself (after
``max_peer_lag``). So the receiver treats those entries exactly as the sender does: its
good prefix stops no later than the sender's; at its rejoin it truncates (SIMPLE) or
votes with (at least) the sender's view of the split (SMART: ``side = n - excluded``
counts the inherited exclusions; the deadlock breaker and re-votes apply as for any
split node); after a restart it holds the persisted split point and truncates at its
first rejoin (the excluded set is not persisted). Without it a node of the larger side
that lagged one entry behind a peer at the split (the peer added it with the node's
status from before the node excluded anyone) would get no tail past the peer's split
point: the two would never wait at one merge base again and the larger side would stop
for the whole split. A muted master never splits, so it still gets nothing past a split
point until the split heals. A segment without split fields (an older master) never
carries entries past the sender's split point.

*Diverged tails.* A node without a split point that receives a diverged status sends
the peer its entries up to the peer's position (at most ``max_tail``): the peer cannot
append them (its queue differs somewhere in them, since the chains differ at that
position) and so learns that it diverged even when its queue is longer than ours — a
status ahead of us tells us nothing about consistency. Those entries are all in our
good prefix.

*Why it converges and loses nothing.* A truncating node goes back to its good prefix,
consistent with every good prefix, and with an empty excluded set it ADDs only with a
fresh status at its merge base from every peer, so (1) holds again between it and
everybody; a node further along gives it tail segments, which it appends only if they
extend its queue. A truncated entry is never lost: it goes back into the incoming queue
in the same durable transaction (the Ready contract below), so an acknowledged
transaction is always in the incoming or synchronised queue, and it is re-negotiated
like any other. Incoming queues at a merge base still only grow (a truncation returns
to an earlier merge base with every entry synchronised since then back in the incoming
queue), which is what (1) needs. Transactions keep their ids and timestamps when
re-negotiated: they are added after transactions with larger timestamps that the other
side agreed during the split, so **after a split recovery the synchronised queue is no
longer sorted by timestamp** — (2)'s "timestamps never decrease" holds only between
split recoveries; agreement and "no acknowledged transaction lost" are what hold
throughout. That every partition ends this way is not proven here; the simulator
(tests/sync_sim.py) checks convergence to one queue holding every acknowledged
transaction after partitions of every shape among 3 and 5 masters, with crashes,
restarts, loss and reordering.

Laggers (docs/design/sync-protocol.md#laggers): a status at a merge base inside our synchronised
queue gets a ``TailSegment`` with what follows it; the lagger appends it only if it continues its
own queue (overlap identical), else reports. A muted master never ADDs: it follows from
tail segments like a lagger, and the others neither wait for it nor use its counter.
``Status.seq`` (the position of the merge base) tells a lagger from a diverged node.

Idle and busy (docs/design/sync-protocol.md#idle-and-busy): a busy round ends as soon as every
waited-for peer has posted a new status at our merge base (back-to-back rounds), else at its
deadline. The first round with nothing unsynchronised switches to idle (rounds every
``idle_interval``); a non-empty status from a peer or a client transaction switches back
to busy and starts a round at once.

Compaction (bounded state)
--------------------------
A peered deployment runs for months: the synchronised queue cannot grow for ever. Each
node forgets a prefix of it, entries and payloads, up to its *floor*; positions stay
absolute (position 1 is the first transaction ever agreed), the node keeps the id of the
entry at the floor and the hash chain up to it, so statuses and tail segments at or after
the floor are compared exactly as before. Inputs: ``executed(pos)`` — this data centre
executed the queue up to ``pos`` (durably) — and the ``Retention`` (LogMaxSize,
LogMaxDepth). Each status carries the sender's executed position and floor.

*What is forgotten.* Up to the least *stable* position of all nodes: for a peer, the
executed position of its newest status, but not past its good prefix (its split point,
while split: a split node may truncate to it and need what follows again; good prefixes
only shrink to another node's split point, whose own stable position was no further);
for ourselves, what we executed. A peer not heard from since we started forgets nothing
on its account. Beyond that, the *horizon*: entries older than LogMaxSize positions or
whose timestamp is older than LogMaxDepth are forgotten even if a peer has not executed
them (docs/design/cluster-basics.md#the-logs-limits). Never past what we
executed ourselves (our workers still need the payloads) nor, under SIMPLE or SMART,
past our split point (a truncation puts the entries after it back into the incoming
queue); under NONE the split point repairs nothing and follows the floor. Read-only
masters execute nothing (docs/design/sync-protocol.md#master-modes), so entries are then kept up to
the horizon. A truncation caps our executed position at its point until the driver reports the
rollback done (``rolled_back``): an execution under way may still report its old end.

*Why nothing needed is lost.* A consistent peer at or past our floor synchronised every
entry we forgot, so none of them is in its queue; one behind our floor needs what we no
longer hold: its status is ``_FORGOTTEN`` to us. Then we report it (``beyond-horizon``,
``Ready.beyond_horizon``), do not merge its queue (it may hold transactions agreed since
its position: merged, they would be agreed twice) and no longer wait for it — it can't
take part before it is seeded from a worker image, and it can't ADD with anybody: no
peer posts at its merge base again. A late status (lower counter than the newest, or the
same counter at a lower position) is not such a peer. A status *ahead* of us is not
verified (a diverged node under NONE can look ahead): from it we skip transactions not
newer than every entry we forgot (``floor_newest``); they are merged once the sender's
status can be verified, or from another peer. The node itself learns that it *needs
seeding* (``Ready.needs_seeding``) when every peer has posted and no peer ahead of it
holds its position (every floor is past it), or a payload it lacks was forgotten by a
peer and no peer surely holds it (floor <= position < executed).

The simulator models execution (with delays; read-only masters execute nothing),
compaction (payloads leave with the entries), restarts from a floor, and seeding (a
node restarted from a peer's image: floor = seq = the peer's executed position); it
checks that nothing is forgotten that a node still needs when there is no horizon, that
after settling every node forgot everything (all executed it), and convergence with a
horizon of 2 to 20 entries, where laggers are seeded.

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

import bisect
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

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

__all__ = [
    "Acquire",
    "Activity",
    "Compaction",
    "Incoming",
    "Inconsistency",
    "PersistentState",
    "Post",
    "Ready",
    "Refused",
    "Retention",
    "SplitRecovery",
    "SyncNode",
    "Tail",
    "Timing",
    "Truncation",
    "UnknownPeer",
]


class Refused(Exception):
    """A client transaction this master does not take (read-only, muted, duplicate id)."""


class UnknownPeer(InvalidMessage):
    """A message from a node that is not a configured peer
    (docs/design/sync-protocol.md#state-of-a-node)."""


class SplitRecovery(enum.Enum):
    """What a node does when a split ends (module docstring, "Split recovery")."""

    NONE = "None"  # report divergence, never repair it
    SIMPLE = "Simple"  # every split node goes back to its split point and re-negotiates
    SMART = "Smart"  # the majority side keeps its state, the others go back

    @classmethod
    def parse(cls, value: str) -> SplitRecovery:
        """The configuration value, case-insensitive (None, Simple, Smart:
        docs/design/sync-protocol.md#split-recovery)."""
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
    idle_interval: int = 5_000  # 1 s to 1 min: docs/design/sync-protocol.md#idle-and-busy
    max_peer_lag: int | None = None  # no progress for this long -> continue without missing
    acquire_retry: int = 1_000  # ask again for a payload that did not arrive
    max_tail: int = 1_000  # entries per tail segment
    # A peer's counter or timestamp further ahead of our clock than this is refused: the
    # clock follows every timestamp it sees, so one forged or badly skewed message would
    # move every master's clock for good.
    max_drift: int = 86_400_000

    def __post_init__(self) -> None:
        for name in ("round_timeout", "idle_interval", "acquire_retry", "max_tail",
                     "max_drift"):
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
    compares statuses and tail segments at ``floor`` with)."""

    floor: int
    txid: str
    chain: str
    newest: int  # the newest timestamp of every entry forgotten so far


@dataclass(frozen=True, slots=True)
class Post:
    to: str
    status: Status


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
class Inconsistency:
    """Something that can't happen between consistent nodes; it was not applied.

    kinds: ``diverged`` (a status whose merge base is not ours at its position),
    ``tail-diverged`` (a tail segment that does not extend our synchronised queue),
    ``conflicting-transaction`` (one id, two different transactions),
    ``mode-mismatch`` (a peer posts with another mode than we have configured for it).
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
    split_point: int | None = None  # the current split point (last known good position)
    split_point_changed: bool = False  # persist split_point
    compacted: Compaction | None = None  # last: forget the agreed entries up to its floor
    # -- then (after a truncation, restore the workers to after_seq first) --
    acknowledge: tuple[str, ...] = ()  # client transactions now durable: answer the clients
    posts: tuple[Post, ...] = ()
    tails: tuple[Tail, ...] = ()
    acquire: tuple[Acquire, ...] = ()
    activity: Activity | None = None  # when busy/idle mode changed
    split_suspected: frozenset[str] | None = None  # when the set of excluded peers changed
    inconsistencies: tuple[Inconsistency, ...] = ()
    # Peers behind our floor, when that set changed: we can't serve them any more by
    # replay (they need seeding from a peer's worker image) and no longer wait for them.
    beyond_horizon: frozenset[str] | None = None
    needs_seeding: bool | None = None  # when it changed: no peer can serve *us* any more
    next_round_at: int = 0  # call tick() at this time

    @property
    def must_persist(self) -> bool:
        return (self.counter is not None or bool(self.incoming) or bool(self.synchronised)
                or self.truncated is not None or self.split_point_changed
                or self.compacted is not None)


class _Entry:
    """An incoming transaction, or a synchronised one whose payload we still lack."""

    __slots__ = ("acquired", "requested_at", "sources", "tx")

    def __init__(self, tx: TxMeta, acquired: bool, sources: list[str]) -> None:
        self.tx = tx
        self.acquired = acquired
        self.sources = sources
        self.requested_at: int | None = None


class _Peer:
    __slots__ = ("fresh", "heard_at", "latest", "mode")

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.latest: Status | None = None  # the newest status (highest counter)
        self.fresh = False  # a new status arrived since our last round ended
        self.heard_at: int | None = None  # when we last received anything from it


@dataclass
class _Out:
    incoming: dict[str, None] = field(default_factory=dict)
    synchronised: list[TxMeta] = field(default_factory=list)
    acknowledge: list[str] = field(default_factory=list)
    posts: list[Post] = field(default_factory=list)
    tails: list[Tail] = field(default_factory=list)
    acquire: list[Acquire] = field(default_factory=list)
    activity: Activity | None = None
    split_changed: bool = False
    split_point_changed: bool = False
    truncated: Truncation | None = None
    compacted: Compaction | None = None
    beyond_changed: bool = False
    needs_seeding: bool | None = None
    inconsistencies: list[Inconsistency] = field(default_factory=list)


_SAME, _BEHIND, _AHEAD, _DIVERGED = "same", "behind", "ahead", "diverged"
_FORGOTTEN = "forgotten"  # a position before our floor: we can't compare nor serve it


def _check_time(now: object) -> None:
    if not isinstance(now, int) or isinstance(now, bool) or now < 0:
        raise ValueError(f"now must be an integer >= 0, got {now!r}")


class SyncNode:
    """One master's side of the TxLog sync protocol (module docstring)."""

    # Post a status at once on a client transaction (when busy), on a payload acquired and
    # on a status from a node ahead of us, besides once per round: a commit then costs
    # about one round trip plus the payload fetch instead of waiting for round ends
    # (bench/bench_sync.py). Statuses are cumulative snapshots, so posting more often
    # changes no safety argument; tests switch it off to replay the plain round schedule.
    EAGER_POSTS = True

    def __init__(self, node_id: str, *, now: int,
                 peers: Mapping[str, Mode] | Iterable[str] = (),
                 mode: Mode = Mode.READ_WRITE, timing: Timing | None = None,
                 state: PersistentState | None = None,
                 missing_payloads: Iterable[str] = (),
                 split_recovery: SplitRecovery = SplitRecovery.NONE,
                 retention: Retention | None = None, executed: int = 0) -> None:
        if not isinstance(node_id, str) or not node_id:
            raise ValueError("node_id must be a non-empty string")
        if not isinstance(mode, Mode):
            raise ValueError(f"mode must be a Mode, got {mode!r}")
        if not isinstance(split_recovery, SplitRecovery):
            raise ValueError(f"split_recovery must be a SplitRecovery, got {split_recovery!r}")
        _check_time(now)
        self._id = node_id
        self._mode = mode
        self._recovery = split_recovery
        self._timing = timing or Timing()
        state = state or PersistentState()
        self._clock = HybridLogicalClock(state.counter)
        self._persisted_counter = state.counter
        # Positions are absolute (1 is the first agreed transaction ever); the entries up
        # to _floor are forgotten (module docstring, "Compaction"), _synced holds the rest.
        self._floor = state.floor
        self._floor_txid = state.floor_txid
        self._forgotten_ts = state.floor_newest
        self._synced: list[TxMeta] = list(state.synchronised)
        # txid -> 0-based absolute position (the entry at position pos + 1)
        self._synced_pos = {tx.txid: self._floor + i for i, tx in enumerate(self._synced)}
        # _chain[k]: hash chain of the first _floor + k synchronised entries
        self._chain = [state.floor_chain]
        for tx in self._synced:
            self._chain.append(chain_hash(self._chain[-1], tx.txid))
        if not isinstance(retention, Retention | None):
            raise ValueError(f"retention must be a Retention, got {retention!r}")
        self._retention = retention or Retention()
        if not isinstance(executed, int) or isinstance(executed, bool) or executed < 0:
            raise ValueError(f"executed must be an integer >= 0, got {executed!r}")
        # what this data centre executed (an input: ``executed``); capped at a truncation
        # point until the driver reports the rollback done (``rolled_back``)
        self._executed = executed
        self._executed_cap: int | None = None
        self._beyond: set[str] = set()  # peers whose statuses are behind our floor
        self._seeding = False  # needs_seeding, as last reported
        self._incoming: dict[str, _Entry] = {}
        self._order: list[tuple[int, str]] = []  # keys of _incoming, sorted
        for item in state.incoming:
            self._incoming[item.tx.txid] = _Entry(item.tx, item.acquired,
                                                  self._sources(item.tx.origin))
            self._order.append(item.tx.key)
        self._peers: dict[str, _Peer] = {}
        items = peers.items() if isinstance(peers, Mapping) else ((p, Mode.READ_WRITE)
                                                                  for p in peers)
        for peer, peer_mode in items:
            self._set_peer(peer, peer_mode)
        # synchronised transactions whose payload we still have to fetch (laggers)
        self._missing: dict[str, _Entry] = {}
        for txid in missing_payloads:
            pos = self._synced_pos.get(txid)
            if pos is None:
                raise ValueError(f"missing payload {txid!r} is not synchronised")
            tx = self._synced[pos - self._floor]
            self._missing[txid] = _Entry(tx, False, self._sources(tx.origin, *sorted(self._peers)))
        self._excluded: set[str] = set()
        # the last known good position while split (module docstring, "Split recovery")
        self._split_point: int | None = state.split_point
        self._apart_since: dict[str, int] = {}  # SMART: excluded peer -> diverged since
        # restored while split: we forgot whom we excluded, so every peer is rejoining
        self._rejoining: set[str] = set() if self._split_point is None else {
            p for p, s in self._peers.items() if s.mode is not Mode.MUTED}
        self._reported: set[tuple[str, str, str]] = set()
        self._stalled_since: int | None = None
        self._activity = Activity.BUSY  # a (re)started node catches up first
        self._deadline = now  # the first tick posts
        self._out = _Out()

    @classmethod
    def restore(cls, node_id: str, persisted: PersistentState, *, now: int,
                **kwargs) -> SyncNode:
        """Resume after a crash from what the Readies asked to persist."""
        return cls(node_id, now=now, state=persisted, **kwargs)

    # ------------------------------------------------------------------ views

    @property
    def node_id(self) -> str:
        return self._id

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def merge_base(self) -> str | None:
        return self._synced[-1].txid if self._synced else self._floor_txid

    @property
    def seq(self) -> int:
        return self._floor + len(self._synced)

    @property
    def floor(self) -> int:
        """The agreed entries up to this position are forgotten ("Compaction")."""
        return self._floor

    @property
    def executed_position(self) -> int:
        """The position up to which this data centre executed, as posted to the peers."""
        return self._posted_executed()

    @property
    def timing(self) -> Timing:
        return self._timing

    @property
    def retention(self) -> Retention:
        return self._retention

    @property
    def beyond_horizon(self) -> frozenset[str]:
        """Peers behind our floor: they need seeding, we do not wait for them."""
        return frozenset(self._beyond)

    @property
    def needs_seeding(self) -> bool:
        """Do we lag behind the floor of every peer (no one can serve us by replay)?"""
        return self._seeding

    @property
    def counter(self) -> int:
        return self._clock.counter

    @property
    def synchronised(self) -> tuple[TxMeta, ...]:
        """The synchronised entries after the floor (positions floor + 1 ..)."""
        return tuple(self._synced)

    @property
    def incoming(self) -> tuple[Incoming, ...]:
        return tuple(Incoming(self._incoming[t].tx, self._incoming[t].acquired)
                     for _, t in self._order)

    @property
    def activity(self) -> Activity:
        return self._activity

    @property
    def split_suspected(self) -> frozenset[str]:
        return frozenset(self._excluded)

    @property
    def split_point(self) -> int | None:
        return self._split_point

    @property
    def split_recovery(self) -> SplitRecovery:
        return self._recovery

    @property
    def next_round_at(self) -> int:
        return self._deadline

    @property
    def peers(self) -> dict[str, Mode]:
        return {p: s.mode for p, s in self._peers.items()}

    @property
    def missing_payloads(self) -> frozenset[str]:
        return frozenset(self._missing)

    def transaction(self, txid: str) -> TxMeta | None:
        """The metadata of ``txid`` if it is incoming or synchronised here."""
        entry = self._incoming.get(txid)
        if entry is not None:
            return entry.tx
        pos = self._synced_pos.get(txid)
        return None if pos is None else self._synced[pos - self._floor]

    def wants_payload(self, txid: str) -> bool:
        """Is ``txid`` incoming or synchronised here without its payload? (O(1), for a
        driver that checks every pushed payload.)"""
        entry = self._incoming.get(txid)
        return (entry is not None and not entry.acquired) or txid in self._missing

    def holds_payload(self, txid: str) -> bool:
        """Is ``txid`` incoming here with its payload acquired?"""
        entry = self._incoming.get(txid)
        return entry is not None and entry.acquired

    def persistent_state(self) -> PersistentState:
        """What the Readies so far asked to persist (for checks and tests)."""
        return PersistentState(tuple(self._synced), self.incoming, self._persisted_counter,
                               self._split_point, self._floor, self._floor_txid,
                               self._chain[0], self._forgotten_ts)

    # ------------------------------------------------------------------ inputs

    def submit(self, txid: str, *, size: int, digest: str, now: int) -> Ready:
        """A client transaction accepted at this master; acknowledge it once persisted."""
        _check_time(now)
        if self._mode is not Mode.READ_WRITE:
            raise Refused(f"master {self._id} is {self._mode.value}: it takes transactions "
                          "only from its peers")
        if txid in self._incoming or txid in self._synced_pos:
            raise Refused(f"transaction id {txid!r} is already known")
        tx = TxMeta(txid, max(now, self._clock.counter + 1), self._id, size, digest)
        self._clock.observe(tx.timestamp)  # == next_timestamp(now), after validation
        self._insert(_Entry(tx, True, []))
        self._out.acknowledge.append(txid)
        if self._activity is Activity.IDLE:
            self._complete_round(now)  # busy on an incoming transaction: post it now
        elif self.EAGER_POSTS:
            self._post(now)  # post it now, without waiting for the round to end
        return self._finish(now)

    def receive(self, message: Message, now: int) -> Ready:
        """A status or tail segment from a peer (already validated at construction)."""
        _check_time(now)
        if message.sender == self._id:
            raise InvalidMessage(f"a message from ourselves ({self._id})")
        peer = self._peers.get(message.sender)
        if peer is None:
            raise UnknownPeer(f"{message.sender!r} is not a configured peer of {self._id}")
        newest = message.counter if isinstance(message, Status) else max(
            (t.timestamp for t in getattr(message, "entries", ())), default=0)
        if newest > max(now, self._clock.counter) + self._timing.max_drift:
            raise InvalidMessage(f"timestamp {newest} from {message.sender} is more than "
                                 f"{self._timing.max_drift} ahead of this master's clock "
                                 f"({now}): a skewed clock or a forged message, refused")
        peer.heard_at = now
        if isinstance(message, Status):
            self._on_status(peer, message, now)
        elif isinstance(message, TailSegment):
            self._on_tail(message, now)
        else:
            raise InvalidMessage(f"not a protocol message: {type(message).__name__}")
        return self._finish(now)

    def tick(self, now: int) -> Ready:
        """The clock: ends the round at its deadline, retries payload fetches."""
        _check_time(now)
        if now >= self._deadline:
            self._complete_round(now)
        else:
            self._retry_acquires(now)
        return self._finish(now)

    def acquired(self, txid: str, now: int) -> Ready:
        """The payload of ``txid`` is stored durably by the driver."""
        _check_time(now)
        entry = self._incoming.get(txid)
        if entry is not None and not entry.acquired:
            entry.acquired = True
            self._out.incoming[txid] = None
            # Now it may be posted (only acquired transactions are:
            # docs/design/sync-protocol.md#transaction-exchange): post at once,
            # so that the origin can ADD it without waiting for our round to end.
            if self.EAGER_POSTS:
                self._post(now)
        self._missing.pop(txid, None)
        return self._finish(now)

    def add_peer(self, peer: str, mode: Mode = Mode.READ_WRITE, *, now: int) -> Ready:
        """Configure a peer (or change its mode). We wait for a new read-write or read-only
        peer's status before adding anything: we hold no counter of it yet."""
        _check_time(now)
        self._set_peer(peer, mode)
        return self._finish(now)

    def executed(self, pos: int, now: int) -> Ready:
        """This data centre executed the agreed queue up to ``pos`` (durably). Posted to the
        peers, so that everybody forgets what everybody executed ("Compaction"). After a
        truncation, reports are capped at its point until ``rolled_back``: an execution
        that was under way when the queue was truncated may still report its end."""
        _check_time(now)
        if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
            raise ValueError(f"executed position must be an integer >= 0, got {pos!r}")
        self._executed = pos if self._executed_cap is None else min(pos, self._executed_cap)
        return self._finish(now)

    def rolled_back(self, pos: int, now: int) -> Ready:
        """The data centre went back to the state at ``pos`` after a truncation (split
        recovery): executed reports are believed again."""
        _check_time(now)
        if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
            raise ValueError(f"rolled back position must be an integer >= 0, got {pos!r}")
        self._executed_cap = None
        self._executed = pos
        return self._finish(now)

    def set_max_peer_lag(self, lag: int | None, *, now: int) -> Ready:
        """MaxPeerLag changed at runtime (None: wait for missing peers indefinitely)."""
        _check_time(now)
        self._timing = replace(self._timing, max_peer_lag=lag)  # validated by Timing
        return self._finish(now)

    def set_retention(self, retention: Retention, *, now: int) -> Ready:
        """LogMaxSize / LogMaxDepth changed at runtime."""
        _check_time(now)
        if not isinstance(retention, Retention):
            raise ValueError(f"retention must be a Retention, got {retention!r}")
        self._retention = retention
        return self._finish(now)

    def remove_peer(self, peer: str, *, now: int) -> Ready:
        """Stop synchronising with a peer. Safe only if it originates no more transactions
        (it is gone, or muted): we stop waiting for its counter."""
        _check_time(now)
        if self._peers.pop(peer, None) is None:
            raise ValueError(f"{peer!r} is not a peer of {self._id}")
        if peer in self._rejoining:
            self._rejoining.discard(peer)
            self._split_maybe_over()
        if peer in self._excluded:
            self._excluded.discard(peer)
            self._out.split_changed = True
            self._split_maybe_over()
        return self._finish(now)

    # ------------------------------------------------------------------ steps

    def _set_peer(self, peer: str, mode: Mode) -> None:
        if not isinstance(peer, str) or not peer or peer == self._id:
            raise ValueError(f"a peer id is a non-empty string other than ours, got {peer!r}")
        if not isinstance(mode, Mode):
            raise ValueError(f"mode must be a Mode, got {mode!r}")
        state = self._peers.get(peer)
        if state is None:
            self._peers[peer] = _Peer(mode)
        else:
            state.mode = mode

    def _on_status(self, peer: _Peer, st: Status, now: int) -> None:
        if st.mode is not peer.mode:
            self._report(st.sender, "mode-mismatch",
                         f"posts as {st.mode.value}, configured {peer.mode.value}")
        relation = self._relation(st.seq, st.merge_base, st.chain)
        if relation == _FORGOTTEN:
            # Behind our floor: we can neither tell whether it is consistent with us nor
            # send it what follows, and its incoming queue may hold transactions agreed
            # (and forgotten) since its position — merged, they would be agreed twice. It
            # needs seeding from a worker image; meanwhile we do not wait for it. Unless
            # the status is an old one that the network delivered late (a lower counter
            # than the newest we hold — counters never go back — or the same counter at a
            # lower position: statuses posted within one millisecond).
            latest = peer.latest
            if latest is not None and (st.counter, st.seq) < (latest.counter, latest.seq):
                return
            if st.sender not in self._beyond:
                self._beyond.add(st.sender)
                self._out.beyond_changed = True
            self._report(st.sender, "beyond-horizon",
                         f"its agreed position {st.seq} is before our floor {self._floor}: "
                         "it can no longer be served by replay and needs seeding from a "
                         "peer's worker image")
            return
        if st.sender in self._beyond:
            self._beyond.discard(st.sender)  # seeded: at or past our floor again
            self._out.beyond_changed = True
        if self._split_point is not None and self._recovery is not SplitRecovery.NONE and (
                st.sender in self._excluded
                or (relation == _DIVERGED and peer.mode is not Mode.MUTED)
                or st.sender in self._rejoining):
            self._rejoin(st.sender, relation, now,  # before anything is sent
                         self._contradicts(*self._good_prefix(st)))
            relation = self._relation(st.seq, st.merge_base, st.chain)
        if st.sender in self._rejoining and relation in (_SAME, _BEHIND):
            self._rejoining.discard(st.sender)  # restored while split: it is consistent
            self._split_maybe_over()
        if relation == _DIVERGED:
            self._report(st.sender, "diverged",
                         f"merge base {st.merge_base} at seq {st.seq} (chain {st.chain[:8]}), "
                         f"ours there is {self._txid_at(st.seq)} "
                         f"(chain {self._chain_at(st.seq)[:8]})")
            # Under None too: the peer cannot append it, but reports the divergence, so
            # that every master of both sides shows it (a master behind the other side
            # sees only a status ahead of it; tests/test_partitions.py, None).
            self._send_diverged(st.sender, st.seq)
            return
        self._clock.observe(st.counter)  # counter >= every timestamp in the queue
        self._merge(st.queue, st.sender, now, verified=relation != _AHEAD)
        if st.sender in self._excluded and relation != _AHEAD:
            self._apart_since.pop(st.sender, None)
            self._excluded.discard(st.sender)  # back, and consistent with us
            self._out.split_changed = True
            self._split_maybe_over()  # first: a recovered node's tail carries everything
        if relation == _BEHIND:
            self._send_tail(st.sender, st.seq)
        elif relation == _AHEAD and self.EAGER_POSTS and self._out.truncated is None:
            # We lag: tell the forerunner where we are now, rather than at the end of our
            # round, so that its tail segment comes at once.
            self._post(now)
        if peer.latest is None or st.counter >= peer.latest.counter:
            peer.latest = st
            peer.fresh = True
        self._check_seeding()
        if self._activity is Activity.IDLE:
            if st.queue:
                # Busy on the first non-empty status (docs/design/sync-protocol.md#idle-and-busy).
                self._complete_round(now)
        elif self._all_posted():
            self._complete_round(now)  # back-to-back rounds

    def _on_tail(self, seg: TailSegment, now: int) -> None:
        start = seg.after_seq
        if start > self.seq:
            return  # not next to our queue; our next status asks from where we are
        if start < self._floor:
            seg = self._from_floor(seg)
            if seg is None:
                return
            start = seg.after_seq
        # the sender's good prefix ends here (the whole segment when it is not split)
        good = start + len(seg.entries) if seg.split_point is None else seg.split_point
        if self._relation(start, seg.after, seg.after_chain) == _DIVERGED:
            self._report(seg.sender, "tail-diverged",
                         f"segment after {seg.after} at seq {start}, ours there is "
                         f"{self._txid_at(start)}")
            # the queues differ somewhere up to ``start``
            self._tail_diverged(seg.sender, now, start <= good)
            return
        overlap = min(len(seg.entries), self.seq - start)
        base = start - self._floor
        for i in range(overlap):
            if seg.entries[i] != self._synced[base + i]:
                self._report(seg.sender, "tail-diverged",
                             f"seq {start + i + 1} is {seg.entries[i].txid}, ours is "
                             f"{self._synced[base + i].txid}")
                self._tail_diverged(seg.sender, now, start + i + 1 <= good)
                return
        new = seg.entries[overlap:]
        for tx in new:
            entry = self._incoming.get(tx.txid)
            if tx.txid in self._synced_pos or (entry is not None and entry.tx != tx):
                self._report(seg.sender, "tail-diverged" if entry is None
                             else "conflicting-transaction",
                             f"{tx.txid} conflicts with what we hold")
                return
        new = self._join_senders_side(seg, new)
        if not new:
            return
        for tx in new:
            self._clock.observe(tx.timestamp)
            entry = self._incoming.pop(tx.txid, None)
            if entry is not None:
                self._order.remove(tx.key)
            self._append_synced(tx, entry, seg.sender, now)
        self._base_advanced(now, progressed=True)
        self._complete_round(now)  # a new merge base: post it

    def _complete_round(self, now: int) -> None:
        """End the current round (ADD), then start the next one (POST)."""
        self._check_stall(now)
        added = self._add(now) if self._mode is not Mode.MUTED else 0
        if added:
            self._base_advanced(now, progressed=True)
        elif not self._incoming:
            self._stalled_since = None
        elif self._stalled_since is None:
            self._stalled_since = now
        idle = not self._incoming and not self._missing and not any(
            p.fresh and p.latest is not None and p.latest.queue for p in self._peers.values())
        activity = Activity.IDLE if idle else Activity.BUSY
        if activity is not self._activity:
            self._activity = activity
            self._out.activity = activity
        for p in self._peers.values():
            p.fresh = False
        self._retry_acquires(now)
        self._post(now)
        self._deadline = now + (self._timing.idle_interval if idle
                                else self._timing.round_timeout)

    def _add(self, now: int) -> int:
        """ADD: the common prefix, up to the least counter, if every waited-for peer
        posted at our merge base this round (module docstring)."""
        if not self._order:
            return 0
        base, seq = self.merge_base, self.seq
        least = self._clock.counter
        collected = []
        for node in self._required():
            peer = self._peers[node]
            st = peer.latest
            if not peer.fresh or st.seq != seq or st.merge_base != base:
                return 0  # missing this round: an empty round
            least = min(least, st.counter)
            collected.append(st.queue)
        chosen: list[str] = []
        for ts, txid in self._order:
            if ts > least:
                break
            entry = self._incoming[txid]
            if not entry.acquired:
                if entry.tx.origin in self._excluded:
                    # A transaction of the other side of a split that we heard of but
                    # could not fetch: without skipping it our side stops for the whole
                    # split. Safe: statuses list
                    # acquired transactions only, so "(1) two nodes that wait for each
                    # other agree" holds for queues without such entries, and what we add
                    # past it is post-split, which split recovery settles.
                    continue
                break
            n = len(chosen)
            if any(len(q) <= n or q[n].txid != txid for q in collected):
                break
            chosen.append(txid)
        if chosen:
            taken = set(chosen)
            self._order = [k for k in self._order if k[1] not in taken]
            for txid in chosen:
                entry = self._incoming.pop(txid)
                self._append_synced(entry.tx, entry, self._id, now)
        return len(chosen)

    def _post(self, now: int) -> None:
        """POST our status (more than once per round is fine: statuses are cumulative
        snapshots, a peer keeps the newest, and ADD still needs a fresh one from every
        waited-for peer at our merge base; see "Why ADD is safe")."""
        if not self._peers:
            return
        counter = self._clock.tick(now)
        queue = tuple(self._incoming[t].tx for _, t in self._order if self._incoming[t].acquired)
        point = self._split_point if self._split() else None
        status = Status(self._id, self._mode, self.merge_base, self.seq, counter, queue,
                        self._chain[-1], point, "" if point is None else self._chain_at(point),
                        self._posted_executed(), self._floor)
        self._out.posts.extend(Post(p, status) for p in sorted(self._peers))

    # ------------------------------------------------------------------ helpers

    def _required(self) -> list[str]:
        """Peers we wait for: every read-write and read-only peer not excluded by a split."""
        return [p for p, s in self._peers.items()
                if s.mode is not Mode.MUTED and p not in self._excluded
                and p not in self._beyond]

    def _all_posted(self) -> bool:
        required = self._required()
        if not required:
            return False
        base, seq = self.merge_base, self.seq
        for node in required:
            peer = self._peers[node]
            if not peer.fresh or peer.latest.seq != seq or peer.latest.merge_base != base:
                return False
        return True

    def _relation(self, seq: int, base: str | None, chain: str) -> str:
        if seq > self.seq:
            return _AHEAD
        if seq < self._floor:
            return _FORGOTTEN
        if seq and (self._txid_at(seq) != base or self._chain_at(seq) != chain):
            return _DIVERGED
        return _SAME if seq == self.seq else _BEHIND

    def _txid_at(self, pos: int) -> str | None:
        """The id of the entry at position ``pos`` (floor <= pos <= seq; None at 0)."""
        if pos == self._floor:
            return self._floor_txid
        return self._synced[pos - self._floor - 1].txid

    def _chain_at(self, pos: int) -> str:
        """The hash chain of the first ``pos`` entries (floor <= pos <= seq)."""
        return self._chain[pos - self._floor]

    def _sources(self, *nodes: str) -> list[str]:
        out: list[str] = []
        for n in nodes:
            if n != self._id and n not in out:
                out.append(n)
        return out

    def _insert(self, entry: _Entry) -> None:
        self._incoming[entry.tx.txid] = entry
        bisect.insort(self._order, entry.tx.key)
        self._out.incoming[entry.tx.txid] = None

    def _merge(self, txs: tuple[TxMeta, ...], poster: str, now: int,
               verified: bool = True) -> None:
        """MERGE unknown transactions (one that conflicts with what we hold is reported).

        ``verified``: the status's merge base and chain are ours at its position, so its
        sender synchronised every entry we forgot and none of them is in its queue. A
        status ahead of us is not verified: it may come from a diverged node (a split
        under None) whose queue holds a transaction we synchronised and then forgot —
        merged, it would be agreed twice. From such a status
        we skip what is not newer than everything we forgot; it is merged when the
        sender's status can be verified (we caught up) or from another peer's."""
        for tx in txs:
            if not verified and self._floor and tx.timestamp <= self._forgotten_ts \
                    and tx.txid not in self._incoming:
                continue
            entry = self._incoming.get(tx.txid)
            if entry is not None:
                if entry.tx != tx:
                    self._report(poster, "conflicting-transaction", f"{tx.txid} differs")
                elif poster not in entry.sources and poster != self._id:
                    entry.sources.append(poster)
                continue
            pos = self._synced_pos.get(tx.txid)
            if pos is not None:
                if self._synced[pos - self._floor] != tx:
                    self._report(poster, "conflicting-transaction", f"{tx.txid} differs")
                continue
            self._clock.observe(tx.timestamp)
            entry = _Entry(tx, False, self._sources(tx.origin, poster))
            self._insert(entry)
            self._request(entry, now)

    def _append_synced(self, tx: TxMeta, entry: _Entry | None, source: str, now: int) -> None:
        self._synced_pos[tx.txid] = self.seq
        self._synced.append(tx)
        self._chain.append(chain_hash(self._chain[-1], tx.txid))
        self._out.synchronised.append(tx)
        if entry is None or not entry.acquired:
            missing = _Entry(tx, False, self._sources(source, tx.origin,
                                                      *(entry.sources if entry else ())))
            self._missing[tx.txid] = missing
            self._request(missing, now)

    def _base_advanced(self, now: int, progressed: bool) -> None:
        if progressed:
            self._stalled_since = now if self._incoming else None

    def _check_stall(self, now: int) -> None:
        """Spec, "Missing nodes": no progress for max_peer_lag -> go on without them."""
        lag = self._timing.max_peer_lag
        if lag is None or self._stalled_since is None or now - self._stalled_since < lag:
            return
        missing = {p for p in self._required()
                   if self._peers[p].heard_at is None or now - self._peers[p].heard_at >= lag}
        if missing:
            if not self._excluded and self._split_point is None and (
                    self._mode is not Mode.MUTED):
                # an exclusion episode starts: our last known good state
                self._split_point = self.seq
                self._out.split_point_changed = True
            self._excluded |= missing
            self._out.split_changed = True
        self._stalled_since = now

    def _split(self) -> bool:
        return self._split_point is not None and self._recovery is not SplitRecovery.NONE

    def _tail_limit(self, peer: str) -> int | None:
        """While split, a node hands out entries after its split point only to a peer of
        its own side (read-write or read-only, neither excluded nor rejoining), which
        joins the split with them (``_join_senders_side``); to the others — excluded,
        rejoining, muted — never: it may take them back (SIMPLE, or SMART when the vote
        goes against it), and a node that took them without a split point would keep
        them."""
        if not self._split():
            return None
        state = self._peers[peer]
        if (state.mode is not Mode.MUTED and peer not in self._excluded
                and peer not in self._rejoining):
            return None
        return self._split_point

    def _join_senders_side(self, seg: TailSegment,
                           new: tuple[TxMeta, ...]) -> tuple[TxMeta, ...]:
        """We are about to append ``new`` (the end of ``seg``) after our queue. Entries
        past the sender's split point are post-split decisions of its side: we take them
        only if we are split ourselves (a split point and somebody excluded, the sender
        not) — then we join its side: its split point (if lower than ours; never above
        our queue) and whom it went on without — else only those up to its split point
        (a node that truncated, or that waits for everybody, re-negotiates instead)."""
        point = seg.split_point
        if point is None or self._recovery is SplitRecovery.NONE:
            return new
        past = self.seq + len(new) - point
        if past <= 0:
            return new
        if (self._mode is Mode.MUTED or self._split_point is None or not self._excluded
                or seg.sender in self._excluded or self._rejoining
                or point < self._floor):
            # (a split point before our floor: we forgot entries the sender may take back
            # — only the retention horizon passes a peer's split point — so we can't
            # join its side, which could make us truncate there)
            return new[:max(0, len(new) - past)]
        point = min(point, self.seq)
        if point < self._split_point:
            self._split_point = point
            self._out.split_point_changed = True
        joined = {p for p in seg.excluded if p in self._peers} - self._excluded
        if joined:
            self._excluded |= joined
            self._out.split_changed = True
        return new

    def _split_view(self) -> tuple[int | None, tuple[str, ...]]:
        """What a tail segment says of our split: the split point and whom we went on
        without (excluded and rejoining peers), or None and () when not split."""
        if not self._split():
            return None, ()
        return self._split_point, tuple(sorted(self._excluded | self._rejoining))

    def _send_tail(self, peer: str, seq: int) -> None:
        end = seq + self._timing.max_tail
        limit = self._tail_limit(peer)
        if limit is not None:
            end = min(end, limit)
        if end <= seq:
            return
        if seq < self._floor:
            return  # forgotten (_on_status tells such a peer that it needs seeding)
        entries = tuple(self._synced[seq - self._floor:end - self._floor])
        point, excluded = self._split_view()
        self._out.tails.append(Tail(peer, TailSegment(self._id, seq, self._txid_at(seq),
                                                      entries, self._chain_at(seq), point,
                                                      excluded)))

    def _send_diverged(self, peer: str, seq: int) -> None:
        """A peer posted a merge base that diverged from our queue at ``seq``: send it our
        entries up to there, which it cannot append — so it learns that it diverged even
        when its queue is longer than ours (a status ahead of us tells us nothing) and
        rejoins. From a split node too, with its split point (otherwise two masters of
        one side, diverged past the keeper's split point, wait for each other for ever:
        the one behind sees the keeper only as ahead of it): a peer that
        appends the segment later (after truncating) takes nothing past that split point
        unless it joins our split (``_join_senders_side``)."""
        start = max(self._floor, seq - self._timing.max_tail)
        if start >= seq:
            return  # nothing before our floor to show it (it is reported on our side)
        point, excluded = self._split_view()
        self._out.tails.append(Tail(peer, TailSegment(
            self._id, start, self._txid_at(start),
            tuple(self._synced[start - self._floor:seq - self._floor]),
            self._chain_at(start), point, excluded)))

    def _tail_diverged(self, peer: str, now: int, in_good_prefix: bool) -> None:
        """A tail segment does not extend our queue; ``in_good_prefix``: the first
        difference lies in the sender's good prefix."""
        if (self._split_point is not None and self._recovery is not SplitRecovery.NONE
                and self._peers[peer].mode is not Mode.MUTED):
            # Good prefixes are consistent, so a difference inside the sender's good
            # prefix is past our split point: one of our post-split entries contradicts it.
            self._rejoin(peer, _DIVERGED, now, in_good_prefix)

    @staticmethod
    def _good_prefix(st: Status) -> tuple[int, str]:
        """The length and chain of the sender's good prefix, as its status says."""
        if st.split_point is None:
            return st.seq, st.chain
        return st.split_point, st.split_chain

    def _contradicts(self, good: int, chain: str) -> bool:
        """Does a peer's good prefix (``good`` entries, hash chain ``chain``) contradict
        our queue? Only past our split point, since good prefixes are consistent; so it
        means that one of our post-split entries differs from an entry of its good
        prefix. When its good prefix is longer than our queue we cannot tell from a
        status (a diverged tail segment tells, ``_on_tail``)."""
        if self._split_point is None or good <= self._split_point:
            return False
        return self._floor <= good <= self.seq and self._chain_at(good) != chain

    def _keeps(self) -> bool:
        """SMART's majority vote (module docstring, "Split recovery")."""
        voters = [self._id] + [p for p, s in self._peers.items() if s.mode is not Mode.MUTED]
        out = {p for p in self._excluded if p in voters}
        side, n = len(voters) - len(out), len(voters)
        return 2 * side > n or (2 * side == n and min(voters) not in out)

    def _rejoin(self, peer: str, relation: str, now: int, contradicted: bool) -> None:
        """A peer of the other side is back (or diverged from us): SIMPLE truncates,
        SMART truncates unless the vote says we keep our state — and always when one of
        our post-split entries contradicts the peer's good prefix (``contradicted``)."""
        if peer not in self._excluded:
            self._excluded.add(peer)  # it diverged from us: we cannot wait for it
            self._out.split_changed = True
        if (self._recovery is SplitRecovery.SMART and self._keeps() and not self._rejoining
                and not contradicted):
            if relation not in (_DIVERGED, _AHEAD):
                return  # consistent with us: waited for again below
            # Both sides may win their own vote (each counts its own excluded set): if
            # this peer still diverges after max_peer_lag, the larger id of the two gives in.
            since = self._apart_since.setdefault(peer, now)
            patience = self._timing.max_peer_lag or self._timing.idle_interval
            if now - since < patience or self._id < peer:
                return
        self._truncate(now)

    def _truncate(self, now: int) -> None:
        """Back to the split point: later synchronised entries become incoming again."""
        point = self._split_point
        assert point is not None
        assert not self._out.synchronised, "a truncation comes first in its step"
        assert point >= self._floor, "never compacted past the split point"
        removed = self._synced[point - self._floor:]
        del self._synced[point - self._floor:]
        del self._chain[point - self._floor + 1:]
        # the data centre rolls back to the point: what it executed after it does not count
        self._executed = min(self._executed, point)
        self._executed_cap = point
        for tx in removed:
            del self._synced_pos[tx.txid]
            missing = self._missing.pop(tx.txid, None)
            if missing is None:
                self._insert(_Entry(tx, True, self._sources(tx.origin)))
            else:
                entry = _Entry(tx, False, self._sources(tx.origin, *missing.sources,
                                                        *sorted(self._peers)))
                self._insert(entry)
                self._request(entry, now)
        self._out.truncated = Truncation(point, tuple(removed))
        self._split_point = None
        self._out.split_point_changed = True
        self._rejoining.clear()
        self._apart_since.clear()
        if self._excluded:
            self._excluded.clear()
            self._out.split_changed = True
        for p in self._peers.values():
            p.fresh = False  # statuses collected at our old merge base say nothing now
        self._stalled_since = now if self._incoming else None
        if self._activity is Activity.IDLE and self._incoming:
            self._activity = Activity.BUSY
            self._out.activity = Activity.BUSY
        self._deadline = min(self._deadline, now + self._timing.round_timeout)
        self._post(now)

    def _split_maybe_over(self) -> None:
        if not self._excluded and not self._rejoining and self._split_point is not None:
            self._split_point = None  # every excluded peer is back and consistent
            self._out.split_point_changed = True

    def _request(self, entry: _Entry, now: int) -> None:
        entry.requested_at = now
        self._out.acquire.append(Acquire(entry.tx, tuple(entry.sources)))

    def _retry_acquires(self, now: int) -> None:
        retry = self._timing.acquire_retry
        for entries in (self._incoming.values(), self._missing.values()):
            for entry in entries:
                if not entry.acquired and (entry.requested_at is None
                                           or now - entry.requested_at >= retry):
                    self._request(entry, now)

    def _report(self, peer: str, kind: str, detail: str) -> None:
        key = (peer, kind, detail)
        if key not in self._reported:
            self._reported.add(key)
            self._out.inconsistencies.append(Inconsistency(peer, kind, detail))

    # ------------------------------------------------------------------ compaction

    def _posted_executed(self) -> int:
        return max(self._floor, min(self._executed, self.seq))

    def _stable(self, st: Status) -> int:
        """What a peer's status lets us forget on its account: what it executed, but not
        past its good prefix (a split node may truncate to its split point and need what
        follows again; module docstring, "Compaction")."""
        good = st.seq if st.split_point is None else st.split_point
        return min(st.executed, good)

    def _compact_limit(self) -> int:
        """Never past what we executed ourselves (our executor still needs the payloads),
        nor, under SIMPLE or SMART, past our split point (a truncation puts the entries
        after it back into the incoming queue)."""
        limit = self._posted_executed()
        if self._split_point is not None and self._recovery is not SplitRecovery.NONE:
            limit = min(limit, self._split_point)
        return limit

    def _compact(self, now: int) -> None:
        """Forget the agreed entries that every node executed, or that are past the
        retention horizon (LogMaxSize / LogMaxDepth)."""
        limit = self._compact_limit()
        if limit <= self._floor:
            return
        target = limit
        for name, peer in self._peers.items():
            if name in self._beyond:
                continue  # it can't be served anyway: it needs seeding
            if peer.latest is None:
                target = self._floor  # not heard since we started: it may need anything
                break
            target = min(target, self._stable(peer.latest))
        r = self._retention
        if r.max_entries is not None:
            target = max(target, self.seq - r.max_entries)
        if r.max_age is not None:
            cutoff, pos = now - r.max_age, max(target, self._floor)
            while pos < limit and self._synced[pos - self._floor].timestamp < cutoff:
                pos += 1
            target = max(target, pos)
        target = min(target, limit)
        if target - self._floor < r.batch:
            return
        k = target - self._floor
        for tx in self._synced[:k]:
            del self._synced_pos[tx.txid]
            self._missing.pop(tx.txid, None)
            self._forgotten_ts = max(self._forgotten_ts, tx.timestamp)
        self._floor_txid = self._synced[k - 1].txid
        del self._synced[:k]
        del self._chain[:k]
        self._floor = target
        if self._split_point is not None and self._split_point < target:
            # only under NONE (_compact_limit): the split point repairs nothing there
            self._split_point = target
            self._out.split_point_changed = True
        self._out.compacted = Compaction(target, self._floor_txid, self._chain[0],
                                         self._forgotten_ts)

    def _from_floor(self, seg: TailSegment) -> TailSegment | None:
        """A tail segment that starts before our floor, cut to start at our floor (None
        when it ends at or before it). Its entry at our floor and the hash chain up to it
        must be ours: else it diverged from us, which is reported and not applied. A
        segment that ends exactly at our floor is still compared there: a diverged tail
        (``_send_diverged``) ends at the position we posted, which is our floor once we
        executed and forgot everything (a diverged peer ahead of us posts an executed
        position past our queue), and it is then the only way we learn of the divergence
        (docs/design/sync-protocol.md#split-recovery,
        SplitRecovery None: reported on every side)."""
        skip = self._floor - seg.after_seq
        if len(seg.entries) < skip:
            return None
        chain = seg.after_chain
        for tx in seg.entries[:skip]:
            chain = chain_hash(chain, tx.txid)
        if seg.entries[skip - 1].txid != self._floor_txid or chain != self._chain[0]:
            self._report(seg.sender, "tail-diverged",
                         f"segment has {seg.entries[skip - 1].txid} at seq {self._floor}, "
                         f"ours there is {self._floor_txid}")
            return None
        if len(seg.entries) == skip:
            return None  # consistent, and nothing past our floor
        return replace(seg, after_seq=self._floor, after=self._floor_txid,
                       entries=seg.entries[skip:], after_chain=chain)

    def _check_seeding(self) -> None:
        """Do we need seeding? When every peer has posted, one is ahead of us or holds a
        payload we lack, and every peer's floor is past where we need to start from."""
        latest = [p.latest for p in self._peers.values()]
        if not latest or any(st is None for st in latest):
            return
        seq = self.seq
        # A lagger gets its tail from a peer ahead of it whose floor is at or before its
        # position. A payload at 0-based position i is surely held by a peer that
        # executed it and did not forget it (floor <= i < executed); a peer that did not
        # execute it yet may hold it or not (the origin does), so we need seeding for a
        # payload only if some peer forgot it and no peer surely holds it.
        need = any(st.seq > seq for st in latest) and not any(
            st.seq > seq and st.floor <= seq for st in latest)
        if not need and self._missing:
            first = min(self._synced_pos[t] for t in self._missing)
            need = any(st.floor > first for st in latest) and not any(
                st.floor <= first < st.executed for st in latest)
        if need != self._seeding:
            self._seeding = need
            self._out.needs_seeding = need

    def _finish(self, now: int) -> Ready:
        self._compact(now)
        return self._ready()

    def _ready(self) -> Ready:
        out, self._out = self._out, _Out()
        counter = None
        if self._clock.counter != self._persisted_counter:
            counter = self._persisted_counter = self._clock.counter
        incoming = tuple(Incoming(self._incoming[t].tx, self._incoming[t].acquired)
                         for t in out.incoming if t in self._incoming)
        return Ready(
            counter=counter, incoming=incoming, synchronised=tuple(out.synchronised),
            acknowledge=tuple(out.acknowledge), posts=tuple(out.posts),
            tails=tuple(out.tails), acquire=tuple(out.acquire), activity=out.activity,
            split_suspected=frozenset(self._excluded) if out.split_changed else None,
            truncated=out.truncated, split_point=self._split_point,
            split_point_changed=out.split_point_changed, compacted=out.compacted,
            inconsistencies=tuple(out.inconsistencies),
            beyond_horizon=frozenset(self._beyond) if out.beyond_changed else None,
            needs_seeding=out.needs_seeding, next_round_at=self._deadline)
