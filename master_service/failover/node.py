"""Failover between the masters of one data centre as a pure state machine
(docs/design/failover.md).

One ``FailoverNode`` per master. Inputs are method calls — a client transaction
(``submit``), a message (``receive``), the clock (``tick``), the operator's ReadOnly
(``promote`` / ``demote``) — each with the current time as a value; each returns a frozen
``Ready`` (messages.py). Nothing here touches a socket, a clock, a file or a random number;
``tests/failover_sim.py`` drives masters and the workers' grant rule
(worker_service/epochs.py) together over a faulty simulated network from one seed.

The rule
--------
* A master changes a worker only with a *write epoch* granted by a majority of the
  workers; each worker grants an epoch at most once and refuses every change with an
  epoch older than one it granted or saw. Two masters never hold a majority for one
  epoch, and once a newer epoch is granted the older one cannot reach a majority again:
  never two writers, whatever the clocks, pauses and partitions.
* The primary appends a client transaction to its log, replicates the log to every
  secondary still attached (heard within ``detach_after``), sends an entry to the workers
  only once every attached secondary holds it (the spec: "all the other masters will wait
  for this master to acknowledge the transaction before sending it to their workers"),
  and acknowledges the client once a majority of the workers applied an entry of its own
  epoch at or after it (Raft's commit rule: an entry of an older epoch is not counted by
  its replicas alone).
* A candidate that won a majority takes over only if its log is at least as up to date,
  by (epoch of the last entry, length), as every granting worker's history. An
  acknowledged entry is on a majority of the workers, which meets every granting
  majority: a master that lacks it cannot take over (Raft's leader completeness). So
  "the masters that can take over" are exactly those that hold every acknowledged entry.
* A secondary runs when it has not heard the primary for ``takeover_after`` (plus a
  stagger by rank); a worker does not grant while its holder is fresh (``grant_lease``),
  so a secondary cut off from a primary that still reaches the workers deposes nobody. A
  primary that has not had a majority of the workers answer within ``primary_lease``, or
  that a worker refuses with a newer epoch, steps down and rejoins as a secondary; one
  that restarts starts as a secondary. The operator's ReadOnly=false (``promote``) asks
  for an epoch the same way, without the workers' lease.
"""

from __future__ import annotations

from master_service.failover.messages import (
    AskGrant,
    Durable,
    Entry,
    Ready,
    Replicate,
    Replicated,
    Role,
    Send,
    Timing,
    WorkerReply,
    WriteEntries,
)


def last_of(log: tuple[Entry, ...]) -> tuple[int, int]:
    """(epoch of the last entry, length): Raft's order of "more up to date"."""
    return (log[-1][0], len(log)) if log else (0, 0)


def last_of_runs(runs: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    return runs[-1] if runs else (0, 0)


def shared_prefix(runs: tuple[tuple[int, int], ...], log: tuple[Entry, ...]) -> int:
    """How much of ``log`` a worker whose history has these (epoch, end) runs holds. By
    log matching, equal epochs at a position mean equal histories up to it, so the first
    position whose epochs differ ends the shared prefix."""
    begin = 0
    for epoch, end in runs:
        for position in range(begin, end):
            if position >= len(log) or log[position][0] != epoch:
                return position
        begin = end
    return begin


class FailoverNode:
    def __init__(self, node_id: str, peers: tuple[str, ...], workers: tuple[str, ...],
                 now: int, *, rank: int = 0, timing: Timing | None = None,
                 durable: Durable | None = None) -> None:
        durable = durable or Durable()
        self.id = node_id
        self.peers = tuple(sorted(peers))
        self.workers = tuple(sorted(workers))
        self.rank = rank
        self.timing = timing or Timing()
        self.epoch = durable.epoch
        self.log = durable.log
        self.seen = durable.epoch  # the highest epoch number seen anywhere
        # A (re)started master is a secondary: an old primary rejoins by itself.
        self.role = Role.SECONDARY
        self.primary: str | None = None
        self.last_heard = now
        self._candidacy(0, now, manual=False)
        self._primacy(now)
        self._out: list[Send] = []
        self._acks: list[str] = []
        self._failed: list[str] = []
        self._persist = False
        self._changed = False
        self._why = ""

    @classmethod
    def restore(cls, node_id: str, peers: tuple[str, ...], workers: tuple[str, ...],
                durable: Durable, now: int, **kwargs) -> FailoverNode:
        """A master restarted from what it persisted."""
        return cls(node_id, peers, workers, now, durable=durable, **kwargs)

    def _candidacy(self, proposed: int, now: int, *, manual: bool) -> None:
        self.proposed = proposed
        self.manual = manual
        self.started = now
        self.asked_at = now
        self.grants: dict[str, WorkerReply] = {}
        self.refusals: set[str] = set()

    def _primacy(self, now: int) -> None:
        self.match: dict[str, int] = {}
        self.worker_heard: dict[str, int] = {}
        self.peer_len: dict[str, int] = {p: 0 for p in self.peers}
        self.peer_heard: dict[str, int] = {p: now for p in self.peers}
        self.pending: dict[str, int] = {}  # client txid -> position
        self.last_beat = now

    # --- what the driver reads --------------------------------------------------------

    @property
    def majority(self) -> int:
        return len(self.workers) // 2 + 1

    def durable(self) -> Durable:
        return Durable(self.epoch, self.log)

    def writable(self, now: int) -> bool:
        """What the health endpoint says: primary, with a majority of the workers heard
        within ``primary_lease`` (shorter than the workers' ``grant_lease``)."""
        if self.role is not Role.PRIMARY:
            return False
        fresh = sum(1 for t in self.worker_heard.values()
                    if now - t < self.timing.primary_lease)
        return fresh >= self.majority

    def sendable(self, now: int) -> int:
        """How much of the log may go to the workers: what every attached secondary
        holds."""
        attached = [p for p in self.peers
                    if now - self.peer_heard[p] < self.timing.detach_after]
        return min([len(self.log)] + [self.peer_len[p] for p in attached])

    # --- inputs ----------------------------------------------------------------------

    def tick(self, now: int) -> Ready:
        t = self.timing
        if self.role is Role.SECONDARY:
            if now - self.last_heard >= self._patience():
                self._run(now, manual=False,
                          why=f"no primary heard for {now - self.last_heard} ms")
        elif self.role is Role.CANDIDATE:
            if now - self.started >= t.election_timeout:
                self._give_up(now, "no majority of the workers answered", full=False)
            elif now - self.asked_at >= t.heartbeat:
                self.asked_at = now
                for w in self.workers:
                    if w not in self.grants and w not in self.refusals:
                        self._send(w, AskGrant(self.proposed, self.id, self.manual))
        elif not self.writable(now):
            self._step_down(now, f"no majority of the workers within {t.primary_lease} ms")
        elif now - self.last_beat >= t.heartbeat:
            self._beat(now)
        return self._ready()

    def submit(self, txid: str, now: int) -> Ready:
        """A client transaction. Only a writable primary takes it (in the services a
        secondary forwards it to the primary)."""
        if not self.writable(now):
            self._failed.append(txid)
            return self._ready()
        self.pending[txid] = len(self.log)
        self.log = (*self.log, (self.epoch, txid))
        self._persist = True
        self._beat(now)
        return self._ready()

    def promote(self, now: int) -> Ready:
        """ReadOnly=false by the operator (the spec's manual failover): the same grant as
        an automatic takeover, without waiting for the workers' lease."""
        if self.role is not Role.PRIMARY:
            self._run(now, manual=True, why="ReadOnly=false set by the operator")
        return self._ready()

    def demote(self, now: int) -> Ready:
        """ReadOnly=true by the operator."""
        self._step_down(now, "ReadOnly=true set by the operator")
        return self._ready()

    def receive(self, message: object, now: int) -> Ready:
        if isinstance(message, WorkerReply):
            self._on_worker(message, now)
        elif isinstance(message, Replicate):
            self._on_replicate(message, now)
        elif isinstance(message, Replicated):
            self._on_replicated(message, now)
        return self._ready()

    # --- steps -----------------------------------------------------------------------

    def _patience(self) -> int:
        return self.timing.takeover_after + self.rank * self.timing.stagger

    def _run(self, now: int, *, manual: bool, why: str) -> None:
        self._fail_pending()
        self._candidacy(max(self.seen, self.epoch) + 1, now, manual=manual)
        self.seen = self.proposed
        self._become(Role.CANDIDATE, f"asks for epoch {self.proposed}: {why}")
        for w in self.workers:
            self._send(w, AskGrant(self.proposed, self.id, manual))

    def _give_up(self, now: int, why: str, *, full: bool) -> None:
        """Back to secondary; run again after the full wait when a live holder or a
        better log stood in the way, sooner (by rank) when the workers were silent."""
        delay = self._patience() if full else self.timing.election_timeout * (1 + self.rank)
        self.last_heard = now - self._patience() + delay
        self._become(Role.SECONDARY, f"gives up epoch {self.proposed}: {why}")

    def _step_down(self, now: int, why: str) -> None:
        if self.role is Role.SECONDARY:
            return
        self._fail_pending()
        self.last_heard = now
        self._become(Role.SECONDARY, f"steps down from epoch {self.epoch}: {why}")

    def _fail_pending(self) -> None:
        # Their outcome is unknown to the client (a later primary may still apply them),
        # as for any request whose answer was lost.
        self._failed.extend(self.pending)
        self.pending = {}

    def _on_worker(self, r: WorkerReply, now: int) -> None:
        self.seen = max(self.seen, r.promised)
        if self.role is Role.CANDIDATE and r.request_epoch == self.proposed:
            if r.kind == "granted":
                self.grants[r.worker] = r
                if len(self.grants) >= self.majority:
                    self._decide(now)
            elif r.kind == "refused":
                self.refusals.add(r.worker)
                if len(self.refusals) > len(self.workers) - self.majority:
                    # Outbid (another candidate asked for this epoch or a newer one):
                    # run again soon above it. Refused for a live holder: wait it out.
                    outbid = r.promised >= self.proposed
                    self._give_up(now, f"refused by {len(self.refusals)} workers ("
                                  f"{r.worker} holds epoch {r.promised} of {r.holder})",
                                  full=not outbid)
        elif self.role is Role.PRIMARY and r.request_epoch == self.epoch:
            if r.kind == "refused":
                if r.promised > self.epoch:
                    self._step_down(now, f"{r.worker} holds epoch {r.promised}")
                return
            if r.kind not in ("applied", "behind"):
                return
            self.worker_heard[r.worker] = now
            self.match[r.worker] = shared_prefix(r.runs, self.log)
            if r.kind == "behind":
                self._write_to((r.worker,), now)
            self._commit()

    def _decide(self, now: int) -> None:
        """A majority granted ``proposed``: take over only with a log at least as up to
        date as every granting worker's history."""
        mine = last_of(self.log)
        for w, r in sorted(self.grants.items()):
            if last_of_runs(r.runs) > mine:
                self.epoch = max(self.epoch, self.proposed)
                self._persist = True
                self._give_up(now, f"{w} holds {last_of_runs(r.runs)}, beyond my log "
                              f"{mine}: taking over would lose acknowledged "
                              "transactions", full=True)
                return
        self.epoch = self.proposed
        self.primary = self.id
        self._persist = True
        self._primacy(now)
        self.match = {w: shared_prefix(r.runs, self.log) for w, r in self.grants.items()}
        self.worker_heard = {w: now for w in self.grants}
        self._become(Role.PRIMARY, f"holds epoch {self.epoch} from "
                     f"{len(self.grants)} of {len(self.workers)} workers")
        self._beat(now)

    def _on_replicate(self, m: Replicate, now: int) -> None:
        if m.epoch < self.epoch or m.primary == self.id:
            return  # a deposed primary: the workers fence it and tell it
        if self.role is Role.PRIMARY and m.epoch == self.epoch:
            return
        if m.epoch > self.epoch or len(m.log) > len(self.log):
            # A newer epoch's log replaces ours (what it drops was never acknowledged);
            # within one epoch the primary's log only grows, so a shorter one is stale.
            self.log = m.log
            self.epoch = m.epoch
            self._persist = True
        self.seen = max(self.seen, m.epoch)
        self.primary = m.primary
        self.last_heard = now
        if self.role is not Role.SECONDARY:
            self._fail_pending()
            self._become(Role.SECONDARY, f"follows {m.primary} at epoch {m.epoch}")
        self._send(m.primary, Replicated(m.epoch, self.id, len(self.log)))

    def _on_replicated(self, m: Replicated, now: int) -> None:
        if self.role is not Role.PRIMARY or m.epoch != self.epoch:
            return
        before = self.sendable(now)
        self.peer_len[m.secondary] = max(self.peer_len[m.secondary], m.length)
        self.peer_heard[m.secondary] = now
        if self.sendable(now) > before:
            self._write_to(self.workers, now)

    def _beat(self, now: int) -> None:
        self.last_beat = now
        for p in self.peers:
            self._send(p, Replicate(self.epoch, self.id, self.log))
        self._write_to(self.workers, now)

    def _write_to(self, workers: tuple[str, ...], now: int) -> None:
        limit = self.sendable(now)
        for w in workers:
            start = min(self.match.get(w, limit), limit)
            prev = self.log[start - 1][0] if start else 0
            self._send(w, WriteEntries(self.epoch, self.id, start, prev,
                                       self.log[start:limit]))

    def _commit(self) -> None:
        for end in range(len(self.log), 0, -1):
            if self.log[end - 1][0] != self.epoch:
                return  # only an entry of our own epoch commits (Raft, section 5.4.2)
            if sum(1 for m in self.match.values() if m >= end) >= self.majority:
                done = [tx for tx, pos in self.pending.items() if pos < end]
                for tx in done:
                    del self.pending[tx]
                self._acks.extend(done)
                return

    # --- output ----------------------------------------------------------------------

    def _send(self, to: str, message) -> None:
        self._out.append(Send(to, message))

    def _become(self, role: Role, why: str) -> None:
        self.role = role
        self._changed = True
        self._why = f"{self.id} {why}"

    def _ready(self) -> Ready:
        ready = Ready(self.durable() if self._persist else None, tuple(self._out),
                      tuple(self._acks), tuple(self._failed),
                      self.role if self._changed else None, self._why)
        self._out, self._acks, self._failed = [], [], []
        self._persist = self._changed = False
        self._why = ""
        return ready
