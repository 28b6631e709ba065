"""A client with failover across masters (docs/operations.md#the-failover-client).

Several masters serve the same repository (one per data centre, or a standby). The client
sends each request to a healthy master; a master that fails (no connection, a lost
connection, a timeout, or 502/503/504) is flagged and the request goes to the next one.
A flagged master is left alone for ``recheck_after_s`` and then asked for `/health`
before it gets requests again. The client stays on the master that last answered, so
one program reads its own writes whenever that master is up.

Two ways to use it:

    from txcluster.client import ClusterClient
    client = ClusterClient(["http://dc1:7200", "http://dc2:7200"], repository="repo")
    client.update("INSERT DATA { <urn:a> <urn:b> 1 }")
    rows = client.select("SELECT * WHERE { ?s ?p ?o }")   # [{"s": "urn:a", ...}]
    client.add("<urn:a> <urn:b> <urn:c> .", "application/n-triples")
    client.remove(subj="<urn:a>")
    client.size()

    from txcluster.client import FailoverStore, failover_graph
    graph = failover_graph(client)                     # an rdflib Graph (needs rdflib)
    dataset = rdflib.Dataset(FailoverStore(client))    # every named graph

Reads and writes go through the master's normal routing: with consistency=eventual a read
may reach a worker that has not applied the write just acknowledged; pass
``read_your_writes=True`` to have every read served by an up-to-date worker.

Writes and uncertainty: a write whose connection broke *after* it was sent may or may
not have been committed. By default it is sent again to the next master
(``retry_uncertain_writes=True``), as the specification's failover utility does: adds, removes and
INSERT/DELETE DATA are set operations, so a repeated one changes nothing (a master that
died before acknowledging marks the write failed when it restarts). Programs whose
updates are not idempotent (DELETE/INSERT WHERE that counts, say) set it to False and get
``UncertainWrite`` to decide themselves.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from io import BytesIO
from typing import Any

import httpx

from txcluster import admin_client

log = logging.getLogger("txcluster.client")

# Statuses meaning "this master cannot serve now", not "the request is wrong": 502 a
# worker did not answer, 503 no worker available / not writable, 504 a gateway timeout.
FAILOVER_STATUSES = frozenset({502, 503, 504})
READ_METHODS = frozenset({"GET", "HEAD"})


class ClientError(Exception):
    """The cluster refused the request (4xx): retrying elsewhere would not help."""

    def __init__(self, status: int, message: str, url: str) -> None:
        super().__init__(f"{url} answered {status}: {message}")
        self.status = status
        self.message = message
        self.url = url


class NoMasterAvailable(Exception):
    """Every master failed this request; ``errors`` says how, per master."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        detail = "; ".join(f"{url}: {err}" for url, err in errors.items())
        super().__init__(f"no master could serve the request ({detail})")
        self.errors = dict(errors)


class UncertainWrite(Exception):
    """A write was sent but its answer was lost: it may or may not have been committed
    (only raised with ``retry_uncertain_writes=False``)."""


@dataclass
class MasterState:
    url: str
    failed_at: float | None = None  # monotonic time it was flagged, None when healthy
    error: str | None = None
    failures: int = 0  # times flagged, for the operator (``client.masters``)


class ClusterClient:
    """Sends each request to a healthy master of ``masters`` (base URLs)."""

    def __init__(self, masters: Sequence[str], repository: str = "repo",
                 auth: tuple[str, str] | None = None, timeout: float = 30.0,
                 recheck_after_s: float = 5.0, retry_uncertain_writes: bool = True,
                 read_your_writes: bool = False, wait_for_master_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic,
                 transport: httpx.BaseTransport | None = None) -> None:
        urls = [m.rstrip("/") for m in masters]
        if not urls:
            raise ValueError("give at least one master URL")
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"'{url}' is not an http(s) URL of a master")
        if len(set(urls)) != len(urls):
            raise ValueError(f"a master is listed twice: {urls}")
        if not repository or "/" in repository:
            raise ValueError(f"'{repository}' is not a repository id")
        if recheck_after_s < 0 or wait_for_master_s < 0:
            raise ValueError("recheck_after_s and wait_for_master_s must be >= 0")
        # When every master failed, keep trying this long (a lone master restarting, a
        # rolling restart) before NoMasterAvailable.
        self.wait_for_master_s = wait_for_master_s
        self.masters = [MasterState(u) for u in urls]
        self.repository = repository
        self.recheck_after_s = recheck_after_s
        self.retry_uncertain_writes = retry_uncertain_writes
        # Reads go to any in-sync worker, which may not have applied the last
        # acknowledged write yet (consistency=eventual); this header makes the master
        # read from a worker that has (X-GraphDB-Local-Consistency: updating).
        self._read_headers = {"x-graphdb-local-consistency": "updating"} \
            if read_your_writes else {}
        self.clock = clock
        self._current = 0  # index of the master that answered last
        self._lock = threading.Lock()  # the client may be shared by threads
        self._http = httpx.Client(auth=auth, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- choosing a master ----

    @property
    def current(self) -> str:
        """The master requests go to first."""
        return self.masters[self._current].url

    def _flag(self, m: MasterState, error: str) -> None:
        with self._lock:
            if m.failed_at is None:
                log.warning("master %s failed: %s; using another", m.url, error)
                m.failures += 1
            m.failed_at, m.error = self.clock(), error

    def _healthy(self, m: MasterState) -> bool:
        """Usable now: never flagged, or flagged long enough ago and answering /health."""
        if m.failed_at is None:
            return True
        if self.clock() - m.failed_at < self.recheck_after_s:
            return False
        try:
            ok = self._http.get(f"{m.url}/health", timeout=2.0).status_code == 200
        except httpx.HTTPError as exc:
            ok, m.error = False, f"recheck: {exc!r}"
        with self._lock:
            if ok:
                log.info("master %s answers again", m.url)
                m.failed_at, m.error = None, None
            else:
                m.failed_at = self.clock()  # next recheck after another interval
        return ok

    def _order(self) -> list[int]:
        """Healthy masters first, starting at the current one; flagged ones last (when
        every master is flagged, each is tried anyway rather than failing at once)."""
        n = len(self.masters)
        ring = [(self._current + i) % n for i in range(n)]
        healthy = [i for i in ring if self._healthy(self.masters[i])]
        return healthy + [i for i in ring if i not in healthy]

    # ---- requests ----

    def request(self, method: str, path: str, *, params: Any = None,
                content: bytes | None = None, headers: Mapping[str, str] | None = None,
                data: Mapping[str, str] | None = None) -> httpx.Response:
        """Send one request (``path`` relative to the master, e.g. /repositories/repo)
        to a healthy master; fail over on a master failure; ClientError on a 4xx."""
        is_read = method.upper() in READ_METHODS or bool(params and _is_query(params)) \
            or bool(data and "query" in data)
        if is_read and self._read_headers:
            headers = {**self._read_headers, **(headers or {})}
        deadline = self.clock() + self.wait_for_master_s
        while True:
            try:
                return self._send_once(method, path, params, content, headers, data, is_read)
            except NoMasterAvailable:
                if self.clock() >= deadline:
                    raise
            time.sleep(min(0.2, max(deadline - self.clock(), 0)))

    def _send_once(self, method: str, path: str, params: Any, content: bytes | None,
                   headers: Mapping[str, str] | None, data: Mapping[str, str] | None,
                   is_read: bool) -> httpx.Response:
        """One pass over the masters, healthy ones first."""
        errors: dict[str, str] = {}
        last: httpx.Response | None = None
        for i in self._order():
            m = self.masters[i]
            try:
                r = self._http.request(method, m.url + path, params=params, content=content,
                                       headers=headers, data=data)
            except httpx.TransportError as exc:
                sent = not isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout,
                                            httpx.PoolTimeout))
                self._flag(m, repr(exc))
                errors[m.url] = repr(exc)
                if sent and not is_read and not self.retry_uncertain_writes:
                    raise UncertainWrite(
                        f"{method} {path} was sent to {m.url}, which failed before "
                        f"answering ({exc!r}): it may or may not have been committed") from exc
                continue
            if r.status_code in FAILOVER_STATUSES:
                self._flag(m, f"{r.status_code}: {r.text[:200]}")
                errors[m.url] = f"{r.status_code}: {r.text[:200]}"
                last = r
                continue
            with self._lock:
                self._current = i
            if 400 <= r.status_code < 500:
                raise ClientError(r.status_code, r.text, m.url)
            return r
        if last is not None and len(errors) == len(self.masters):
            log.debug("every master answered with a failover status; last: %s", last.text)
        raise NoMasterAvailable(errors)

    def _repo(self, suffix: str = "") -> str:
        return f"/repositories/{self.repository}{suffix}"

    # ---- plain functions ----

    def query(self, sparql: str, accept: str = "application/sparql-results+json",
              **params: str) -> httpx.Response:
        """Any SPARQL query; the response as the master sent it (``accept`` chooses)."""
        return self.request("POST", self._repo(), data={"query": sparql, **params},
                            headers={"accept": accept})

    def select(self, sparql: str) -> list[dict[str, str]]:
        """SELECT rows, each {variable: value as text} (unbound variables left out)."""
        body = self.query(sparql).json()
        return [{k: v["value"] for k, v in b.items()} for b in body["results"]["bindings"]]

    def ask(self, sparql: str) -> bool:
        return bool(self.query(sparql).json()["boolean"])

    def update(self, sparql: str) -> None:
        self.request("POST", self._repo("/statements"), content=sparql.encode(),
                     headers={"content-type": "application/sparql-update"})

    def add(self, data: str | bytes, content_type: str = "text/turtle",
            context: str | None = None) -> None:
        """Add statements in an RDF format; ``context`` an N-Triples term such as
        ``<http://example.org/g>`` (RDF4J protocol)."""
        body = data.encode() if isinstance(data, str) else data
        self.request("POST", self._repo("/statements"), content=body,
                     params={"context": context} if context else None,
                     headers={"content-type": content_type})

    def remove(self, subj: str | None = None, pred: str | None = None,
               obj: str | None = None, context: str | None = None) -> None:
        """Remove the statements matching a pattern of N-Triples terms (None: any)."""
        params = {k: v for k, v in (("subj", subj), ("pred", pred), ("obj", obj),
                                    ("context", context)) if v is not None}
        self.request("DELETE", self._repo("/statements"), params=params or None)

    def size(self, context: str | None = None) -> int:
        r = self.request("GET", self._repo("/size"),
                         params={"context": context} if context else None)
        return int(r.text.strip())

    def status(self) -> dict:
        """The admin status of the master that answers (with failover, unlike the one
        master of txcluster/admin_client.py)."""
        return self.request("GET", admin_client.STATUS).json()


def _is_query(params: Any) -> bool:
    if isinstance(params, Mapping):
        return "query" in params
    if isinstance(params, Iterable) and not isinstance(params, str | bytes):
        return any(isinstance(p, tuple) and p and p[0] == "query" for p in params)
    return False


@functools.cache
def _failover_store_class() -> type:
    """FailoverStore, built on rdflib's SPARQLUpdateStore (rdflib is an optional
    dependency: imported when the store is first used)."""
    from rdflib.graph import DATASET_DEFAULT_GRAPH_ID
    from rdflib.plugins.stores.sparqlstore import SPARQLUpdateStore
    from rdflib.query import Result

    class _FailoverStore(SPARQLUpdateStore):
        """An rdflib store whose every query and update goes through a ClusterClient.

        rdflib's SPARQL stores turn graph operations (triples, add, remove, len, query,
        update) into SPARQL and send them through ``_query`` / ``_update``; only those
        two are replaced, so rdflib's own translation stays in charge."""

        def __init__(self, client: ClusterClient, **kwargs: Any) -> None:
            endpoint = f"{client.current}{client._repo()}"
            super().__init__(query_endpoint=endpoint, update_endpoint=f"{endpoint}/statements",
                             **kwargs)
            self.client = client

        def _query(self, query: str, default_graph: str | None = None,
                   named_graph: str | None = None) -> Result:
            self._queries += 1
            params = {"query": query}
            # rdflib names the dataset's default graph urn:x-rdflib:default (and a
            # Graph's default is a blank node): neither is a graph of the repository.
            if default_graph is not None and not _is_bnode(default_graph) \
                    and str(default_graph) != str(DATASET_DEFAULT_GRAPH_ID):
                params["default-graph-uri"] = str(default_graph)
            r = self.client.request("POST", self.client._repo(), data=params,
                                    headers={"accept": self.response_mime_types()})
            return Result.parse(BytesIO(r.content),
                                content_type=r.headers["content-type"].split(";")[0])

        def _update(self, update: str) -> None:
            self._updates += 1
            self.client.update(update)

    return _FailoverStore


def _is_bnode(term: Any) -> bool:
    from rdflib import BNode

    return isinstance(term, BNode)


def FailoverStore(client: ClusterClient, **kwargs: Any):  # named as the class it returns
    """An rdflib Store (a SPARQLUpdateStore) over ``client``: ``Graph(FailoverStore(c))``."""
    return _failover_store_class()(client, **kwargs)


def failover_graph(client: ClusterClient):
    """The repository's default graph as an rdflib Graph over ``client``.

    rdflib's SPARQL stores refuse a Graph with a blank node identifier (Graph's default),
    so the graph is named as rdflib's dataset default graph, which they send as the
    SPARQL default graph."""
    from rdflib import Graph
    from rdflib.graph import DATASET_DEFAULT_GRAPH_ID

    return Graph(FailoverStore(client), identifier=DATASET_DEFAULT_GRAPH_ID)
