"""Compaction of the agreed queue (bounded state): what forgets agreed entries and tells
who needs seeding, a part of the pure core (protocol.py). ``Compactor`` holds its own
state; the core calls it with the agreed queue (agreed_queue.py) and the peers' statuses.

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
while split: a split node may truncate to it and need what follows again; a split point
is set to the node's queue length when its split starts and never lowered, so a good
prefix never shrinks below what the node's statuses posted as good);
for ourselves, what we executed. A peer not heard from since we started forgets nothing
on its account. Beyond that, the *horizon*: entries older than LogMaxSize positions or
whose timestamp is older than LogMaxDepth are forgotten even if a peer has not executed
them (docs/design/cluster-basics.md#the-logs-limits), but never past the last known
position of a peer we still wait for. Never past what we executed
ourselves (our workers still need the payloads) nor, under SIMPLE or SMART, past our
split point (a truncation puts the entries after it back into the incoming queue); under
NONE the split point repairs nothing and follows the floor. Read-only masters execute
nothing (docs/design/sync-protocol.md#master-modes), so entries are then kept up to the
horizon. A truncation caps our executed position at its point until the driver reports
the rollback done (``rolled_back``): an execution under way may still report its old
end.

*Why nothing needed is lost.* A consistent peer at or past our floor synchronised every
entry we forgot, so none of them is in its queue; one behind our floor needs what we no
longer hold: its status is ``_FORGOTTEN`` to us. Unless another peer we wait for can
serve it (``_served_by_another``), we report it (``beyond-horizon``,
``Ready.beyond_horizon``), do not merge its queue (it may hold transactions agreed since
its position: merged, they would be agreed twice) and no longer wait for it — it can't
take part before it is seeded from a worker image, and it can't ADD with anybody: no
peer posts at its merge base again. A late status (lower counter than the newest, or the
same counter at a lower position) is not such a peer, nor one whose sender had not yet
heard a status of ours carrying a floor past its position (``Status.heard``,
``_knew_our_floor``): it may have been posted before the sender caught up. A status
*ahead* of us is not verified (a diverged node under NONE can look ahead): from it we
skip transactions not newer than every entry we forgot (``floor_newest``); they are
merged once the sender's status can be verified, or from another peer. The node itself
learns that it *needs seeding* (``Ready.needs_seeding``) when every peer has posted and
no peer ahead of it holds its position (every floor is past it), or a payload it lacks
was forgotten by a peer and no peer surely holds it (floor <= position < executed).

*Seeding and the incoming queue.* A node seeded from a peer's image of agreed position
P starts from P (its floor); which of its incoming transactions does the image hold? By
timestamp alone (those sorting at or before the entry at P) only while the agreed queue
is sorted by timestamp, which it is not after a split recovery (truncated entries are
agreed again after newer ones) nor for a write acknowledged by a node beyond the horizon
(nobody merges its queue until it is seeded, and the others agree newer ones
meanwhile): the simulator found such writes dropped at seeding, acknowledged and lost.
So the seed point names the entries agreed in (known_after, P] that the donor still
knows: its queue, and the *ids of forgotten entries* it keeps — compaction forgets
payloads and entries, but keeps the id and position of each forgotten entry after
``Compaction.ids_after``, the least stable position of its peers (none holds one agreed
at or before that in its incoming queue), 0 while a peer has not posted since we
started. The recipient, at agreed position r, drops exactly the incoming transactions
named; when r >= known_after that is exact (``leaves_incoming``); otherwise (the donor
forgot ids before it heard of the recipient's position, e.g. a data centre restored from
an old backup) the timestamp rule decides for the others. The recipient keeps the ids in
turn (a lagger may seed from it). They are ~50 bytes per transaction and kept only
while some peer lags behind them.

The simulator models execution (with delays; read-only masters execute nothing),
compaction (payloads leave with the entries), restarts from a floor, and seeding (a
node restarted from a peer's image: floor = seq = the peer's executed position); it
checks that nothing is forgotten that a node still needs when there is no horizon, that
after settling every node forgot everything (all executed it), and convergence with a
horizon of 2 to 20 entries, where laggers are seeded.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping

from master_service.sync.agreed_queue import AgreedQueue
from master_service.sync.core_state import Out, PeerState
from master_service.sync.messages import Status, TxMeta
from master_service.sync.ready import Compaction, Retention

__all__ = ["Compactor", "leaves_incoming", "seed_donor", "served_by_another", "stable"]

# The floors we remember with the counter from which our statuses carried each
# (``_knew_our_floor``); a peer that acknowledges an older status is waited for.
FLOOR_HISTORY = 64


def leaves_incoming(txid: str, timestamp: int, *, point_txid: str | None, point_newest: int,
                    agreed: Container[str], known_after: int | None, position: int) -> bool:
    """Seeding from a peer's image of agreed position P (module docstring, "Seeding and
    the incoming queue"): does an incoming transaction of the seeded node leave its
    queue (the image holds it)? ``agreed``: the ids the seed point names, agreed at or
    before P; ``known_after``: it names every entry agreed in (known_after, P] (None: the
    donor did not say); ``position``: our agreed position (no entry up to it is in our
    incoming queue)."""
    if point_txid is None:
        return False  # position 0: nothing agreed
    if txid in agreed:
        return True
    if known_after is not None and position >= known_after:
        return False  # the donor knows every entry we may lack: not agreed by P
    # The donor forgot some of what we lack: the old rule, exact while the agreed queue
    # is sorted by timestamp (no split recovery, no late write of a node beyond horizon).
    return (timestamp, txid) <= (point_newest, point_txid)


def stable(st: Status) -> int:
    """What a peer's status lets us forget on its account: what it executed, but not past
    its good prefix (a split node may truncate to its split point and need what follows
    again; module docstring, "Compaction")."""
    good = st.seq if st.split_point is None else st.split_point
    return min(st.executed, good)


def served_by_another(st: Status, peers: Mapping[str, PeerState], required: list[str]) -> bool:
    """A status behind our floor: can another peer we wait for still serve it (its floor
    at or before the status's position, its queue past it)? Then the sender is not beyond
    the horizon: it catches up through that peer's tail segments, and we go on waiting
    for it (and wait for it again if we had stopped). A node seeded at P sees peers a few
    positions behind P as behind its floor; not waiting for them, it would ADD without
    their counters while they go on adding with the others (the simulator found it: seed
    3375373473). Not a peer whose newest status was behind our floor too: its ``latest``
    is older than that (seed 619204908: two such peers held each other up with positions
    from before they truncated). Nor a split peer: it gives its post-split entries to its
    own side only, and the lagger would take them only split itself (seed 2370230567: a
    split n1 "served" n3, which took nothing, and n3 never rejoined the others)."""
    return any(p != st.sender and not (q := peers[p]).behind
               and q.latest is not None and q.latest.floor <= st.seq < q.latest.seq
               and q.latest.split_point is None for p in required)


def seed_donor(mine: int, peers: Mapping[str, PeerState]) -> str | None:
    """The peer to seed from when we need seeding, we having executed up to ``mine``: the
    one that executed the most, of those that executed past us (None: nobody did). Past
    what we *executed*: a node may hold agreed entries whose payloads every peer forgot
    (it needs seeding then too, ``Compactor.needs_seeding``). What a split peer executed
    counts up to its split point only: it gives no image past it (``seed_point``)."""
    ahead = [(s, name) for name, p in peers.items()
             if (st := p.latest) is not None and (s := stable(st)) > mine]
    return max(ahead)[1] if ahead else None


def seed_point(agreed: AgreedQueue, pos: int,
               split_point: int | None) -> tuple[str | None, str, int] | None:
    """What a node seeded from our image of agreed position ``pos`` starts from as its
    floor: (id of the entry at ``pos``, hash chain up to it, newest timestamp up to it);
    None when ``pos`` is before our floor or past our queue, or, while we are split
    (SIMPLE, SMART: ``split_point`` given), past our split point: we may take back what
    follows it, and a node seeded there could not (its floor is past it) — the simulator
    found a muted node seeded from a split donor that kept the losing side's entries. The
    simulator's ``seed`` builds the same from the donor's queue."""
    if not agreed.floor <= pos <= agreed.seq:
        return None
    if split_point is not None and pos > split_point:
        return None
    return agreed.txid_at(pos), agreed.chain_at(pos), agreed.newest_up_to(pos)


class Compactor:
    """What compaction keeps besides the agreed queue (module docstring): the floors our
    statuses carried, the seeding holds, the peers beyond our horizon, and whether we
    need seeding. The core calls it with the agreed queue and the peers' statuses."""

    def __init__(self, node_id: str, *, counter: int, floor: int) -> None:
        self._id = node_id
        # The floors we remember with the counter from which our statuses carried each
        # (``knew_our_floor``); every status we posted before has a counter <= the
        # persisted one.
        self._floors = [(counter + 1, floor)]
        self.seed_holds: dict[str, tuple[int, int]] = {}  # hold_for_seeding
        self.beyond: set[str] = set()  # peers whose statuses are behind our floor
        self.seeding = False  # needs_seeding, as last reported

    def compact(self, agreed: AgreedQueue, now: int, *, limit: int, retention: Retention,
                peers: Mapping[str, PeerState], required: list[str],
                counter: int) -> tuple[Compaction, list[TxMeta]] | None:
        """Forget the agreed entries that every node executed, or that are past the
        retention horizon (LogMaxSize / LogMaxDepth), never past ``limit`` (what we
        executed, our split point: ``SyncNode._compact``). Returns what to persist
        (``Ready.compacted``) and the entries forgotten (None: nothing forgotten)."""
        floor = agreed.floor
        if limit <= floor:
            return None
        target = limit
        for name, peer in peers.items():
            if name in self.beyond:
                continue  # it can't be served anyway: it needs seeding
            if peer.latest is None:
                target = floor  # not heard since we started: it may need anything
                break
            target = min(target, stable(peer.latest))
        for name, (pos, until) in list(self.seed_holds.items()):
            holder = peers.get(name)
            if now >= until or (holder is not None and holder.latest is not None):
                del self.seed_holds[name]  # expired, or its own status governs now
            else:
                target = min(target, pos)
        r = retention
        if r.max_entries is not None:
            target = max(target, agreed.seq - r.max_entries)
        if r.max_age is not None:
            cutoff, pos = now - r.max_age, max(target, floor)
            while pos < limit and agreed.entries[pos - floor].timestamp < cutoff:
                pos += 1
            target = max(target, pos)
        # The horizon never passes a peer we still wait for: we ADD only with its status
        # at our merge base, so it is a few positions behind at most, and once beyond
        # it would no longer be waited for although it may be adding with our earlier
        # statuses (the simulator found it: seed 3375373473, a horizon of 2 entries).
        for name in required:
            if (st := peers[name].latest) is not None:
                target = min(target, max(st.seq, floor))
        target = min(target, limit)
        if target - floor < r.batch:
            return None
        gone = agreed.forget(target)
        # Our statuses with a higher counter carry the new floor (``knew_our_floor``; one
        # with the same counter may be from before: taken for the old, lower floor).
        self._floors.append((counter + 1, target))
        del self._floors[:-FLOOR_HISTORY]
        return Compaction(target, agreed.floor_txid, agreed.chain[0], agreed.floor_newest,
                          self._ids_after(target, peers)), gone

    def behind_our_floor(self, st: Status, latest: Status | None, relayed: bool) -> bool:
        """A status behind our floor: is its sender behind our horizon? We can't tell if
        it is consistent with us nor send it what follows, and its incoming queue may hold
        transactions agreed (and forgotten) since its position — merged, they would be
        agreed twice. It needs seeding; meanwhile we do not wait for it (unless another
        peer can serve it: ``served_by_another``). Not if the status is an old one the
        network delivered late (a lower counter than the newest we hold, ``latest`` —
        counters never go back — or the same counter at a lower position: posted within
        1 ms; the simulator found both), nor one passed on by a third node: it may be that
        old too, and a master just restarted has no newer one to tell (simulator): marked
        beyond, it would not hold back compaction."""
        return not relayed and (latest is None or (st.counter, st.seq) >= (
            latest.counter, latest.seq)) and self.knew_our_floor(st)

    def knew_our_floor(self, st: Status) -> bool:
        """Had the sender of ``st`` (behind our floor) heard a status of ours carrying a
        floor past its position? Then ``st`` is its position, not a late status posted
        before it caught up: it knew it was behind our horizon
        (``SplitRecoverer.beyond_their_horizon``) and can't ADD with us. Else we go on
        waiting for it until it tells — a status it posts once it heard ours does. Counters
        alone can't tell a late status: a node just seeded at 11 took statuses two peers had
        posted at 5 before the seeding for theirs, waited for nobody and agreed a
        transaction alone at 12 that they agreed another at (the simulator: seed 391061907,
        a horizon of 2 entries)."""
        heard = dict(st.heard).get(self._id, 0)
        floor = 0  # before the oldest floor we remember (or from before ``heard``)
        for counter, at in self._floors:
            if counter > heard:
                break
            floor = at
        return st.seq < floor

    def set_beyond(self, peer: str, beyond: bool) -> bool:
        """Mark ``peer`` beyond our horizon or not; returns whether that changed."""
        if (peer in self.beyond) is beyond:
            return False
        (self.beyond.add if beyond else self.beyond.discard)(peer)
        return True

    def hold(self, requester: str, pos: int, until: int, *, floor: int) -> None:
        """A data centre seeded from our image of ``pos`` catches up from us by replay once
        its peers add it: what follows ``pos`` is not forgotten, on anybody's account,
        before ``until`` or before ``requester`` is our peer and posted (its own status
        governs from then on). The horizon (LogMaxSize / LogMaxDepth) still applies. Held
        in memory: a donor restarted meanwhile may leave the new data centre needing
        seeding again."""
        if pos < floor:
            raise ValueError(f"position {pos} is before our floor {floor}")
        self.seed_holds[requester] = (pos, until)

    @staticmethod
    def _ids_after(target: int, peers: Mapping[str, PeerState]) -> int:
        """Up to where no peer can still hold a forgotten transaction in its incoming
        queue: none holds one agreed at or before its own stable position (it holds
        that prefix). A peer not heard from since we started: 0 (keep every id)."""
        after = target
        for peer in peers.values():
            if peer.latest is None:
                return 0
            after = min(after, stable(peer.latest))
        return after

    def check_seeding(self, agreed: AgreedQueue, peers: Mapping[str, PeerState],
                      missing: Collection[str], out: Out) -> None:
        """Do we need seeding? When every peer has posted, one is ahead of us or holds a
        payload we lack, and every peer's floor is past where we need to start from.
        A change goes to ``out`` (``Ready.needs_seeding``)."""
        latest = [p.latest for p in peers.values()]
        if not latest or any(st is None for st in latest):
            return
        seq = agreed.seq
        # A lagger gets its tail from a peer ahead of it whose floor is at or before its
        # position. A payload at 0-based position i is surely held by a peer that
        # executed it and did not forget it (floor <= i < executed); a peer that did not
        # execute it yet may hold it or not (the origin does), so we need seeding for a
        # payload only if some peer forgot it and no peer surely holds it.
        need = any(st.seq > seq for st in latest) and not any(
            st.seq > seq and st.floor <= seq for st in latest)
        if not need and missing:
            first = min(agreed.positions[t] for t in missing)
            need = any(st.floor > first for st in latest) and not any(
                st.floor <= first < st.executed for st in latest)
        if need != self.seeding:
            self.seeding = need
            out.needs_seeding = need
