"""The worker's epoch promise, kept durably and enforced (docs/design/failover.md).

``promised`` (the highest write epoch this worker granted or saw on a change) and
``holder`` (the master of that epoch) must survive kill -9 and a restart, and must be on
disk before the worker answers: a worker that granted epoch 5, crashed and came back
granting 5 again would let two masters hold a majority for it (the rule's step 2).

Where: ``epoch.json`` in the data directory itself, written atomically (a temporary file,
fsync, rename, fsync of the directory: state.write_atomically). Not in the state slots
(state.py), for two reasons. The slots belong to a store *generation*
(``data-dir/gen-N``), which an image install, a restore or a bulk load replaces by a
generation made elsewhere, and the promise is this worker's, not its data's: a
replication must not carry a source's epoch in or take this one away. And a slot is
written after every transaction group without fsync unless ``sync-writes`` is on; the
promise needs its fsync every time, which is cheap only because it changes rarely (a
grant, or the first change of a new primary). A rename-based write is atomic against a
torn write: a crash leaves the old file or the new one, never a mix.

Enforced: a change's epoch is compared with ``promised`` (an int comparison on the write
path; ``epochs.fence`` decides the rare case of a different epoch). An epoch that rises
is persisted before the change goes on, and before a grant is answered the changes of
older epochs still running here are waited for: what a master hears granted is never
followed by a change of an older epoch (the simulator's worker takes each step at once).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import replace
from pathlib import Path

from starlette.concurrency import run_in_threadpool

from worker_service import epochs
from worker_service.state import write_atomically

log = logging.getLogger("txcluster.worker")

EPOCH_FILE = "epoch.json"
# docs/design/failover.md, Timing: a worker grants no other master (automatically) while
# its holder wrote within this; below the masters' takeover_after, above primary_lease.
DEFAULT_GRANT_LEASE_MS = 2_500


class EpochFileError(Exception):
    """``epoch.json`` exists but cannot be read: the worker must not start, or it could
    grant an epoch it already granted."""


def load(data_dir: Path) -> epochs.EpochLedger:
    """The durable part of the ledger: (0, "") where nothing was ever granted or seen."""
    path = Path(data_dir) / EPOCH_FILE
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return epochs.EpochLedger()
    except ValueError as exc:
        raise EpochFileError(f"{path} is not readable JSON ({exc}); it holds the write "
                             f"epoch this worker promised: restore it or, knowing that "
                             f"no master holds an epoch here, remove it") from None
    promised, holder = (data.get("promised"), data.get("holder")) \
        if isinstance(data, dict) else (None, None)
    if type(promised) is not int or promised < 0 or not isinstance(holder, str):
        raise EpochFileError(f"{path} holds no valid promise: {data!r}")
    return epochs.EpochLedger(promised=promised, holder=holder)


def save(data_dir: Path, ledger: epochs.EpochLedger) -> None:
    """Write ``promised`` and ``holder`` durably (fsync and rename) before returning."""
    body = json.dumps({"promised": ledger.promised, "holder": ledger.holder}).encode()
    write_atomically(Path(data_dir) / EPOCH_FILE, body, sync=True)


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class Promise:
    """The ledger of a running worker: its durable part read at start, ``heard_at``
    (when the holder last changed this worker) in memory only, and the changes running
    now by their epoch. Used on the event loop only."""

    def __init__(self, data_dir: Path, lease_ms: int = DEFAULT_GRANT_LEASE_MS) -> None:
        self.data_dir = Path(data_dir)
        self.lease_ms = lease_ms
        # Restarted: the holder taken as just heard (EpochLedger.restarted), so a restart
        # alone does not hand the epoch to another master.
        self.ledger = load(self.data_dir).restarted(now_ms())
        self.promised = self.ledger.promised  # read on every change: a plain int
        self._lock = asyncio.Lock()  # one rise or grant at a time
        self._running: dict[int, int] = {}  # epoch -> changes of it running now
        self._drained: list[asyncio.Future] = []

    # ---- the write path ----

    def heard(self) -> None:
        """A change of the current epoch passed: its holder is alive (the lease)."""
        self.ledger = replace(self.ledger, heard_at=now_ms())

    def enter(self, epoch: int) -> None:
        """A change of ``epoch`` starts (checked against ``promised`` just before, with
        no await between)."""
        self._running[epoch] = self._running.get(epoch, 0) + 1

    def leave(self, epoch: int) -> None:
        left = self._running[epoch] - 1
        if left:
            self._running[epoch] = left
            return
        del self._running[epoch]
        for waiter in self._drained:
            if not waiter.done():
                waiter.set_result(None)
        self._drained.clear()

    async def _older_drained(self, epoch: int) -> None:
        while any(running < epoch for running in self._running):
            waiter = asyncio.get_running_loop().create_future()
            self._drained.append(waiter)
            await waiter

    async def _take(self, ledger: epochs.EpochLedger) -> None:
        """Make ``ledger`` (a higher epoch) this worker's: on disk first, then in force,
        then wait for the older changes still running."""
        if (ledger.promised, ledger.holder) != (self.ledger.promised, self.ledger.holder):
            await run_in_threadpool(save, self.data_dir, ledger)
            log.info("write epoch %d of master '%s' promised (was %d of '%s')",
                     ledger.promised, ledger.holder or "?", self.ledger.promised,
                     self.ledger.holder or "?")
        self.ledger, self.promised = ledger, ledger.promised
        await self._older_drained(ledger.promised)

    async def seen(self, epoch: int, master: str) -> epochs.Verdict | None:
        """A change of an epoch other than ``promised``: its REFUSED verdict when older,
        else None once the newer epoch is on disk (and the older changes are done)."""
        ledger, refused = epochs.fence(self.ledger, epoch, master, now_ms())
        if refused is not None:
            return refused  # at once, also while a grant waits for older changes
        async with self._lock:
            ledger, refused = epochs.fence(self.ledger, epoch, master, now_ms())
            if refused is None:
                await self._take(ledger)
            return refused

    # ---- the grant ----

    async def ask_grant(self, epoch: int, candidate: str, manual: bool) -> epochs.Verdict:
        """POST /cluster/epoch: epochs.ask_grant, the granted epoch on disk before the
        answer."""
        async with self._lock:
            ledger, verdict = epochs.ask_grant(self.ledger, epoch, candidate, now_ms(),
                                               lease=self.lease_ms, manual=manual)
            if verdict.kind == epochs.GRANTED:
                await self._take(ledger)
            return verdict


def refusal(epoch: int, verdict: epochs.Verdict) -> str:
    """The 409's message for a change of an older epoch."""
    owner = f"granted to master {verdict.holder}" if verdict.holder else "seen here"
    return (f"write epoch {epoch} is older than epoch {verdict.promised} {owner}: this "
            f"master was replaced")
