"""Acquisition (spec: a transaction is used only once its payload is held): from which
source a payload is asked, and when — a part of the pure core (protocol.py) with its own
state: the asks under way (``Fetches``), when each payload was last requested, and the
payloads pushed with the input in hand. The core tells it what it lacks and what came
back; it writes the requests and asks into the core's output (``Out``, the next Ready).

Requested: an entry whose payload we lack is requested (``Ready.acquire``) when the core
takes it, and again every ``Timing.acquire_retry`` until it is held.

Hedged: a source asked first can hang (the origin on the other side of a cut that is not
detected yet); waiting for its request timeout would hold the agreement of the whole side
for that long. So when an ask has not been answered within ``Timing.fetch_hedge``, the
next source is asked too, and the first valid answer wins; a source that fails is
followed by the next one at once. Sources the core names later (a retried ``Acquire``:
peers that posted it since) are asked too. When every source asked has failed the plan
ends: the acquire retry asks again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from master_service.sync.core_state import Entry, Out
from master_service.sync.messages import TxMeta
from master_service.sync.ready import Acquire, Fetch

__all__ = ["Acquisition", "Fetches", "lost_at_origin"]


class _Plan:
    __slots__ = ("asked_at", "pending", "sources", "tried", "tx")

    def __init__(self, tx: TxMeta, sources: tuple[str, ...]) -> None:
        self.tx = tx
        self.sources = list(sources)
        self.tried: set[str] = set()
        self.pending: set[str] = set()
        self.asked_at = 0


class Fetches:
    """The payloads being fetched: whom each was asked, whom to ask next, and when."""

    def __init__(self) -> None:
        self._plans: dict[str, _Plan] = {}

    def want(self, tx: TxMeta, sources: tuple[str, ...], now: int,
             peers: Collection[str]) -> list[Fetch]:
        plan = self._plans.get(tx.txid)
        if plan is not None:  # being fetched: the sources named since are asked too
            plan.sources.extend(p for p in sources if p not in plan.sources)
            return []
        plan = self._plans[tx.txid] = _Plan(tx, sources)
        return self._next(plan, now, peers)

    def failed(self, txid: str, source: str, now: int, peers: Collection[str]) -> list[Fetch]:
        plan = self._plans.get(txid)
        if plan is None or source not in plan.pending:
            return []
        plan.pending.discard(source)
        return self._next(plan, now, peers)

    def arrived(self, txid: str) -> None:
        self._plans.pop(txid, None)

    def due(self, now: int, hedge: int, peers: Collection[str]) -> list[Fetch]:
        out: list[Fetch] = []
        for plan in list(self._plans.values()):
            if now - plan.asked_at >= hedge and self._untried(plan, peers) is not None:
                out += self._next(plan, now, peers)
        return out

    def next_at(self, hedge: int, peers: Collection[str]) -> int | None:
        """When an unanswered ask is to be hedged next (None: nothing to hedge)."""
        return min((plan.asked_at + hedge for plan in self._plans.values()
                    if self._untried(plan, peers) is not None), default=None)

    @staticmethod
    def _untried(plan: _Plan, peers: Collection[str]) -> str | None:
        return next((p for p in plan.sources if p not in plan.tried and p in peers), None)

    def _next(self, plan: _Plan, now: int, peers: Collection[str]) -> list[Fetch]:
        nxt = self._untried(plan, peers)
        if nxt is None:
            if not plan.pending:
                del self._plans[plan.tx.txid]  # every source failed: the retry asks again
            return []
        plan.tried.add(nxt)
        plan.pending.add(nxt)
        plan.asked_at = now
        return [Fetch(plan.tx, nxt)]


class Acquisition:
    """The payloads the core lacks (module docstring): requested, asked of their sources,
    requested again until held."""

    def __init__(self) -> None:
        self._fetches = Fetches()
        # txid -> when its payload was last requested; only entries not acquired count
        # (an entry the core takes without its payload is requested at once: ``request``)
        self._requested: dict[str, int] = {}
        self.arriving: frozenset[str] = frozenset()  # pushed with the input in hand

    def request(self, entry: Entry, now: int, peers: Collection[str], out: Out) -> None:
        """Ask for the payload of ``entry`` (its sources in order of preference) now."""
        self._requested[entry.tx.txid] = now
        out.acquire.append(Acquire(entry.tx, tuple(entry.sources)))
        if entry.tx.txid not in self.arriving:
            out.fetches += self._fetches.want(entry.tx, tuple(entry.sources), now, peers)

    def retry(self, entries: Iterable[Entry], now: int, retry: int, peers: Collection[str],
              out: Out) -> None:
        """Request again what is still lacking ``retry`` after it was requested."""
        lacking: dict[str, int] = {}
        for entry in entries:
            if entry.acquired:
                continue
            at = self._requested.get(entry.tx.txid)
            if at is None or now - at >= retry:
                self.request(entry, now, peers, out)
                at = now
            lacking[entry.tx.txid] = at
        self._requested = lacking  # forget entries that left or were acquired

    def failed(self, txid: str, source: str, now: int, peers: Collection[str],
               out: Out) -> None:
        """``source`` could not give the payload of ``txid``: the next one is asked."""
        out.fetches += self._fetches.failed(txid, source, now, peers)

    def due(self, now: int, hedge: int, peers: Collection[str], out: Out) -> None:
        """The asks not answered within ``hedge``: their next sources are asked too."""
        out.fetches += self._fetches.due(now, hedge, peers)

    def arrived(self, txid: str) -> None:
        """The payload of ``txid`` is held, or no longer wanted: no more asks for it."""
        self._fetches.arrived(txid)
        self._requested.pop(txid, None)

    def next_at(self, hedge: int, peers: Collection[str]) -> int | None:
        """When a payload ask is to be hedged next (None: none is)."""
        return self._fetches.next_at(hedge, peers)


def lost_at_origin(tx: TxMeta, required: Collection[str],
                   collected: list[tuple[TxMeta, ...]]) -> bool:
    """Is the unacquired incoming ``tx`` lost at its origin (wiped, or restored from an
    older backup, before anyone fetched it)? ADD (protocol.py, ``_add``) asks when the
    entry sorts at or below the least counter of this round: then its origin, a
    waited-for peer, posted at our merge base with a counter past it; if that status no
    longer lists it, and no waited-for peer does (statuses list acquired transactions
    only), nobody holds its payload. It was never agreed (ADD needs it in every
    waited-for queue) and never can be; its client was never answered (the driver
    answers a write once it is agreed and applied). Kept, it would stop agreement for
    good (chaos round 203, wipe-dc, found it)."""
    return tx.origin in required and not any(
        t.txid == tx.txid for queue in collected for t in queue)
