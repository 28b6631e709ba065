"""Read routing: a priority queue on the queries running on each worker (pure policy).

docs/design/rdf4j-protocol.md#consistency-levels (read routing): each read goes to the available
worker with the fewest queries currently running; the queue is rearranged after every read; on a
timeout or lost connection the read is re-sent to another worker. Ties go to the worker that was
chosen least recently, so an idle cluster spreads reads evenly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class ReadStats:
    running: int = 0
    completed: int = 0
    failed: int = 0
    total_time_s: float = 0.0
    last_chosen: int = 0

    @property
    def average_s(self) -> float:
        return self.total_time_s / self.completed if self.completed else 0.0


@dataclass
class Router:
    stats: dict[str, ReadStats] = field(default_factory=dict)
    _clock: int = 0

    def choose(self, candidates: Iterable[str], exclude: Iterable[str] = ()) -> str | None:
        """The worker for the next read, or None when no candidate is left."""
        skip = set(exclude)
        best: tuple[int, int, str] | None = None
        for url in candidates:
            if url in skip:
                continue
            st = self.stats.setdefault(url, ReadStats())
            key = (st.running, st.last_chosen, url)
            if best is None or key < best:
                best = key
        if best is None:
            return None
        self._clock += 1
        chosen = self.stats[best[2]]
        chosen.last_chosen = self._clock
        chosen.running += 1
        return best[2]

    def done(self, url: str, seconds: float, ok: bool) -> None:
        st = self.stats.setdefault(url, ReadStats())
        st.running = max(0, st.running - 1)
        if ok:
            st.completed += 1
            st.total_time_s += seconds
        else:
            st.failed += 1

    def forget(self, url: str) -> None:
        self.stats.pop(url, None)
