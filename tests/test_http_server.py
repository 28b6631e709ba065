"""txcluster.http_server: no request body is lost, whatever the client offers.

Raw bytes on a real socket against the protocol both node kinds run (uvicorn + httptools +
UpgradeIgnoringProtocol), serving an app that echoes what it received. The offers are the
ones real clients make: java.net.http.HttpClient's ``Upgrade: h2c`` (its default, which
made httptools drop the body), ``Expect: 100-continue`` (curl above 1 MB), chunked
bodies, and pipelined requests after an ignored upgrade. tests/test_clients_jdk.py drives
the real JDK client through every write endpoint of a cluster.

The direct lane (DirectAnswers) is checked the same way: which requests it answers, that
every other one reaches the application unchanged, and that answers keep request order.
So is the body lane (POSTs to exact paths handed whole to their endpoint, the calls
between nodes): its endpoints get the request uvicorn would have given the application,
and what it does not take (chunked, 100-continue, upgrade offers, large bodies) still
reaches the application with its body.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest
from fastapi import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from rdf4j_protocol.routes import answered
from tests.procs import uvicorn_in_thread
from txcluster.http_server import (
    BODY_LANE_UP_TO,
    HeadWithBody,
    UpgradeIgnoringProtocol,
    protocol_with,
)

H2C = (b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
       b"HTTP2-Settings: AAEAAEAAAAIAAAABAAMAAABkAAQBAAAAAAUAAEAA\r\n")


async def echo_app(scope, receive, send) -> None:
    """Answers ``<method> <path> <body length> <body>``."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(0.3)
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    out = b"%s %s %d " % (scope["method"].encode(), scope["path"].encode(), len(body)) + body
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(out)).encode())]})
    await send({"type": "http.response.body", "body": out})


@pytest.fixture(scope="module")
def server():
    with uvicorn_in_thread(echo_app, http=UpgradeIgnoringProtocol, access_log=False) as port:
        yield port


def exchange(port: int, data: bytes | list[bytes], answers: int) -> list[bytes]:
    """Send ``data`` (several pieces: sent with pauses, as a slow client would) and read
    ``answers`` responses; returns their bodies."""
    pieces = data if isinstance(data, list) else [data]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for piece in pieces:
            s.sendall(piece)
            time.sleep(0.05)
        buf = b""
        bodies: list[bytes] = []
        while len(bodies) < answers:
            chunk = s.recv(65536)
            assert chunk, f"connection closed after {len(bodies)} answers: {buf!r}"
            buf += chunk
            while True:
                head, sep, rest = buf.partition(b"\r\n\r\n")
                if not sep:
                    break
                status = head.split(b"\r\n")[0]
                if status.startswith(b"HTTP/1.1 100"):
                    buf = rest
                    continue
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                if len(rest) < length:
                    break
                assert status.startswith(b"HTTP/1.1 200"), status
                bodies.append(rest[:length])
                buf = rest[length:]
    return bodies


def post(body: bytes, path: str = "/p", extra: bytes = b"", chunked: bool = False) -> bytes:
    head = b"POST %s HTTP/1.1\r\nHost: t\r\n" % path.encode() + extra
    if chunked:
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7])
                          for i in range(0, len(body), 7))
        return head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def test_h2c_offer_keeps_the_body(server):
    body = b"INSERT DATA { <urn:a> <urn:b> 'two triples' }"
    assert exchange(server, post(body, extra=H2C), 1) == [b"POST /p %d %s" % (len(body), body)]


def test_h2c_offer_keeps_a_chunked_body(server):
    body = b"chunked body across several chunks " * 3
    assert exchange(server, post(body, extra=H2C, chunked=True), 1) == \
        [b"POST /p %d %s" % (len(body), body)]


def test_h2c_body_arriving_after_the_headers(server):
    # The JDK client writes headers and body separately: the body is in a later read.
    body = b"x" * 200_000
    request = post(body, extra=H2C)
    split = request.index(b"\r\n\r\n") + 4
    answers = exchange(server, [request[:split], request[split:split + 1000],
                                request[split + 1000:]], 1)
    assert answers == [b"POST /p %d %s" % (len(body), body)]


def test_requests_after_an_ignored_upgrade_on_the_same_connection(server):
    # Pipelined: an h2c offer with a body, a plain POST, a bodiless h2c GET, a POST.
    get_h2c = b"GET /g HTTP/1.1\r\nHost: t\r\n" + H2C + b"\r\n"
    data = post(b"first", "/1", H2C) + post(b"second", "/2") + get_h2c + post(b"third", "/3")
    assert exchange(server, data, 4) == [b"POST /1 5 first", b"POST /2 6 second",
                                         b"GET /g 0 ", b"POST /3 5 third"]


def test_expect_100_continue(server):
    body = b"y" * 3000
    request = post(body, extra=b"Expect: 100-continue\r\n")
    split = request.index(b"\r\n\r\n") + 4
    assert exchange(server, [request[:split], request[split:]], 1) == \
        [b"POST /p %d %s" % (len(body), body)]


def test_h2c_offer_without_a_body_is_plain_http(server):
    get = b"GET /only HTTP/1.1\r\nHost: t\r\n" + H2C + b"\r\n"
    assert exchange(server, get + get, 2) == [b"GET /only 0 ", b"GET /only 0 "]


# ---- the direct lane ----

LANE_CALLS: list[str] = []
CLIENT_LEFT = threading.Event()  # a later answer saw its client go away


async def later_answer(query: bytes, client_gone) -> tuple[int, bytes, bytes]:
    """An answer given after an await, as a master's forwarded read: ``wait`` waits for
    the client to go away (then there is nobody to answer), ``fail`` raises."""
    if query == b"wait":
        await client_gone()
        CLIENT_LEFT.set()
    await asyncio.sleep(0.2)
    if query == b"fail":
        raise RuntimeError("the later answer failed")
    return 200, b"content-type: text/x-later\r\n", b"later " + query


def lane(path: str, query: bytes, headers: list[tuple[bytes, bytes]]):
    """Answers GET /fast (its query string and Accept header) now and GET /later later,
    fails on /broken, declines the rest."""
    LANE_CALLS.append(path)
    if path == "/broken":
        raise RuntimeError("the lane failed")
    if path == "/later":
        return lambda client_gone: later_answer(query, client_gone)
    if path != "/fast":
        return None
    accept = dict(headers).get(b"accept", b"")
    return 200, b"content-type: text/x-lane\r\n", b"lane " + query + b" " + accept


@pytest.fixture(scope="module")
def lane_server():
    with uvicorn_in_thread(echo_app, http=protocol_with(lane), access_log=False) as port:
        yield port


def get(path: str, extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    return b"GET %s HTTP/%s\r\nHost: t\r\n%s\r\n" % (path.encode(), version, extra)


def test_the_lane_answers_what_it_takes_and_the_app_the_rest(lane_server):
    LANE_CALLS.clear()
    # One request per packet: pipelined behind an application answer, the lane would
    # rightly not be asked (the test below).
    answers = exchange(lane_server, [get("/fast?q=1", b"Accept: a/b\r\n"), get("/other"),
                                     get("/broken"), post(b"body", "/fast"), get("/fast?q=2")],
                       5)
    assert answers == [b"lane q=1 a/b", b"GET /other 0 ", b"GET /broken 0 ",
                       b"POST /fast 4 body", b"lane q=2 "]
    assert LANE_CALLS == ["/fast", "/other", "/broken", "/fast"]  # never offered a POST


def test_the_lane_answer_is_plain_http_with_the_servers_headers(lane_server):
    with socket.create_connection(("127.0.0.1", lane_server), timeout=10) as s:
        s.sendall(get("/fast?x"))
        head = s.recv(65536).split(b"\r\n\r\n")[0].lower().split(b"\r\n")
    assert head[0] == b"http/1.1 200 ok"
    assert {b"content-type: text/x-lane", b"content-length: 7"} <= set(head)
    assert any(h.startswith(b"date: ") for h in head)


@pytest.mark.parametrize("request_bytes", [
    get("/fast", b"Connection: close\r\n"),  # the app closes the connection after
    get("/fast", version=b"1.0"),
    get("/fast", H2C),  # an upgrade offer: UpgradeIgnoringProtocol's handling
    get("/fast", b"Content-Length: 3\r\n") + b"abc",  # a GET with a body
    get("/fast", b"Expect: 100-continue\r\nContent-Length: 0\r\n"),
    get("/f%61st"),  # percent-escapes: the app decodes paths
], ids=["close", "http-1.0", "h2c", "body", "expect", "escaped"])
def test_requests_the_lane_never_takes(lane_server, request_bytes):
    LANE_CALLS.clear()
    with socket.create_connection(("127.0.0.1", lane_server), timeout=10) as s:
        s.sendall(request_bytes)
        answer = s.recv(65536)
    assert answer.rsplit(b"\r\n\r\n", 1)[1].startswith(b"GET /f")  # the app's echo
    assert LANE_CALLS == []


def test_answers_keep_request_order_behind_a_slow_application_answer(lane_server):
    # Pipelined in one packet: the app takes 0.3 s on /slow; the GETs of /fast after it
    # must not overtake it: the lane is not asked while an earlier answer is pending, and
    # they queue behind it in the application.
    LANE_CALLS.clear()
    answers = exchange(lane_server, get("/slow") + get("/fast?a") + get("/fast?b"), 3)
    assert answers == [b"GET /slow 0 ", b"GET /fast 0 ", b"GET /fast 0 "]
    assert LANE_CALLS == ["/slow"]  # asked first, and declined


def test_a_connection_goes_on_after_lane_answers(lane_server):
    # Keep-alive across lane answers, with a request split over several packets.
    first = get("/fast?1")
    pieces = [first[:7], first[7:20], first[20:], post(b"after", "/p"), get("/fast?2"),
              get("/fast?3") + get("/fast?4")]
    assert exchange(lane_server, pieces, 5) == [b"lane 1 ", b"POST /p 5 after", b"lane 2 ",
                                                b"lane 3 ", b"lane 4 "]


def test_a_later_answer_keeps_request_order_and_the_connection(lane_server):
    # Behind an answer that takes 0.2 s, pipelined requests queue in the application
    # (the lane is not asked while an answer is pending), so answers keep their order.
    LANE_CALLS.clear()
    pieces = [get("/later?a") + get("/other") + get("/fast?b"), get("/later?c")]
    assert exchange(lane_server, pieces, 4) == [b"later a", b"GET /other 0 ", b"GET /fast 0 ",
                                                b"GET /later 0 "]
    assert LANE_CALLS == ["/later"]
    # One after the other, the lane answers each, later and now, on one connection.
    pieces = [get("/later?c"), get("/fast?d")]
    with socket.create_connection(("127.0.0.1", lane_server), timeout=10) as s:
        for piece, expected in zip(pieces, [b"later c", b"lane d "], strict=True):
            s.sendall(piece)
            answer = b""
            while not answer.endswith(expected):
                chunk = s.recv(65536)
                assert chunk, answer
                answer += chunk


def test_a_later_answer_that_fails_is_a_500_and_the_connection_goes_on(lane_server):
    with socket.create_connection(("127.0.0.1", lane_server), timeout=10) as s:
        s.sendall(get("/later?fail") + get("/fast?after"))  # the second: the application's
        answer = b""
        while not answer.endswith(b"GET /fast 0 "):
            chunk = s.recv(65536)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert b"\r\n\r\nInternal Server Error" in answer


def test_a_later_answer_learns_that_its_client_went_away(lane_server):
    CLIENT_LEFT.clear()
    with socket.create_connection(("127.0.0.1", lane_server), timeout=10) as s:
        s.sendall(get("/later?wait"))
        time.sleep(0.1)
    assert CLIENT_LEFT.wait(5), "the later answer was not told that its client left"
    # The server goes on serving others.
    assert exchange(lane_server, get("/later?next"), 1) == [b"later next"]


# ---- the body lane ----

BODY_LANE_CALLS: list[str] = []


async def lane_endpoint(request: Request) -> Response:
    """The body lane's endpoint: ``in <path>?<query> <x-h header> <client host> <body>``;
    /in?refuse: a refusal (HTTPException); /in?fail: an error; /in?empty: a 204."""
    BODY_LANE_CALLS.append(request.url.path)
    body = await request.body()
    query = request.url.query
    if query == "refuse":
        raise HTTPException(409, "refused: the test said so")
    if query == "fail":
        raise RuntimeError("the endpoint failed")
    if query == "empty":
        return Response(status_code=204, headers={"x-took": "it"})
    if query == "slow":
        await asyncio.sleep(0.3)
    client = request.client.host if request.client else "?"
    return Response(b"in %s?%s %s %s " % (request.url.path.encode(), query.encode(),
                                          request.headers.get("x-h", "-").encode(),
                                          client.encode()) + body,
                    media_type="text/x-body-lane")


@pytest.fixture(scope="module")
def body_lane_server():
    with uvicorn_in_thread(echo_app, http=protocol_with(None, {"/in": answered(lane_endpoint)}),
                           access_log=False) as port:
        yield port


def test_the_body_lane_hands_a_post_to_its_endpoint_and_the_app_the_rest(body_lane_server):
    BODY_LANE_CALLS.clear()
    body = b"a body \xe2\x9c\x93"
    answers = exchange(body_lane_server, [
        post(body, "/in?q=1", b"X-H: v\r\n"),
        post(b"other", "/p"),  # not a lane path
        get("/in"),  # not a POST
        post(b"chunked body", "/in", chunked=True),
        post(b"continue", "/in", b"Expect: 100-continue\r\n"),
        post(b"h2c", "/in", H2C),
        post(b"escaped", "/%69n"),
        post(b"", "/in?none"),
    ], 8)
    assert answers == [b"in /in?q=1 v 127.0.0.1 " + body, b"POST /p 5 other", b"GET /in 0 ",
                       b"POST /in 12 chunked body", b"POST /in 8 continue", b"POST /in 3 h2c",
                       b"POST /in 7 escaped", b"in /in?none - 127.0.0.1 "]  # decoded by uvicorn
    assert BODY_LANE_CALLS == ["/in", "/in"]


def test_a_body_lane_body_in_pieces_and_at_its_limit(body_lane_server):
    BODY_LANE_CALLS.clear()
    request = post(b"x" * 70_000, "/in?pieces")
    pieces = [request[:30], request[30:90], request[90:5000], request[5000:]]
    assert exchange(body_lane_server, pieces, 1) == [b"in /in?pieces - 127.0.0.1 " +
                                                     b"x" * 70_000]
    big = b"y" * BODY_LANE_UP_TO
    answers = exchange(body_lane_server, [post(big, "/in?limit"), post(big + b"z", "/in")], 2)
    assert answers == [b"in /in?limit - 127.0.0.1 " + big,
                       b"POST /in %d " % (len(big) + 1) + big + b"z"]  # the application's
    assert BODY_LANE_CALLS == ["/in", "/in"]


def test_body_lane_answers_keep_request_order(body_lane_server):
    # Pipelined in one packet: the first is the lane's (answered after 0.3 s), the others
    # queue behind it in the application, in order.
    BODY_LANE_CALLS.clear()
    answers = exchange(body_lane_server,
                       [post(b"1", "/in?slow") + post(b"2", "/in") + get("/x")], 3)
    assert answers == [b"in /in?slow - 127.0.0.1 1", b"POST /in 1 2", b"GET /x 0 "]
    assert BODY_LANE_CALLS == ["/in"]
    # One after the other on one connection, the lane takes each.
    with socket.create_connection(("127.0.0.1", body_lane_server), timeout=10) as s:
        for n in (b"3", b"4", b"5"):
            s.sendall(post(n, "/in"))
            answer = b""
            while not answer.endswith(b"127.0.0.1 " + n):
                chunk = s.recv(65536)
                assert chunk, answer
                answer += chunk
    assert BODY_LANE_CALLS == ["/in"] * 4


def test_body_lane_refusals_errors_and_empty_answers(body_lane_server):
    refused = raw_answers(body_lane_server, post(b"r", "/in?refuse") + get("/after"),
                          b"GET /after")
    assert refused.startswith(b"HTTP/1.1 409 Conflict\r\n")
    assert b'{"detail":"refused: the test said so"}' in refused  # as FastAPI answers it
    failed = raw_answers(body_lane_server, post(b"f", "/in?fail") + get("/after"),
                         b"GET /after")
    assert failed.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert b"\r\n\r\nInternal Server Error" in failed
    empty = raw_answers(body_lane_server, post(b"e", "/in?empty") + get("/after"),
                        b"GET /after")
    first, second = empty.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"204 No Content\r\n") and first.endswith(b"\r\n\r\n")
    assert b"x-took: it" in first and b"content-length" not in first.lower()
    assert second.startswith(b"200") and second.endswith(b"GET /after 0 ")


# ---- an answer's head goes out with its body (HeadWithBody) ----


class Sink:
    """A transport that records each write (and whether it was closed)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def test_the_head_is_written_with_the_first_body_bytes():
    sink = Sink()
    t = HeadWithBody(sink, head_only=False)
    t.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # interim: at once, the client waits for it
    assert sink.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    assert len(sink.writes) == 1  # held
    t.write(b"ok")
    assert sink.writes[1:] == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"]
    t.write(b"more")  # later body bytes as they come
    assert sink.writes[2:] == [b"more"] and not t.is_closing()


def test_a_head_only_answer_a_large_body_and_a_close_are_not_held():
    sink = Sink()
    HeadWithBody(sink, head_only=True).write(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n")
    assert len(sink.writes) == 1  # a HEAD's answer has no body to wait for
    sink = Sink()
    t = HeadWithBody(sink, head_only=False)
    t.write(b"HTTP/1.1 200 OK\r\n\r\n")
    big = b"x" * (1 << 20)
    t.write(big)
    assert sink.writes == [b"HTTP/1.1 200 OK\r\n\r\n", big]  # not copied into one
    sink = Sink()
    t = HeadWithBody(sink, head_only=False)
    t.write(b"HTTP/1.1 500 Internal Server Error\r\n\r\n")
    t.close()  # the application failed after its head: the head, then the close
    assert sink.writes == [b"HTTP/1.1 500 Internal Server Error\r\n\r\n"] and sink.closed


async def answers_app(scope, receive, send) -> None:
    """/stream: three body parts; /nocontent: 204; /fail: a head, then an exception;
    anything else: ``<method> <path>`` (HEAD: its length, no body)."""
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/nocontent":
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain")]})
        for part in (b"one ", b"two ", b"three"):
            await asyncio.sleep(0.01)
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    if path == "/fail":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"10")]})
        raise RuntimeError("failed after the head")
    out = f"{scope['method']} {path}".encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(out)).encode())]})
    await send({"type": "http.response.body", "body": out})


@pytest.fixture(scope="module")
def answers_server():
    with uvicorn_in_thread(answers_app, http=UpgradeIgnoringProtocol,
                           access_log=False) as port:
        yield port


def raw_answers(port: int, request: bytes, until: bytes) -> bytes:
    """Send ``request`` and read until ``until`` is in what came back, or the close."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request)
        buf = b""
        while until not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf


def test_answers_without_a_body_streamed_and_failed_reach_the_client(answers_server):
    port = answers_server
    both = raw_answers(port, b"HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n"
                             b"GET /nocontent HTTP/1.1\r\nHost: x\r\n\r\n"
                             b"GET /g HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /g")
    head, nocontent, get = both.split(b"HTTP/1.1 ")[1:]
    assert head.startswith(b"200") and b"content-length: 7" in head.lower()
    assert head.endswith(b"\r\n\r\n")  # no body after a HEAD's head
    assert nocontent.startswith(b"204") and nocontent.endswith(b"\r\n\r\n")
    assert get.startswith(b"200") and get.endswith(b"\r\n\r\nGET /g")
    streamed = raw_answers(port, b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n", b"0\r\n\r\n")
    assert b"transfer-encoding: chunked" in streamed.lower()
    assert streamed.endswith(b"4\r\none \r\n4\r\ntwo \r\n5\r\nthree\r\n0\r\n\r\n")
    failed = raw_answers(port, b"GET /fail HTTP/1.1\r\nHost: x\r\n\r\n", b"\r\n\r\n!")
    assert failed.startswith(b"HTTP/1.1 200") and failed.endswith(b"\r\n\r\n")  # then closed
