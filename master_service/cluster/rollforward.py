"""Roll-forward: a worker found ahead of the log by exactly what the log expected next.

The write path executes a group on the probe, then records it in the log. A master
killed between the two (or whose call to the probe was lost after the probe committed)
finds the probe one group ahead of its log head, at a state the log never had. Recovered
like any other unknown state, the probe would be replicated over from a worker at the
head (losing what it executed), or, in a data centre whose only worker it is, never
recovered at all. For a transaction whose order was fixed before it executed, that is
wrong twice: it must be executed here anyway, in that order.

So when the transactions the worker executed after the head (its executed journal,
GET /cluster/journal) are exactly the ones the write path's ordering expects next
(write_path.py, Ordering.expected_next: e.g. transactions logged pending, in log order)
— and its changesets lead from the head's state, step by step, to the worker's state,
the log records them as if the answer had arrived: the same synchronised-queue entries
and the same failures. Anything else (a transaction the log does not expect, a
changeset that does not start from the head's state, a journal that does not reach the
worker's state) is no roll-forward: the worker is recovered as before.

``plan`` is that decision, pure: the worker's journal and what the log expects in,
what to record out (or why not).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from master_service.txlog.log import State
from rdfcore import fingerprint
from rdfcore.changeset import Changeset

# Farther ahead than this is not one lost group (MAX_GROUP transactions): no roll-forward.
MAX_AHEAD = 1024


@dataclass(frozen=True)
class Expected:
    """A transaction the log expects next: its id, and its position when the ordering
    numbers its transactions."""

    txid: str
    pos: int | None = None


@dataclass(frozen=True)
class Plan:
    """What to record: ``entries`` as the write path logs them (seq, txid, changeset,
    fingerprint, quads, apply_duration_s), ``failures`` (txid, error), and ``done`` —
    (pos, txid, fingerprint, quads) of each expected transaction consumed, in order, for
    an ordering that records positions executed (Ordering.record_rolled_forward)."""

    entries: list[tuple] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    done: list[tuple[int | None, str, str, int]] = field(default_factory=list)
    answers: dict[str, dict | tuple[int, str]] = field(default_factory=dict)

    @property
    def state(self) -> tuple[int, str, int] | None:
        """(seq, fingerprint, quads) after the last entry."""
        if not self.entries:
            return None
        last = self.entries[-1]
        return last[0], last[3], last[4]


class NoRollForward(Exception):
    """Why the worker's journal is not what the log expected next."""


def plan(head: State, expected: Sequence[Expected], journal: dict) -> Plan:
    """Match a worker's journal (the /cluster/journal answer for ``after=head.seq``)
    against the transactions the log expects after ``head``; NoRollForward says why not.

    Refusals interleave with entries by the seq they were made at: a refusal of the
    transaction expected next is recorded as its failure (the probe refused it on the
    state the log records there, as it would have answered); any other refusal (one the
    log recorded before, or not ours) changed nothing and is passed over."""
    try:
        seq, fp, quads = journal["seq"], journal["fingerprint"], journal["quads"]
        entries, refused = list(journal["entries"]), list(journal["refused"])
    except (KeyError, TypeError) as exc:
        raise NoRollForward(f"the journal answer lacks {exc}") from None
    if not isinstance(seq, int) or seq <= head.seq:
        raise NoRollForward(f"the worker (seq {seq}) is not ahead of the log ({head.seq})")
    if seq - head.seq > MAX_AHEAD:
        raise NoRollForward(f"the worker is {seq - head.seq} transactions ahead, more than "
                            f"one group")
    seqs = [e.get("seq") if isinstance(e, dict) else None for e in entries]
    if seqs != list(range(head.seq + 1, seq + 1)):
        raise NoRollForward(f"the journal does not hold seqs {head.seq + 1}..{seq}")
    out = Plan()
    state = [head.fingerprint, head.quads]
    queue = list(expected)

    def consume(txid: str) -> Expected | None:
        if queue and queue[0].txid == txid:
            return queue.pop(0)
        return None

    def refusals_at(at: int) -> None:
        for r in refused:
            if isinstance(r, dict) and r.get("after") == at and \
                    (e := consume(r.get("txid"))) is not None:
                error = str(r.get("error"))
                out.failures.append((e.txid, error))
                out.done.append((e.pos, e.txid, state[0], state[1]))
                out.answers[e.txid] = (int(r.get("status") or 400), error)

    for entry in entries:
        refusals_at(entry["seq"] - 1)
        txid = entry.get("txid")
        e = consume(txid)
        if e is None:
            nxt = queue[0].txid if queue else "none"
            raise NoRollForward(f"transaction {txid} at seq {entry['seq']} is not the one "
                                f"the log expects next ({nxt})")
        try:
            cs = Changeset.from_wire(entry["changeset"])
            after = fingerprint.to_hex(cs.moved_fingerprint(fingerprint.from_hex(state[0])))
        except (KeyError, TypeError, ValueError) as exc:
            raise NoRollForward(f"seq {entry['seq']}: {exc}") from None
        moved = [after, state[1] + len(cs.added) - len(cs.removed)]
        if moved != [entry.get("fingerprint"), entry.get("quads")]:
            raise NoRollForward(
                f"seq {entry['seq']} does not lead from the log's state to the worker's "
                f"(fingerprint {moved[0]}, {moved[1]} quads; the worker says "
                f"{entry.get('fingerprint')}, {entry.get('quads')})")
        state = moved
        duration = entry.get("duration_s")
        duration = float(duration) if isinstance(duration, int | float) and duration >= 0 \
            else 0.0
        out.entries.append((entry["seq"], txid, entry["changeset"], after, moved[1],
                            duration))
        out.done.append((e.pos, txid, after, moved[1]))
        out.answers[txid] = {"txid": txid, "seq": entry["seq"], "fingerprint": after,
                             **({"position": e.pos} if e.pos is not None else {})}
    refusals_at(seq)
    if state != [fp, quads]:
        raise NoRollForward(f"the journal leads to fingerprint {state[0]} ({state[1]} "
                            f"quads), the worker is at {fp} ({quads} quads)")
    return out
