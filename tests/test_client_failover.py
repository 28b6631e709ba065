"""The failover client (txcluster/client.py) against real masters killed mid-stream.

Writes run in a loop on a thread while a master is SIGKILLed: the loop must never see an
error, and every write the client reported done must be in the repository afterwards.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.procs import free_port
from txcluster.client import (
    ClientError,
    ClusterClient,
    FailoverStore,
    NoMasterAvailable,
    UncertainWrite,
    failover_graph,
)

EX = "http://example.org/failover/"


class WriteLoop:
    """INSERT DATA of numbered statements through ``client`` until stopped; records the
    numbers acknowledged and any exception."""

    def __init__(self, client: ClusterClient, graph: str = "") -> None:
        self.client = client
        self.acked: list[int] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        try:
            while not self._stop.is_set():
                self.client.update(f"INSERT DATA {{ <{EX}s{i}> <{EX}n> {i} }}")
                self.acked.append(i)
                i += 1
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def __enter__(self) -> WriteLoop:
        self._thread.start()
        return self

    def wait_for(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < n:
            assert self.error is None, f"write loop failed: {self.error!r}"
            assert time.monotonic() < deadline, f"only {len(self.acked)} writes in {timeout}s"
            time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


def numbers_in(client_or_url, repository: str = "repo") -> set[int]:
    """The numbers of the loop's statements held by one master's repository."""
    base = client_or_url if isinstance(client_or_url, str) else client_or_url.current
    r = httpx.post(f"{base}/repositories/{repository}",
                   data={"query": f"SELECT ?i WHERE {{ ?s <{EX}n> ?i }}"},
                   headers={"accept": "application/sparql-results+json",
                            "x-graphdb-local-consistency": "updating"}, timeout=30)
    assert r.status_code == 200, r.text
    return {int(b["i"]["value"]) for b in r.json()["results"]["bindings"]}


def dead_url() -> str:
    """A loopback URL where nothing listens (the port was free a moment ago)."""
    return f"http://127.0.0.1:{free_port()}"


def test_plain_functions_and_a_dead_master_flagged(cluster_factory):
    cluster = cluster_factory(workers=2)
    dead = dead_url()
    now = [0.0]
    client = ClusterClient([dead, cluster.master.url], recheck_after_s=10,
                           read_your_writes=True, clock=lambda: now[0])
    with client:
        before = client.size()
        client.update(f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }}")
        client.add(f"<{EX}b> <{EX}p> <{EX}c> .", "application/n-triples", context=f"<{EX}g>")
        assert client.size() == before + 2
        assert client.size(context=f"<{EX}g>") == 1
        assert client.select(f"SELECT ?o WHERE {{ <{EX}a> <{EX}p> ?o }}") == [{"o": "1"}]
        assert client.ask(f"ASK {{ GRAPH <{EX}g> {{ <{EX}b> <{EX}p> <{EX}c> }} }}")
        client.remove(subj=f"<{EX}b>")
        assert client.size() == before + 1
        assert client.status()["node_id"] == "master1"

        # The dead master was flagged on the first request and not asked again since.
        flagged = client.masters[0]
        assert flagged.failures == 1 and flagged.failed_at is not None
        assert "ConnectError" in flagged.error
        assert client.current == cluster.master.url
        # After recheck_after_s it is checked again (still dead: flagged again, and
        # the request is served by the live one).
        now[0] += 11
        assert client.size() == before + 1
        assert client.masters[0].failed_at == now[0]

        # A bad request is the caller's problem, not a failover.
        with pytest.raises(ClientError) as bad:
            client.update("INSERT DATA { this is not SPARQL }")
        assert bad.value.status == 400
        assert client.masters[1].failed_at is None


def test_no_master_available_names_every_master():
    urls = [dead_url(), dead_url()]
    with ClusterClient(urls) as client, pytest.raises(NoMasterAvailable) as exc:
        client.size()
    assert set(exc.value.errors) == set(urls)


@pytest.mark.parametrize("masters, message", [
    ([], "at least one master"),
    (["ftp://x"], r"not an http\(s\) URL"),
    (["http://a:1", "http://a:1/"], "listed twice"),
])
def test_bad_configuration(masters, message):
    with pytest.raises(ValueError, match=message):
        ClusterClient(masters)


def test_rdflib_store(cluster_factory):
    from rdflib import Dataset, Literal, URIRef

    cluster = cluster_factory(workers=2)
    client = ClusterClient([dead_url(), cluster.master.url], read_your_writes=True)
    graph = failover_graph(client)
    a, p = URIRef(f"{EX}a"), URIRef(f"{EX}p")
    n = len(graph)
    graph.add((a, p, Literal("hello")))
    assert len(graph) == n + 1
    assert list(graph.objects(a, p)) == [Literal("hello")]
    assert [tuple(r) for r in graph.query(f"SELECT ?o WHERE {{ <{a}> <{p}> ?o }}")] == \
        [(Literal("hello"),)]
    graph.remove((a, None, None))
    assert len(graph) == n
    named = Dataset(FailoverStore(client)).graph(URIRef(f"{EX}g"))
    named.add((a, p, Literal(2)))
    assert client.size(context=f"<{EX}g>") == 1
    client.close()


def test_lone_master_killed_and_restarted_mid_stream(cluster_factory):
    """One master, SIGKILL while the loop writes, restarted: the client waits for it
    (wait_for_master_s); nothing acknowledged is lost."""
    cluster = cluster_factory(workers=2)
    client = ClusterClient([cluster.master.url], wait_for_master_s=90, recheck_after_s=0.2)
    with WriteLoop(client) as loop:
        loop.wait_for(20)
        cluster.master.kill9()
        killed_at = len(loop.acked)
        time.sleep(1.0)  # the loop is now retrying against a dead master
        assert len(loop.acked) <= killed_at + 1
        cluster.master.start()
        loop.wait_for(killed_at + 20)
    assert loop.error is None, f"{loop.error!r}"
    assert client.masters[0].failures >= 1
    cluster.wait_in_sync()
    assert set(loop.acked) <= numbers_in(cluster.master.url)


def test_failover_between_two_masters_mid_stream(cluster_factory):
    """Two clusters (two masters, as two data centres not yet peered): the master in use
    is SIGKILLed mid-stream and the loop goes on at the other without an error; the
    killed one, restarted, is rechecked and taken again when the other dies."""
    # Two workers each: a master killed while its probe executes leaves that worker in a
    # state the log never recorded, and only another worker can replicate it back.
    one = cluster_factory(workers=2, name="dc1")
    two = cluster_factory(workers=2, name="dc2")
    client = ClusterClient([one.master.url, two.master.url], recheck_after_s=0.5,
                           wait_for_master_s=30)
    with WriteLoop(client) as loop:
        loop.wait_for(20)
        assert client.current == one.master.url
        one.master.kill9()
        n = len(loop.acked)
        loop.wait_for(n + 30)
        assert client.current == two.master.url
        assert client.masters[0].failed_at is not None

        one.master.start()
        one.wait_in_sync()
        time.sleep(0.6)  # past recheck_after_s: the next request rechecks dc1
        two.master.kill9()
        n = len(loop.acked)
        loop.wait_for(n + 30)
        assert client.current == one.master.url
    assert loop.error is None, f"{loop.error!r}"
    two.master.start()
    two.wait_in_sync()
    held = numbers_in(one.master.url) | numbers_in(two.master.url)
    assert set(loop.acked) <= held
    assert client.masters[0].failures >= 1 and client.masters[1].failures >= 1


def test_uncertain_write_reported_when_retries_are_off():
    """A master that takes the request and dies before answering: with
    retry_uncertain_writes=False the caller hears that the write is uncertain."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    url = f"http://127.0.0.1:{server.getsockname()[1]}"

    def accept_and_drop() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.close()  # the request was read, no answer: a master killed mid-request

    t = threading.Thread(target=accept_and_drop, daemon=True)
    t.start()
    with ClusterClient([url], retry_uncertain_writes=False) as client, \
            pytest.raises(UncertainWrite, match="may or may not"):
        client.update("INSERT DATA { <urn:a> <urn:b> 1 }")
    t.join(5)
    server.close()
