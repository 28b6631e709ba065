"""The per-node timestamp counter: a hybrid logical clock packed in one integer.

Spec ("Node state variables", "Post/Collect timing"): each node keeps a timestamp counter
that is posted every round. We keep it as a hybrid logical clock (Kulkarni et al.) in a
single integer, as CockroachDB and MongoDB's cluster time do: the counter follows the
physical clock given as an input, never goes backwards, moves past every timestamp it
observes, and a new local transaction gets a timestamp strictly greater than the
counter. The last rule is what makes a posted counter a promise: "every transaction I will
ever originate has a timestamp above this value" (see ``protocol.py``). It survives a
restart only if the counter is persisted before it is posted — the Ready contract.
"""

from __future__ import annotations


class HybridLogicalClock:
    __slots__ = ("_counter",)

    def __init__(self, counter: int = 0) -> None:
        if not isinstance(counter, int) or isinstance(counter, bool) or counter < 0:
            raise ValueError(f"a counter is an integer >= 0, got {counter!r}")
        self._counter = counter

    @property
    def counter(self) -> int:
        return self._counter

    def observe(self, timestamp: int) -> None:
        """Move past a timestamp (or counter) seen in a message or a transaction."""
        if timestamp > self._counter:
            self._counter = timestamp

    def tick(self, now: int) -> int:
        """Follow the physical clock (never backwards); return the counter."""
        if now > self._counter:
            self._counter = now
        return self._counter

    def next_timestamp(self, now: int) -> int:
        """A timestamp for a new local transaction: > counter, >= now if the clock allows."""
        self._counter = max(now, self._counter + 1)
        return self._counter
