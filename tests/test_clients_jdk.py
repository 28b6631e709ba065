"""The master as a drop-in endpoint for the JDK's own HTTP client (java.net.http), with its
defaults: ``HttpClient.newHttpClient()`` prefers HTTP/2 and so offers ``Upgrade: h2c`` on
every cleartext HTTP/1.1 request, body included. That offer used to lose request bodies (a
Graph Store PUT of two triples answered 204 and left the graph empty; a POST of
application/sparql-update got 400 "missing SPARQL update").

The client is tests/java/JdkHttpClientWrites.java, compiled here by javac and driven line by
line (one JVM for the module; ``NEW`` makes a fresh client, so a fresh connection whose
first request offers h2c). Every write endpoint of the master is driven with a plain body
(Content-Length), with ``Expect: 100-continue`` and with a chunked body; after each, the
stored content is read back by a SPARQL SELECT from Python (httpx) and compared exactly.
Then: a ~5 MB body, several requests on one kept-alive connection after an h2c-offered
first one (counted by a relay), HTTP/1.1 pipelining from a raw socket, and a worker: reads
answered, direct writes refused (403, with the body read) on a connection that stays usable.
"""

from __future__ import annotations

import base64
import select
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

import h11
import httpx
import pyoxigraph as ox
import pytest

from tests.clientlab import Relay, namespaces, nq, stored

JAVA_SOURCE = Path(__file__).parent / "java" / "JdkHttpClientWrites.java"

pytestmark = pytest.mark.skipif(
    not (shutil.which("javac") and shutil.which("java")),
    reason="the JDK client tests need a JDK (javac, java; Debian openjdk-17-jdk-headless); "
    "`make test` installs it")

X = "urn:x:"
SPARQL_UPDATE = "application/sparql-update"
FORM = "application/x-www-form-urlencoded"

# The state every write case starts from (N-Quads).
PRE = f"""
<{X}keep> <{X}p> "kept" .
<{X}old> <{X}p> "old" .
<{X}old> <{X}p> "old" <{X}g1> .
<{X}s> <{X}p> "in g1" <{X}g1> .
"""
# Two new triples, in the formats the tests send.
TWO_TTL = f'<{X}new> <{X}p> "one" , "two" .\n'
TWO_RDFXML = f"""<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns:x="{X}">
  <rdf:Description rdf:about="{X}new"><x:p>one</x:p><x:p>two</x:p></rdf:Description>
</rdf:RDF>
"""


def two(graph: str | None = None) -> set[ox.Quad]:
    g = f" <{X}{graph}>" if graph else ""
    return nq(f'<{X}new> <{X}p> "one"{g} .\n<{X}new> <{X}p> "two"{g} .\n')


def without(quads: set[ox.Quad], text: str) -> set[ox.Quad]:
    gone = nq(text)
    assert gone <= quads
    return quads - gone


# ---- the Java client ----


@dataclass
class Reply:
    status: int
    version: str
    body: bytes
    headers: dict[str, str]

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class JdkClient:
    """One JVM running JdkHttpClientWrites; stopped (by its PID) by ``close``."""

    def __init__(self, classes: Path, tmp: Path) -> None:
        self.tmp = tmp
        self.proc = subprocess.Popen(
            ["java", "-cp", str(classes), "JdkHttpClientWrites"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self._files = 0

    def _line(self, command: str, timeout: float = 180) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            raise AssertionError(f"the Java client did not answer {command[:200]!r}: "
                                 f"{self.proc.poll()=}")
        return line.rstrip("\n")

    def new(self) -> None:
        """A fresh HttpClient.newHttpClient(): the next request opens a new connection."""
        assert self._line("NEW") == "OK"

    def request(self, method: str, url: str, body: bytes | str | None = None, *,
                content_type: str | None = None, chunked: bool = False,
                expect100: bool = False, headers: dict[str, str] | None = None) -> Reply:
        if body is None:
            spec = "-"
        else:
            data = body.encode() if isinstance(body, str) else body
            if len(data) > 64 * 1024:  # big bodies go by file, not on the command line
                self._files += 1
                path = self.tmp / f"body-{self._files}"
                path.write_bytes(data)
                spec = f"file:{path}"
            else:
                spec = "b64:" + base64.b64encode(data).decode()
            if chunked:
                spec = "chunked-" + spec
        hdrs = dict(headers or {})
        if content_type:
            hdrs["Content-Type"] = content_type
        fields = ["REQ", method, url, spec, "expect100" if expect100 else "-",
                  *(f"{k}: {v}" for k, v in hdrs.items())]
        f = self._line("\t".join(fields)).split("\t")
        if f[0] != "RES":
            raise AssertionError(f"{method} {url}: the Java client failed: "
                                 f"{base64.b64decode(f[1]).decode()}")
        head = base64.b64decode(f[4]).decode()
        parsed = dict(h.split(": ", 1) for h in head.splitlines() if h)
        return Reply(int(f[1]), f[2], base64.b64decode(f[3]), parsed)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # this Popen's own PID
                self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def java_classes(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("jdk-client")
    subprocess.run(["javac", "-d", str(out), str(JAVA_SOURCE)], check=True, timeout=120)
    return out


@pytest.fixture(scope="module")
def jdk(java_classes, tmp_path_factory):
    client = JdkClient(java_classes, tmp_path_factory.mktemp("jdk-bodies"))
    yield client
    client.close()


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory(workers=3)


# ---- reading the stored content back (Python, httpx) ----

def stored_default_graph(cluster) -> set[ox.Quad]:
    """The default graph, by a SPARQL CONSTRUCT (N-Triples) through the master: for big
    contents, quicker than the SELECT of ``stored``."""
    cluster.wait_in_sync()
    r = httpx.post(cluster.repo_url, data={"query": "CONSTRUCT WHERE { ?s ?p ?o }"},
                   headers={"accept": "application/n-triples"}, timeout=120)
    assert r.status_code == 200, r.text
    return set(ox.parse(r.content, format=ox.RdfFormat.N_TRIPLES))


def reset(cluster, quads: str = PRE) -> set[ox.Quad]:
    """The repository holds exactly ``quads`` (written from Python, no h2c offer)."""
    for r in (httpx.delete(f"{cluster.repo_url}/statements", timeout=60),
              httpx.post(f"{cluster.repo_url}/statements", content=quads.encode(),
                         headers={"content-type": "application/n-quads"}, timeout=60)):
        assert r.status_code == 204, r.text
    assert stored(cluster) == nq(quads)
    return nq(quads)


# ---- every write endpoint of the master, in three body modes ----

MODES = {
    "content-length": {},
    "expect-100-continue": {"expect100": True},
    "chunked": {"chunked": True},
}


@dataclass
class Write:
    method: str
    path: str  # below /repositories/{id}
    body: str | None
    content_type: str | None
    expected: set[ox.Quad]


BASE = nq(PRE)
UPDATE_TEXT = (f'DELETE DATA {{ <{X}old> <{X}p> "old" }} ;\n'
               f'INSERT DATA {{ <{X}new> <{X}p> "one" . <{X}new> <{X}p> "two" }}')
AFTER_UPDATE = without(BASE, f'<{X}old> <{X}p> "old" .') | two()

WRITES = {
    "POST statements sparql-update":
        Write("POST", "/statements", UPDATE_TEXT, SPARQL_UPDATE, AFTER_UPDATE),
    "POST statements sparql-update charset":
        Write("POST", "/statements", UPDATE_TEXT, SPARQL_UPDATE + "; charset=UTF-8",
              AFTER_UPDATE),
    "POST statements form update=":
        Write("POST", "/statements", urlencode({"update": UPDATE_TEXT}), FORM, AFTER_UPDATE),
    "POST statements text/turtle":
        Write("POST", "/statements", TWO_TTL, "text/turtle", BASE | two()),
    "POST statements?context text/turtle":
        Write("POST", f"/statements?context={quote(f'<{X}g2>')}", TWO_TTL, "text/turtle",
              BASE | two("g2")),
    "POST statements application/n-quads":
        Write("POST", "/statements", f'<{X}new> <{X}p> "one" .\n<{X}new> <{X}p> "two" <{X}g2> .\n',
              "application/n-quads", BASE | nq(f'<{X}new> <{X}p> "one" .\n'
                                               f'<{X}new> <{X}p> "two" <{X}g2> .\n')),
    "POST statements application/rdf+xml":
        Write("POST", "/statements", TWO_RDFXML, "application/rdf+xml", BASE | two()),
    "PUT statements (replace everything)":
        Write("PUT", "/statements", TWO_TTL, "text/turtle", two()),
    "PUT statements?context (replace a graph)":
        Write("PUT", f"/statements?context={quote(f'<{X}g1>')}", TWO_TTL, "text/turtle",
              without(BASE, f'<{X}old> <{X}p> "old" <{X}g1> .\n<{X}s> <{X}p> "in g1" <{X}g1> .')
              | two("g1")),
    "PUT rdf-graphs/service?graph":
        Write("PUT", f"/rdf-graphs/service?graph={quote(X + 'g1')}", TWO_TTL, "text/turtle",
              without(BASE, f'<{X}old> <{X}p> "old" <{X}g1> .\n<{X}s> <{X}p> "in g1" <{X}g1> .')
              | two("g1")),
    "POST rdf-graphs/service?graph":
        Write("POST", f"/rdf-graphs/service?graph={quote(X + 'g1')}", TWO_TTL, "text/turtle",
              BASE | two("g1")),
    "PUT rdf-graphs/service?default":
        Write("PUT", "/rdf-graphs/service?default", TWO_TTL, "text/turtle",
              without(BASE, f'<{X}keep> <{X}p> "kept" .\n<{X}old> <{X}p> "old" .') | two()),
    "POST rdf-graphs/service?default application/rdf+xml":
        Write("POST", "/rdf-graphs/service?default", TWO_RDFXML, "application/rdf+xml",
              BASE | two()),
}

BODYLESS = {
    "DELETE statements?subj":
        Write("DELETE", f"/statements?subj={quote(f'<{X}old>')}", None, None,
              without(BASE, f'<{X}old> <{X}p> "old" .\n<{X}old> <{X}p> "old" <{X}g1> .')),
    "DELETE statements?context":
        Write("DELETE", f"/statements?context={quote(f'<{X}g1>')}", None, None,
              without(BASE, f'<{X}old> <{X}p> "old" <{X}g1> .\n<{X}s> <{X}p> "in g1" <{X}g1> .')),
    "DELETE statements (everything)": Write("DELETE", "/statements", None, None, set()),
    "DELETE rdf-graphs/service?graph":
        Write("DELETE", f"/rdf-graphs/service?graph={quote(X + 'g1')}", None, None,
              without(BASE, f'<{X}old> <{X}p> "old" <{X}g1> .\n<{X}s> <{X}p> "in g1" <{X}g1> .')),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", WRITES)
def test_write_with_body(cluster, jdk, case, mode):
    w = WRITES[case]
    reset(cluster)
    jdk.new()  # a fresh connection: this request is the one offering h2c
    r = jdk.request(w.method, cluster.repo_url + w.path, w.body, content_type=w.content_type,
                    **MODES[mode])
    assert (r.status, r.text) == (204, ""), f"{case} ({mode}): {r.status} {r.text}"
    assert r.version == "HTTP_1_1"
    assert stored(cluster) == w.expected, f"{case} ({mode}): stored content differs"


@pytest.mark.parametrize("case", BODYLESS)
def test_write_without_body(cluster, jdk, case):
    w = BODYLESS[case]
    reset(cluster)
    jdk.new()
    r = jdk.request(w.method, cluster.repo_url + w.path)
    assert (r.status, r.text) == (204, ""), f"{case}: {r.status} {r.text}"
    assert stored(cluster) == w.expected


@pytest.mark.parametrize("mode", MODES)
def test_namespaces(cluster, jdk, mode):
    reset(cluster)
    assert httpx.delete(f"{cluster.repo_url}/namespaces", timeout=30).status_code == 204
    assert namespaces(cluster) == {}
    jdk.new()
    for prefix, ns in (("ex", "http://example.org/ns#"), ("x", X)):
        r = jdk.request("PUT", f"{cluster.repo_url}/namespaces/{prefix}", ns,
                        content_type="text/plain", **MODES[mode])
        assert (r.status, r.text) == (204, ""), r.text
    assert namespaces(cluster) == {"ex": "http://example.org/ns#", "x": X}
    jdk.new()
    r = jdk.request("DELETE", f"{cluster.repo_url}/namespaces/x")
    assert (r.status, r.text) == (204, "")
    assert namespaces(cluster) == {"ex": "http://example.org/ns#"}
    jdk.new()
    r = jdk.request("DELETE", f"{cluster.repo_url}/namespaces")
    assert (r.status, r.text) == (204, "")
    assert namespaces(cluster) == {}
    assert stored(cluster) == BASE  # namespaces only


@pytest.mark.parametrize("mode", MODES)
def test_transaction(cluster, jdk, mode):
    reset(cluster)
    jdk.new()
    r = jdk.request("POST", f"{cluster.repo_url}/transactions")
    assert r.status == 201, r.text
    location = r.headers["location"]
    assert location.startswith(f"{cluster.repo_url}/transactions/")
    sep = "&" if "?" in location else "?"

    jdk.new()  # each step on a fresh connection, so each offers h2c
    r = jdk.request("PUT", f"{location}{sep}action=ADD", TWO_TTL, content_type="text/turtle",
                    **MODES[mode])
    assert r.status == 200, r.text
    jdk.new()
    update = f'DELETE DATA {{ <{X}old> <{X}p> "old" }} ; INSERT DATA {{ <{X}t> <{X}p> "u" }}'
    r = jdk.request("PUT", f"{location}{sep}action=UPDATE", urlencode({"update": update}),
                    content_type=FORM, **MODES[mode])
    assert r.status == 200, r.text
    jdk.new()
    r = jdk.request("PUT", f"{location}{sep}action=DELETE", f'<{X}keep> <{X}p> "kept" .',
                    content_type="text/turtle", **MODES[mode])
    assert r.status == 200, r.text
    assert stored(cluster) == BASE, "nothing is applied before COMMIT"

    jdk.new()
    r = jdk.request("PUT", f"{location}{sep}action=COMMIT")
    assert r.status == 200, r.text
    expected = without(BASE, f'<{X}old> <{X}p> "old" .\n<{X}keep> <{X}p> "kept" .') | two() \
        | nq(f'<{X}t> <{X}p> "u" .')
    assert stored(cluster) == expected


def test_transaction_rollback(cluster, jdk):
    reset(cluster)
    jdk.new()
    r = jdk.request("POST", f"{cluster.repo_url}/transactions")
    assert r.status == 201, r.text
    location = r.headers["location"]
    r = jdk.request("PUT", f"{location}?action=ADD", TWO_TTL, content_type="text/turtle")
    assert r.status == 200, r.text
    r = jdk.request("DELETE", location)
    assert r.status == 204, r.text
    r = jdk.request("PUT", f"{location}?action=COMMIT")
    assert r.status == 404, r.text
    assert stored(cluster) == BASE


def test_error_answers_are_read_whole(cluster, jdk):
    """A refused write (malformed body) is answered with its reason, and the connection
    goes on: the next request on it is applied."""
    reset(cluster)
    jdk.new()
    r = jdk.request("POST", f"{cluster.repo_url}/statements", "<urn:broken",
                    content_type="text/turtle")
    assert r.status == 400 and "MALFORMED" in r.text.upper(), (r.status, r.text)
    r = jdk.request("POST", f"{cluster.repo_url}/statements", "INSERT DATA { GRAPH",
                    content_type=SPARQL_UPDATE)
    assert r.status == 400 and r.text, (r.status, r.text)
    r = jdk.request("POST", f"{cluster.repo_url}/statements", TWO_TTL,
                    content_type="text/turtle")
    assert r.status == 204, r.text
    assert stored(cluster) == BASE | two()


# ---- a large body ----


def _big_turtle(target_bytes: int = 5 * 1024 * 1024) -> tuple[str, set[ox.Quad]]:
    line = '<http://example.org/s/{i:07d}> <http://example.org/p> "value {i:07d} {pad}" .\n'
    # long literals: the bytes of a big body without the store work of millions of
    # triples; a non-ASCII character in every line (the length is in bytes)
    pad = "é" + "x" * 1000
    n = target_bytes // len(line.format(i=0, pad=pad).encode()) + 1
    text = "".join(line.format(i=i, pad=pad) for i in range(n))
    return text, set(ox.parse(text, format=ox.RdfFormat.TURTLE))


@pytest.mark.parametrize("mode", ["content-length", "chunked"])
def test_large_body(cluster, jdk, mode):
    text, quads = _big_turtle()
    assert len(text.encode()) >= 5 * 1024 * 1024
    reset(cluster, "")
    jdk.new()
    r = jdk.request("PUT", f"{cluster.repo_url}/rdf-graphs/service?default", text,
                    content_type="text/turtle; charset=UTF-8", **MODES[mode])
    assert (r.status, r.text) == (204, ""), r.text
    assert stored_default_graph(cluster) == quads
    count = cluster.select("SELECT (COUNT(*) AS ?n) { GRAPH ?g { ?s ?p ?o } }")
    assert count == [{"n": "0"}], "nothing in a named graph"


# ---- one kept-alive connection after an h2c-offered first request ----


def test_keep_alive_after_h2c_offer(cluster, jdk):
    reset(cluster)
    relay = Relay(cluster.master.port)
    try:
        base = f"http://127.0.0.1:{relay.port}/repositories/{cluster.repository_id}"
        jdk.new()
        steps = [
            ("POST", "/statements", f'INSERT DATA {{ <{X}k> <{X}p> "1" }}', SPARQL_UPDATE),
            ("POST", "/statements", f'<{X}k> <{X}p> "2" .', "text/turtle"),
            ("PUT", f"/rdf-graphs/service?graph={quote(X + 'g3')}", f'<{X}k> <{X}p> "3" .',
             "text/turtle"),
            ("POST", "/statements", urlencode({"update": f'INSERT DATA {{ <{X}k> <{X}p> "4" }}'}),
             FORM),
            ("DELETE", f"/statements?subj={quote(f'<{X}old>')}", None, None),
        ]
        for method, path, body, ctype in steps:
            r = jdk.request(method, base + path, body, content_type=ctype)
            assert (r.status, r.text) == (204, ""), (method, path, r.status, r.text)
        # a read on the same connection too
        r = jdk.request("GET", f"{base}?query={quote('ASK { ?s ?p ?o }')}",
                        headers={"Accept": "application/sparql-results+json"})
        assert r.status == 200 and '"boolean":true' in r.text.replace(" ", ""), r.text
        assert len(relay.sent) == 1, f"{len(relay.sent)} connections for {len(steps) + 1} " \
            "requests: the connection was not kept alive"
        sent = bytes(relay.sent[0])
        first_head = sent.split(b"\r\n\r\n", 1)[0].lower()
        assert b"upgrade: h2c" in first_head, "the JDK client's first request offers h2c"
        assert sent.count(b" HTTP/1.1\r\n") == len(steps) + 1
    finally:
        relay.close()
    assert stored(cluster) == without(
        BASE, f'<{X}old> <{X}p> "old" .\n<{X}old> <{X}p> "old" <{X}g1> .') | nq(
        f'<{X}k> <{X}p> "1" .\n<{X}k> <{X}p> "2" .\n<{X}k> <{X}p> "3" <{X}g3> .\n'
        f'<{X}k> <{X}p> "4" .\n')


# ---- HTTP/1.1 pipelining from a raw socket ----


def _pipelined(port: int, requests: list[bytes], timeout: float = 60) -> list[tuple]:
    """Send every request at once on one connection; the (response, body) pairs in the
    order read (h11 parses them; it is told of a stand-in GET for each, what it needs to
    expect an answer)."""
    conn = h11.Connection(our_role=h11.CLIENT)
    answers: list[tuple[h11.Response, bytes]] = []

    def expect_answer() -> None:
        conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
        conn.send(h11.EndOfMessage())

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"".join(requests))
        deadline = time.monotonic() + timeout
        current: h11.Response | None = None
        body = b""
        expect_answer()
        while len(answers) < len(requests):
            assert time.monotonic() < deadline, f"only {len(answers)} answers"
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = s.recv(65536)
                assert data, f"connection closed after {len(answers)} answers"
                conn.receive_data(data)
            elif isinstance(event, h11.Response):
                current, body = event, b""
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                answers.append((current, body))
                if len(answers) < len(requests):
                    conn.start_next_cycle()
                    expect_answer()
    return answers


def _raw(port: int, method: str, target: str, body: bytes = b"", **headers: str) -> bytes:
    head = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}",
            *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items())]
    if body or method in ("POST", "PUT"):
        head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def test_pipelined_requests_are_all_applied_in_order(cluster):
    reset(cluster)
    path, port = f"/repositories/{cluster.repository_id}", cluster.master.port
    h2c = {"Connection": "Upgrade, HTTP2-Settings", "Upgrade": "h2c",
           "HTTP2-Settings": "AAEAAEAAAAIAAAAAAAMAAAAAAAQBAAAAAAUAAEAAAAYABgAA"}
    requests = [
        _raw(port, "POST", f"{path}/statements", f'INSERT DATA {{ <{X}pl> <{X}p> "A" }}'.encode(),
             **{"Content-Type": SPARQL_UPDATE}, **h2c),
        _raw(port, "POST", f"{path}/transactions"),
        _raw(port, "POST", f"{path}/statements", f'<{X}pl> <{X}p> "B" .'.encode(),
             **{"Content-Type": "text/turtle"}),
        _raw(port, "GET", "/protocol"),
    ]
    answers = _pipelined(port, requests)
    assert [a.status_code for a, _ in answers] == [204, 201, 204, 200], answers
    assert answers[0][1] == answers[2][1] == b""
    location = dict(answers[1][0].headers)[b"location"].decode()
    assert answers[3][1].decode().strip().isdigit(), answers[3]  # the protocol version
    assert httpx.delete(location, timeout=30).status_code == 204
    assert stored(cluster) == BASE | nq(f'<{X}pl> <{X}p> "A" .\n<{X}pl> <{X}p> "B" .\n')


# ---- reads through the JDK client, on the master and on a worker ----

QUERY = f'SELECT ?o {{ <{X}s> <{X}p> ?o }}'  # only in g1: none in the default graph
QUERY_G = f'SELECT ?o {{ GRAPH <{X}g1> {{ ?s <{X}p> ?o }} }} ORDER BY ?o'
JSON = {"Accept": "application/sparql-results+json"}


def _values(reply: Reply) -> list[str]:
    import json
    return [b["o"]["value"] for b in json.loads(reply.body)["results"]["bindings"]]


@pytest.mark.parametrize("node", ["master", "worker"])
@pytest.mark.parametrize("mode", MODES)
def test_reads(cluster, jdk, node, mode):
    reset(cluster)
    base = (cluster.master.url if node == "master" else cluster.workers[0].url) + \
        f"/repositories/{cluster.repository_id}"
    expected = ["in g1", "old"]
    jdk.new()
    r = jdk.request("GET", f"{base}?query={quote(QUERY_G)}", headers=JSON)
    assert (r.status, _values(r)) == (200, expected), r.text
    jdk.new()
    r = jdk.request("POST", base, urlencode({"query": QUERY_G}), content_type=FORM,
                    headers=JSON, **MODES[mode])
    assert (r.status, _values(r)) == (200, expected), r.text
    jdk.new()
    r = jdk.request("POST", base, QUERY_G, content_type="application/sparql-query",
                    headers=JSON, **MODES[mode])
    assert (r.status, _values(r)) == (200, expected), r.text
    r = jdk.request("POST", base, QUERY, content_type="application/sparql-query",
                    headers=JSON, **MODES[mode])
    assert (r.status, _values(r)) == (200, []), r.text


WORKER_WRITES = {
    "POST statements sparql-update": ("POST", "/statements", UPDATE_TEXT, SPARQL_UPDATE),
    "POST statements form update=": ("POST", "/statements", urlencode({"update": UPDATE_TEXT}),
                                     FORM),
    "POST statements text/turtle": ("POST", "/statements", TWO_TTL, "text/turtle"),
    "PUT statements": ("PUT", "/statements", TWO_TTL, "text/turtle"),
    "DELETE statements": ("DELETE", "/statements", None, None),
    "PUT rdf-graphs/service?graph": ("PUT", f"/rdf-graphs/service?graph={quote(X + 'g1')}",
                                     TWO_TTL, "text/turtle"),
    "DELETE rdf-graphs/service?graph": ("DELETE",
                                        f"/rdf-graphs/service?graph={quote(X + 'g1')}",
                                        None, None),
    "PUT namespaces/ex": ("PUT", "/namespaces/ex", "http://example.org/", "text/plain"),
    "DELETE namespaces": ("DELETE", "/namespaces", None, None),
    "POST transactions": ("POST", "/transactions", None, None),
}


@pytest.mark.parametrize("mode", MODES)
def test_worker_refuses_direct_writes(cluster, jdk, mode):
    """Without the cluster credential a worker refuses every write with 403 and its reason;
    the connection stays usable (the next request on it is answered) and nothing changed."""
    reset(cluster)
    before = cluster.fingerprints()
    base = f"{cluster.workers[1].url}/repositories/{cluster.repository_id}"
    for case, (method, path, body, ctype) in WORKER_WRITES.items():
        jdk.new()
        r = jdk.request(method, base + path, body, content_type=ctype,
                        **(MODES[mode] if body is not None else {}))
        assert r.status == 403, (case, r.status, r.text)
        assert "rejects any direct write" in r.text, (case, r.text)
        r = jdk.request("GET", f"{base}?query={quote(QUERY_G)}", headers=JSON)
        assert (r.status, _values(r)) == (200, ["in g1", "old"]), (case, r.text)
    assert cluster.fingerprints() == before
    assert stored(cluster) == BASE
