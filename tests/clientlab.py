"""What the client tests (the JDK's HttpClient, Jena, graphdb.js) share: N-Quads parsed
into a set, a cluster's stored quads and namespaces read back through the master (httpx,
SPARQL JSON), and a TCP relay that counts connections.
"""

from __future__ import annotations

import socket
import threading

import httpx
import pyoxigraph as ox


def nq(text: str) -> set[ox.Quad]:
    return set(ox.parse(text, format=ox.RdfFormat.N_QUADS))


ALL_QUADS = "SELECT ?s ?p ?o ?g { { ?s ?p ?o } UNION { GRAPH ?g { ?s ?p ?o } } }"


def _term(b: dict) -> ox.NamedNode | ox.BlankNode | ox.Literal:
    if b["type"] == "uri":
        return ox.NamedNode(b["value"])
    if b["type"] == "bnode":
        return ox.BlankNode(b["value"])
    if "xml:lang" in b:
        return ox.Literal(b["value"], language=b["xml:lang"])
    if "datatype" in b:
        return ox.Literal(b["value"], datatype=ox.NamedNode(b["datatype"]))
    return ox.Literal(b["value"])


def stored(cluster) -> set[ox.Quad]:
    """Every quad of the repository, by a SPARQL SELECT through the master once every
    worker has applied every write."""
    cluster.wait_in_sync()
    r = httpx.post(cluster.repo_url, data={"query": ALL_QUADS}, timeout=60,
                   headers={"accept": "application/sparql-results+json"})
    assert r.status_code == 200, r.text
    out = set()
    for row in r.json()["results"]["bindings"]:
        g = _term(row["g"]) if "g" in row else ox.DefaultGraph()
        out.add(ox.Quad(_term(row["s"]), _term(row["p"]), _term(row["o"]), g))
    return out


def namespaces(cluster) -> dict[str, str]:
    cluster.wait_in_sync()
    r = httpx.get(f"{cluster.repo_url}/namespaces", timeout=30,
                  headers={"accept": "application/sparql-results+json"})
    assert r.status_code == 200, r.text
    return {b["prefix"]["value"]: b["namespace"]["value"]
            for b in r.json()["results"]["bindings"]}


class Relay:
    """A TCP relay on loopback in front of a node: counts the connections made through it
    and keeps the bytes each one sent (to see the h2c offer and the requests)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sent: list[bytearray] = []  # per connection, what the client sent
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            record = bytearray()
            self.sent.append(record)
            threading.Thread(target=self._pump, args=(client, upstream, record),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bytearray | None) -> None:
        try:
            while data := src.recv(65536):
                if record is not None:
                    record += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self.server.close()
        self._thread.join(timeout=5)
