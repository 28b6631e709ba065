"""txcluster.http_server: no request body is lost, whatever the client offers.

Raw bytes on a real socket against the protocol both node kinds run (uvicorn + httptools +
UpgradeIgnoringProtocol), serving an app that echoes what it received. The offers are the
ones real clients make: java.net.http.HttpClient's ``Upgrade: h2c`` (its default, which
made httptools drop the body), ``Expect: 100-continue`` (curl above 1 MB), chunked
bodies, and pipelined requests after an ignored upgrade. tests/test_clients_jdk.py drives
the real JDK client through every write endpoint of a cluster.
"""

from __future__ import annotations

import socket
import time

import pytest

from tests.procs import uvicorn_in_thread
from txcluster.http_server import UpgradeIgnoringProtocol

H2C = (b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
       b"HTTP2-Settings: AAEAAEAAAAIAAAABAAMAAABkAAQBAAAAAAUAAEAA\r\n")


async def echo_app(scope, receive, send) -> None:
    """Answers ``<method> <path> <body length> <body>``."""
    if scope["type"] != "http":
        return
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
