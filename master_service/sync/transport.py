"""HTTP between peer masters: what the protocol core decided to send, carried.

Peers (docs/design/sync-protocol.md#transaction-exchange): statuses and tail segments are POSTed to
``<peer>/peer/status`` and ``/peer/tail``; a payload is fetched from
``/peer/transactions/<txid>`` and checked against the digest and size its status
announced. Every request is signed with the peer secret (txinfra/auth.py: HMAC over the
request with a nonce, so a captured message can't be re-sent). A sender keeps at most one
unsent status per peer (a newer status replaces it: statuses are cumulative) and drops
what a dead peer can't take — the protocol re-posts every round. Tail segments queued
before a status go in its request (docs/design/sync-protocol.md#laggers).

This room knows messages and bytes, not the core: which status goes to whom with which
pushed or relayed payloads, and which source a payload is asked from and when, are the
core's outputs (``Post``, ``Fetch``). A status body also carries this data centre's
executed position and fingerprint at the time it is sent (``executed``), and the payloads
it names are read when it is sent (``payload``: off the event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import aiohttp

from master_service.sync import wire
from master_service.sync.messages import InvalidMessage, Status, TailSegment, TxMeta
from master_service.sync.ready import Post
from master_service.sync.wire import payload_digest
from txinfra import jsonbody
from txinfra.signed_session import SignedSession

log = logging.getLogger("txcluster.sync")

__all__ = ["TAKES_HEADER", "TAKES_TAILS", "Transport", "checked_operations", "pushed_payloads",
           "relayed_statuses"]

# The header of a status answer by which a receiver says it takes the sender's tail
# segments in a status's request (wire.TAILS_FIELD).
TAKES_HEADER = "x-txcluster-peer-takes"
TAKES_TAILS = "tails"


def checked_operations(tx: TxMeta, data: bytes, how: str) -> list[dict] | None:
    """The operations of a payload that matches the size and digest its status announced
    (``how``: "from <peer>", "pushed by <peer>", for the log), or None. A JSON list of
    objects only: a peer's digest says which bytes it announced, not that they are a
    transaction."""
    if len(data) != tx.size or payload_digest(data) != tx.digest:
        log.error("sync: payload of %s %s does not match its digest", tx.txid, how)
        return None
    try:
        operations = json.loads(data)
    except ValueError:
        operations = None
    if not isinstance(operations, list) or not all(isinstance(o, dict) for o in operations):
        log.error("sync: payload of %s %s is not a list of operations", tx.txid, how)
        return None
    return operations


def pushed_payloads(st: Status, pushed: Any, any_origin: bool = False
                    ) -> dict[str, tuple[TxMeta, list]]:
    """The payloads that came with a status body (``payloads``: txid -> text) and match
    what it announced: of its sender's own transactions, or of any when relayed."""
    if not isinstance(pushed, dict):
        return {}
    metas = {tx.txid: tx for tx in st.queue if any_origin or tx.origin == st.sender}
    out = {}
    for txid, text in pushed.items():
        tx = metas.get(txid)
        if tx is None or not isinstance(text, str):
            continue
        operations = checked_operations(tx, text.encode(), f"pushed by {st.sender}")
        if operations is not None:
            out[txid] = (tx, operations)
    return out


def relayed_statuses(relayed: list, relayer: str, node_id: str, peers: Collection[str]
                     ) -> Iterator[tuple[Status, dict[str, tuple[TxMeta, list]]]]:
    """The statuses a status body relays (``relayed``: at most one per peer), of known
    peers other than us and the relayer, each with its payloads that check out."""
    for item in relayed[:len(peers)]:
        if not isinstance(item, dict):
            continue
        try:
            st = wire.status_from_json(item.get("status"))
        except InvalidMessage as exc:
            log.warning("sync: ignored a status relayed by %s: %s", relayer, exc)
            continue
        if st.sender in (node_id, relayer):
            continue
        if st.sender not in peers:
            log.warning("sync: ignored a status relayed by %s: '%s' is not a configured "
                        "peer of %s", relayer, st.sender, node_id)
            continue
        yield st, pushed_payloads(st, item.get("payloads"), any_origin=True)


class _Sender:
    """Messages to one peer, in order; an unsent status is replaced by a newer one (which
    also pushes what the replaced one would have pushed: those were promised once)."""

    def __init__(self, transport: Transport, peer: str) -> None:
        self.transport, self.peer = transport, peer
        self.queue: deque[tuple[str, Any]] = deque()
        self.wake = asyncio.Event()
        self.task = asyncio.create_task(self._run(), name=f"sync sender {peer}")

    def status(self, post: Post) -> None:
        if self.queue and self.queue[-1][0] == "status":
            old: Post = self.queue.pop()[1]
            push = (*old.push, *(t for t in post.push if t not in old.push))
            post = replace(post, push=push)
        self.queue.append(("status", post))
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
                if kind == "tail" and self.transport.takes_tails.get(self.peer):
                    # Tail segments queued before a status go in its request, in order
                    # (wire.TAILS_FIELD): one request instead of several. Under load a peer
                    # behind our merge base gets one about every third agreed transaction.
                    tails = [msg]
                    while self.queue and self.queue[0][0] == "tail":
                        tails.append(self.queue.popleft()[1])
                    if self.queue:  # a status
                        await self.transport._send(self.peer, "status",
                                                   self.queue.popleft()[1], tails)
                        continue
                    for seg in tails:
                        await self.transport._send(self.peer, "tail", seg)
                    continue
                await self.transport._send(self.peer, kind, msg)


class Transport:
    """Signed HTTP to the configured peers: per-peer send queues and payload fetches."""

    def __init__(self, *, node_id: str, secret: bytes, request_timeout: float,
                 executed: Callable[[], dict[str, Any]],
                 payload: Callable[[str], Awaitable[bytes | None]],
                 tls: ssl.SSLContext | None = None) -> None:
        self.node_id = node_id
        self.request_timeout = request_timeout
        self.urls: dict[str, str] = {}
        self.reachable: dict[str, bool | None] = {}  # did our last send reach it
        self._executed = executed
        self._payload = payload
        self._secret = secret
        self._tls = tls  # verifies https peers (tls-ca-file; None: the system's CAs)
        self._http: SignedSession | None = None
        self._senders: dict[str, _Sender] = {}
        # Peers whose last status answer said they take tail segments in a status's
        # request (TAKES_HEADER): one of an earlier release would drop them unread.
        self.takes_tails: dict[str, bool] = {}
        self._fetches: dict[str, set[asyncio.Task]] = {}  # txid -> asks under way

    async def start(self, peers: dict[str, str]) -> None:
        # Signed and sent as the workers' calls are (txinfra/signed_session.py): an
        # https peer is verified with tls-ca-file; one whose certificate is not trusted
        # is refused with that reason (logged there, and by _send as unreachable).
        self._http = SignedSession(self._secret, tls=self._tls, limit=64,
                                   timeout=min(self.request_timeout, 10.0))
        for peer, url in peers.items():
            self.add_peer(peer, url)

    def tasks(self) -> list[asyncio.Task]:
        return [*(s.task for s in self._senders.values()),
                *(t for asks in self._fetches.values() for t in asks)]

    async def close(self) -> None:
        tasks = self.tasks()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._http:
            await self._http.close()

    def add_peer(self, peer: str, url: str) -> None:
        self.urls[peer] = url.rstrip("/")
        self.reachable[peer] = None
        self._senders[peer] = _Sender(self, peer)

    def remove_peer(self, peer: str) -> None:
        self.urls.pop(peer, None)
        self.reachable.pop(peer, None)
        self.takes_tails.pop(peer, None)
        sender = self._senders.pop(peer, None)
        if sender is not None:
            sender.task.cancel()

    # ------------------------------------------------------------------ sending

    def post(self, post: Post) -> None:
        sender = self._senders.get(post.to)
        if sender:
            sender.status(post)

    def tail(self, to: str, seg: TailSegment) -> None:
        sender = self._senders.get(to)
        if sender:
            sender.tail(seg)

    async def _payloads(self, txids: tuple[str, ...]) -> dict[str, str]:
        out: dict[str, str] = {}
        for txid in txids:
            try:
                data = await self._payload(txid)
            except Exception as exc:
                log.warning("sync: payload %s not read to send it: %s", txid, exc)
                continue
            if data is not None:
                out[txid] = data.decode()
        return out

    async def _status_body(self, post: Post) -> dict[str, Any]:
        body: dict[str, Any] = {"status": wire.status_to_json(post.status),
                                "executed": self._executed()}
        pushed = await self._payloads(post.push)
        if pushed:
            body["payloads"] = pushed
        body["silent"] = list(post.silent)
        if post.relayed:
            body["relayed"] = [{"status": wire.status_to_json(r.status),
                                "payloads": await self._payloads(r.payloads)}
                               for r in post.relayed]
        return body

    async def _send(self, peer: str, kind: str, msg: Any,
                    tails: list[TailSegment] | None = None) -> None:
        url = self.urls.get(peer)
        if url is None:
            return
        try:
            body = await self._status_body(msg) if kind == "status" else wire.tail_to_json(msg)
            if tails:
                body[wire.TAILS_FIELD] = [wire.tail_to_json(t) for t in tails]
            assert self._http is not None
            status, headers, text = await self._http.exchange(
                "POST", f"{url}/peer/{kind}", jsonbody.dumps(body), "application/json")
            ok = status < 300
            if kind == "status" and ok:
                self.takes_tails[peer] = TAKES_TAILS in headers.get(TAKES_HEADER, "")
            problem = None if ok else f"{status} {text[:200]!r}"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            ok, problem = False, f"{type(exc).__name__}: {exc}"
        if peer not in self.reachable:
            return  # removed meanwhile
        if ok != self.reachable[peer]:
            if ok:
                log.info("sync: peer %s is reachable", peer)
            else:
                log.warning("sync: peer %s did not take our %s: %s", peer, kind, problem)
        self.reachable[peer] = ok

    async def _request(self, method: str, url: str, body: bytes = b"") -> tuple[int, bytes]:
        """One signed request (txinfra/signed_session.py: over the Host, path and query
        as sent)."""
        assert self._http is not None
        return await self._http.request(method, url, body,
                                        "application/json" if body else None)

    # ------------------------------------------------------------------ fetching

    def fetch(self, tx: TxMeta, source: str,
              done: Callable[[TxMeta, str, list | None], None]) -> None:
        """Ask ``source`` for the payload of ``tx``; ``done(tx, source, operations)`` with
        None when it can't give it. The first valid answer ends the other asks for it."""
        asks = self._fetches.setdefault(tx.txid, set())
        task = asyncio.create_task(self._ask(tx, source, done),
                                   name=f"fetch {tx.txid} from {source}")
        asks.add(task)

    async def _ask(self, tx: TxMeta, source: str,
                   done: Callable[[TxMeta, str, list | None], None]) -> None:
        task = asyncio.current_task()
        try:
            operations = await self._fetch_from(source, tx)
        except Exception:  # reported as a failed ask: the core asks the next source
            log.exception("sync: fetching %s from %s failed", tx.txid, source)
            operations = None
        finally:
            asks = self._fetches.get(tx.txid)
            if asks is not None:
                asks.discard(task)  # type: ignore[arg-type]
                if not asks:
                    del self._fetches[tx.txid]
        if operations is not None:
            for other in self._fetches.pop(tx.txid, ()):
                other.cancel()
        done(tx, source, operations)

    async def _fetch_from(self, source: str, tx: TxMeta) -> list | None:
        """The payload of ``tx`` from one peer, checked against its digest; None when that
        peer cannot give it."""
        url = self.urls.get(source)
        if url is None:
            return None  # removed meanwhile
        # Quoted: a transaction id is any non-empty string (messages.py); unquoted, a '?',
        # '#', '/' or control character in one fetches another URL or none.
        path = f"/peer/transactions/{quote(tx.txid, safe='')}?peer={self.node_id}"
        try:
            status, data = await self._request("GET", url + path)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None
        if status != 200:
            return None
        return checked_operations(tx, data, f"from {source}")
