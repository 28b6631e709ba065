"""The core's working values (protocol.py and its parts), not part of what it takes and
gives (ready.py): an incoming or missing entry, what the core knows of a peer, the output
gathered during one input (it becomes the ``Ready``), and how a peer's position relates
to our agreed queue.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from master_service.sync.messages import Mode, Status, TxMeta
from master_service.sync.ready import (
    Acquire,
    Activity,
    Compaction,
    Fetch,
    Inconsistency,
    Post,
    Tail,
    Truncation,
)

__all__ = ["AHEAD", "BEHIND", "DIVERGED", "FORGOTTEN", "SAME", "Entry", "Out", "PeerState"]


class Entry:
    """An incoming transaction, or a synchronised one whose payload we still lack."""

    __slots__ = ("acquired", "sources", "tx")

    def __init__(self, tx: TxMeta, acquired: bool, sources: list[str]) -> None:
        self.tx = tx
        self.acquired = acquired
        self.sources = sources


class PeerState:
    __slots__ = ("behind", "fresh", "heard_at", "latest", "mode", "newest")

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.latest: Status | None = None  # the newest status (highest counter)
        self.fresh = False  # a new status arrived since our last round ended
        self.heard_at: int | None = None  # when we last received anything from it
        self.behind = False  # its newest status was behind our floor (not ``latest``)
        self.newest = 0  # the highest counter of its statuses we received (``Status.heard``)


@dataclass
class Out:
    incoming: dict[str, None] = field(default_factory=dict)
    synchronised: list[TxMeta] = field(default_factory=list)
    acknowledge: list[str] = field(default_factory=list)
    posts: list[Post] = field(default_factory=list)
    tails: list[Tail] = field(default_factory=list)
    acquire: list[Acquire] = field(default_factory=list)
    fetches: list[Fetch] = field(default_factory=list)
    fingerprint_agrees: list[tuple[str, int]] = field(default_factory=list)
    activity: Activity | None = None
    split_changed: bool = False
    split_point_changed: bool = False
    truncated: Truncation | None = None
    compacted: Compaction | None = None
    beyond_changed: bool = False
    needs_seeding: bool | None = None
    inconsistencies: list[Inconsistency] = field(default_factory=list)


SAME, BEHIND, AHEAD, DIVERGED = "same", "behind", "ahead", "diverged"
FORGOTTEN = "forgotten"  # a position before our floor: we can't compare nor serve it
