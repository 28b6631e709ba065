"""Acquisition (spec: a transaction is used only once its payload is held): from which
source a payload is asked, and when, as a part of the pure core (protocol.py; ``Fetches``
holds its own state, the core tells it what it wants and what came back).

Hedged: a source asked first can hang (the origin on the other side of a cut that is not
detected yet); waiting for its request timeout would hold the agreement of the whole side
for that long. So when an ask has not been answered within ``Timing.fetch_hedge``, the
next source is asked too, and the first valid answer wins; a source that fails is
followed by the next one at once. Sources the core names later (a retried ``Acquire``:
peers that posted it since) are asked too. When every source asked has failed the plan
ends: the core's acquire retry (``Timing.acquire_retry``) asks again.
"""

from __future__ import annotations

from collections.abc import Collection

from master_service.sync.messages import TxMeta
from master_service.sync.ready import Acquire, Entry, Fetch, Ready, check_time

__all__ = ["AcquisitionSteps", "Fetches"]


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


class AcquisitionSteps:
    """The acquisition steps of ``SyncNode``: an entry whose payload we lack is requested
    (``Ready.acquire``, and asked of its sources through ``Fetches``), and requested
    again every ``acquire_retry`` until it is held."""

    @property
    def next_fetch_at(self) -> int | None:
        """When a payload ask is to be hedged next (tick then); None: none is."""
        return self._fetching.next_at(self._timing.fetch_hedge, self._peers)

    def fetch_failed(self, txid: str, source: str, now: int) -> Ready:
        """``source`` could not give the payload of ``txid``: the next one is asked."""
        check_time(now)
        self._out.fetches += self._fetching.failed(txid, source, now, self._peers)
        return self._finish(now)

    def _request(self, entry: Entry, now: int) -> None:
        entry.requested_at = now
        self._out.acquire.append(Acquire(entry.tx, tuple(entry.sources)))
        if entry.tx.txid not in self._arriving:
            self._out.fetches += self._fetching.want(entry.tx, tuple(entry.sources), now,
                                                     self._peers)

    @staticmethod
    def _lost_at_origin(entry: Entry, required: Collection[str],
                        collected: list[tuple[TxMeta, ...]]) -> bool:
        """Is the unacquired incoming ``entry`` lost at its origin (wiped, or restored
        from an older backup, before anyone fetched it)? ADD (``_add``) asks when the
        entry sorts at or below the least counter of this round: then its origin, a
        waited-for peer, posted at our merge base with a counter past it; if that
        status no longer lists it, and no waited-for peer does (statuses list acquired
        transactions only), nobody holds its payload. It was never agreed (ADD needs it
        in every waited-for queue) and never can be; its client was never answered (the
        driver answers a write once it is agreed and applied). Kept, it would stop
        agreement for good (chaos round 203, wipe-dc, found it)."""
        txid = entry.tx.txid
        return entry.tx.origin in required and not any(
            t.txid == txid for queue in collected for t in queue)

    def _drop_lost(self, txids: list[str]) -> None:
        """Forget incoming transactions lost at their origin. Only acquired entries are
        persisted, so this changes memory only."""
        gone = set(txids)
        self._order = [k for k in self._order if k[1] not in gone]
        for txid in txids:
            entry = self._incoming.pop(txid)
            self._fetching.arrived(txid)  # no more asks for it
            self._report(entry.tx.origin, "lost-at-origin",
                         f"{txid} is no longer held by its origin nor by any peer; it was "
                         f"never agreed and is dropped")

    def _retry_acquires(self, now: int) -> None:
        retry = self._timing.acquire_retry
        for entries in (self._incoming.values(), self._missing.values()):
            for entry in entries:
                if not entry.acquired and (entry.requested_at is None
                                           or now - entry.requested_at >= retry):
                    self._request(entry, now)
