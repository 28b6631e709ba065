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

State per node (docs/design/sync-protocol.md#state-of-a-node): the *synchronised queue*
(agreed, replayed by the workers in order), the *incoming queue* sorted by (timestamp,
txid), the *merge base* (id of the last synchronised transaction; its position is
``seq``), and the *timestamp counter*, a hybrid logical clock (``hlc.py``): it never
goes backwards, moves past every timestamp it sees, and a new local transaction gets a
timestamp above it.

A round (docs/design/sync-protocol.md#a-round): POST ``Status(merge base, seq, counter, incoming
queue)`` to every peer; COLLECT what peers post (a node keeps statuses that arrive before
it posts its own); ADD the longest common prefix of the local queue and the queues
collected this round at the same merge base, limited to timestamps up to the least
collected counter (ours included); MERGE unknown transactions from every received queue
into the local queue in sorted place (we merge on receipt: the same thing, earlier).

The rule we add: **ADD only when this round collected a status at our merge base from
every peer we wait for** (every read-write and read-only peer, unless excluded by a
split, below). The spec lets a round complete with the last known counters of missing
nodes; the simulator found two ways that diverges (docs/design/sync-protocol.md, "The
stricter missing-peer rule"; tests/test_sync_simulator.py keeps both): a last known
counter posted at another merge base, and a peer's counter used without its queue once
a node went on without a crashed peer. With the rule, a missing peer means empty rounds
until it posts again or is excluded.

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

(3) *Acquired transactions only* (docs/design/sync-protocol.md#transaction-exchange): a
status lists only transactions whose payload its sender holds, and L stops at the first
local transaction whose payload we lack; so everything added was acquired by every node
in the round (a read-only master that posted it has acknowledged it) and can be
executed.

Where safety ends, the split, and split recovery: split_recovery.py (its module
docstring says when a node goes on without missing peers, what it does when a split
ends, and why it converges and loses nothing).

Laggers (docs/design/sync-protocol.md#laggers): a status at a merge base inside our
queue gets a ``TailSegment`` of what follows, appended only if it continues the lagger's
queue. A muted master follows that way and never ADDs; nobody waits for it.

Idle and busy (docs/design/sync-protocol.md#idle-and-busy): a busy round ends once every
waited-for peer posted at our merge base, else at its deadline; idle rounds come every
``idle_interval`` until a transaction or a status listing one we have not agreed
(``_news``). Going idle, a node posts only to the peers that cannot ADD without it.

Compaction (bounded state): compaction.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from master_service.sync.acquisition import Acquisition, lost_at_origin
from master_service.sync.agreed_queue import AgreedQueue
from master_service.sync.compaction import Compactor, seed_donor, seed_point, served_by_another
from master_service.sync.core_state import AHEAD as _AHEAD
from master_service.sync.core_state import BEHIND as _BEHIND
from master_service.sync.core_state import DIVERGED as _DIVERGED
from master_service.sync.core_state import FORGOTTEN as _FORGOTTEN
from master_service.sync.core_state import Entry as _Entry
from master_service.sync.core_state import Out as _Out
from master_service.sync.core_state import PeerState as _Peer
from master_service.sync.fingerprints import FingerprintCheck
from master_service.sync.hlc import HybridLogicalClock
from master_service.sync.incoming import IncomingQueue
from master_service.sync.messages import (
    InvalidMessage,
    Message,
    Mode,
    Status,
    TailSegment,
    TxMeta,
)
from master_service.sync.ready import (
    Activity,
    ExecutedAt,
    Incoming,
    Inconsistency,
    PersistentState,
    Post,
    Ready,
    Refused,
    Retention,
    SplitRecovery,
    Tail,
    Timing,
    Truncation,
    UnknownPeer,
)
from master_service.sync.ready import check_position as _check_position
from master_service.sync.ready import check_time as _check_time
from master_service.sync.relaying import Relaying
from master_service.sync.split_recovery import SplitRecoverer

__all__ = ["SyncNode"]  # the values it takes and gives: ready.py


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
                 state: PersistentState | None = None, missing_payloads: Iterable[str] = (),
                 split_recovery: SplitRecovery = SplitRecovery.NONE,
                 retention: Retention | None = None, executed: int = 0,
                 pushable: Iterable[str] = ()) -> None:
        if not isinstance(node_id, str) or not node_id:
            raise ValueError("node_id must be a non-empty string")
        if not isinstance(mode, Mode):
            raise ValueError(f"mode must be a Mode, got {mode!r}")
        if not isinstance(split_recovery, SplitRecovery):
            raise ValueError(f"split_recovery must be a SplitRecovery, got {split_recovery!r}")
        _check_time(now)
        self._id = node_id
        self._mode = mode
        self._timing = timing or Timing()
        state = state or PersistentState()
        self._clock = HybridLogicalClock(state.counter)
        self._persisted_counter = state.counter
        self._agreed = AgreedQueue.restore(state)  # forgotten up to its floor: compaction.py
        if not isinstance(retention, Retention | None):
            raise ValueError(f"retention must be a Retention, got {retention!r}")
        self._retention = retention or Retention()
        _check_position("executed", executed)
        # what this data centre executed (an input: ``executed``); capped at a truncation
        # point until the driver reports the rollback done (``rolled_back``)
        self._executed = executed
        self._executed_cap: int | None = None
        self._compaction = Compactor(node_id, counter=state.counter, floor=state.floor)
        self._incoming = IncomingQueue(_Entry(item.tx, item.acquired,
                                              self._sources(item.tx.origin))
                                       for item in state.incoming)
        self._peers: dict[str, _Peer] = {}
        items = peers.items() if isinstance(peers, Mapping) else ((p, Mode.READ_WRITE)
                                                                  for p in peers)
        for peer, peer_mode in items:
            self._set_peer(peer, peer_mode)
        # synchronised transactions whose payload we still have to fetch (laggers)
        self._missing: dict[str, _Entry] = {}
        for txid in missing_payloads:
            if (tx := self._agreed.get(txid)) is None:
                raise ValueError(f"missing payload {txid!r} is not synchronised")
            self._missing[txid] = _Entry(tx, False, self._sources(tx.origin, *sorted(self._peers)))
        # whom we went on without, the split point: split_recovery.py
        self._split = SplitRecoverer(node_id, mode, split_recovery, state.split_point, self._peers)
        self._reported: set[tuple[str, str, str]] = set()
        self._stalled_since: int | None = None
        self._activity = Activity.BUSY  # a (re)started node catches up first
        self._deadline = now  # the first tick posts
        # (seq, base, counter, txids) of our last status to every peer since we
        # (re)started, None before the first: _peers_can_add
        self._posted: tuple[int, str | None, int, frozenset[str]] | None = None
        self._out = _Out()
        # what goes with statuses, payload asks, fingerprints (their modules' docstrings);
        # ``pushable``: own transactions whose payloads the driver holds to push
        self._relaying = Relaying(node_id, pushable)
        self._acquisition = Acquisition()
        self._fingerprints = FingerprintCheck()

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
        return self._agreed.merge_base

    @property
    def seq(self) -> int:
        return self._agreed.seq

    @property
    def floor(self) -> int:
        """The agreed entries up to this position are forgotten ("Compaction")."""
        return self._agreed.floor

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
        return frozenset(self._compaction.beyond)

    @property
    def needs_seeding(self) -> bool:
        """Do we lag behind the floor of every peer (no one can serve us by replay)?"""
        return self._compaction.seeding

    @property
    def counter(self) -> int:
        return self._clock.counter

    @property
    def synchronised(self) -> tuple[TxMeta, ...]:
        """The synchronised entries after the floor (positions floor + 1 ..)."""
        return tuple(self._agreed.entries)

    @property
    def incoming(self) -> tuple[Incoming, ...]:
        return tuple(Incoming(e.tx, e.acquired) for e in self._incoming.sorted())

    @property
    def activity(self) -> Activity:
        return self._activity

    @property
    def split_suspected(self) -> frozenset[str]:
        return self._split.excluded

    @property
    def split_point(self) -> int | None:
        return self._split.point

    @property
    def split_recovery(self) -> SplitRecovery:
        return self._split.recovery

    @property
    def next_round_at(self) -> int:
        return self._deadline

    @property
    def peers(self) -> dict[str, Mode]:
        return {p: s.mode for p, s in self._peers.items()}

    @property
    def fingerprint_matches(self) -> dict[str, bool | None]:
        """Per peer: did its fingerprint match ours at the last position both knew?"""
        return dict(self._fingerprints.matches)

    @property
    def pushable(self) -> tuple[str, ...]:
        """Own transactions, not agreed yet, whose payloads go with our statuses."""
        return self._relaying.own

    @property
    def next_fetch_at(self) -> int | None:
        """When a payload ask is to be hedged next (tick then); None: none is."""
        return self._acquisition.next_at(self._timing.fetch_hedge, self._peers)

    @property
    def missing_payloads(self) -> frozenset[str]:
        return frozenset(self._missing)

    def transaction(self, txid: str) -> TxMeta | None:
        """The metadata of ``txid`` if it is incoming or synchronised here."""
        entry = self._incoming.get(txid)
        if entry is not None:
            return entry.tx
        return self._agreed.get(txid)

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
        a = self._agreed
        return PersistentState(tuple(a.entries), self.incoming, self._persisted_counter,
                               self._split.point, a.floor, a.floor_txid, a.chain[0],
                               a.floor_newest)

    # ------------------------------------------------------------------ inputs

    def submit(self, txid: str, *, size: int, digest: str, now: int) -> Ready:
        """A client transaction accepted at this master; acknowledge it once persisted."""
        _check_time(now)
        if self._mode is not Mode.READ_WRITE:
            raise Refused(f"master {self._id} is {self._mode.value}: it takes transactions "
                          "only from its peers")
        if txid in self._incoming or txid in self._agreed.positions:
            raise Refused(f"transaction id {txid!r} is already known")
        tx = TxMeta(txid, max(now, self._clock.counter + 1), self._id, size, digest)
        self._clock.observe(tx.timestamp)  # == next_timestamp(now), after validation
        self._insert(_Entry(tx, True, []))
        if self._peers:
            self._relaying.submitted(txid)
        self._out.acknowledge.append(txid)
        if self._activity is Activity.IDLE:
            self._complete_round(now)  # busy on an incoming transaction: post it now
        elif self.EAGER_POSTS:
            self._post(now)  # post it now, without waiting for the round to end
        return self._finish(now)

    def receive(self, message: Message, now: int, *, executed: ExecutedAt | None = None,
                silent: Iterable[str] | None = None, relayed_by: str | None = None,
                pushed: Iterable[str] = ()) -> Ready:
        """A status or tail segment from a peer (validated at construction; refused as
        ``check`` says). With a status straight from its sender: what it executed (compared
        with ours, fingerprints.py) and whom it does not hear (relaying.py). ``relayed_by``:
        a status of another peer passed on by that one (taken only with the mode the peer
        posts itself). ``pushed``: payloads that came with it (stored next): not asked for."""
        _check_time(now)
        if relayed_by is not None and (
                message.sender in (self._id, relayed_by) or not isinstance(message, Status)
                or (message.sender in self._peers
                and self._peers[message.sender].mode is not message.mode)):
            return self._finish(now)  # modes are learnt from the peer itself
        self.check(message, now)
        peer = self._peers[message.sender]
        peer.heard_at = now
        self._split.heard(message.sender)  # it talks to us: wait for it again
        self._acquisition.arriving = frozenset(pushed)
        try:
            if isinstance(message, Status):
                self._on_status(peer, message, now, relayed=relayed_by is not None)
            else:
                self._on_tail(message, now)
        finally:
            self._acquisition.arriving = frozenset()
        if isinstance(message, Status) and relayed_by is None:
            self._relaying.heard(message, now, silent)
            if executed is not None:
                diverged, again = self._fingerprints.compare(message.sender, executed)
                if diverged is not None:
                    self._out.inconsistencies.append(diverged)
                if again:
                    self._out.fingerprint_agrees.append((message.sender, executed.pos))
        return self._finish(now)

    def check(self, message: Message, now: int) -> None:
        """What ``receive`` refuses a message for, changing nothing: the driver checks each
        message of a request before it takes any (one passing now passes later too)."""
        if not isinstance(message, (Status, TailSegment)):
            raise InvalidMessage(f"not a protocol message: {type(message).__name__}")
        if message.sender == self._id:
            raise InvalidMessage(f"a message from ourselves ({self._id})")
        if message.sender not in self._peers:
            raise UnknownPeer(f"{message.sender!r} is not a configured peer of {self._id}")
        newest = message.counter if isinstance(message, Status) else max(
            (t.timestamp for t in getattr(message, "entries", ())), default=0)
        if newest > max(now, self._clock.counter) + self._timing.max_drift:
            raise InvalidMessage(f"timestamp {newest} from {message.sender} is more than "
                                 f"{self._timing.max_drift} ahead of this master's clock "
                                 f"({now}): a skewed clock or a forged message, refused")

    def tick(self, now: int) -> Ready:
        """The clock: ends the round at its deadline, retries payload fetches."""
        _check_time(now)
        if now >= self._deadline:
            self._complete_round(now)
        else:
            self._retry_acquires(now)
        self._acquisition.due(now, self._timing.fetch_hedge, self._peers, self._out)
        return self._finish(now)

    def acquired(self, txid: str, now: int) -> Ready:
        """The payload of ``txid`` is stored durably by the driver."""
        _check_time(now)
        entry = self._incoming.get(txid)
        if entry is not None and not entry.acquired:
            entry.acquired = True
            self._out.incoming[txid] = None
            # Now it may be posted (spec: only acquired transactions are): post at once,
            # so that the origin can ADD it without waiting for our round to end.
            if self.EAGER_POSTS:
                self._post(now)
        self._missing.pop(txid, None)
        self._acquisition.arrived(txid)
        return self._finish(now)

    def fetch_failed(self, txid: str, source: str, now: int) -> Ready:
        """``source`` could not give the payload of ``txid``: the next one is asked."""
        _check_time(now)
        self._acquisition.failed(txid, source, now, self._peers, self._out)
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
        _check_position("executed position", pos)
        self._executed = pos if self._executed_cap is None else min(pos, self._executed_cap)
        return self._finish(now)

    def rolled_back(self, pos: int, now: int) -> Ready:
        """The data centre went back to the state at ``pos`` after a truncation (split
        recovery): executed reports are believed again."""
        _check_time(now)
        _check_position("rolled back position", pos)
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
        self._relaying.forget(peer)
        self._fingerprints.forget(peer)
        self._split.forget_peer(peer, self._out)
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

    def _on_status(self, peer: _Peer, st: Status, now: int, relayed: bool = False) -> None:
        peer.newest = max(peer.newest, st.counter)
        if st.mode is not peer.mode:
            self._report(st.sender, "mode-mismatch",
                         f"posts as {st.mode.value}, configured {peer.mode.value}")
        relation = self._agreed.relation(st.seq, st.merge_base, st.chain)
        if relation == _FORGOTTEN:
            if not self._compaction.behind_our_floor(st, peer.latest, relayed):
                return
            peer.behind = True  # its newest status; ``latest`` stays the one before
            if served_by_another(st, self._peers, self._required()):
                self._set_beyond(st.sender, False)
                return
            self._set_beyond(st.sender, True)
            if self._split.rejoin_beyond(st, now, self._peers, self._timing, self._out):
                self._truncate(now)
            self._report(st.sender, "beyond-horizon",
                         f"its agreed position {st.seq} is before our floor "
                         f"{self._agreed.floor}: it can no longer be served by replay and "
                         "needs seeding from a peer's worker image")
            return
        self._set_beyond(st.sender, False)  # seeded: at or past our floor again
        split = self._split  # rejoins and truncations come before anything is sent
        if split.beyond_their_horizon(st, self.seq, self._peers, self._out):
            self._truncate(now)  # which ends the split: it rejoins nobody
        elif split.rejoins(st, relation, peer.mode) and split.rejoin(
                st.sender, relation, now, split.contradicts(st, self._agreed), self._peers,
                self._timing, self._out):
            self._truncate(now)
            relation = self._agreed.relation(st.seq, st.merge_base, st.chain)
        split.consistent_again(st.sender, relation, self._out)
        if relation == _DIVERGED:
            self._report(st.sender, "diverged",
                         f"merge base {st.merge_base} at seq {st.seq} (chain {st.chain[:8]}), "
                         f"ours there is {self._agreed.txid_at(st.seq)} "
                         f"(chain {self._agreed.chain_at(st.seq)[:8]})")
            # Under None too: the peer cannot append it, but reports the divergence, so
            # that every master of both sides shows it (a master behind the other side
            # sees only a status ahead of it; tests/test_partitions.py, None).
            split.send_diverged(st.sender, st.seq, self._agreed, self._timing.max_tail, self._out)
            return
        self._clock.observe(st.counter)  # counter >= every timestamp in the queue
        self._merge(st.queue, st.sender, now, verified=relation != _AHEAD)
        split.back(st.sender, relation, self._out)  # first: a recovered node's tail
        if relation == _BEHIND:
            self._send_tail(st.sender, st.seq)
        elif relation == _AHEAD and self.EAGER_POSTS and self._out.truncated is None:
            # We lag: tell the forerunner where we are now, rather than at the end of our
            # round, so that its tail segment comes at once.
            self._post(now)
        if peer.latest is None or st.counter >= peer.latest.counter:
            peer.latest, peer.fresh, peer.behind = st, True, False
        self._compaction.check_seeding(self._agreed, self._peers, self._missing, self._out)
        if self._activity is Activity.IDLE:
            if self._news(st):  # busy; the status counts for the round it starts
                self._complete_round(now, keep=st.sender)
        elif self._posted_here(self._required()):
            self._complete_round(now)  # back-to-back rounds

    def _on_tail(self, seg: TailSegment, now: int) -> None:
        start = seg.after_seq
        if start > self.seq:
            return  # not next to our queue; our next status asks from where we are
        if start < self._agreed.floor:
            cut, diverged = self._agreed.from_floor(seg)
            if diverged is not None:
                self._report(seg.sender, "tail-diverged", diverged)
            if cut is None:
                return
            seg, start = cut, cut.after_seq
        # the sender's good prefix ends here (the whole segment when it is not split)
        good = start + len(seg.entries) if seg.split_point is None else seg.split_point
        if self._agreed.relation(start, seg.after, seg.after_chain) == _DIVERGED:
            self._report(seg.sender, "tail-diverged",
                         f"segment after {seg.after} at seq {start}, ours there is "
                         f"{self._agreed.txid_at(start)}")
            # the queues differ somewhere up to ``start``
            if self._split.tail_diverged(seg.sender, now, start <= good, self._peers,
                                         self._timing, self._out):
                self._truncate(now)
            return
        overlap = min(len(seg.entries), self.seq - start)
        base = start - self._agreed.floor
        for i in range(overlap):
            if seg.entries[i] != self._agreed.entries[base + i]:
                self._report(seg.sender, "tail-diverged",
                             f"seq {start + i + 1} is {seg.entries[i].txid}, ours is "
                             f"{self._agreed.entries[base + i].txid}")
                if self._split.tail_diverged(seg.sender, now, start + i + 1 <= good,
                                             self._peers, self._timing, self._out):
                    self._truncate(now)
                return
        new = seg.entries[overlap:]
        for tx in new:
            entry = self._incoming.get(tx.txid)
            if tx.txid in self._agreed.positions or (entry is not None and entry.tx != tx):
                self._report(seg.sender, "tail-diverged" if entry is None
                             else "conflicting-transaction",
                             f"{tx.txid} conflicts with what we hold")
                return
        new = self._split.join_senders_side(seg, new, self._agreed, self._peers, self._out)
        if not new:
            return
        for tx in new:
            self._clock.observe(tx.timestamp)
            self._append_synced(tx, self._incoming.pop(tx.txid), seg.sender, now)
        self._base_advanced(now, progressed=True)
        self._complete_round(now)  # a new merge base: post it

    def _complete_round(self, now: int, keep: str | None = None) -> None:
        """End the round (ADD), start the next (POST); ``keep``'s status counts for it."""
        if self._split.check_stall(now, self._timing.max_peer_lag, self._stalled_since,
                                   self._required(), self._agreed, self._peers, self._out):
            self._stalled_since = now
        base = (self.seq, self.merge_base)
        added = self._add(now) if self._mode is not Mode.MUTED else 0
        if added:
            self._base_advanced(now, progressed=True)
        elif not self._incoming:
            self._stalled_since = None
        elif self._stalled_since is None:
            self._stalled_since = now
        idle = not self._incoming and not self._missing and not any(
            p.fresh and p.latest is not None and self._news(p.latest)
            for p in self._peers.values())
        activity = Activity.IDLE if idle else Activity.BUSY
        settling = idle and self._activity is Activity.BUSY and self.EAGER_POSTS and not (
            not self._split.settled or self._posted is None or not self._peers_can_add(base, added))
        if activity is not self._activity:
            self._activity = activity
            self._out.activity = activity
        for name, p in self._peers.items():
            p.fresh = name == keep and not added and p.fresh
        self._retry_acquires(now)
        # settling: our new merge base goes to those who ADD themselves a round later
        self._post(now, only=[p for p in self._peers if p not in self._required()]
                   if settling else None)
        self._deadline = now + (self._timing.idle_interval if idle and not settling
                                else self._timing.round_timeout)

    def _add(self, now: int) -> int:
        """ADD: the common prefix, up to the least counter, if every waited-for peer
        posted at our merge base this round (module docstring)."""
        required = self._required()
        if not self._incoming or not self._posted_here(required, allow_none=True):
            return 0  # a status missing this round: an empty round
        least = self._clock.counter
        collected = []
        for node in required:
            st = self._peers[node].latest
            least = min(least, st.counter)
            collected.append(st.queue)
        chosen: list[str] = []
        lost: list[str] = []
        for entry in self._incoming.sorted():
            ts, txid = entry.tx.key
            if ts > least:
                break
            if not entry.acquired:
                if self._split.excludes(entry.tx.origin):
                    # of the other side of a split, heard of but not fetched: passed over
                    # (split_recovery.py, "Where safety ends: the split", says why)
                    continue
                if lost_at_origin(entry.tx, required, collected):
                    lost.append(txid)  # never agreed, and never can be (acquisition.py)
                    continue
                break
            n = len(chosen)
            if any(len(q) <= n or q[n].txid != txid for q in collected):
                break
            chosen.append(txid)
        for entry in self._incoming.take(lost):  # only in memory: it was not acquired
            self._acquisition.arrived(entry.tx.txid)  # no more asks for it
            self._report(entry.tx.origin, "lost-at-origin",
                         f"{entry.tx.txid} is no longer held by its origin nor by any peer; "
                         "it was never agreed and is dropped")
        for entry in self._incoming.take(chosen):
            self._append_synced(entry.tx, entry, self._id, now)
        return len(chosen)

    def _retry_acquires(self, now: int) -> None:
        self._acquisition.retry((*self._incoming.values(), *self._missing.values()), now,
                                self._timing.acquire_retry, self._peers, self._out)

    def _peers_can_add(self, base: tuple[int, str | None], added: int) -> bool:
        """Can our peers ADD what we just ``added`` at ``base`` from our last status? Not
        if we never posted there: a lagger that a tail segment brought to ``base`` and that
        ADDed in the same step (they waited for its status until their round timeout:
        bench/README "2026-12-03 (3)")."""
        posted = self._posted
        return not added or (posted is not None and posted[:2] == base and all(
            t.txid in posted[3] and t.timestamp <= posted[2]
            for t in self._agreed.entries[len(self._agreed.entries) - added:]))

    def _post(self, now: int, only: list[str] | None = None) -> None:
        """POST our status (to ``only`` those peers): a cumulative snapshot, so any number."""
        if not self._peers or only == [] or (self.EAGER_POSTS and any(
                t in self._incoming and not self._incoming[t].acquired
                for t in self._acquisition.arriving)):
            return  # payloads pushed with the status in hand: ``acquired`` posts next
        counter = self._clock.tick(now)
        queue = tuple(e.tx for e in self._incoming.sorted() if e.acquired)
        if only is None:
            self._posted = (self.seq, self.merge_base, counter, frozenset(t.txid for t in queue))
        point = self._split.good_point
        status = Status(self._id, self._mode, self.merge_base, self.seq, counter, queue,
                        self._agreed.chain[-1], point,
                        "" if point is None else self._agreed.chain_at(point),
                        self._posted_executed(), self._agreed.floor,
                        tuple((p, s.newest) for p, s in sorted(self._peers.items()) if s.newest))
        silent = self._relaying.silent_peers(self._peers, self._timing, now)
        self._out.posts.extend(
            Post(p, status, self._relaying.push(p, status),
                 self._relaying.relay(p, silent, self._peers, self.holds_payload), silent)
            for p in sorted(self._peers if only is None else only))

    # ------------------------------------------------------------------ helpers

    def _news(self, st: Status) -> bool:  # it lists a transaction we have not agreed
        return any(t.txid not in self._agreed.positions for t in st.queue)

    def _required(self) -> list[str]:
        """Peers we wait for: every read-write and read-only peer not excluded by a split."""
        return [p for p, s in self._peers.items()
                if s.mode is not Mode.MUTED and not self._split.excludes(p)
                and p not in self._compaction.beyond]

    def _posted_here(self, required: list[str], allow_none: bool = False) -> bool:
        """Did every peer in ``required`` post at our merge base this round?"""
        return (allow_none or bool(required)) and all(
            (p := self._peers[n]).fresh and p.latest.seq == self.seq
            and p.latest.merge_base == self.merge_base for n in required)

    def _sources(self, *nodes: str) -> list[str]:
        out: list[str] = []
        for n in nodes:
            if n != self._id and n not in out:
                out.append(n)
        return out

    def _insert(self, entry: _Entry) -> None:
        self._incoming.add(entry)
        self._out.incoming[entry.tx.txid] = None

    def _merge(self, txs: tuple[TxMeta, ...], poster: str, now: int,
               verified: bool = True) -> None:
        """MERGE unknown transactions (one that conflicts with what we hold is reported).
        ``verified``: the status's merge base and chain are ours at its position; from one
        ahead of us we skip what is not newer than everything we forgot (compaction.py,
        "Why nothing needed is lost": it may come from a diverged node)."""
        for tx in txs:
            if not verified and self._agreed.floor \
                    and tx.timestamp <= self._agreed.floor_newest \
                    and tx.txid not in self._incoming:
                continue
            entry = self._incoming.get(tx.txid)
            if entry is not None:
                if entry.tx != tx:
                    self._report(poster, "conflicting-transaction", f"{tx.txid} differs")
                elif poster not in entry.sources and poster != self._id:
                    entry.sources.append(poster)
                continue
            pos = self._agreed.positions.get(tx.txid)
            if pos is not None:
                if self._agreed.entries[pos - self._agreed.floor] != tx:
                    self._report(poster, "conflicting-transaction", f"{tx.txid} differs")
                continue
            self._clock.observe(tx.timestamp)
            entry = _Entry(tx, False, self._sources(tx.origin, poster))
            self._insert(entry)
            self._acquisition.request(entry, now, self._peers, self._out)

    def _append_synced(self, tx: TxMeta, entry: _Entry | None, source: str, now: int) -> None:
        self._agreed.append(tx)
        self._out.synchronised.append(tx)
        self._relaying.agreed(tx.txid)  # every peer holds it: no more pushes
        if entry is None or not entry.acquired:
            missing = _Entry(tx, False, self._sources(source, tx.origin,
                                                      *(entry.sources if entry else ())))
            self._missing[tx.txid] = missing
            self._acquisition.request(missing, now, self._peers, self._out)

    def _base_advanced(self, now: int, progressed: bool) -> None:
        if progressed:
            self._stalled_since = now if self._incoming else None

    def _send_tail(self, peer: str, seq: int) -> None:
        end = seq + self._timing.max_tail
        limit = self._tail_limit(peer)
        if limit is not None:
            end = min(end, limit)
        if end <= seq:
            return
        if seq < self._agreed.floor:
            return  # forgotten (_on_status tells such a peer that it needs seeding)
        segment = self._agreed.segment(self._id, seq, end, *self._split.view())
        self._out.tails.append(Tail(peer, segment))

    def _tail_limit(self, peer: str) -> int | None:
        return self._split.tail_limit(peer, self._peers[peer].mode)

    def _truncate(self, now: int) -> None:
        """Back to the split point (split_recovery.py): later entries become incoming again."""
        point = self._split.point
        assert point is not None
        assert not self._out.synchronised, "a truncation comes first in its step"
        assert point >= self._agreed.floor, "never compacted past the split point"
        removed = self._agreed.truncate(point)
        # the data centre rolls back to the point: what it executed after it does not count
        self._executed = min(self._executed, point)
        self._executed_cap = point
        for tx in removed:  # back into the incoming queue, to fetch again if we lack it
            missing = self._missing.pop(tx.txid, None)
            more = () if missing is None else (*missing.sources, *sorted(self._peers))
            self._insert(entry := _Entry(tx, missing is None, self._sources(tx.origin, *more)))
            if missing is not None:
                self._acquisition.request(entry, now, self._peers, self._out)
        self._out.truncated = Truncation(point, tuple(removed))
        self._split.truncated(self._out)  # the excluded set is empty again
        for p in self._peers.values():
            p.fresh = False  # statuses collected at our old merge base say nothing now
        self._stalled_since = now if self._incoming else None
        if self._activity is Activity.IDLE and self._incoming:
            self._activity = self._out.activity = Activity.BUSY
        self._deadline = min(self._deadline, now + self._timing.round_timeout)
        self._post(now)

    def _report(self, peer: str, kind: str, detail: str) -> None:
        key = (peer, kind, detail)
        if key not in self._reported:
            self._reported.add(key)
            self._out.inconsistencies.append(Inconsistency(peer, kind, detail))

    def _finish(self, now: int) -> Ready:
        self._compact(now)
        return self._ready()

    # ------------------------------------------------------------------ compaction.py

    def _posted_executed(self) -> int:
        return max(self._agreed.floor, min(self._executed, self.seq))

    def _compact(self, now: int) -> None:
        """Forget what compaction.py allows, never past what we executed (our executor needs
        the payloads) nor, while split (SIMPLE, SMART), past our split point (a truncation
        puts the entries after it back into the incoming queue)."""
        good = self._split.good_point
        limit = min(self._posted_executed(), self.seq if good is None else good)
        done = self._compaction.compact(self._agreed, now, limit=limit, peers=self._peers,
                                        retention=self._retention, required=self._required(),
                                        counter=self._clock.counter)
        if done is not None:
            self._out.compacted, gone = done
            for tx in gone:
                self._missing.pop(tx.txid, None)
            self._split.follow_floor(self._agreed.floor, self._out)

    def _set_beyond(self, peer: str, beyond: bool) -> None:
        if self._compaction.set_beyond(peer, beyond):
            self._out.beyond_changed = True

    def seed_point(self, pos: int) -> tuple[str | None, str, int] | None:
        """What a node seeded from our image of ``pos`` starts from (compaction.py)."""
        return seed_point(self._agreed, pos, self._split.good_point)

    def seed_donor(self) -> str | None:
        """The peer to seed from when we need seeding (compaction.py, ``seed_donor``)."""
        return seed_donor(self._posted_executed(), self._peers)

    def hold_for_seeding(self, requester: str, pos: int, *, until: int, now: int) -> Ready:
        """Keep what follows ``pos`` for a node seeded from our image (``Compactor.hold``)."""
        _check_time(now)
        self._compaction.hold(requester, pos, until, floor=self._agreed.floor)
        return self._finish(now)

    def _ready(self) -> Ready:
        out, self._out = self._out, _Out()
        counter = None
        if self._clock.counter != self._persisted_counter:
            counter = self._persisted_counter = self._clock.counter
        incoming = tuple(Incoming(self._incoming[t].tx, self._incoming[t].acquired)
                         for t in out.incoming if t in self._incoming)
        return Ready(
            counter=counter, incoming=incoming, synchronised=tuple(out.synchronised), seq=self.seq,
            acknowledge=tuple(out.acknowledge), posts=tuple(out.posts), tails=tuple(out.tails),
            acquire=tuple(out.acquire), activity=out.activity, fetches=tuple(out.fetches),
            fingerprint_agrees=tuple(out.fingerprint_agrees), next_fetch_at=self.next_fetch_at,
            split_suspected=self._split.excluded if out.split_changed else None,
            truncated=out.truncated, split_point=self._split.point, compacted=out.compacted,
            split_point_changed=out.split_point_changed, needs_seeding=out.needs_seeding,
            inconsistencies=tuple(out.inconsistencies), next_round_at=self._deadline,
            beyond_horizon=frozenset(self._compaction.beyond) if out.beyond_changed else None)
