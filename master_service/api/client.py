"""Client facade of a master: the RDF4J REST protocol, so unchanged clients see one
repository (docs/design/rdf4j-protocol.md: a master is a
drop-in RDF4J repository).

The routes are the protocol's one route table (rdf4j_protocol/routes.py), mounted here
over the master's backend. Reads are forwarded as they came to one worker that has
applied every write this master acknowledged before the read arrived (read-your-writes,
master_service/cluster/reads.py), chosen by the read router (fewest running queries),
and re-sent to another on a lost connection; a query that timed out (query-timeout-s,
the client's ``timeout``) is answered as such, never re-sent; a query FROM the control-
query graph goes to every worker. Writes become transaction operations
(rdf4j_protocol.writes, the same translation a worker uses) and go through the cluster's
write path. Clients authenticate with HTTP basic auth when a client-auth-file is
configured (read and write roles).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any
from urllib.parse import parse_qsl, quote, unquote_plus, urlencode

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from master_service.cluster.core import Cluster, Worker
from master_service.cluster.reads import (
    PASS_HEADERS,
    QUERY_WAIT_MARGIN_S,
    ReadAnswer,
    route_read,
)
from master_service.cluster.worker_client import WorkerUnavailable
from master_service.errors import NotWritable, WriteFailed
from rdf4j_protocol.parameters import GraphName, Params, ProtocolError, parse_params, single_param
from rdf4j_protocol.routes import Backend, HotRoutes, rdf4j_routes
from rdf4j_protocol.routes import text as _text
from rdf4j_protocol.transactions import TransactionRegistry
from txinfra import query_limits
from txinfra.query_limits import wait_for_disconnect

log = logging.getLogger("txcluster.master.api")

CONTROL_QUERY_GRAPH = "http://www.ontotext.com/owlim/cluster/control-query"
LOCAL_CONSISTENCY = "x-graphdb-local-consistency"


class ClientAuth:
    """Optional HTTP basic auth with read and write roles (client-auth-file)."""

    def __init__(self, users) -> None:
        self.users = {u.name: u for u in users}

    def user_for(self, header: str) -> Any:
        """The user an ``Authorization`` header names with its right password; None
        for any other header."""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            name, _, password = base64.b64decode(token).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        candidate = self.users.get(name)
        # Bytes: compare_digest raises TypeError on str holding non-ASCII characters
        # (a non-ASCII password would be a 500).
        if candidate and hmac.compare_digest(candidate.password.encode(),
                                             password.encode()):
            return candidate
        return None

    def problem(self, request: Request, need_write: bool) -> Response | None:
        if not self.users:
            return None
        user = self.user_for(request.headers.get("authorization", ""))
        client = request.client.host if request.client else "?"
        if user is None:
            # Logged (issue 9: refused credentials are logged), never with the password.
            log.warning("refused %s %s from %s: wrong or missing user/password",
                        request.method, request.url.path, client)
            return Response("authentication required: wrong or missing user/password",
                            status_code=401, media_type="text/plain",
                            headers={"WWW-Authenticate": 'Basic realm="txcluster"'})
        if need_write and user.role != "write":
            log.warning("refused %s %s from %s: user '%s' may only read",
                        request.method, request.url.path, client, user.name)
            return _text(403, f"user '{user.name}' may only read")
        return None


def client_router(cluster_provider: Callable[[], Cluster], repository_id: str,
                  auth: ClientAuth, transactions: TransactionRegistry | None = None,
                  query_timeout_s: float = query_limits.DEFAULT_QUERY_TIMEOUT_S,
                  hot: HotRoutes | None = None) -> APIRouter:
    """``transactions``: the open RDF4J transactions (the service sweeps idle ones);
    ``query_timeout_s``: this master's query-timeout-s; ``hot``: where the route table's
    hot routes are declared (routes.HotPaths: point reads and writes)."""
    transactions = transactions if transactions is not None else TransactionRegistry()
    backend = MasterBackend(cluster_provider, repository_id, auth, query_timeout_s)
    return rdf4j_routes(backend, transactions, hot)


class MasterBackend(Backend):
    """The master under the RDF4J route table: reads go to workers, writes to the
    cluster's write path."""

    log = log
    route_prefix = "client"

    def __init__(self, cluster_provider: Callable[[], Cluster], repository_id: str,
                 auth: ClientAuth,
                 query_timeout_s: float = query_limits.DEFAULT_QUERY_TIMEOUT_S) -> None:
        self.cluster_provider = cluster_provider
        self.repository_id = repository_id
        self.auth = auth
        self.query_timeout_s = query_timeout_s
        self.query_path = f"/repositories/{repository_id}"
        # Workers holding a view for a transaction's reads (worker_service/tx_view.py):
        # told when it ends, so its private store goes at once rather than after the
        # idle time.
        self.view_holders: dict[str, set[str]] = {}

    def repository(self, request: Request) -> None:
        rid = request.path_params.get("repo_id")
        if rid is not None and rid != self.repository_id:
            raise ProtocolError(404, f"unknown repository '{rid}'")

    def repositories(self) -> list[tuple[str, str, bool, bool]]:
        writable = self.cluster_provider().writable_reason() is None
        return [(self.repository_id, f"txcluster cluster repository {self.repository_id}",
                 True, writable)]

    def read_denied(self, request: Request) -> Response | None:
        return self.auth.problem(request, need_write=False)

    async def write_denied(self, request: Request) -> Response | None:
        return self.auth.problem(request, need_write=True)

    def error_status(self, exc: Exception) -> int | None:
        return exc.status if isinstance(exc, NotWritable | WriteFailed) else None

    def refused(self, exc: ProtocolError) -> None:
        counts = self.cluster_provider().counters.refused_requests
        counts[exc.reason] = counts.get(exc.reason, 0) + 1

    # ---- reads: forwarded as they came ----

    async def query(self, request: Request, repo: Any) -> Response:
        return await self.forward_read(request)

    statements = size = contexts = namespaces = query

    async def namespace(self, request: Request, repo: Any, prefix: str) -> Response:
        return await self.forward_read(request)

    async def graph(self, request: Request, repo: Any, graph: GraphName,
                    named_by_url: bool) -> Response:
        if not named_by_url:
            return await self.forward_read(request)
        # The graph IRI is the URL the client used, this master's; a worker would take
        # its own URL, so the read names the graph explicitly.
        return await self.forward_read(
            request, f"/repositories/{self.repository_id}/rdf-graphs/service",
            urlencode({"graph": graph.value}, quote_via=quote).encode())

    def query_timeout(self, request: Request, target: str, query: bytes,
                      body: bytes) -> float | None:
        """The timeout of a query (txinfra/query_limits.py): the smaller of the
        client's ``timeout`` and this master's query-timeout-s; None for other reads. A
        ``timeout`` that does not parse is left to the worker to refuse (400)."""
        if target != self.query_path:
            return None
        cap = self.query_timeout_s
        asked = None
        if body or _names_timeout(query):
            try:
                params = parse_params(query, body, request.headers.get("content-type"))
                asked = query_limits.parse_timeout(single_param(params, "timeout"), "timeout")
            except (ProtocolError, ValueError):
                pass
        return query_limits.effective_timeout(cap, asked)

    async def forward_read(self, request: Request, target: str | None = None,
                           query: bytes | None = None) -> Response:
        """Send a read to one worker; on a lost connection, to another. A query is sent
        with its timeout (the worker stops it there) and waited for that long plus a
        margin; a query that timed out is not re-sent (it would take as long elsewhere),
        and one whose client went away is abandoned. ``target`` / ``query``: another path
        and query string for the worker than the client's (a graph named by this
        master's URL)."""
        cluster = self.cluster_provider()
        headers, sized, consistency = _forwarded_headers(request.scope["headers"])
        # A GET that declares no body has none: not waited for (~2% of a master's CPU per
        # point read, py-spy).
        body = b"" if request.method == "GET" and not sized else await request.body()
        # scope["path"] is what request.url.path gives (no root_path here) without
        # building a URL object for every read.
        target = target or request.scope["path"]
        query = query if query is not None else request.scope.get("query_string", b"")
        if _is_control_query(query, body):
            return await _to_every_worker(cluster, request.method, target, query, body,
                                          headers)
        timeout_s = self.query_timeout(request, target, query, body)
        # Read-your-writes (the default): the read sees every write this master
        # acknowledged before it arrived, so its floor is the head of the log now.
        floor = cluster.read_floor(consistency.lower() == "updating")
        url = target + (f"?{query.decode()}" if query else "")
        return _response(await _forward(cluster, request.method, url, body, headers,
                                        timeout_s, floor,
                                        partial(wait_for_disconnect, request.receive)))

    # ---- writes: the cluster's write path ----

    async def write(self, repo: Any, operations: list[dict]) -> None:
        if operations:  # an empty transaction commits nothing
            await self.cluster_provider().write(operations)

    # ---- reads inside a transaction ----

    async def transaction_ended(self, txid: str) -> None:
        for url in self.view_holders.pop(txid, ()):
            w = self.cluster_provider().workers.get(url)
            if w is not None:
                with contextlib.suppress(WorkerUnavailable):
                    await w.client.transaction_read({"txid": txid, "operations": [],
                                                     "action": "END"})

    async def read_in_transaction(self, request: Request, repo: Any, txid: str,
                                  operations: list[dict], action: str, params: Params,
                                  body: bytes, content_type: str | None) -> Response:
        """The committed state (read-your-writes, as every read) plus the transaction's
        pending operations, on a worker's private view of it (worker_service/tx_view.py;
        POST /cluster/transaction-read). With nothing pending it is the plain read of the
        same thing."""
        cluster = self.cluster_provider()
        query = _without_action(request.scope.get("query_string", b""))
        accept = request.headers.get("accept")
        repo_path = f"/repositories/{self.repository_id}"
        if operations:
            try:
                text = body.decode()
            except UnicodeDecodeError:
                raise ProtocolError(400, "the body of a read inside a transaction must be "
                                         "UTF-8 text") from None
            payload = {"txid": txid, "operations": operations, "action": action,
                       "query_string": query, "body": text, "content_type": content_type,
                       "accept": accept}

            def send(w: Worker) -> Awaitable:
                self.view_holders.setdefault(txid, set()).add(w.url)
                return w.client.transaction_read(payload)
        else:
            headers = {k: v for k, v in (("accept", accept), ("content-type", content_type))
                       if v}
            target = {"SIZE": "/size", "QUERY": ""}.get(action, "/statements")
            method = "POST" if action == "QUERY" else "GET"
            url = f"{repo_path}{target}" + (f"?{query}" if query else "")

            def send(w: Worker) -> Awaitable:
                return w.client.read(method, url, body if method == "POST" else b"",
                                     headers)
        return _response(await route_read(partial(wait_for_disconnect, request.receive),
                                          cluster, cluster.read_floor(), send, None))


# The request headers a read passes on to the worker (forward_read).
_FORWARDED = frozenset({"accept", "content-type", "accept-encoding"})
_BODY_HEADERS = frozenset({"content-length", "transfer-encoding"})


def _forwarded_headers(raw: list[tuple[bytes, bytes]]) -> tuple[dict[str, str], bool, str]:
    """From a read's headers as the ASGI scope has them (names in lower case), in one
    pass: the ones passed on to the worker (the last of repeated ones, as before), whether
    a body is declared, and the local-consistency asked (the first one, as
    Headers.get). Not Starlette's Headers: its lookups and items() decoded every header
    again, ~4% of a master's CPU per point read (py-spy)."""
    headers: dict[str, str] = {}
    sized = False
    consistency: str | None = None
    for raw_name, raw_value in raw:
        name = raw_name.decode("latin-1")
        if name in _FORWARDED:
            headers[name] = raw_value.decode("latin-1")
        elif name in _BODY_HEADERS:
            sized = True
        elif name == LOCAL_CONSISTENCY and consistency is None:
            consistency = raw_value.decode("latin-1")
    return headers, sized, consistency or ""


async def _forward(cluster: Cluster, method: str, url: str, body: bytes,
                   headers: dict[str, str], timeout_s: float | None, floor: int | None,
                   client_gone: Callable[[], Awaitable]) -> ReadAnswer:
    """A read sent to a worker at ``floor`` as it came (route_read): a query with its
    timeout (the worker stops it there), waited for that long plus a margin; other
    reads (``timeout_s`` None) for request-timeout-s."""
    wait_s = None
    if timeout_s is not None:
        headers[query_limits.TIMEOUT_HEADER] = repr(timeout_s)
        wait_s = timeout_s + QUERY_WAIT_MARGIN_S + 1

    def send(w: Worker) -> Awaitable:
        return w.client.read(method, url, body, headers, timeout=wait_s)

    return await route_read(client_gone, cluster, floor, send, timeout_s)


def _response(answer: ReadAnswer) -> Response:
    status, headers, content = answer
    return Response(content, status_code=status, headers=headers)


def _without_action(query_string: bytes) -> str:
    """A transaction request's query string without its ``action`` parameter."""
    pairs = [(k, v) for k, v in parse_qsl(query_string.decode("latin-1"),
                                          keep_blank_values=True) if k != "action"]
    return urlencode(pairs, quote_via=quote)


def _names_timeout(query_string: bytes) -> bool:
    """Does the query string have a ``timeout`` parameter? Its names only, decoded as
    parse_qsl decodes them: decoding the whole string (the query's text) for a parameter
    most reads lack was ~5% of a master's CPU per point read (py-spy). Where this says
    no, parse_params finds no ``timeout`` either, or refuses the string (both: none asked)."""
    for pair in query_string.split(b"&"):
        name = pair.partition(b"=")[0]
        if name == b"timeout" or ((b"%" in name or b"+" in name)
                                  and unquote_plus(name.decode("latin-1")) == "timeout"):
            return True
    return False


def _is_control_query(query_string: bytes, body: bytes) -> bool:
    """A query FROM the control-query graph goes to every worker
    (docs/design/rdf4j-protocol.md#endpoints)."""
    return CONTROL_QUERY_GRAPH.encode() in query_string or \
        CONTROL_QUERY_GRAPH.encode() in body or \
        b"ontotext.com%2Fowlim%2Fcluster%2Fcontrol-query" in query_string + body


async def _to_every_worker(cluster: Cluster, method: str, target: str, query: bytes,
                           body: bytes, headers: dict) -> Response:
    workers = cluster.readable()
    if not workers:
        return _text(503, "no worker is available for reads")
    url = target + (f"?{query.decode()}" if query else "")
    answers = await asyncio.gather(
        *(w.client.read(method, url, body, headers) for w in workers), return_exceptions=True)
    failed = [f"{w.url}: {a if isinstance(a, Exception) else a[2][:200].decode(errors='replace')}"
              for w, a in zip(workers, answers, strict=True)
              if isinstance(a, Exception) or a[0] >= 400]
    if failed:
        return _text(502, "control query failed on: " + "; ".join(failed))
    status, resp_headers, content = answers[0]
    out = {k: v for k, v in resp_headers.items() if k in PASS_HEADERS}
    return Response(content, status_code=status, headers=out)
