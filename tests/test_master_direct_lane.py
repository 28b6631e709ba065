"""A master's point reads on the hot path (routes.HotPaths, the route table's query
route): GET queries on keep-alive connections, pipelined or not, are answered exactly as
with ``Connection: close``, in request order with writes between them, counted in the
read series, and a query FROM the control-query graph still goes to every worker.

Against a real master with two workers, on raw sockets.
"""

from __future__ import annotations

import socket
from urllib.parse import quote, urlsplit

import httpx
import pytest

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
def test_a_keep_alive_read_answers_as_a_closing_one(cluster, query, accept):
    [(lane_status, lane_head, lane_body)] = exchange(cluster.repo_url,
                                                     [get(cluster.repo_url, query, accept)])
    [(route_status, route_head, route_body)] = exchange(
        cluster.repo_url, [get(cluster.repo_url, query, accept, close=True)])
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


def test_hot_reads_are_counted_and_see_each_acknowledged_write(cluster):
    before = scrape(cluster.master.url)
    with httpx.Client(timeout=30) as client:  # keep-alive
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


def test_a_control_query_still_goes_to_every_worker(cluster):
    # The route sends it to both workers (one answer).
    query = f"SELECT (COUNT(*) AS ?n) FROM <{CONTROL_GRAPH}> WHERE {{ ?s ?p ?o }}"
    before = scrape(cluster.master.url)
    [(status, _, body)] = exchange(cluster.repo_url, [get(cluster.repo_url, query, JSON)])
    assert status == 200, body
    after = scrape(cluster.master.url)
    assert value(after, "txcluster_reads_completed_total") == \
        value(before, "txcluster_reads_completed_total")  # not a routed read of one worker
