"""txinfra.http_server: no request body is lost, whatever the client offers.

Raw bytes on a real socket against the server both node kinds run (granian, pinned in
setup.cfg), serving an app that echoes what it received. The offers are the
ones real clients make: java.net.http.HttpClient's ``Upgrade: h2c`` (its default, which
made httptools drop the body), ``Expect: 100-continue`` (curl above 1 MB), chunked
bodies, and pipelined requests after an ignored upgrade. tests/test_clients_jdk.py drives
the real JDK client through every write endpoint of a cluster.

Then what the nodes rely on besides: pipelined answers in request order, keep-alive across
requests split over packets, an answer told that its client left (a query stopped when
nobody waits for it: txinfra/query_limits.py), and answers without a body, streamed or
failed after their head.
"""

from __future__ import annotations

import asyncio
import resource
import socket
import threading
import time

import pytest

from tests.procs import node_server_in_thread
from txinfra import http_server

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
    with node_server_in_thread(echo_app) as port:
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


# ---- order, keep-alive and a client that leaves ----

CLIENT_LEFT = threading.Event()  # /wait saw its client go away


def get(path: str, extra: bytes = b"", version: bytes = b"1.1") -> bytes:
    return b"GET %s HTTP/%s\r\nHost: t\r\n%s\r\n" % (path.encode(), version, extra)


def test_pipelined_answers_keep_request_order_behind_a_slow_answer(server):
    # Pipelined in one packet: the app takes 0.3 s on /slow; the answers after it must not
    # overtake it.
    answers = exchange(server, get("/slow") + get("/fast?a") + post(b"b", "/fast"), 3)
    assert answers == [b"GET /slow 0 ", b"GET /fast 0 ", b"POST /fast 1 b"]


def test_a_connection_goes_on_across_requests_in_pieces(server):
    first = get("/one?1")
    pieces = [first[:7], first[7:20], first[20:], post(b"after", "/p"), get("/two"),
              get("/three") + get("/four")]
    assert exchange(server, pieces, 5) == [b"GET /one 0 ", b"POST /p 5 after", b"GET /two 0 ",
                                           b"GET /three 0 ", b"GET /four 0 "]


async def waiting_app(scope, receive, send) -> None:
    """/wait: waits for the client to leave (query_limits.wait_for_disconnect reads the
    same message), then sets CLIENT_LEFT; anything else: ``ok``."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/wait":
        while (await receive())["type"] != "http.disconnect":
            pass
        CLIENT_LEFT.set()
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def test_an_answer_learns_that_its_client_went_away():
    CLIENT_LEFT.clear()
    with node_server_in_thread(waiting_app) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(get("/wait"))
            time.sleep(0.1)
        assert CLIENT_LEFT.wait(5), "the answer was not told that its client left"
        # The server goes on serving others.
        assert raw_answers(port, get("/next"), b"ok").endswith(b"\r\n\r\nok")


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
    with node_server_in_thread(answers_app) as port:
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
    # Failed after its head was given, before any body byte: the head was not sent yet,
    # so the client gets a whole 500 (not a 200 cut short), and the connection goes on.
    failed = raw_answers(port, b"GET /fail HTTP/1.1\r\nHost: x\r\n\r\n"
                               b"GET /g HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /g")
    first, second = failed.split(b"HTTP/1.1 ")[1:]
    assert first.startswith(b"500 Internal Server Error\r\n")
    assert first.endswith(b"\r\n\r\nInternal server error")
    assert second.startswith(b"200") and second.endswith(b"\r\n\r\nGET /g")


def test_idle_kept_alive_connections_do_not_shut_out_a_new_client(server):
    """Found by tests/test_partitions.py in CI: after a network cut a master answered
    nobody for 30 s. Each status its peers gave up on during the cut left a connection
    whose FIN the cut dropped; granian counts open connections against its backpressure
    (128 by default) and accepted no new one until those timed out."""
    idle = []
    try:
        for _ in range(200):  # past granian's default, as after the cut
            s = socket.create_connection(("127.0.0.1", server), timeout=10)
            s.sendall(b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n")  # answered, then kept alive
            idle.append(s)
        for s in idle:
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        [answer] = exchange(server, b"POST /new HTTP/1.1\r\nHost: a\r\nContent-Length: 2"
                                    b"\r\n\r\nok", 1)
        assert answer == b"POST /new 2 ok"
        assert time.monotonic() - started < 5
    finally:
        for s in idle:
            s.close()


def test_a_server_raises_its_own_open_files_limit_within_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        assert http_server.raise_open_files_limit(4096) == min(4096, hard)
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (min(4096, hard), hard)
        assert http_server.raise_open_files_limit(100) == min(4096, hard)  # never lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
