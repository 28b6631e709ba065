"""The thin shell around ``SyncNode``: HTTP to peers, SQLite, the clock, APScheduler.

Theory of operation
-------------------
Every input (a client write, a peer's message, a payload that arrived, the round
deadline) is a synchronous call on the one ``SyncNode``, on the master's asyncio loop; each
returns a ``Ready``. Readies queue up for one *applier* task which follows the Ready
contract (protocol.py): it persists everything queued in ONE SQLite transaction (the
Readies merged in order, with the payloads of new transactions) and only then acts on
each Ready in order — posts and tail segments to the per-peer senders, payload fetches,
the executor woken, the next round scheduled. Concurrent clients and messages are thereby
group-committed, the same way the single data-centre write path is.

The *executor* (execution.py) runs agreed transactions (the synchronised queue) in the
agreed order on this data centre's workers through the agreed ordering (ordering.py) —
probe, control queries, changeset logged, forwarded — and answers the client that
submitted one here: a client's
write is acknowledged once it is synchronised and applied on this master's probe worker.
A transaction the probe refuses is refused identically in every data centre (same data,
same order) and moves no fingerprint.

Peers (docs/design/sync-protocol.md#transaction-exchange): statuses and tail segments are POSTed to
``<peer>/peer/status`` and ``/peer/tail``; a payload is fetched from
``/peer/transactions/<txid>`` and checked against the digest and size its status
announced. Every request is signed with the peer secret (txcluster/auth.py: HMAC over the
request with a nonce, so a captured message can't be re-sent) and a receiver refuses
messages from nodes that are not configured peers. A sender keeps at most one unsent
status per peer (a newer status replaces it: statuses are cumulative) and drops what a
dead peer can't take — the protocol re-posts every round.

Divergence between data centres (docs/design/sync-protocol.md#where-we-differ: non-deterministic
updates, and any store bug): every status carries the sender's last executed agreed position and
its fingerprint after it; the receiver compares it with its own at that position and
logs and reports a mismatch.

Time: milliseconds of the wall clock (time.time), which the hybrid logical clock follows.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import ssl
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

import aiohttp

from master_service.errors import NotWritable, WriteFailed
from master_service.sync import wire
from master_service.sync.execution import Execution
from master_service.sync.messages import InvalidMessage, Mode, Status, TailSegment, TxMeta
from master_service.sync.ordering import AgreedOrdering
from master_service.sync.protocol import (
    Acquire,
    Activity,
    Compaction,
    Incoming,
    PersistentState,
    Ready,
    Refused,
    Retention,
    SplitRecovery,
    SyncNode,
    Timing,
    UnknownPeer,
)
from master_service.txlog.agreement import AgreementLog, canonical_payload, payload_digest
from txcluster.signed_session import SignedSession

log = logging.getLogger("txcluster.sync")

PUSH_BYTES = 256 * 1024  # payloads pushed with one status, at most
# A payload source that has not answered in this long is not waited for alone: the next
# one is asked too (_fetch). Well above a fetch across data centres (tens of ms), well
# below a request timeout.
FETCH_HEDGE_S = 0.5
# Agreed entries are forgotten in steps of at least this many (protocol.py, Retention).
COMPACT_BATCH = 64

__all__ = ["SyncDriver", "mode_of"]


def mode_of(read_only: bool, mode: str) -> Mode:
    """The protocol mode of a master from its ReadOnly and Mode attributes."""
    if mode == "MUTE":
        return Mode.MUTED
    return Mode.READ_ONLY if read_only else Mode.READ_WRITE


def now_ms() -> int:
    return int(time.time() * 1000)


def _operations(payload: bytes) -> list[dict] | None:
    """A payload's operations, or None if it is not a JSON list of objects: a peer's
    digest only says which bytes it announced, not that they are a transaction (a
    payload that is not JSON must be refused, not crash the peer API)."""
    try:
        operations = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(operations, list) or not all(isinstance(o, dict) for o in operations):
        return None
    return operations


@dataclass
class PeerInfo:
    url: str
    last_heard: float | None = None  # wall clock, seconds
    reachable: bool | None = None  # did our last send reach it
    seq: int | None = None  # agreed position it posted
    executed: int | None = None  # its last executed position
    fingerprint_match: bool | None = None  # at that position, vs ours
    direct_heard: float | None = None  # last status from it directly (not relayed)
    direct_status: dict | None = None  # that status, as JSON (to relay)
    silent: set[str] = field(default_factory=set)  # peers it does not hear directly


class _Sender:
    """Messages to one peer, in order; an unsent status is replaced by a newer one."""

    def __init__(self, driver: SyncDriver, peer: str) -> None:
        self.driver, self.peer = driver, peer
        self.queue: deque[tuple[str, Any]] = deque()
        self.wake = asyncio.Event()
        self.task = asyncio.create_task(self._run(), name=f"sync sender {peer}")

    def status(self, st: Status) -> None:
        if self.queue and self.queue[-1][0] == "status":
            self.queue.pop()
        self.queue.append(("status", st))
        self.wake.set()

    def tail(self, seg: TailSegment) -> None:
        self.queue.append(("tail", seg))
        self.wake.set()

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.queue:
                kind, msg = self.queue.popleft()
                await self.driver._send(self.peer, kind, msg)


class SyncDriver:
    """Runs one master's side of the TxLog sync protocol (module docstring)."""

    def __init__(self, *, node_id: str, mode: Mode, peers: Mapping[str, str], secret: bytes,
                 agreement: AgreementLog, cluster: Any, scheduler: Any, timing: Timing,
                 request_timeout: float = 30.0, data_centre: str | None = None,
                 on_round: Callable[[float], None] | None = None,
                 split_recovery: SplitRecovery = SplitRecovery.NONE,
                 tls: ssl.SSLContext | None = None,
                 ordering: AgreedOrdering | None = None) -> None:
        self.node_id = node_id
        self.data_centre = data_centre or node_id
        self.mode = mode
        self.agreement = agreement
        self.cluster = cluster
        self.scheduler = scheduler
        self.timing = timing
        self.request_timeout = request_timeout
        self.peers: dict[str, PeerInfo] = {p: PeerInfo(u.rstrip("/")) for p, u in peers.items()}
        self.node: SyncNode | None = None
        self.divergences: list[dict[str, Any]] = []
        self.split_suspected: frozenset[str] = frozenset()
        self.failed: str | None = None  # the applier could not persist: we stop taking input
        self._secret = secret
        self._queue: list[tuple[Ready, list[tuple[TxMeta, list]]]] = []
        self._queued = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._waiters: dict[str, asyncio.Future] = {}
        self._persist_failures: list[float] = []  # when group commits failed (monotonic)
        self._fetching: set[str] = set()
        self._fetch_sources: dict[str, list[str]] = {}  # txid -> peers to ask, in order
        self._pushed: set[str] = set()  # payloads that came with a status
        self._own_payloads: dict[str, bytes] = {}  # ours, not yet agreed (to push)
        self._pushed_to: dict[str, set[str]] = {}  # peer -> txids pushed to it
        self._senders: dict[str, _Sender] = {}
        self._tasks: list[asyncio.Task] = []
        self._http: SignedSession | None = None
        self._tls = tls  # verifies https peers (tls-ca-file; None: the system's CAs)
        self._round_at: int | None = None
        self._stopping = False
        # Per-transaction timings in the log (diagnostics: TXC_SYNC_TRACE=1).
        self._trace = bool(os.environ.get("TXC_SYNC_TRACE"))
        self._submitted: dict[str, float] = {}
        self.on_round = on_round  # metrics: called with each round's duration (seconds)
        # Split recovery (docs/design/sync-protocol.md#split-recovery).
        self.split_recovery = split_recovery
        # The execution room (execution.py): agreed transactions executed through the
        # agreed ordering (ordering.py), split backup and rollback; it reports back here.
        self.execution = Execution(
            node_id=node_id, agreement=agreement, ordering=ordering, cluster=cluster,
            may_execute=lambda: self.mode is not Mode.READ_ONLY,
            backs_up=lambda: self.split_recovery is not SplitRecovery.NONE,
            on_executed=self._executed, on_answers=self._answer,
            on_rolled_back=self._rolled_back)
        self._deadline_seen: int | None = None
        self._round_started: float | None = None
        self._base_fingerprint = "0" * 32  # this data centre's state at agreed position 0
        # peers behind our floor (they need seeding), and whether we need it ourselves
        self.beyond_horizon: frozenset[str] = frozenset()
        self.needs_seeding = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        # Signed and sent as the workers' calls are (txcluster/signed_session.py): an
        # https peer is verified with tls-ca-file; one whose certificate is not trusted
        # is refused with that reason (logged there, and by _send as unreachable).
        self._http = SignedSession(self._secret, tls=self._tls, limit=64,
                                   timeout=min(self.request_timeout, 10.0))
        await self.execution.load()
        self._base_fingerprint = (await self.cluster.db(self.agreement.base)).fingerprint
        self.node = await self._restore_node({p: Mode.READ_WRITE for p in self.peers})
        await self.execution.start(self.node.split_point)
        for peer in self.peers:
            self._senders[peer] = _Sender(self, peer)
        self._tasks = [asyncio.create_task(self._applier(), name="sync applier")]
        # Payload fetches and round deadlines that are due: APScheduler (3.x) runs them.
        self.scheduler.add_job(self._retry_tick, "interval",
                               seconds=self.timing.acquire_retry / 1000, id="sync-acquire",
                               max_instances=1, coalesce=True, replace_existing=True)
        self._step(lambda now: self.node.tick(now))
        self.execution.wake()
        log.info("sync: %s (%s) peers with %s at agreed position %d, executed %d",
                 self.node_id, self.mode.value, ", ".join(sorted(self.peers)) or "nobody",
                 self.node.seq, self.executed_pos)

    async def _restore_node(self, peers: Mapping[str, Mode]) -> SyncNode:
        state, missing = await self.cluster.db(self.agreement.load)
        return self._core(state, missing, peers)

    def _core(self, state: PersistentState, missing: list[str],
              peers: Mapping[str, Mode]) -> SyncNode:
        return SyncNode.restore(self.node_id, state, now=now_ms(), peers=dict(peers),
                                mode=self.mode, timing=self.timing, missing_payloads=missing,
                                split_recovery=self.split_recovery,
                                retention=self._retention(),
                                # during a rollback our executed position is not known
                                # yet (rolled_back tells the core): claim nothing
                                executed=0 if self._rollback is not None
                                else self.executed_pos)

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
        await self.execution.stop()
        tasks = [*self._tasks, *(s.task for s in self._senders.values())]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(NotWritable("master is shutting down"))
        if self._http:
            await self._http.close()

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
        payload = canonical_payload(operations)
        txid = str(uuid.uuid4())
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters[txid] = fut
        if self._trace:
            self._submitted[txid] = time.monotonic()
        pays: list[tuple[TxMeta, list]] = []
        try:
            ready = self._step(lambda now: self.node.submit(
                txid, size=len(payload), digest=payload_digest(payload), now=now), pays)
        except Refused as exc:
            self._waiters.pop(txid, None)
            raise NotWritable(str(exc)) from None
        except BaseException:
            self._waiters.pop(txid, None)
            raise
        # Its metadata is incoming, or already synchronised (a master without peers).
        tx = next((t for t in (*(i.tx for i in ready.incoming), *ready.synchronised)
                   if t.txid == txid), None)
        if tx is None:
            # Defensive: if the Ready does not list it, ask the core.
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
        """POST /peer/status. InvalidMessage (400) or UnknownPeer (403): nothing changed."""
        if not isinstance(body, dict):
            raise InvalidMessage("the body must be a JSON object")
        st = wire.status_from_json(body.get("status"))
        info = self._peer(st.sender)
        executed = body.get("executed")
        if self.node.peers.get(st.sender) is not st.mode:
            # Modes are learnt from the peers' own statuses: a muted peer is not waited
            # for, a read-only one is
            # (docs/design/sync-protocol.md#master-modes).
            log.info("sync: peer %s is %s", st.sender, st.mode.value)
            self._step(lambda now: self.node.add_peer(st.sender, st.mode, now=now))
        self._step(lambda now: self.node.receive(st, now))
        if "payloads" in body:
            self._take_pushed(st, body["payloads"])
        info.last_heard = info.direct_heard = time.time()
        info.seq = st.seq
        info.direct_status = body.get("status")
        info.silent = {p for p in body.get("silent", ()) if isinstance(p, str)} \
            if isinstance(body.get("silent"), list) else set()
        if isinstance(executed, dict):
            self._compare(st.sender, info, executed)
        relayed = body.get("relayed")
        if isinstance(relayed, list):
            self._take_relayed(st.sender, relayed)

    # Relaying (docs/design/sync-protocol.md#relaying-a-lost-link-is-not-a-split): with one
    # connection lost, what a master learns from the reachable peer still reaches the
    # unreachable one. Each status names the peers its sender has not heard from directly
    # for a while ("silent"); a master that hears one of them passes that peer's latest
    # status on, with the payloads of its queue that it holds. A relayed status is a
    # status like any other to the core (it is the origin's, and every hop is
    # authenticated by the peer secret), so a lost link is not a split while some master
    # reaches both ends.

    def _silent_peers(self) -> list[str]:
        now = time.time()
        quiet = max(3 * self.timing.round_timeout, 2 * self.timing.idle_interval) / 1000
        return sorted(p for p, i in self.peers.items()
                      if i.direct_heard is None or now - i.direct_heard > quiet)

    def _to_relay(self, recipient: str) -> list[dict[str, Any]]:
        wanted = self.peers[recipient].silent - {recipient, self.node_id}
        out = []
        budget = PUSH_BYTES
        for peer in sorted(wanted):
            info = self.peers.get(peer)
            if info is None or info.direct_status is None or peer in self._silent_peers():
                continue
            payloads: dict[str, str] = {}
            for tx in info.direct_status.get("queue", []):
                txid = tx.get("txid") if isinstance(tx, dict) else None
                if not isinstance(txid, str) or not self.node.holds_payload(txid):
                    continue
                data = self._payload_bytes(txid)
                if data is not None and len(data) <= budget:
                    budget -= len(data)
                    payloads[txid] = data.decode()
            out.append({"status": info.direct_status, "payloads": payloads})
        return out

    def _payload_bytes(self, txid: str) -> bytes | None:
        return self._own_payloads.get(txid) or self.agreement.payload(txid)

    def _take_relayed(self, relayer: str, relayed: list) -> None:
        for item in relayed[:len(self.peers)]:
            if not isinstance(item, dict):
                continue
            try:
                st = wire.status_from_json(item.get("status"))
                if st.sender in (self.node_id, relayer):
                    continue
                self._peer(st.sender)
            except InvalidMessage as exc:
                log.warning("sync: ignored a status relayed by %s: %s", relayer, exc)
                continue
            if self.node.peers.get(st.sender) is not st.mode:
                continue  # modes are learnt from the peer itself
            self._step(lambda now, st=st: self.node.receive(st, now))
            self.peers[st.sender].last_heard = time.time()
            if item.get("payloads"):
                self._take_pushed(st, item["payloads"], any_origin=True)

    def _payloads_to_push(self, peer: str, st: Status) -> dict[str, str]:
        """Our own new transactions' payloads, sent along with the status that first lists
        them (up to PUSH_BYTES): the peer then holds them without fetching them, which
        takes one round trip off every commit. Fetching (acquisition,
        docs/design/sync-protocol.md#transaction-exchange) stays
        for the rest and for every retry."""
        sent = self._pushed_to.setdefault(peer, set())
        out: dict[str, str] = {}
        budget = PUSH_BYTES
        for tx in st.queue:
            if tx.origin != self.node_id or tx.txid in sent:
                continue
            payload = self._own_payloads.get(tx.txid)
            if payload is None or len(payload) > budget:
                continue
            budget -= len(payload)
            out[tx.txid] = payload.decode()
            sent.add(tx.txid)
        return out

    def _take_pushed(self, st: Status, pushed: Any, any_origin: bool = False) -> None:
        if not isinstance(pushed, dict):
            return
        metas = {tx.txid: tx for tx in st.queue if any_origin or tx.origin == st.sender}
        for txid, text in pushed.items():
            tx = metas.get(txid)
            if tx is None or not isinstance(text, str) or not self.node.wants_payload(txid):
                continue
            data = text.encode()
            if len(data) != tx.size or payload_digest(data) != tx.digest:
                log.error("sync: payload of %s pushed by %s does not match its digest", txid,
                          st.sender)
                continue
            operations = _operations(data)
            if operations is None:
                log.error("sync: payload of %s pushed by %s is not a list of operations",
                          txid, st.sender)
                continue
            self._pushed.add(txid)
            self._step(lambda now, txid=txid: self.node.acquired(txid, now),
                       [(tx, operations)])

    def receive_tail(self, body: Any) -> None:
        seg = wire.tail_from_json(body)
        info = self._peer(seg.sender)
        self._step(lambda now: self.node.receive(seg, now))
        info.last_heard = time.time()

    def _peer(self, sender: str) -> PeerInfo:
        info = self.peers.get(sender)
        if info is None:
            raise UnknownPeer(f"'{sender}' is not a configured peer of {self.node_id}")
        return info

    def payload(self, txid: str, requester: str) -> bytes | None:
        """GET /peer/transactions/<txid> (sync: run it in a thread)."""
        self._peer(requester)
        return self.agreement.payload(txid)

    def _retry_tick(self) -> None:
        if not self._stopping and self.node is not None and not self.failed:
            retention = self._retention()
            if retention != self.node.retention:  # LogMaxSize / LogMaxDepth were written
                self._step(lambda now: self.node.set_retention(retention, now=now))
            self._step(lambda now: self.node.tick(now))

    # ------------------------------------------------------------------ membership, mode

    async def add_peer(self, peer: str, url: str) -> None:
        if peer in self.peers:
            raise ValueError(f"'{peer}' is already a sync peer")
        self.peers[peer] = PeerInfo(url.rstrip("/"))
        self._senders[peer] = _Sender(self, peer)
        self._step(lambda now: self.node.add_peer(peer, Mode.READ_WRITE, now=now))
        log.info("sync: peer %s added (%s)", peer, url)

    async def remove_peer(self, peer: str) -> None:
        if peer not in self.peers:
            raise ValueError(f"'{peer}' is not a sync peer of {self.node_id}")
        self._step(lambda now: self.node.remove_peer(peer, now=now))
        del self.peers[peer]
        sender = self._senders.pop(peer)
        sender.task.cancel()
        log.info("sync: peer %s removed", peer)

    async def set_mode(self, mode: Mode) -> None:
        """A mode change at runtime is a restart of the protocol core from what it has
        persisted (as after a crash): the core takes its mode at construction."""
        if mode is self.mode:
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
        """SplitRecovery changed at runtime; refused during a split
        (docs/design/sync-protocol.md#split-recovery: the strategy is state)."""
        if strategy is self.split_recovery:
            return
        if self.split_point is not None or self._rollback is not None:
            raise ValueError("SplitRecovery can't be changed during a split")
        await self._restart_core(lambda: setattr(self, "split_recovery", strategy))
        log.info("sync: split recovery is now %s", strategy.value)

    async def _restart_core(self, change: Callable[[], None]) -> None:
        """Apply ``change`` and rebuild the core from what it persisted, keeping the peers'
        modes: the core takes its mode and strategy only at construction."""
        while not self._idle.is_set():  # everything the old core promised is persisted
            await self._idle.wait()
        # From here to the swap nothing awaits: an input that stepped the old core after
        # its state was read (as when the read ran in the executor) would be lost with it.
        # A short SQLite read on the loop, for a rare admin action.
        peers = self.node.peers
        change()
        self._reload_core(peers)

    def _reload_core(self, peers: Mapping[str, Mode]) -> None:
        """A new core from what is persisted (where a restart would leave us), told the
        time so that it acts at once."""
        state, missing = self.agreement.load()
        self.node = self._core(state, missing, peers)
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
                    if not self._restart_after_failed_persist(exc, dropped):
                        return
                    continue
                for ready, payloads in batch:
                    if payloads:  # an agreed transaction may have been waiting for it
                        self.execution.wake()
                    self._act(ready)
            if not self._queue:
                self._idle.set()

    def _restart_after_failed_persist(self, exc: Exception,
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
        if len(self._persist_failures) > 3:
            self.failed = f"could not persist the sync state: {exc}"
            log.critical("sync: %s (4 times in a minute): peering stops", self.failed,
                         exc_info=True)
            return False
        log.critical("sync: could not persist the sync state (%s): the protocol core "
                     "restarts from what is persisted, as after a crash", exc, exc_info=True)
        try:
            self._reload_core(self.node.peers)
        except Exception as again:
            self.failed = f"could not persist the sync state: {exc}; reload failed: {again}"
            log.critical("sync: %s", self.failed, exc_info=True)
            return False
        return True

    async def _persist(self, batch: list[tuple[Ready, list[tuple[TxMeta, list]]]]) -> None:
        """Merge the Readies into as few SQLite transactions as their order allows: one,
        unless a split recovery truncated the agreed queue (the truncation must come after
        the appends of the Readies before it and before those of its own)."""
        start = 0
        for i, (ready, _) in enumerate(batch):
            if ready.truncated is not None and i > start:
                await self._persist_merged(batch[start:i])
                start = i
        await self._persist_merged(batch[start:])

    async def _persist_merged(self, batch: list[tuple[Ready, list[tuple[TxMeta, list]]]]
                              ) -> None:
        truncated = batch[0][0].truncated if batch else None
        split_point: tuple[int | None] | None = None
        compacted: Compaction | None = None
        counter = None
        incoming: dict[str, Incoming] = {}
        synchronised: list[TxMeta] = []
        payloads: list[tuple[TxMeta, list]] = []
        for ready, pays in batch:
            if ready.counter is not None:
                counter = max(counter or 0, ready.counter)
            for item in ready.incoming:
                incoming.pop(item.tx.txid, None)
                # A transaction merged from a peer but not acquired is not persisted (one
                # fsync less on the commit path): no status of ours lists it until its
                # payload is stored, which persists it; after a crash the peers' next
                # statuses bring it back. The safety argument only needs what we posted.
                if item.acquired:
                    incoming[item.tx.txid] = item
            for tx in ready.synchronised:
                incoming.pop(tx.txid, None)  # agreed in this batch: never incoming on disk
            synchronised.extend(ready.synchronised)
            payloads.extend(pays)
            if ready.split_point_changed:
                split_point = (ready.split_point,)
            if ready.compacted is not None:
                compacted = ready.compacted  # floors only rise: the last one covers all
        if (counter is None and not incoming and not synchronised and not payloads
                and truncated is None and split_point is None and compacted is None):
            return
        await self.cluster.db(lambda: self.agreement.persist(
            counter=counter, incoming=list(incoming.values()), synchronised=synchronised,
            payloads=payloads, split_point=split_point,
            truncate_after=None if truncated is None else truncated.after_seq,
            compacted=compacted))

    def _act(self, ready: Ready) -> None:
        for post in ready.posts:
            sender = self._senders.get(post.to)
            if sender:
                sender.status(post.status)
        for tail in ready.tails:
            sender = self._senders.get(tail.to)
            if sender:
                sender.tail(tail.segment)
        for acq in ready.acquire:
            if acq.tx.txid in self._pushed:
                self._pushed.discard(acq.tx.txid)  # it came with the status
                continue
            if acq.tx.txid in self._fetching:
                # Being fetched: sources named since (peers that posted it) are asked
                # too if the ones asked do not answer (_fetch).
                known = self._fetch_sources.get(acq.tx.txid)
                if known is not None:
                    known.extend(p for p in acq.sources if p not in known)
            else:
                self._fetching.add(acq.tx.txid)
                self._tasks.append(asyncio.create_task(self._fetch(acq),
                                                       name=f"fetch {acq.tx.txid}"))
        if ready.synchronised:
            self.execution.wake()
            for tx in ready.synchronised:  # agreed: every peer holds it, no more pushes
                if self._own_payloads.pop(tx.txid, None) is not None:
                    for sent in self._pushed_to.values():
                        sent.discard(tx.txid)
            if self._trace:
                for tx in ready.synchronised:
                    if tx.txid in self._waiters:
                        log.info("trace %s agreed %.1f ms after submit", tx.txid,
                                  (time.monotonic() - self._submitted.get(tx.txid, 0)) * 1000)
        if ready.activity is not None:
            log.debug("sync: %s", ready.activity.value)
        if ready.split_suspected is not None:
            self.split_suspected = ready.split_suspected
            if ready.split_suspected:
                log.warning("sync: going on without %s (not heard for max-peer-lag)",
                            ", ".join(sorted(ready.split_suspected)))
            else:
                log.warning("sync: every peer is back")
        for inc in ready.inconsistencies:
            if inc.kind == "beyond-horizon":
                log.error("sync: peer %s needs seeding: %s", inc.peer, inc.detail)
            else:
                self._diverged(inc.peer, inc.kind, inc.detail)
        if ready.beyond_horizon is not None:
            self.beyond_horizon = ready.beyond_horizon
        if ready.needs_seeding is not None:
            self.needs_seeding = ready.needs_seeding
            if ready.needs_seeding:
                log.critical("sync: this data centre needs seeding: it lags behind the "
                             "floor of every peer (they forgot the agreed transactions it "
                             "still needs, past LogMaxSize / LogMaxDepth); replay can no "
                             "longer bring it up to date")
            else:
                log.warning("sync: a peer can serve this data centre again")
        if ready.split_point_changed:
            self.execution.split_point_moved(ready.split_point)
        if ready.truncated is not None:
            t = ready.truncated
            log.warning("sync: split recovery (%s): the %d agreed transactions after "
                        "position %d are negotiated again; this data centre returns to the "
                        "state at that position", self.split_recovery.value, len(t.entries),
                        t.after_seq)
            self.execution.start_rollback()
        if ready.next_round_at != self._deadline_seen:
            # The core moves the round deadline exactly when a round ends (protocol.py,
            # _complete_round): that is how the driver sees rounds.
            t = time.monotonic()
            if self._round_started is not None and self.on_round is not None:
                self.on_round(t - self._round_started)
            self._round_started, self._deadline_seen = t, ready.next_round_at
        self._schedule_round(ready.next_round_at)
        self._tasks = [t for t in self._tasks if not t.done()]

    def _schedule_round(self, at: int) -> None:
        if at == self._round_at or self._stopping:
            return
        self._round_at = at
        self.scheduler.add_job(self._round_due, "date", run_date=datetime.fromtimestamp(at / 1000),
                               id="sync-round", replace_existing=True, misfire_grace_time=None)

    def _round_due(self) -> None:
        self._round_at = None
        if not self._stopping and not self.failed:
            self._step(lambda now: self.node.tick(now))

    # ------------------------------------------------------------------ network

    async def _send(self, peer: str, kind: str, msg: Any) -> None:
        info = self.peers.get(peer)
        if info is None:
            return
        if kind == "status":
            body = {"status": wire.status_to_json(msg),
                    "executed": {"pos": self.executed_pos, "fingerprint": self.executed_fp}}
            pushed = self._payloads_to_push(peer, msg)
            if pushed:
                body["payloads"] = pushed
            body["silent"] = self._silent_peers()
            if self.peers[peer].silent:
                body["relayed"] = self._to_relay(peer)
        else:
            body = wire.tail_to_json(msg)
        try:
            status, text = await self._request("POST", f"{info.url}/peer/{kind}",
                                               json.dumps(body).encode())
            ok = status < 300
            problem = None if ok else f"{status} {text[:200]!r}"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            ok, problem = False, f"{type(exc).__name__}: {exc}"
        if ok != info.reachable:
            if ok:
                log.info("sync: peer %s is reachable", peer)
            else:
                log.warning("sync: peer %s did not take our %s: %s", peer, kind, problem)
        info.reachable = ok

    async def _request(self, method: str, url: str, body: bytes = b"") -> tuple[int, bytes]:
        """One signed request (txcluster/signed_session.py: over the Host, path and query
        as sent)."""
        assert self._http is not None
        return await self._http.request(method, url, body,
                                        "application/json" if body else None)

    async def _fetch(self, acq: Acquire) -> None:
        """Fetch a payload from the peers that hold it, hedged: the next source is asked
        too when one has not answered within FETCH_HEDGE_S, and the first valid answer
        wins. A source asked first can hang (the origin on the other side of a cut that
        is not detected yet): waiting for its request timeout would hold the whole side's
        agreement for that long.
        Sources the core names later (a retried Acquire: peers that posted it since) are
        asked too."""
        tx = acq.tx
        self._fetch_sources[tx.txid] = list(acq.sources)
        tried: set[str] = set()
        attempts: set[asyncio.Task] = set()
        try:
            while True:
                nxt = next((p for p in self._fetch_sources.get(tx.txid, ())
                            if p not in tried and p in self.peers), None)
                if nxt is not None:
                    tried.add(nxt)
                    attempts.add(asyncio.create_task(self._fetch_from(nxt, tx),
                                                     name=f"fetch {tx.txid} from {nxt}"))
                if not attempts:
                    return  # every source failed: the core's acquire retry asks again
                done, attempts = await asyncio.wait(attempts, timeout=FETCH_HEDGE_S,
                                                    return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    operations = task.result()
                    if operations is not None:
                        if not self._stopping and not self.failed:
                            self._step(lambda now: self.node.acquired(tx.txid, now),
                                       [(tx, operations)])
                        return
        finally:
            for task in attempts:
                task.cancel()
            self._fetching.discard(tx.txid)
            self._fetch_sources.pop(tx.txid, None)

    async def _fetch_from(self, source: str, tx: TxMeta) -> list | None:
        """The payload of ``tx`` from one peer, checked against its digest; None when that
        peer cannot give it."""
        info = self.peers.get(source)
        if info is None:
            return None  # removed meanwhile
        # Quoted: a transaction id is any non-empty string (messages.py); unquoted, a '?',
        # '#', '/' or control character in one would fetch another URL or none.
        path = f"/peer/transactions/{quote(tx.txid, safe='')}?peer={self.node_id}"
        try:
            status, data = await self._request("GET", info.url + path)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None
        if status != 200:
            return None
        if len(data) != tx.size or payload_digest(data) != tx.digest:
            log.error("sync: payload of %s from %s does not match its digest", tx.txid, source)
            return None
        operations = _operations(data)
        if operations is None:
            log.error("sync: payload of %s from %s is not a list of operations", tx.txid,
                      source)
        return operations

    # ------------------------------------------------------------------ execution

    # The execution room's reports (execution.py).

    def _executed(self, pos: int) -> None:
        """Agreed transactions up to ``pos`` are executed here: posted to the peers, and
        what everybody executed is forgotten."""
        if not self._stopping and not self.failed:
            self._step(lambda now: self.node.executed(pos, now))

    def _answer(self, answers: dict[str, Any]) -> None:
        """The answers of executed transactions, to the clients that submitted them here."""
        for txid, answer in answers.items():
            if self._trace and txid in self._submitted:
                log.info("trace %s executed %.1f ms after submit", txid, (
                    time.monotonic() - self._submitted.pop(txid)) * 1000)
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

    @property
    def executed_pos(self) -> int:
        return self.execution.executed_pos

    @property
    def executed_fp(self) -> str:
        return self.execution.executed_fp

    @property
    def _recent(self) -> Mapping[int, str]:
        return self.execution.recent

    @property
    def split_point(self) -> int | None:
        return self.execution.split_point

    @property
    def split_backup_name(self) -> str | None:
        return self.execution.split_backup_name

    @property
    def recovery_problem(self) -> str | None:
        return self.execution.recovery_problem

    @property
    def _rollback(self) -> asyncio.Task | None:
        return self.execution.rollback

    def _compare(self, peer: str, info: PeerInfo, executed: dict) -> None:
        pos, theirs = executed.get("pos"), executed.get("fingerprint")
        if not isinstance(pos, int) or not isinstance(theirs, str):
            return
        info.executed = pos
        if pos > self.executed_pos:
            return
        ours = self.executed_fp if pos == self.executed_pos else self._recent.get(pos)
        if ours is None and pos == 0:
            ours = self._base_fingerprint
        if ours is None:
            return  # too old to compare cheaply; the next status will be newer
        match = ours == theirs.lower()
        if not match and info.fingerprint_match is not False:
            self._diverged(peer, "fingerprint", f"after agreed position {pos} its repository "
                           f"fingerprint is {theirs}, ours is {ours}")
        elif match and info.fingerprint_match is False:
            log.warning("sync: peer %s agrees with our fingerprint again at position %d",
                        peer, pos)
        info.fingerprint_match = match

    def _diverged(self, peer: str, kind: str, detail: str) -> None:
        log.error("sync: divergence with %s (%s): %s", peer, kind, detail)
        self.divergences.append({"peer": peer, "kind": kind, "detail": detail,
                                 "time": time.time()})
        del self.divergences[:-50]

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        node = self.node
        now = time.time()
        stale = 3 * max(self.timing.idle_interval, self.timing.round_timeout) / 1000
        modes = node.peers if node else {}
        waited = [p for p, m in modes.items() if m is not Mode.MUTED]
        missing = [p for p in waited if self.peers[p].last_heard is None
                   or now - self.peers[p].last_heard > stale]
        if self._rollback is not None:
            state = "recovering"
        elif self.split_suspected or self.split_point is not None:
            state = "split"
        elif missing:
            state = "waiting"
        else:
            state = "connected"
        return {
            "node_id": self.node_id, "data_centre": self.data_centre,
            "mode": self.mode.value, "state": state, "missing_peers": sorted(missing),
            "seq": node.seq if node else 0, "executed_seq": self.executed_pos,
            # agreed entries up to "floor" are forgotten; "agreed_held" are kept
            "floor": node.floor if node else 0,
            "agreed_held": len(node.synchronised) if node else 0,
            "needs_seeding": self.needs_seeding,
            "beyond_horizon": sorted(self.beyond_horizon),
            "executed_fingerprint": self.executed_fp,
            "merge_base": node.merge_base if node else None,
            "counter": node.counter if node else 0,
            "activity": node.activity.value if node else Activity.BUSY.value,
            "incoming": len(node.incoming) if node else 0,
            "split_suspected": sorted(self.split_suspected),
            "split_recovery": self.split_recovery.value,
            "split_point": self.split_point,
            "split_backup": self.split_backup_name,
            "recovery_problem": self.recovery_problem,
            "failed": self.failed,
            "peers": [
                {"id": p, "url": i.url, "mode": modes.get(p, Mode.READ_WRITE).value,
                 "reachable": i.reachable,
                 "last_heard_s": round(now - i.last_heard, 3) if i.last_heard else None,
                 "seq": i.seq, "executed_seq": i.executed,
                 "fingerprint_match": i.fingerprint_match}
                for p, i in sorted(self.peers.items())],
            "divergences": list(self.divergences[-20:]),
        }
