"""A master's direct lane (MasterBackend.direct_read behind txcluster/http_server.py's
DirectAnswers): the GET queries it forwards from the HTTP parser's callback are answered
exactly as the route answers them, counted as the route counts them, and every other read
is left to the route.

Against a real master with two workers, on raw sockets: the same request on a keep-alive
connection (which the lane takes) and with ``Connection: close`` (which it never takes, so
the route answers). Which one answered shows in the master's ``txcluster_reads_direct``
counter.
"""

from __future__ import annotations

import socket
from urllib.parse import quote, urlsplit

import httpx
import pytest

from master_service.api.client import ClientAuth, MasterBackend
from master_service.config import ClientUser
from tests.scrape import scrape, value

EX = "http://example.org/lane/"
JSON = "application/sparql-results+json"
SELECT = f"SELECT ?s ?o WHERE {{ ?s <{EX}p> ?o }} ORDER BY ?s"
CONSTRUCT = f"CONSTRUCT {{ ?s <{EX}q> ?o }} WHERE {{ ?s <{EX}p> ?o }}"
CONTROL_GRAPH = "http://www.ontotext.com/owlim/cluster/control-query"


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    c = module_cluster_factory(workers=2, name="lane")
    data = " ".join(f'<{EX}s{i}> <{EX}p> "o{i}" .' for i in range(20))
    assert c.update(f"INSERT DATA {{ {data} }}").status_code == 204
    c.wait_in_sync()
    return c


def exchange(url: str, requests: list[bytes]) -> list[tuple[int, list[bytes], bytes]]:
    """Send ``requests`` on one connection (pipelined, in one packet) and read one answer
    each: (status, header lines, body)."""
    address = urlsplit(url)
    answers: list[tuple[int, list[bytes], bytes]] = []
    buf = b""
    with socket.create_connection((address.hostname, address.port), timeout=30) as s:
        s.sendall(b"".join(requests))
        while len(answers) < len(requests):
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if sep:
                lines = head.split(b"\r\n")
                length = next((int(line.split(b":")[1]) for line in lines
                               if line.lower().startswith(b"content-length:")), 0)  # a 204
                if len(rest) >= length:
                    answers.append((int(lines[0].split()[1]), lines[1:], rest[:length]))
                    buf = rest[length:]
                    continue
            chunk = s.recv(65536)
            assert chunk, f"closed after {len(answers)} answers"
            buf += chunk
    return answers


def get(url: str, query: str, accept: str, close: bool = False, extra: str = "") -> bytes:
    address = urlsplit(url)
    return (f"GET {address.path}?query={quote(query, safe='')} HTTP/1.1\r\n"
            f"Host: {address.netloc}\r\nAccept: {accept}\r\n{extra}"
            + ("Connection: close\r\n" if close else "") + "\r\n").encode()


def direct_reads(cluster) -> float:
    return value(scrape(cluster.master.url), "txcluster_reads_direct_total")


@pytest.mark.parametrize(("query", "accept"), [
    (SELECT, JSON),
    (SELECT, "application/sparql-results+xml"),
    (SELECT, "text/csv"),
    (f"ASK {{ <{EX}s3> <{EX}p> ?o }}", "text/boolean"),
    (CONSTRUCT, "text/turtle"),
    (CONSTRUCT, "application/n-triples"),
    ("SELECT ?s WHERE { ?s", JSON),  # the worker's 400, passed on
    (SELECT, "image/png"),  # the worker's 406, passed on
], ids=["json", "xml", "csv", "ask", "turtle", "ntriples", "syntax-error", "not-acceptable"])
def test_the_lane_answers_as_the_route(cluster, query, accept):
    before = direct_reads(cluster)
    [(lane_status, lane_head, lane_body)] = exchange(cluster.repo_url,
                                                     [get(cluster.repo_url, query, accept)])
    assert direct_reads(cluster) == before + 1
    [(route_status, route_head, route_body)] = exchange(
        cluster.repo_url, [get(cluster.repo_url, query, accept, close=True)])
    assert direct_reads(cluster) == before + 1
    assert lane_status == route_status
    # The same head but for the date and the route's Connection: close.
    assert [line for line in lane_head if not line.startswith(b"date:")] == [
        line for line in route_head if not line.startswith(b"date:")
        and line != b"connection: close"]
    assert lane_body == route_body and lane_body


def test_pipelined_reads_and_a_write_keep_their_order(cluster):
    url = cluster.repo_url
    path = urlsplit(url).path
    ask = f"ASK {{ <{EX}new> <{EX}p> ?o }}"
    insert = f'INSERT DATA {{ <{EX}new> <{EX}p> "x" }}'.encode()
    write = (f"POST {path}/statements HTTP/1.1\r\nHost: t\r\n"
             f"Content-Type: application/sparql-update\r\nContent-Length: {len(insert)}\r\n"
             "\r\n").encode() + insert
    try:
        answers = exchange(url, [get(url, ask, "text/boolean"), write,
                                 get(url, ask, "text/boolean")])
        assert [(status, body) for status, _, body in answers] == [
            (200, b"false"), (204, b""), (200, b"true")]  # read-your-writes, in order
    finally:
        assert cluster.update(f"DELETE DATA {{ <{EX}new> <{EX}p> \"x\" }}").status_code == 204


def test_lane_reads_are_counted_and_see_each_acknowledged_write(cluster):
    before = scrape(cluster.master.url)
    with httpx.Client(timeout=30) as client:  # keep-alive: the lane takes every read
        for i in range(5):
            r = client.post(f"{cluster.repo_url}/statements",
                            content=f'INSERT DATA {{ <{EX}c{i}> <{EX}p> "c" }}'.encode(),
                            headers={"content-type": "application/sparql-update"})
            assert r.status_code == 204, r.text
            r = client.get(cluster.repo_url, headers={"accept": "text/boolean"},
                           params={"query": f"ASK {{ <{EX}c{i}> <{EX}p> ?o }}"})
            assert (r.status_code, r.text) == (200, "true")
        assert client.post(f"{cluster.repo_url}/statements",
                           content=f"DELETE WHERE {{ ?s <{EX}p> \"c\" }}".encode(),
                           headers={"content-type": "application/sparql-update"}
                           ).status_code == 204
    after = scrape(cluster.master.url)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("txcluster_request_duration_seconds_count", kind="read") == 5
    assert grew("txcluster_reads_completed_total") == 5
    assert grew("txcluster_reads_direct_total") == 5


def test_a_control_query_still_goes_to_every_worker(cluster):
    # Declined by the lane: the route sends it to both workers (one answer).
    query = f"SELECT (COUNT(*) AS ?n) FROM <{CONTROL_GRAPH}> WHERE {{ ?s ?p ?o }}"
    before = direct_reads(cluster)
    [(status, _, body)] = exchange(cluster.repo_url, [get(cluster.repo_url, query, JSON)])
    assert status == 200, body
    assert direct_reads(cluster) == before


# ---- which reads the lane takes (no request forwarded: it declines before that) ----

def backend(users=()) -> MasterBackend:
    def no_cluster():
        raise AssertionError("a declined read must not reach the cluster")
    return MasterBackend(no_cluster, "repo", ClientAuth(users))


@pytest.mark.parametrize(("path", "query_string"), [
    ("/repositories/other", b"query=ASK%7B%7D"),
    ("/repositories/repo/size", b""),
    ("/repositories/repo/statements", b"subj=%3Curn:a%3E"),
    ("/repositories/repo", b""),
    ("/repositories/repo", b"query=ASK%7B%7D&timeout=5"),
    ("/repositories/repo", b"query=ASK%7B%7D&%74imeout=5"),  # timeout, escaped
    ("/repositories/repo", b"query=SELECT+*+FROM+%3C" + quote(CONTROL_GRAPH, safe="").encode()
     + b"%3E+WHERE+%7B%7D"),
], ids=["other-repository", "size", "statements", "no-query", "timeout", "escaped-timeout",
        "control-query"])
def test_reads_the_lane_leaves_to_the_route(path, query_string):
    assert backend().direct_read(path, query_string, []) is None


def test_a_missing_or_wrong_credential_is_left_to_the_route():
    # The route answers 401 and logs the refusal (tests/test_security.py).
    lane = backend([ClientUser("reader", "secret", "read")])
    for authorization in ([], [(b"authorization", b"Basic cmVhZGVyOm5vcGU=")],  # reader:nope
                          [(b"authorization", b"Bearer x")]):
        assert lane.direct_read("/repositories/repo", b"query=ASK%7B%7D",
                                authorization) is None
