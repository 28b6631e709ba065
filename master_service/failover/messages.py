"""The values a ``FailoverNode`` takes and gives (docs/design/failover.md): messages,
timing, what it persists, and the ``Ready`` of each step.

The Ready contract (as the sync core's, master_service/sync/ready.py): persist
``persist`` first (the epoch and the log, in one durable write), then send ``sends``,
acknowledge ``acks`` to their clients and answer ``failed`` with an error. A secondary's
``Replicated`` promises that it holds the log, so it must be durable before it is sent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields

Entry = tuple[int, str]  # (epoch the entry was first written in, txid); index = position


class Role(enum.Enum):
    SECONDARY = "secondary"  # ReadOnly=true: holds the log, changes no worker
    CANDIDATE = "candidate"  # asking the workers for a new write epoch
    PRIMARY = "primary"  # holds a write epoch granted by a majority of the workers


@dataclass(frozen=True, slots=True)
class Timing:
    """In the driver's time unit (the simulator's is the millisecond). Only liveness
    depends on these; safety holds for any values and any clock (docs/design/failover.md,
    "Defaults")."""

    heartbeat: int = 500  # primary -> secondaries and workers
    takeover_after: int = 3_000  # a secondary that has not heard the primary this long runs
    stagger: int = 500  # ... plus this per rank, so two secondaries seldom run together
    election_timeout: int = 1_000  # a candidacy without a majority ends after this
    grant_lease: int = 2_500  # a worker grants no other master while its holder is this fresh
    primary_lease: int = 2_000  # a primary without a worker majority this long steps down
    detach_after: int = 2_000  # a secondary silent this long is no longer waited for

    def __post_init__(self) -> None:
        for f in fields(self):
            name, value = f.name, getattr(self, f.name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        # A primary must stop calling itself writable before a worker can grant its epoch
        # to another master, and a secondary must not run before the workers would grant.
        if not self.primary_lease < self.grant_lease <= self.takeover_after:
            raise ValueError("need primary_lease < grant_lease <= takeover_after")


# Master -> worker
@dataclass(frozen=True, slots=True)
class AskGrant:
    epoch: int
    candidate: str
    manual: bool = False  # an operator's ReadOnly=false: the workers' lease does not hold


@dataclass(frozen=True, slots=True)
class WriteEntries:
    """Entries for positions ``start``.. (none: a heartbeat), with the sender's epoch."""

    epoch: int
    master: str
    start: int
    prev_epoch: int  # epoch of the entry at start - 1 (0 when start is 0)
    entries: tuple[Entry, ...]


# Worker -> master
@dataclass(frozen=True, slots=True)
class WorkerReply:
    """A worker's verdict (worker_service/epochs.py) on ``request_epoch``, as the
    transport carries it: the kind, the worker's epoch and holder, its history as
    (epoch, end) runs."""

    worker: str
    request_epoch: int
    kind: str  # "granted", "applied", "refused", "behind"
    promised: int
    holder: str
    runs: tuple[tuple[int, int], ...]


# Primary <-> secondaries (in the services: the TxLog peering, ReadOnly peers)
@dataclass(frozen=True, slots=True)
class Replicate:
    epoch: int
    primary: str
    log: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class Replicated:
    epoch: int
    secondary: str
    length: int  # the secondary durably holds log[:length] of this epoch's primary


@dataclass(frozen=True, slots=True)
class Send:
    to: str
    message: AskGrant | WriteEntries | Replicate | Replicated


@dataclass(frozen=True, slots=True)
class Durable:
    epoch: int = 0  # the newest epoch this master knows was granted
    log: tuple[Entry, ...] = ()


@dataclass(frozen=True, slots=True)
class Ready:
    persist: Durable | None = None
    sends: tuple[Send, ...] = ()
    acks: tuple[str, ...] = ()  # client transactions acknowledged
    failed: tuple[str, ...] = ()  # client transactions answered with an error
    role: Role | None = None  # the role after this step, when it changed
    why: str = ""  # why the role changed: logged by the driver
