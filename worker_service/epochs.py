"""The worker's half of failover fencing (docs/design/failover.md): the write epoch.

The masters of one data centre share their workers, and exactly one of them may change a
worker. The right to change the workers is a *write epoch*, a number that only grows,
granted by a majority of the workers; every change a master sends carries its epoch and a
worker refuses a change carrying an epoch older than one it has granted or seen (a
fencing token: Chubby's sequencers, Kleppmann's "How to do distributed locking"). So a
primary that was paused, cut off or restarted cannot change a worker once a newer epoch
was granted, whatever its clock says.

Pure: a frozen ``EpochLedger`` in, a new ledger and a ``Verdict`` out. The worker persists
``promised``, ``holder`` and ``history`` (everything but ``heard_at``) before it answers;
the master side (``master_service/failover``) does not import this module, nor this the
master's: the two meet only through the messages the transport carries (HTTP in the
services, ``tests/failover_sim.py`` in the simulator that models both together).

An entry of the history is ``(epoch it was written in, txid)``; its position is its
index. Positions and epochs follow Raft's log matching: two histories holding an entry
of the same epoch at the same position are identical up to it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

Entry = tuple[int, str]  # (epoch the entry was first written in, txid)

GRANTED = "granted"
APPLIED = "applied"
REFUSED = "refused"
BEHIND = "behind"  # the change does not follow this worker's history: resend from ``runs``


def runs_of(history: tuple[Entry, ...]) -> tuple[tuple[int, int], ...]:
    """The history as (epoch, end position) runs: enough for a master to find the longest
    prefix it shares with this worker (log matching), and a few numbers long."""
    runs: list[tuple[int, int]] = []
    for position, (epoch, _) in enumerate(history):
        if runs and runs[-1][0] == epoch:
            runs[-1] = (epoch, position + 1)
        else:
            runs.append((epoch, position + 1))
    return tuple(runs)


@dataclass(frozen=True, slots=True)
class EpochLedger:
    """What a worker knows of the write epochs. ``promised`` is the highest epoch it has
    granted or seen on a change (it never goes back, also across restarts); ``holder``
    the master it belongs to; ``heard_at`` (not persisted) when the holder last wrote or
    heartbeat, which only delays grants to other masters (liveness, never safety)."""

    promised: int = 0
    holder: str = ""
    history: tuple[Entry, ...] = ()
    heard_at: int | None = None

    def restarted(self, now: int) -> EpochLedger:
        """The ledger as a restarted worker reads it back: the durable part, and a holder
        taken as just heard, so a restart alone does not hand the epoch to another master
        (``heard_at`` is volatile)."""
        return replace(self, heard_at=now)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The worker's answer: ``kind`` (GRANTED, APPLIED, REFUSED, BEHIND), its epoch
    after the step, and its history as runs (for the master's catch-up and the
    candidate's up-to-date check). ``replaced`` counts the entries an applied change
    dropped: a suffix written by a deposed primary, never acknowledged; in the services
    this is a full replication of the worker from a good copy."""

    kind: str
    promised: int
    holder: str
    length: int
    runs: tuple[tuple[int, int], ...]
    replaced: int = 0


def _verdict(kind: str, ledger: EpochLedger, replaced: int = 0) -> Verdict:
    return Verdict(kind, ledger.promised, ledger.holder, len(ledger.history),
                   runs_of(ledger.history), replaced)


def ask_grant(ledger: EpochLedger, epoch: int, candidate: str, now: int, *, lease: int,
              manual: bool = False) -> tuple[EpochLedger, Verdict]:
    """A master asks for ``epoch``. Granted only if it is newer than every epoch this
    worker granted or saw (each epoch at most once, so at most one master ever holds a
    majority for it) and, unless an operator asked (``manual``: ReadOnly=false on a
    secondary), the current holder has not been heard for ``lease`` — a live primary is
    not deposed by a secondary that merely lost sight of it (Raft's leader stickiness)."""
    if epoch == ledger.promised and candidate == ledger.holder:
        return ledger, _verdict(GRANTED, ledger)  # a duplicate ask: the same answer
    if epoch <= ledger.promised:
        return ledger, _verdict(REFUSED, ledger)
    live = ledger.heard_at is not None and now - ledger.heard_at < lease
    if live and not manual and ledger.holder not in ("", candidate):
        return ledger, _verdict(REFUSED, ledger)
    # Not heard yet: only a holder that writes keeps the others out, not a candidacy
    # that may still fail (it would stall every other candidate for a lease).
    granted = replace(ledger, promised=epoch, holder=candidate, heard_at=None)
    return granted, _verdict(GRANTED, granted)


def fence(ledger: EpochLedger, epoch: int, master: str, now: int, *,
          check_epochs: bool = True) -> tuple[EpochLedger, Verdict | None]:
    """The epoch half of ``write``, what a worker checks on every change before anything
    else: a REFUSED verdict when ``epoch`` is older than ``promised``; else None and the
    ledger with a newer epoch taken as seen (``master`` its holder: it got a majority
    elsewhere) and the holder heard. A worker that persists the ledger does so when
    ``promised`` rose, before it applies the change."""
    if check_epochs and epoch < ledger.promised:
        return ledger, _verdict(REFUSED, ledger)
    if epoch > ledger.promised:
        ledger = replace(ledger, promised=epoch, holder=master)
    if master == ledger.holder:
        ledger = replace(ledger, heard_at=now)
    return ledger, None


def write(ledger: EpochLedger, epoch: int, master: str, start: int, prev_epoch: int,
          entries: tuple[Entry, ...], now: int, *,
          check_epochs: bool = True) -> tuple[EpochLedger, Verdict]:
    """A master sends ``entries`` for positions ``start``.. with its write epoch (no
    entries: a heartbeat). Refused when ``epoch`` is older than ``promised`` — the fence.
    A newer epoch is taken as seen (its holder got a majority elsewhere). The change must
    follow the history: ``start`` within it and the entry before it of ``prev_epoch``,
    else BEHIND. An entry that differs from the one held at its position replaces it and
    everything after (a deposed primary's unacknowledged suffix). ``check_epochs=False``
    is the broken worker the simulator uses to show that its checker can fail."""
    ledger, refused = fence(ledger, epoch, master, now, check_epochs=check_epochs)
    if refused is not None:
        return ledger, refused
    history = ledger.history
    if start > len(history) or (start > 0 and history[start - 1][0] != prev_epoch):
        return ledger, _verdict(BEHIND, ledger)
    replaced = 0
    for offset, entry in enumerate(entries):
        position = start + offset
        if position < len(history):
            if history[position] == entry:
                continue
            replaced = len(history) - position
            history = history[:position]
        history = (*history, entry)
    ledger = replace(ledger, history=history)
    return ledger, _verdict(APPLIED, ledger, replaced)
