"""The HTTP/1.1 server both node kinds run: uvicorn with httptools, minus one way to lose a
request body.

Why this exists. ``java.net.http.HttpClient`` with its defaults (what Jena 4+ and many Java
services use) offers HTTP/2 on a cleartext connection: ``Connection: Upgrade, HTTP2-Settings``
and ``Upgrade: h2c`` on an ordinary HTTP/1.1 request, body included. RFC 9110 §7.8 lets a
server ignore the offer and answer in HTTP/1.1, which every client must accept. httptools
(llhttp) however tells the parser "no body" as soon as it sees an upgrade, so uvicorn
handed the application an EMPTY body and treated the real body bytes as the new
protocol's, dropping them: a Graph Store ``PUT`` answered 204 and stored nothing, and
every later request on that connection was ignored.

:class:`UpgradeIgnoringProtocol` ignores any upgrade other than WebSocket (which we do not
serve either): the request is completed with its body as plain HTTP/1.1, and the
connection goes on parsing the requests that follow (keep-alive and pipelining). The body
is re-parsed by a fresh llhttp parser primed with the request's own headers (minus the
upgrade), so Content-Length, chunked transfer coding and ``Expect: 100-continue`` keep
their exact meaning; nothing here parses HTTP by hand.

:class:`DirectAnswers` adds two lanes past the ASGI application for a node's most frequent
requests: GETs answered from the parser's callback (point reads), and POSTs to a few exact
paths handed with their whole body to their endpoint (the calls between nodes: a peer's
status, a worker's execute and apply). Anything either lane does not take goes to the
application as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import httptools
import uvicorn
from starlette.requests import Request
from starlette.responses import Response
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from txcluster import heap

log = logging.getLogger("txcluster.http")

# A whole answer: status, its content headers (each ``name: value\r\n``), body.
Answer = tuple[int, bytes, bytes]
# An answer the lane gives later: called with a waiter that returns when the client has
# gone away, it returns the answer (a master's forwarded read).
LaterAnswer = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Answer]]
# A node's direct lane: (path, query string, headers) of a GET -> the whole answer now, an
# answer later, or None to let the application answer it. It runs on the event loop, so
# it must answer (or return its later answer) within a small budget, or decline.
DirectLane = Callable[[str, bytes, list[tuple[bytes, bytes]]],
                      Answer | LaterAnswer | None]
# A node's body lane: exact path -> the endpoint a POST to it is handed to, with its whole
# body, past the ASGI application (a Starlette Request -> a Response with its body whole:
# the routes.HotPaths endpoints, which answer refusals themselves).
BodyLane = Mapping[str, Callable[[Request], Awaitable[Response]]]

# FastAPI's own OpenTelemetry instrumentation, off on both node kinds: nothing here
# configures a tracer or meter, and deciding so again on every request cost about 25 us
# of CPU (a tenth of a point query's whole budget on the hot path).
FASTAPI_TELEMETRY = {"tracing": False, "metrics": False, "logs": False}

# A body up to this size goes out in one write with its head (HeadWithBody).
_MERGED_UP_TO = 64 * 1024
# The body lane takes a POST whose Content-Length is at most this; a larger one goes to
# the application, which reads it as a stream.
BODY_LANE_UP_TO = 1 << 20

# Hop-by-hop headers of the upgrade offer: dropped when the request is re-parsed.
_UPGRADE_HEADERS = {b"upgrade", b"connection", b"http2-settings"}


def _declares_body(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"transfer-encoding":
            return True
        if name == b"content-length" and value.strip() not in (b"", b"0"):
            return True
    return False


class HeadWithBody:
    """The transport as one request's RequestResponseCycle sees it: the answer's head is
    held back and written together with the answer's first body bytes. uvicorn writes
    them apart, and on loopback each write is a send() that runs the receiver's side of
    TCP too: two sends per answer were ~18% of a master's CPU on point reads (py-spy).

    Every answer but a HEAD's writes its body (an empty one included) after its head:
    a HEAD's head goes out at once. An interim ``100 Continue`` goes out at once (the
    client waits for it before it sends the body). A close sends what is held first."""

    __slots__ = ("_head", "_head_only", "_started", "_transport")

    def __init__(self, transport: Any, head_only: bool) -> None:
        self._transport = transport
        self._head: bytes | None = None
        self._started = False
        self._head_only = head_only

    def write(self, data: bytes) -> None:
        if not self._started and not data.startswith(b"HTTP/1.1 100 "):
            self._started = True  # the answer's head (uvicorn writes it in one piece)
            if not self._head_only:
                self._head = data
                return
        elif self._head is not None:
            head, self._head = self._head, None
            if len(data) > _MERGED_UP_TO:  # not worth copying: a send more is little
                self._transport.write(head)
            else:
                data = head + data
        self._transport.write(data)

    def close(self) -> None:
        if self._head is not None:  # an answer that ended before its body
            head, self._head = self._head, None
            self._transport.write(head)
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class UpgradeIgnoringProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that answers an ``Upgrade: h2c`` (or any non-WebSocket
    upgrade) request as plain HTTP/1.1 with its body intact."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._replaying = False  # True while the re-parse primes a parser with headers
        self._body_follows = False  # the ignored upgrade request still has a body to read
        self._answered = False  # the request being parsed was answered by the direct lane

    def _ignored_upgrade(self) -> bool:
        return self.parser.should_upgrade() and not self._should_upgrade()

    # ---- parser callbacks: muted while a fresh parser is primed with known headers ----

    def on_message_begin(self) -> None:
        if not self._replaying:
            super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        if not self._replaying:
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._replaying:
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if not self._replaying:
            before = self.cycle
            super().on_headers_complete()
            if self.cycle is not None and self.cycle is not before:  # a new request's
                self.cycle.transport = HeadWithBody(self.cycle.transport,  # type: ignore
                                                    self.scope["method"] == "HEAD")

    def on_message_complete(self) -> None:
        if self._answered:  # DirectAnswers wrote the whole answer at its headers
            self._answered = False
            return
        if not self._replaying and self._ignored_upgrade() and _declares_body(self.headers):
            # llhttp ended the message at the headers because of the upgrade; its body
            # is still to come (data_received re-parses it).
            self._body_follows = True
            return
        super().on_message_complete()

    # ---- the bytes after an ignored upgrade ----

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
        except httptools.HttpParserUpgrade as exc:
            if self._should_upgrade():  # WebSocket: uvicorn's own handling
                self.handle_websocket_upgrade()
                return
            offset = exc.args[0] if exc.args else len(data)
            self._resume_after_upgrade(data[offset:])

    def _resume_after_upgrade(self, rest: bytes) -> None:
        """Go on as HTTP/1.1: a fresh parser, primed with this request's headers when its
        body is still to come, then fed the bytes the old parser left."""
        self.parser = httptools.HttpRequestParser(self)
        if self._body_follows:
            self._body_follows = False
            head = [b"POST / HTTP/1.1\r\n"]
            head += [name + b": " + value + b"\r\n" for name, value in self.headers
                     if name not in _UPGRADE_HEADERS]
            head.append(b"\r\n")
            self._replaying = True
            try:
                self.parser.feed_data(b"".join(head))
            finally:
                self._replaying = False
        if rest:
            self.data_received(rest)


class DirectAnswers(UpgradeIgnoringProtocol):
    """:class:`UpgradeIgnoringProtocol` with a direct lane (``lane``, set on a subclass by
    :func:`protocol_with`) for GETs answered whole from the parser's callback, and a body
    lane (``body_lane``) for POSTs to exact paths handed whole to their endpoint.

    Why the body lane: each call between nodes (a peer's status, a worker's execute) went
    through uvicorn's request cycle and the application's seven middleware layers before
    its endpoint, and its answer back through them as ASGI messages: about a fifth of
    what such a call cost the node that received it (py-spy, bench/README.md). The
    endpoint is the one the application routes to (routes.HotPaths), with its credential
    check, errors and answer; only the layers around it are left out, none of which does
    anything for these calls (no latency series, no body limit, no proxy headers)."""

    lane: DirectLane | None = None
    body_lane: BodyLane | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The body lane's request being read: its endpoint and scope; its body so far.
        self._taken: tuple[Callable[[Request], Awaitable[Response]], dict] | None = None
        self._taken_body: list[bytes] = []

    def on_headers_complete(self) -> None:
        if not self._replaying:
            if self.lane is not None and self._answer_directly():
                self._answered = True
                return
            if self.body_lane is not None and self._take_body():
                return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._taken is not None:
            self._taken_body.append(body)
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._taken is not None:
            (endpoint, scope), body = self._taken, b"".join(self._taken_body)
            self._taken, self._taken_body = None, []
            self._answer_later(partial(_endpoint_answer, endpoint, scope, body))
            return
        super().on_message_complete()

    def _take_body(self) -> bool:
        """Take the request for the body lane: a POST to one of its paths (as
        ``_lane_url`` lets through) with a Content-Length body of at most
        BODY_LANE_UP_TO. Any other goes to the application (chunked bodies included:
        uvicorn's handling of them stays the one that is tested with every client)."""
        if self.limit_concurrency is not None:
            return False
        length = None
        for name, value in self.headers:
            if name == b"transfer-encoding":
                return False
            if name == b"content-length":
                length = value.strip()
        if length is None or not length.isdigit() or int(length) > BODY_LANE_UP_TO:
            return False
        url = self._lane_url(b"POST")
        if url is None:
            return False
        path = url.path.decode("ascii")
        endpoint = self.body_lane.get(path)  # type: ignore[union-attr]
        if endpoint is None:
            return False
        # The scope uvicorn would give the application (on_message_begin began it).
        scope = self.scope
        scope["method"] = "POST"
        scope["path"] = self.root_path + path
        scope["raw_path"] = self.root_path.encode("ascii") + url.path
        scope["query_string"] = url.query or b""
        self._taken = (endpoint, scope)
        return True

    def _lane_url(self, method: bytes) -> Any:
        """The parsed URL of a request either lane may take, else None: a keep-alive
        HTTP/1.1 ``method`` with no upgrade offer, no ``Expect: 100-continue`` and no
        percent-escape in its path (the application's path decoding and checks), arriving
        when no earlier answer is still being written."""
        parser = self.parser
        if (parser.get_method() != method or parser.get_http_version() != "1.1"
                or not parser.should_keep_alive() or parser.should_upgrade()
                or self.expect_100_continue):
            return None
        # Answers go out in request order: not while an earlier one is still being
        # written by the application (pipelining), nor while the client does not read.
        if ((self.cycle is not None and not self.cycle.response_complete)
                or self.pipeline or self.flow.write_paused):
            return None
        url = httptools.parse_url(self.url)
        return None if b"%" in url.path else url

    def _answer_directly(self) -> bool:
        """Answer a GET without a body (as ``_lane_url`` lets through) from the lane."""
        if _declares_body(self.headers):
            return False
        url = self._lane_url(b"GET")
        if url is None:
            return False
        try:
            answer = self.lane(url.path.decode("ascii"),  # type: ignore[misc]
                               url.query or b"", self.headers)
        except Exception:  # the application answers it (and logs what failed)
            log.debug("direct lane declined after an error", exc_info=True)
            return False
        if answer is None:
            return False
        if callable(answer):
            self._answer_later(answer)
            return True
        self._write_answer(*answer)
        # What uvicorn's on_response_complete does for a keep-alive connection.
        self.server_state.total_requests += 1
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler)
        return True

    def _write_answer(self, status: int, headers: bytes, body: bytes) -> None:
        head = [STATUS_LINE[status]]
        head += [name + b": " + value + b"\r\n"
                 for name, value in self.server_state.default_headers]
        if status in (204, 304):  # RFC 9110 8.6: no Content-Length, and no body
            head += [headers, b"\r\n"]
        else:
            head += [headers, b"content-length: ", str(len(body)).encode("ascii"),
                     b"\r\n\r\n", body]
        # One write for head and body (uvicorn writes them separately: two sends).
        self.transport.write(b"".join(head))

    def _answer_later(self, later: LaterAnswer) -> None:
        """Run ``later`` as this request's answer: until it is written, a stand-in
        cycle is the protocol's current one, so that uvicorn queues pipelined requests
        behind it, marks it on a lost connection and clears its keep-alive on shutdown;
        the server waits for it on shutdown as for an application's task."""
        cycle = _LaterCycle()
        self.cycle = cycle  # type: ignore[assignment]
        task = self.loop.create_task(self._finish_later(cycle, later))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    async def _finish_later(self, cycle: _LaterCycle, later: LaterAnswer) -> None:
        answer: Answer | None = None
        try:
            answer = await later(cycle.message_event.wait)
        except Exception:  # the answer a failing application gets from uvicorn
            log.exception("direct lane failed on a request it had taken")
            answer = (500, b"content-type: text/plain; charset=utf-8\r\n",
                      b"Internal Server Error")
        finally:
            # What RequestResponseCycle does at the end of an answer (none is written if
            # the client went away, or if this was cancelled: the connection closes).
            cycle.response_complete = True
            if answer is not None and not cycle.disconnected:
                self._write_answer(*answer)
            if answer is None or not cycle.keep_alive:
                self.transport.close()
            self.on_response_complete()


class _LaterCycle:
    """What uvicorn's protocol sees of a request whose answer the direct lane gives
    later (uvicorn's RequestResponseCycle has these attributes): connection_lost sets
    ``disconnected`` and the event, shutdown clears ``keep_alive``."""

    __slots__ = ("disconnected", "keep_alive", "message_event", "response_complete")

    def __init__(self) -> None:
        self.response_complete = False
        self.disconnected = False
        self.keep_alive = True
        self.message_event = asyncio.Event()


async def _endpoint_answer(endpoint: Callable[[Request], Awaitable[Response]], scope: dict,
                           body: bytes, gone: Callable[[], Awaitable[Any]]) -> Answer:
    """A body-lane request's answer: ``endpoint``'s Response for ``scope`` and ``body``,
    its headers as the lane writes them (the lane adds Content-Length)."""
    received = False

    async def receive() -> dict:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone()  # as uvicorn: after the body, only the client's leaving
        return {"type": "http.disconnect"}

    response = await endpoint(Request(scope, receive))
    if response.background is not None:  # none of ours has one; run as Starlette would
        await response.background()
    headers = b"".join(name + b": " + value + b"\r\n" for name, value in response.raw_headers
                       if name != b"content-length")
    return response.status_code, headers, bytes(response.body)


def protocol_with(lane: DirectLane | None,
                  body_lane: BodyLane | None = None) -> type[UpgradeIgnoringProtocol]:
    """The protocol class uvicorn runs: with ``lane`` as its direct lane and
    ``body_lane`` as its body lane, if any."""
    if lane is None and not body_lane:
        return UpgradeIgnoringProtocol
    return type("DirectAnswersFor", (DirectAnswers,),
                {"lane": None if lane is None else staticmethod(lane),
                 "body_lane": dict(body_lane) if body_lane else None})


def run(app: Any, *, host: str, port: int, lane: DirectLane | None = None,
        body_lane: BodyLane | None = None, **options: Any) -> None:
    """Serve ``app`` as both node kinds do (uvicorn, httptools, the protocol above), with
    ``lane`` and ``body_lane`` for the requests they answer (DirectAnswers)."""
    heap.settle()  # the app is built: nothing a collection should walk again
    uvicorn.run(app, host=host, port=port, http=protocol_with(lane, body_lane),
                log_level="warning", access_log=False, **options)
