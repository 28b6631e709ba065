"""The applier around ``SyncNode``: the inputs (client writes, peers' messages, payloads
that arrived, the clock) stepped into the core, and its Readies persisted and acted on.

Theory of operation
-------------------
Every input (a client write, a peer's message, a payload that arrived, the round
deadline) is a synchronous call on the one ``SyncNode``, on the master's asyncio loop; each
returns a ``Ready``. Readies queue up for one *applier* task which follows the Ready
contract (ready.py): it persists everything queued in ONE SQLite transaction (the
Readies merged in order, with the payloads of new transactions: applier.py, shared with
the simulator), in the txlog's thread,
and only then acts on each Ready in order — posts and tail segments to the transport
(transport.py), payload asks, the executor woken, the next round scheduled. Concurrent
clients and messages are thereby group-committed, the same way the single data-centre
write path is.

Every protocol decision is the core's (protocol.py and its parts): what to post, relay
and push to whom (relaying.py), which source a payload is asked from and when
(acquisition.py), whether a peer's fingerprint diverges from ours (fingerprints.py).
The driver only tells it the time, what arrived and this data centre's fingerprints.

The execution room (execution.py) runs agreed transactions in the agreed order on this
data centre's workers (ordering.py, ``Cluster.execute``) and answers the client that
submitted one here once it is synchronised and applied on this master's probe worker;
the payloads persisted here and the positions agreed are handed to it as they become
durable, so that it rarely reads them back from the log.

A receiver refuses messages from nodes that are not configured peers
(docs/design/cluster-basics.md#master-modes), and a request whose parts are not all taken.
Time: milliseconds of the wall clock (time.time), which the hybrid logical clock follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from master_service.errors import NotWritable, WriteFailed
from master_service.sync import wire
from master_service.sync.applier import Applier
from master_service.sync.execution import Execution
from master_service.sync.messages import InvalidMessage, Mode, TxMeta, applies_agreed
from master_service.sync.ordering import AgreedOrdering
from master_service.sync.protocol import SyncNode
from master_service.sync.ready import (
    ExecutedAt,
    PersistentState,
    Ready,
    Refused,
    Retention,
    SplitRecovery,
    Timing,
    UnknownPeer,
)
from master_service.sync.sqlite_storage import SqliteStorage
from master_service.sync.status import Health, PeerInfo, driver_status
from master_service.sync.transport import Transport, pushed_payloads, relayed_statuses
from master_service.txlog.txids import new_txid

log = logging.getLogger("txcluster.sync")

# Agreed entries are forgotten in steps of at least this many (compaction.py, Retention).
COMPACT_BATCH = 64

__all__ = ["SyncDriver"]


def now_ms() -> int:
    return int(time.time() * 1000)


class SyncDriver:
    """Runs one master's side of the TxLog sync protocol (module docstring)."""

    def __init__(self, *, node_id: str, mode: Mode, peers: Mapping[str, str], secret: bytes,
                 agreement: SqliteStorage, cluster: Any, scheduler: Any, timing: Timing,
                 request_timeout: float = 30.0, data_centre: str | None = None,
                 on_round: Callable[[float], None] | None = None,
                 on_needs_seeding: Callable[[], None] | None = None,
                 split_recovery: SplitRecovery = SplitRecovery.NONE,
                 tls: ssl.SSLContext | None = None,
                 ordering: AgreedOrdering | None = None) -> None:
        self.node_id = node_id
        self.data_centre = data_centre or node_id
        self.mode = mode
        self.agreement = agreement
        self.applier = Applier(agreement)  # the Readies' durable part, through the storage
        self.cluster = cluster
        self.scheduler = scheduler
        self.timing = timing
        self.request_timeout = request_timeout
        self.peers: dict[str, PeerInfo] = {p: PeerInfo() for p in peers}
        self.transport = Transport(node_id=node_id, secret=secret,
                                   request_timeout=request_timeout, tls=tls,
                                   executed=self._executed_now, payload=self._payload_bytes)
        self._urls = dict(peers)
        self.node: SyncNode | None = None
        self.health = Health()  # splits, divergences, seeding (status.py)
        self.failed: str | None = None  # the applier could not persist: we stop taking input
        self._queue: list[tuple[Ready, list[tuple[TxMeta, list]]]] = []
        self._queued = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._waiters: dict[str, asyncio.Future] = {}
        self._persist_failures: list[float] = []  # when group commits failed (monotonic)
        self._own_payloads: dict[str, bytes] = {}  # ours, not yet agreed (to push)
        self._tasks: list[asyncio.Task] = []
        self._round_at: int | None = None
        self._fetch_at: int | None = None
        self._fetch_timer: asyncio.TimerHandle | None = None
        self._stopping = False
        self.on_round = on_round  # metrics: called with each round's duration (seconds)
        self.on_needs_seeding = on_needs_seeding
        # Split recovery (docs/design/sync-protocol.md#split-recovery).
        self.split_recovery = split_recovery
        # The execution room (execution.py): agreed transactions executed through the
        # agreed ordering (ordering.py), split backup and rollback; it reports back here.
        self.execution = Execution(
            node_id=node_id, agreement=agreement, ordering=ordering, cluster=cluster,
            may_execute=lambda: applies_agreed(self.cluster.read_only, self.mode),
            backs_up=lambda: self.split_recovery is not SplitRecovery.NONE,
            on_executed=self._executed, on_answers=self._answer,
            on_rolled_back=self._rolled_back, agreed_up_to=lambda: self.node.seq)
        self._deadline_seen: int | None = None
        self._round_started: float | None = None
        self._base_fingerprint = "0" * 32  # this data centre's state at agreed position 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.transport.start(self._urls)
        await self.execution.load()
        self._base_fingerprint = (await self.cluster.db(self.agreement.base)).fingerprint
        state, missing = await self.cluster.db(self.agreement.load)
        self.node = self._core(state, missing, {p: Mode.READ_WRITE for p in self.peers})
        await self.execution.start(self.node.split_point)
        self._tasks = [asyncio.create_task(self._applier(), name="sync applier")]
        # Payload retries and round deadlines that are due: APScheduler (3.x) runs them.
        self.scheduler.add_job(self._retry_tick, "interval",
                               seconds=self.timing.acquire_retry / 1000, id="sync-acquire",
                               max_instances=1, coalesce=True, replace_existing=True)
        self._step(lambda now: self.node.tick(now))
        self.execution.wake()
        log.info("sync: %s (%s) peers with %s at agreed position %d, executed %d",
                 self.node_id, self.mode.value, ", ".join(sorted(self.peers)) or "nobody",
                 self.node.seq, self.executed_pos)

    def _core(self, state: PersistentState, missing: list[str],
              peers: Mapping[str, Mode]) -> SyncNode:
        # during a rollback our executed position is not known yet (rolled_back tells the
        # core): claim nothing
        executed = 0 if self._rollback is not None else self.executed_pos
        return SyncNode.restore(self.node_id, state, now=now_ms(), peers=dict(peers),
                                mode=self.mode, timing=self.timing, missing_payloads=missing,
                                split_recovery=self.split_recovery, retention=self._retention(),
                                executed=executed, pushable=list(self._own_payloads))

    def _retention(self) -> Retention:
        """LogMaxSize / LogMaxDepth of the data centre's log are the agreed queue's
        horizon too (docs/design/sync-protocol.md#bounded-state)."""
        size = getattr(self.cluster, "log_max_size", None)
        depth = getattr(self.cluster, "log_max_depth_h", None)
        return Retention(max_entries=int(size) if size else None,
                         max_age=int(float(depth) * 3_600_000) if depth else None,
                         batch=COMPACT_BATCH)

    async def stop(self) -> None:
        self._stopping = True
        for job in ("sync-acquire", "sync-round"):
            with contextlib.suppress(Exception):
                self.scheduler.remove_job(job)
        if self._fetch_timer is not None:
            self._fetch_timer.cancel()
        await self.execution.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(NotWritable("master is shutting down"))
        await self.transport.close()

    # ------------------------------------------------------------------ inputs

    def _step(self, call: Callable[[int], Ready],
              payloads: list[tuple[TxMeta, list]] | None = None) -> Ready:
        if self.failed:
            raise NotWritable(f"peering stopped: {self.failed}")
        ready = call(now_ms())
        self._queue.append((ready, payloads if payloads is not None else []))
        self._idle.clear()
        self._queued.set()
        return ready

    async def submit(self, operations: list[dict]) -> dict:
        """A client write at this master: agreed with the peers, executed here, answered."""
        payload = wire.canonical_payload(operations)
        txid = new_txid()
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters[txid] = fut
        pays: list[tuple[TxMeta, list]] = []
        try:
            ready = self._step(lambda now: self.node.submit(
                txid, size=len(payload), digest=wire.payload_digest(payload), now=now), pays)
        except BaseException as exc:
            self._waiters.pop(txid, None)
            if isinstance(exc, Refused):
                raise NotWritable(str(exc)) from None
            raise
        # Its metadata is incoming, or already synchronised (a master without peers).
        tx = next((t for t in (*(i.tx for i in ready.incoming), *ready.synchronised)
                   if t.txid == txid), None)
        if tx is None:
            # Seen once under heavy load (StopIteration here); the core still has it.
            tx = self.node.transaction(txid)
            log.warning("sync: the Ready of client transaction %s did not list it (%s)",
                        txid, "found in the core" if tx else "unknown to the core")
            if tx is None:
                self._waiters.pop(txid, None)
                raise WriteFailed(500, f"transaction {txid} was not taken; retry it")
        if self.peers:
            self._own_payloads[txid] = payload
        pays.append((tx, operations))  # its payload: in the same commit as its metadata
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self.request_timeout)
        except TimeoutError:
            raise WriteFailed(504, f"transaction {txid} is logged but not yet agreed with "
                              "the peers or executed; it will be, in the agreed order "
                              "(check with the admin status)") from None
        finally:
            if fut.done():
                self._waiters.pop(txid, None)

    def receive_status(self, body: Any) -> None:
        """POST /peer/status. InvalidMessage (400), UnknownPeer (403): nothing taken."""
        if not isinstance(body, dict):
            raise InvalidMessage("the body must be a JSON object")
        st = wire.status_from_json(body.get("status"))
        info = self._peer(st.sender)
        tails = wire.status_tails(body, st.sender)
        pushed = pushed_payloads(st, body.get("payloads"))
        silent = body.get("silent")
        silent = [p for p in silent if isinstance(p, str)] if isinstance(silent, list) else []
        executed = self._executed_at(body.get("executed"))
        for message in (*tails, st):  # all checked before any is taken (its mode included)
            self.node.check(message, now_ms())
        for seg in tails:  # each taken as if sent alone
            self._step(lambda now, seg=seg: self.node.receive(seg, now))
        if self.node.peers.get(st.sender) is not st.mode:
            # Modes are learnt from the peers' own statuses: a muted peer is not waited
            # for, a read-only one is (docs/design/sync-protocol.md#master-modes).
            log.info("sync: peer %s is %s", st.sender, st.mode.value)
            self._step(lambda now: self.node.add_peer(st.sender, st.mode, now=now))
        self._step(lambda now: self.node.receive(st, now, executed=executed, silent=silent,
                                                 pushed=pushed))
        self._take_pushed(pushed)
        info.last_heard, info.seq = time.time(), st.seq
        if executed is not None:
            info.executed = executed.pos
        if isinstance(relayed := body.get("relayed"), list):
            self._take_relayed(st.sender, relayed)

    def _executed_at(self, executed: Any) -> ExecutedAt | None:
        """A status's executed position and fingerprint, with ours at that position."""
        if not isinstance(executed, dict):
            return None
        pos, theirs = executed.get("pos"), executed.get("fingerprint")
        if not isinstance(pos, int) or not isinstance(theirs, str):
            return None
        ours = None
        if pos <= self.executed_pos:
            ours = self.executed_fp if pos == self.executed_pos else self._recent.get(pos)
            if ours is None and pos == 0:
                ours = self._base_fingerprint
        return ExecutedAt(pos, theirs, ours)

    def _executed_now(self) -> dict[str, Any]:
        return {"pos": self.executed_pos, "fingerprint": self.executed_fp}

    async def _payload_bytes(self, txid: str) -> bytes | None:
        """A payload to push or relay: ours in memory, else from the log (its thread)."""
        if (own := self._own_payloads.get(txid)) is not None:
            return own
        return await self.cluster.db(self.agreement.payload, txid)

    def _take_relayed(self, relayer: str, relayed: list) -> None:
        """Statuses of other peers passed on by ``relayer`` (relaying.py)."""
        for st, pushed in relayed_statuses(relayed, relayer, self.node_id, self.peers):
            if self.node.peers.get(st.sender) is not st.mode:
                continue  # modes are learnt from the peer itself
            try:
                self._step(lambda now, st=st, pushed=pushed: self.node.receive(
                    st, now, relayed_by=relayer, pushed=pushed))
            except InvalidMessage as exc:  # as from its sender; the relayer's own is taken
                log.warning("sync: ignored a status relayed by %s: %s", relayer, exc)
            else:
                self.peers[st.sender].last_heard = time.time()
                self._take_pushed(pushed)

    def _take_pushed(self, pushed: dict[str, tuple[TxMeta, list]]) -> None:
        for txid, (tx, operations) in pushed.items():
            if self.node.wants_payload(txid):
                self._step(lambda now, txid=txid: self.node.acquired(txid, now),
                           [(tx, operations)])

    def _fetched(self, tx: TxMeta, source: str, operations: list | None) -> None:
        """The answer to one payload ask (Ready.fetches)."""
        if self._stopping or self.failed:
            return
        if operations is None:
            self._step(lambda now: self.node.fetch_failed(tx.txid, source, now))
        else:
            self._step(lambda now: self.node.acquired(tx.txid, now), [(tx, operations)])

    def receive_tail(self, body: Any) -> None:
        seg = wire.tail_from_json(body)
        info = self._peer(seg.sender)
        self._step(lambda now: self.node.receive(seg, now))
        info.last_heard = time.time()

    def _peer(self, sender: str) -> PeerInfo:
        if (info := self.peers.get(sender)) is None:
            raise UnknownPeer(f"'{sender}' is not a configured peer of {self.node_id}")
        return info

    def payload(self, txid: str, requester: str) -> bytes | None:
        """GET /peer/transactions/<txid> (sync: run it in a thread)."""
        self._peer(requester)
        return self.agreement.payload(txid)

    async def _retry_tick(self) -> None:
        # A coroutine: APScheduler's AsyncIOExecutor runs a plain function in its thread
        # pool, where this stepped the core while the loop did too (seen under load).
        if not self._stopping and self.node is not None and not self.failed:
            retention = self._retention()
            if retention != self.node.retention:  # LogMaxSize / LogMaxDepth were written
                self._step(lambda now: self.node.set_retention(retention, now=now))
            self._step(lambda now: self.node.tick(now))

    # ------------------------------------------------------------------ membership, mode

    def hold_for_seeding(self, requester: str, pos: int, lease_ms: int) -> None:
        """A data centre seeds from our image of ``pos``: keep what follows (seeding.py)."""
        self._step(lambda t: self.node.hold_for_seeding(requester, pos, until=t + lease_ms, now=t))

    async def add_peer(self, peer: str, url: str) -> None:
        if peer in self.peers:
            raise ValueError(f"'{peer}' is already a sync peer")
        self.peers[peer] = PeerInfo()
        self.transport.add_peer(peer, url)
        self._step(lambda now: self.node.add_peer(peer, Mode.READ_WRITE, now=now))
        log.info("sync: peer %s added (%s)", peer, url)

    async def remove_peer(self, peer: str) -> None:
        if peer not in self.peers:
            raise ValueError(f"'{peer}' is not a sync peer of {self.node_id}")
        self._step(lambda now: self.node.remove_peer(peer, now=now))
        del self.peers[peer]
        self.transport.remove_peer(peer)
        log.info("sync: peer %s removed", peer)

    async def set_mode(self, mode: Mode) -> None:
        """A mode change at runtime is a restart of the protocol core from what it has
        persisted (as after a crash): the core takes its mode at construction."""
        if mode is self.mode:  # muted, and ReadOnly changed: execution may resume
            self.execution.wake()
            return
        await self._restart_core(lambda: setattr(self, "mode", mode))
        log.info("sync: %s is now %s", self.node_id, mode.value)

    def set_max_peer_lag(self, seconds: float | None) -> None:
        """MaxPeerLag written at runtime (JMX, Jolokia): the core uses it from its next
        step on; None (0 in cluster.properties) waits for missing peers indefinitely."""
        lag = None if not seconds else max(1, int(seconds * 1000))
        self.timing = dataclasses.replace(self.timing, max_peer_lag=lag)
        self._step(lambda now: self.node.set_max_peer_lag(lag, now=now))
        log.info("sync: max-peer-lag is now %s", f"{seconds} s" if lag else "unset (wait)")

    async def set_split_recovery(self, strategy: SplitRecovery) -> None:
        """SplitRecovery changed at runtime; refused during a split (the spec: the
        strategies are stateful)."""
        if strategy is self.split_recovery:
            return
        if self.split_point is not None or self._rollback is not None:
            raise ValueError("SplitRecovery can't be changed during a split")
        await self._restart_core(lambda: setattr(self, "split_recovery", strategy))
        log.info("sync: split recovery is now %s", strategy.value)

    async def _restart_core(self, change: Callable[[], None]) -> None:
        """Apply ``change`` and rebuild the core from what it persisted, keeping the peers'
        modes: the core takes its mode and strategy only at construction. Once every
        queued Ready is persisted, what the core asked to persist IS what is persisted
        (the Ready contract), so the new core is built from that, in memory: nothing
        awaits between reading it and the swap (an input that stepped the old core in
        between would be lost with it)."""
        while not self._idle.is_set():  # everything the old core promised is persisted
            await self._idle.wait()
        state = self.node.persistent_state()
        # incoming entries merged from a peer and not acquired are not persisted
        # (_persist_merged): a restarted core does not know them either
        state = dataclasses.replace(state, incoming=tuple(
            i for i in state.incoming if i.acquired))
        missing = sorted(self.node.missing_payloads)
        change()
        self._swap_core(state, missing, self.node.peers)

    def _swap_core(self, state: PersistentState, missing: list[str],
                   peers: Mapping[str, Mode]) -> None:
        """A new core from what is persisted (where a restart would leave us), told the
        time so that it acts at once."""
        self.node = self._core(state, missing, peers)
        self.execution.forget_offered()  # what it executes next comes from the log
        if self.node.split_point != self.split_point:
            self.execution.split_point_moved(self.node.split_point)
        self._step(lambda now: self.node.tick(now))
        self.execution.wake()

    # ------------------------------------------------------------------ the applier

    async def _applier(self) -> None:
        while True:
            await self._queued.wait()
            self._queued.clear()
            while self._queue:
                batch, self._queue = self._queue, []
                try:
                    await self._persist(batch)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # The core believes this is durable: going on with it could break a
                    # promise (a counter, an acknowledged transaction). Nothing of these
                    # Readies was acted on, so a core rebuilt from what is persisted is
                    # where a crash and restart would leave us: safe by design.
                    dropped, self._queue = batch + self._queue, []
                    if not await self._restart_after_failed_persist(exc, dropped):
                        return
                    continue
                for ready, payloads in batch:
                    if payloads:  # an agreed transaction may have been waiting for it
                        self.execution.hold(payloads)  # durable now
                        self.execution.wake()
                    self._act(ready)
            if not self._queue:
                self._idle.set()

    async def _restart_after_failed_persist(self, exc: Exception,
                                            dropped: list[tuple[Ready, list]]) -> bool:
        """A group commit failed: refuse the client transactions of the dropped Readies
        (not logged) and rebuild the core from SQLite, as a restart would; at most 3 times
        a minute, then stop peering (a disk that keeps failing)."""
        now = time.monotonic()
        self._persist_failures = [t for t in self._persist_failures if now - t < 60] + [now]
        for ready, _ in dropped:
            for txid in ready.acknowledge:
                self._own_payloads.pop(txid, None)
                fut = self._waiters.pop(txid, None)
                if fut is not None and not fut.done():
                    fut.set_exception(WriteFailed(503, (
                        f"transaction {txid} was not logged: the sync state could not be "
                        "persisted; nothing was changed, send it again")))
        self.failed = f"could not persist the sync state: {exc}"
        if len(self._persist_failures) > 3:
            log.critical("sync: %s (4 times in a minute): peering stops", self.failed,
                         exc_info=True)
            return False
        log.critical("sync: could not persist the sync state (%s): the protocol core "
                     "restarts from what is persisted, as after a crash", exc, exc_info=True)
        # Read in the txlog's thread; meanwhile ``failed`` refuses every input, which
        # would step the old core (it believes what was dropped is durable).
        try:
            state, missing = await self.cluster.db(self.agreement.load)
        except Exception as again:
            self.failed = f"could not persist the sync state: {exc}; reload failed: {again}"
            log.critical("sync: %s", self.failed, exc_info=True)
            return False
        self._queue = []  # whatever the old core said meanwhile (nothing: inputs refused)
        self.failed = None
        self._swap_core(state, missing, self.node.peers)
        return True

    async def _persist(self, batch: list[tuple[Ready, list[tuple[TxMeta, list]]]]) -> None:
        """Persist the queued Readies (applier.py), each write in the txlog's thread."""
        for commit in self.applier.commits(batch):
            await self.cluster.db(self.applier.write, commit)

    def _act(self, ready: Ready) -> None:
        for tail in ready.tails:  # before the status: it finds the lagger caught up
            self.transport.tail(tail.to, tail.segment)
        for post in ready.posts:
            self.transport.post(post)
        for ask in ready.fetches:
            self.transport.fetch(ask.tx, ask.source, self._fetched)
        if ready.synchronised:  # the execution room is woken below (agreed)
            for tx in ready.synchronised:  # agreed: every peer holds it, no more pushes
                self._own_payloads.pop(tx.txid, None)
        if ready.activity is not None:
            log.debug("sync: %s", ready.activity.value)
        self.health.note(ready)
        if ready.needs_seeding and self.on_needs_seeding is not None:
            self.on_needs_seeding()  # the master seeds its data centre (seeding.py)
        if ready.split_point_changed:
            self.execution.split_point_moved(ready.split_point)
        if ready.truncated is not None:
            t = ready.truncated
            log.warning("sync: split recovery (%s): the %d agreed transactions after "
                        "position %d are negotiated again; this data centre returns to the "
                        "state at that position", self.split_recovery.value, len(t.entries),
                        t.after_seq)
            self.execution.start_rollback()  # offered positions are agreed anew
        if ready.synchronised:  # durable now, at the positions the core gave them: wakes it
            self.execution.agreed(ready.seq, ready.synchronised)
        if ready.next_round_at != self._deadline_seen:
            # The deadline moves exactly when a round ends (protocol.py, _complete_round)
            t = time.monotonic()
            if self._round_started is not None and self.on_round is not None:
                self.on_round(t - self._round_started)
            self._round_started, self._deadline_seen = t, ready.next_round_at
        self._schedule_round(ready.next_round_at)
        self._schedule_fetch(ready.next_fetch_at)
        self._tasks = [t for t in self._tasks if not t.done()]

    def _schedule_round(self, at: int) -> None:
        # Only moved earlier (an early tick reschedules): add_job per round cost ~9% CPU
        if self._stopping or (self._round_at is not None and self._round_at <= at):
            return
        self._round_at = at
        self.scheduler.add_job(self._round_due, "date", run_date=datetime.fromtimestamp(at / 1000),
                               id="sync-round", replace_existing=True, misfire_grace_time=None)

    async def _round_due(self) -> None:  # on the event loop, as _retry_tick
        self._round_at = None
        if not self._stopping and not self.failed:
            self._step(lambda now: self.node.tick(now))

    def _schedule_fetch(self, at: int | None) -> None:
        """The core's next payload ask to hedge (acquisition.py) is due at ``at``."""
        if at == self._fetch_at or self._stopping:
            return
        if self._fetch_timer is not None:
            self._fetch_timer.cancel()  # a cancelled handle may stay: cancel is idempotent
        self._fetch_at = at
        if at is not None:
            self._fetch_timer = asyncio.get_running_loop().call_later(
                max(0, at - now_ms() + 1) / 1000, self._fetch_due)

    def _fetch_due(self) -> None:
        self._fetch_at = self._fetch_timer = None
        if not self._stopping and not self.failed:
            self._step(lambda now: self.node.tick(now))

    # ------------------------------------------------------------------ execution's reports

    def _executed(self, pos: int) -> None:
        """Agreed transactions up to ``pos`` are executed here: posted to the peers, and
        what everybody executed is forgotten."""
        if not self._stopping and not self.failed:
            self._step(lambda now: self.node.executed(pos, now))

    def _answer(self, answers: dict[str, Any]) -> None:
        """The answers of executed transactions, to the clients that submitted them here."""
        for txid, answer in answers.items():
            fut = self._waiters.pop(txid, None)
            if fut is None or fut.done():
                continue
            if isinstance(answer, Exception):
                fut.set_exception(answer)
            else:
                fut.set_result(answer)

    def _rolled_back(self, pos: int) -> None:
        self._step(lambda now: self.node.rolled_back(pos, now))

    # The execution room's state, as the status and the comparisons read it.
    executed_pos = property(lambda self: self.execution.executed_pos)
    executed_fp = property(lambda self: self.execution.executed_fp)
    _recent = property(lambda self: self.execution.recent)
    split_point = property(lambda self: self.execution.split_point)
    split_backup_name = property(lambda self: self.execution.split_backup_name)
    recovery_problem = property(lambda self: self.execution.recovery_problem)
    _rollback = property(lambda self: self.execution.rollback)

    # ------------------------------------------------------------------ status

    @property
    def rolling_back(self) -> bool:
        """Is this data centre returning to a truncation point (split recovery)?"""
        return self._rollback is not None

    def status(self) -> dict[str, Any]:
        return driver_status(self)
