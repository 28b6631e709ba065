"""What goes with a status besides the status: relayed statuses and pushed payloads, as
a part of the pure core (protocol.py; ``Relaying`` holds its own state, the core asks it
when it posts and tells it what it heard).

Relaying (spec, "Split-brain use case": with one connection lost, "the updates that are
communicated with the reachable master are sent to the unreachable master on the next
ADD step"). Each status names the peers its sender has not heard from directly for a
while (``silent``: no direct status for ``max(3 x round_timeout, 2 x idle_interval)``); a
master that hears one of them passes that peer's latest direct status on, with the
payloads of its queue that it holds (up to ``PUSH_BYTES``). A relayed status is a status
like any other to the core (it is the origin's, and every hop is authenticated by the
peer secret), so a lost link is not a split while some master reaches both ends.

Pushing: our own new transactions' payloads go along with the status that first lists
them for a peer (up to ``PUSH_BYTES`` a status): the peer then holds them without
fetching them, which takes one round trip off every commit. Fetching (the spec's
acquisition, acquisition.py) stays for the rest and for every retry. Only transactions
submitted here since the core started are pushed (the driver holds their payloads in
memory); once agreed, every peer holds them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from master_service.sync.messages import Status
from master_service.sync.ready import Relayed, Timing

__all__ = ["PUSH_BYTES", "Relaying"]

PUSH_BYTES = 256 * 1024  # payloads pushed (or relayed) with one status, at most


class Relaying:
    """Which peers are silent, what to relay to whom, what to push to whom."""

    def __init__(self, node_id: str, own: Iterable[str] = ()) -> None:
        self._id = node_id
        self._direct: dict[str, tuple[int, Status]] = {}  # peer -> (when, its status)
        self._silent: dict[str, frozenset[str]] = {}  # peer -> peers it does not hear
        self._own: dict[str, None] = dict.fromkeys(own)  # ours, not agreed yet (to push)
        self._pushed_to: dict[str, set[str]] = {}  # peer -> own txids pushed to it

    def heard(self, st: Status, now: int, silent: Iterable[str] | None) -> None:
        """A status straight from its sender, naming the peers it does not hear."""
        self._direct[st.sender] = (now, st)
        self._silent[st.sender] = frozenset(p for p in silent or () if isinstance(p, str))

    def forget(self, peer: str) -> None:
        self._direct.pop(peer, None)
        self._silent.pop(peer, None)
        self._pushed_to.pop(peer, None)

    def submitted(self, txid: str) -> None:
        self._own[txid] = None

    def agreed(self, txid: str) -> None:
        if self._own.pop(txid, 0) is None:
            for sent in self._pushed_to.values():
                sent.discard(txid)

    @property
    def own(self) -> tuple[str, ...]:
        return tuple(self._own)

    def silent_peers(self, peers: Iterable[str], timing: Timing, now: int) -> tuple[str, ...]:
        quiet = max(3 * timing.round_timeout, 2 * timing.idle_interval)
        return tuple(sorted(p for p in peers if p not in self._direct
                            or now - self._direct[p][0] > quiet))

    def relay(self, to: str, silent: tuple[str, ...], peers: Iterable[str],
              holds: Callable[[str], bool]) -> tuple[Relayed, ...]:
        """The latest direct statuses of the peers that ``to`` does not hear (and we do),
        with the payloads of their queues that we hold."""
        wanted = self._silent.get(to, frozenset()) - {to, self._id}
        configured = set(peers)
        out = []
        budget = PUSH_BYTES
        for peer in sorted(wanted):
            if peer not in configured or peer not in self._direct or peer in silent:
                continue
            st = self._direct[peer][1]
            payloads = []
            for tx in st.queue:
                if holds(tx.txid) and tx.size <= budget:
                    budget -= tx.size
                    payloads.append(tx.txid)
            out.append(Relayed(st, tuple(payloads)))
        return tuple(out)

    def push(self, to: str, st: Status) -> tuple[str, ...]:
        """Our own transactions in ``st`` not pushed to ``to`` yet, up to PUSH_BYTES."""
        sent = self._pushed_to.setdefault(to, set())
        out = []
        budget = PUSH_BYTES
        for tx in st.queue:
            if tx.origin != self._id or tx.txid in sent or tx.txid not in self._own:
                continue
            if tx.size > budget:
                continue
            budget -= tx.size
            out.append(tx.txid)
            sent.add(tx.txid)
        return tuple(out)
