"""Split recovery (spec, "Split recovery strategies"): what detects a split, keeps its
split point, rejoins and decides to truncate, a part of the pure core (protocol.py).
``SplitRecoverer`` holds its own state (the split point, the excluded, rejoining and
left-behind peers, since when a peer diverges); the core calls it with the agreed queue
(agreed_queue.py), the peers' states and its output (``Out``, the next Ready). A step
that must truncate returns True and the core truncates (``SyncNode._truncate``: the
queues are the core's), telling it ``truncated``.

Where safety ends: the split
----------------------------
((1) and (2): protocol.py, "Why ADD is safe".)
When no progress was made for ``max_peer_lag`` while there is work, the waited-for peers
not heard from for that long are *excluded* and reported in ``split_suspected``; the
remaining nodes go on without them (spec, "Missing nodes") and ADD no longer waits for
their status or counter, nor for the payloads of their transactions that we heard of but
could not fetch: ADD passes over those (statuses list acquired transactions only, so the
argument of (1) holds for queues without them, and what is added past them is post-split,
which split recovery settles; without it a side that heard of one write of the other side
before the cut stops for the whole split: tests/test_partitions.py found it). (1) still
holds between nodes that wait for each other, and a node that excludes nobody agrees with
every node it waits for, even one that excluded it (the case analysis of (1) with the
counters of (2)). Two nodes can therefore only diverge when one excludes the other and the other
excludes somebody: the split brain of the spec (a partition longer than max peer lag).
A node that takes, under NONE, entries a peer agreed without somebody (the
tail segment names whom) excludes that somebody too once it has not heard from it for
max peer lag itself (``check_stall``): it progresses without stalling, so the stall alone
would leave it waiting for ever. An excluded peer is waited for again as soon as it posts
a merge base consistent with ours. A status whose merge base is not ours at its
position, or a tail segment that does not extend our queue, is reported in
``inconsistencies`` and never applied; what happens next is the split recovery strategy.

Split recovery
--------------
``SplitRecovery`` (spec, "Split recovery strategies"): ``NONE`` reports divergence and
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
  a restarted split node cannot vote; under SMART too it truncates (the simulator found
  that a restarted node that waited for "consistent" peers instead ended its split on
  statuses of peers that still excluded it, which then diverged from it);
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
  node with the larger id of the two truncates (the simulator found this deadlock).
  And the vote never keeps a post-split entry that *contradicts another node's good
  prefix*: every status of a split node carries its good prefix (``Status.split_point``
  and ``split_chain``; a node that is not split posts none, its whole queue is good), and
  a rejoining peer whose good prefix differs from our queue past our split point (or a
  diverged tail segment that differs inside the sender's good prefix) makes us truncate
  whatever the vote. Good prefixes being consistent, such a difference always lies past
  our split point, and the peer cannot go back before it; without this rule the two
  wait for each other for ever. The simulator found it (seed 2201640281, Smart, 3
  masters): n3 ended its split when the excluded n1 came back *behind* it, so the two
  entries n3 had agreed with n2 during the split became good; a crash kept them from n2,
  which then split from n3 at an earlier position with n1 and agreed other entries
  there; n1 and n2 won the vote, and n3, holding them in its good prefix, had nothing to
  truncate.

*Tail segments while split*: a node that takes post-split entries joins the sender's
side of the split. To a peer it excludes or counts as rejoining, or to a muted one, a
split node (SIMPLE or SMART) hands out nothing past its split point: it may take those
entries back (SIMPLE, or SMART when the vote goes against it), and even a node that
would keep now may lose a later vote after its excluded set grew. To a peer of its own
side (neither excluded nor rejoining; read-write or read-only) it sends everything, and
every tail segment of a split node carries its ``split_point`` and whom it went on
without (``excluded``: excluded and rejoining peers). The receiver appends entries past
the sender's split point only if it is split itself (it has a split point and excludes
somebody, not the sender, and is not restored-and-rejoining); they land past its own
split point (at most its queue's length), which stays — lowering it to the sender's
would take back entries that its statuses posted as good, which peers may have forgotten
on that account (the simulator found it: seed 119, five masters, Smart) — and it adds the
sender's excluded peers to its own. Otherwise it
appends only the entries up to the sender's split point: a node that waits for everybody
— one that truncated at its rejoin, or has not noticed the split yet — re-negotiates
instead of taking back post-split decisions (the simulator found SIMPLE nodes of one
side handing a truncated peer its old post-split entries back, over and over); one that
has not noticed the split yet joins once it excludes the missing peers itself (after
``max_peer_lag``). So the receiver treats those entries exactly as the sender does: they
are past its good prefix; at its rejoin it truncates (SIMPLE) or
votes with (at least) the sender's view of the split (SMART: ``side = n - excluded``
counts the inherited exclusions; the deadlock breaker and re-votes apply as for any
split node); after a restart it holds the persisted split point and truncates at its
first rejoin (the excluded set is not persisted). This lifts a liveness hole that the
simulator did not catch before it checked progress *during* a split
(tests/test_partitions.py found it with real processes): a node of the larger side
that lagged one entry behind a peer at the split (the peer added it with the node's
status from before the node excluded anyone) used to get no tail past the peer's split
point, so the two never waited at one merge base again and the larger side stopped for
the whole split. A muted master never splits, so it still gets nothing past a split
point until the split heals. (A master from before this rule sends no split with its
segments, but it never sends past its split point either.)

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
"""

from __future__ import annotations

from collections.abc import Mapping

from master_service.sync.agreed_queue import AgreedQueue
from master_service.sync.core_state import AHEAD, BEHIND, DIVERGED, SAME, Out, PeerState
from master_service.sync.messages import Mode, Status, TailSegment, TxMeta
from master_service.sync.ready import SplitRecovery, Tail, Timing

__all__ = ["SplitRecoverer"]


class SplitRecoverer:
    """A node's split (module docstring): whom it went on without, its split point, the
    peers rejoining it. The core calls it with its agreed queue, the peers' states and
    its output; a step that returns True asks the core to truncate (``truncated``)."""

    def __init__(self, node_id: str, mode: Mode, recovery: SplitRecovery, point: int | None,
                 peers: Mapping[str, PeerState]) -> None:
        self._id = node_id
        self._mode = mode
        self._recovery = recovery
        # the last known good position while split (module docstring, "Split recovery")
        self._point = point
        self._excluded: set[str] = set()
        self._left_behind: set[str] = set()  # check_stall
        self._apart_since: dict[str, int] = {}  # SMART: excluded peer -> diverged since
        # restored while split: we forgot whom we excluded, so every peer is rejoining
        self._rejoining: set[str] = set() if point is None else {
            p for p, s in peers.items() if s.mode is not Mode.MUTED}

    # ------------------------------------------------------------------ views

    @property
    def point(self) -> int | None:
        """The split point (persisted), None when not split."""
        return self._point

    @property
    def recovery(self) -> SplitRecovery:
        return self._recovery

    @property
    def excluded(self) -> frozenset[str]:
        """The peers we went on without (``split_suspected``)."""
        return frozenset(self._excluded)

    def excludes(self, peer: str) -> bool:
        return peer in self._excluded

    @property
    def good_point(self) -> int | None:
        """The split point while it repairs something (SIMPLE, SMART): our good prefix
        ends there; None otherwise."""
        return self._point if self._split() else None

    @property
    def settled(self) -> bool:
        """No split point, nobody excluded nor rejoining."""
        return self._point is None and not self._excluded and not self._rejoining

    def _split(self) -> bool:
        return self._point is not None and self._recovery is not SplitRecovery.NONE

    # ------------------------------------------------------------------ detection

    def heard(self, peer: str) -> None:
        """``peer`` talks to us: we wait for it again (``check_stall``)."""
        self._left_behind.discard(peer)

    def check_stall(self, now: int, lag: int | None, stalled_since: int | None,
                    required: list[str], agreed: AgreedQueue,
                    peers: Mapping[str, PeerState], out: Out) -> bool:
        """Spec, "Missing nodes": no progress for max_peer_lag -> go on without them.
        True when stalled (the stall starts again now)."""
        if lag is None:
            return False
        silent = {p for p in required
                  if peers[p].heard_at is None or now - peers[p].heard_at >= lag}
        stalled = stalled_since is not None and now - stalled_since >= lag
        if not stalled:
            # Progress, but maybe only by entries that a peer agreed without somebody we
            # still wait for (under NONE we take them all, ``join_senders_side``): silent
            # for max_peer_lag here too, it is missing for us as well. Else we would wait
            # for it for ever while the queue goes on without it, and never forget past
            # its position (a data centre wiped for good held a node's floor at 0).
            self._exclude(silent & self._left_behind, agreed.seq, out)
            return False
        self._exclude(silent - self._anchors(agreed.seq, peers), agreed.seq, out)
        return True

    def _exclude(self, missing: set[str], seq: int, out: Out) -> None:
        if not missing:
            return
        if not self._excluded and self._point is None and self._mode is not Mode.MUTED:
            # an exclusion episode starts: our last known good state
            self._point = seq
            out.split_point_changed = True
        self._excluded |= missing
        self._left_behind -= missing
        out.split_changed = True

    def forget_peer(self, peer: str, out: Out) -> None:
        """``remove_peer``: a peer that is gone is neither excluded nor rejoining."""
        self._left_behind.discard(peer)
        if peer in self._rejoining:
            self._rejoining.discard(peer)
            self._split_maybe_over(out)
        if peer in self._excluded:
            self._excluded.discard(peer)
            out.split_changed = True
            self._split_maybe_over(out)

    # ------------------------------------------------------------------ tail segments

    def tail_limit(self, peer: str, mode: Mode) -> int | None:
        """While split, a node hands out entries after its split point only to a peer of
        its own side (read-write or read-only, neither excluded nor rejoining), which
        joins the split with them (``join_senders_side``); to the others — excluded,
        rejoining, muted — never: it may take them back (SIMPLE, or SMART when the vote
        goes against it), and a node that took them without a split point would keep
        them."""
        if not self._split():
            return None
        if mode is not Mode.MUTED and peer not in self._excluded and peer not in self._rejoining:
            return None
        return self._point

    def join_senders_side(self, seg: TailSegment, new: tuple[TxMeta, ...],
                          agreed: AgreedQueue, peers: Mapping[str, PeerState],
                          out: Out) -> tuple[TxMeta, ...]:
        """We are about to append ``new`` (the end of ``seg``) after our queue. Entries
        past the sender's split point are post-split decisions of its side: we take them
        only if we are split ourselves (a split point and somebody excluded, the sender
        not) — then we join its side: whom it went on without (our split point stays:
        the entries land past it) — else only those up to its split point (a node that
        truncated, or that waits for everybody, re-negotiates instead). Under NONE we
        take them all, and note whom the sender went on without (``check_stall``)."""
        point = seg.split_point
        if self._recovery is SplitRecovery.NONE:
            if new:  # agreed by a sender that went on without seg.excluded
                self._left_behind |= {p for p in seg.excluded if p in peers}
            return new
        if point is None:
            return new
        past = agreed.seq + len(new) - point
        if past <= 0:
            return new
        if (self._mode is Mode.MUTED or self._point is None or not self._excluded
                or seg.sender in self._excluded or self._rejoining
                or point < agreed.floor or self._anchors(agreed.seq, peers)):
            # (a split point before our floor: we forgot entries the sender may take back
            # — only the retention horizon passes a peer's split point — so we can't
            # join its side, which could make us truncate there)
            return new[:max(0, len(new) - past)]
        # Our split point stays: the entries we append are past it anyway (it is at most
        # our queue's length), and lowering it to the sender's would take back entries
        # that our statuses already posted as good, which peers may have forgotten on
        # our account since (module docstring, "Tail segments while split").
        joined = {p for p in seg.excluded if p in peers} - self._excluded
        if joined:
            self._excluded |= joined
            out.split_changed = True
        return new

    def view(self) -> tuple[int | None, tuple[str, ...]]:
        """What a tail segment says of our split: the split point and whom we went on
        without (excluded and rejoining peers), or None and () when not split. Under NONE
        no split point (it repairs nothing) but whom we excluded, for a receiver that
        takes our entries while it still waits for them (``check_stall``)."""
        if not self._split():
            if self._recovery is SplitRecovery.NONE and self._excluded:
                return None, tuple(sorted(self._excluded))
            return None, ()
        return self._point, tuple(sorted(self._excluded | self._rejoining))

    def send_diverged(self, peer: str, seq: int, agreed: AgreedQueue, max_tail: int,
                      out: Out) -> None:
        """A peer posted a merge base that diverged from our queue at ``seq``: send it our
        entries up to there, which it cannot append — so it learns that it diverged even
        when its queue is longer than ours (a status ahead of us tells us nothing) and
        rejoins. From a split node too, with its split point (the chaos suite found two
        masters of one side, diverged past the keeper's split point, waiting for each
        other for ever: the one behind saw the keeper only as ahead of it): a peer that
        appends the segment later (after truncating) takes nothing past that split point
        unless it joins our split (``join_senders_side``)."""
        start = max(agreed.floor, seq - max_tail)
        if start >= seq:
            return  # nothing before our floor to show it (it is reported on our side)
        out.tails.append(Tail(peer, agreed.segment(self._id, start, seq, *self.view())))

    def tail_diverged(self, peer: str, now: int, in_good_prefix: bool,
                      peers: Mapping[str, PeerState], timing: Timing, out: Out) -> bool:
        """A tail segment of ``peer`` does not extend our queue; ``in_good_prefix``: the
        first difference lies in the sender's good prefix. True: truncate."""
        if (self._point is not None and self._recovery is not SplitRecovery.NONE
                and peers[peer].mode is not Mode.MUTED):
            # Good prefixes are consistent, so a difference inside the sender's good
            # prefix is past our split point: one of our post-split entries contradicts it.
            return self.rejoin(peer, DIVERGED, now, in_good_prefix, peers, timing, out)
        return False

    # ------------------------------------------------------------------ statuses

    def contradicts(self, st: Status, agreed: AgreedQueue) -> bool:
        """Does the good prefix of ``st``'s sender (as its status says) contradict our
        queue? Only past our split point, since good prefixes are consistent; so it
        means that one of our post-split entries differs from an entry of its good
        prefix. When its good prefix is longer than our queue we cannot tell from a
        status (a diverged tail segment tells, ``SyncNode._on_tail``)."""
        good, chain = (st.seq, st.chain) if st.split_point is None else (
            st.split_point, st.split_chain)
        if self._point is None or good <= self._point:
            return False
        return agreed.floor <= good <= agreed.seq and agreed.chain_at(good) != chain

    def rejoins(self, st: Status, relation: str, mode: Mode) -> bool:
        """Does ``st`` make its sender rejoin us (module docstring, "Rejoin")? Then the
        core calls ``rejoin`` before anything is sent."""
        return self._point is not None and self._recovery is not SplitRecovery.NONE and (
            st.sender in self._excluded or (relation == DIVERGED and mode is not Mode.MUTED)
            or st.sender in self._rejoining)

    def _keeps(self, peers: Mapping[str, PeerState]) -> bool:
        """SMART's majority vote (module docstring, "Split recovery")."""
        voters = [self._id] + [p for p, s in peers.items() if s.mode is not Mode.MUTED]
        out = {p for p in self._excluded if p in voters}
        side, n = len(voters) - len(out), len(voters)
        return 2 * side > n or (2 * side == n and min(voters) not in out)

    def rejoin(self, peer: str, relation: str, now: int, contradicted: bool,
               peers: Mapping[str, PeerState], timing: Timing, out: Out) -> bool:
        """A peer of the other side is back (or diverged from us): SIMPLE truncates,
        SMART truncates unless the vote says we keep our state — and always when one of
        our post-split entries contradicts the peer's good prefix (``contradicted``).
        True: truncate."""
        if peer not in self._excluded:
            self._excluded.add(peer)  # it diverged from us: we cannot wait for it
            out.split_changed = True
        if (self._recovery is SplitRecovery.SMART and self._keeps(peers)
                and not self._rejoining and not contradicted):
            if relation not in (DIVERGED, AHEAD):
                return False  # consistent with us: waited for again (``back``)
            # Both sides may win their own vote (each counts its own excluded set): if
            # this peer still diverges after max_peer_lag, the larger id of the two gives in.
            since = self._apart_since.setdefault(peer, now)
            patience = timing.max_peer_lag or timing.idle_interval
            if now - since < patience or self._id < peer:
                return False
        return True

    def rejoin_beyond(self, st: Status, now: int, peers: Mapping[str, PeerState],
                      timing: Timing, out: Out) -> bool:
        """A peer we went on without posts a position before our floor: we can't compare
        its queue, but a status without a split point says its whole queue is its good
        prefix, consistent with ours (the claim above), so it is back and consistent,
        only behind our horizon. It rejoins as a consistent lagger would (the vote may
        make us truncate: True); without this, a keeping node whose only excluded peer
        needs seeding stays split for ever, and a split node gives no image past its
        split point (``seed_point``): the simulator found the two waiting for each other."""
        if (st.split_point is not None or not self._split()
                or st.sender not in self._excluded | self._rejoining
                or peers[st.sender].mode is Mode.MUTED):
            return False
        if self.rejoin(st.sender, BEHIND, now, False, peers, timing, out):
            return True  # the truncation empties the excluded set
        self._waited_for_again(st.sender, out)
        return False

    def consistent_again(self, peer: str, relation: str, out: Out) -> None:
        """Restored while split, ``peer`` posted a merge base consistent with ours."""
        if peer in self._rejoining and relation in (SAME, BEHIND):
            self._rejoining.discard(peer)
            self._split_maybe_over(out)

    def back(self, peer: str, relation: str, out: Out) -> None:
        """An excluded ``peer`` posted a merge base consistent with ours (not ahead): it
        is waited for again; the split may be over (first: a recovered node's tail
        segments carry everything)."""
        if peer in self._excluded and relation != AHEAD:
            self._apart_since.pop(peer, None)
            self._excluded.discard(peer)
            out.split_changed = True
            self._split_maybe_over(out)

    def _waited_for_again(self, peer: str, out: Out) -> None:
        """``peer`` is no longer excluded nor rejoining; the split may be over."""
        self._apart_since.pop(peer, None)
        self._excluded.discard(peer)
        self._rejoining.discard(peer)
        out.split_changed = True
        self._split_maybe_over(out)

    def _anchors(self, seq: int, peers: Mapping[str, PeerState]) -> set[str]:
        """The peers whose floor is past our position (``beyond_their_horizon``)."""
        return {p for p, s in peers.items()
                if s.latest is not None and self._behind_floor_of(s.latest, seq, peers)}

    def _behind_floor_of(self, st: Status, seq: int, peers: Mapping[str, PeerState]) -> bool:
        """Under SIMPLE or SMART: is our position before the floor of ``st``'s sender (not
        muted)? We must not go on without it (``beyond_their_horizon``)."""
        return (self._recovery is not SplitRecovery.NONE and st.floor > seq
                and peers[st.sender].mode is not Mode.MUTED)

    def beyond_their_horizon(self, st: Status, seq: int, peers: Mapping[str, PeerState],
                             out: Out) -> bool:
        """A peer forgot entries past our position: we are beyond *its* horizon (the
        mirror of ``rejoin_beyond``). What it forgot is in its good prefix (a floor never
        passes a split point) and it can never take it back; it no longer waits for us
        (we are ``beyond`` to it) and goes on without a split point. So we must not go
        on without it: it is never excluded (``check_stall``) and we join no split
        (``join_senders_side``) while it is so; we wait and need seeding from it
        (``Compactor.check_seeding``). Post-split entries of ours are truncated (True):
        we cannot compare them with what it forgot, and if they differ nobody could ever
        take either back. The simulator found it (seed 677540770, Smart, a horizon of 2
        entries): n2 cleared its split when n1 and n3 came back behind it, forgot past
        them and went on alone; they excluded n2, which never posts at their merge base,
        and agreed the same transactions in another order, and nobody could truncate or
        seed."""
        if not self._behind_floor_of(st, seq, peers):
            return False
        if self._point is not None and seq > self._point:
            return True  # the truncation empties the excluded set
        if st.sender in self._excluded | self._rejoining:
            self._waited_for_again(st.sender, out)
        return False

    # ------------------------------------------------------------------ the split's end

    def truncated(self, out: Out) -> None:
        """The core truncated its queue to the split point: the split is over and we wait
        for every peer again."""
        self._point = None
        out.split_point_changed = True
        self._rejoining.clear()
        self._apart_since.clear()
        if self._excluded:
            self._excluded.clear()
            out.split_changed = True

    def follow_floor(self, floor: int, out: Out) -> None:
        """Compaction passed the split point — only under NONE, which repairs nothing
        (else the core never forgets past it): the split point follows the floor."""
        if self._point is not None and self._point < floor:
            self._point = floor
            out.split_point_changed = True

    def _split_maybe_over(self, out: Out) -> None:
        if not self._excluded and not self._rejoining and self._point is not None:
            self._point = None  # every excluded peer is back and consistent
            out.split_point_changed = True
