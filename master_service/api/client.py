"""Client facade of a master: the RDF4J REST protocol, so unchanged clients see one
repository (cluster-basics.txt: "the master repository fully implements the RDF4J API").

Reads are forwarded to one worker that has applied every write this master acknowledged
before the read arrived (read-your-writes, core.py), chosen by the read router (fewest
running queries), and re-sent to another on a lost connection; a query that timed out
(query-timeout-s, the client's ``timeout``) is answered as such, never re-sent; a query
FROM the control-query graph goes to every worker. Writes become transaction operations
(txcluster.rdf4j, the same translation a worker uses) and go through the cluster's write
path.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import logging
from collections.abc import Awaitable, Callable
from functools import wraps
from urllib.parse import parse_qsl, quote, urlencode

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from master_service.cluster.core import Cluster, Worker
from master_service.cluster.reads import PASS_HEADERS, QUERY_WAIT_MARGIN_S, route_read
from master_service.cluster.worker_client import WorkerUnavailable
from master_service.errors import NotWritable, WriteFailed
from txcluster import rdf4j
from txcluster.rdf4j import ProtocolError
from worker_service import query_limits

log = logging.getLogger("txcluster.master.api")

CONTROL_QUERY_GRAPH = "http://www.ontotext.com/owlim/cluster/control-query"
LOCAL_CONSISTENCY = "x-graphdb-local-consistency"


def _text(status: int, message: str) -> Response:
    return PlainTextResponse(message, status_code=status)


class ClientAuth:
    """Optional HTTP basic auth with read and write roles (client-auth-file)."""

    def __init__(self, users) -> None:
        self.users = {u.name: u for u in users}

    def problem(self, request: Request, need_write: bool) -> Response | None:
        if not self.users:
            return None
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        user = None
        if scheme.lower() == "basic":
            try:
                name, _, password = base64.b64decode(token).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                name, password = "", ""
            candidate = self.users.get(name)
            # Bytes: compare_digest raises TypeError on str holding non-ASCII characters
            # (a client's "pässword" was a 500).
            if candidate and hmac.compare_digest(candidate.password.encode(),
                                                 password.encode()):
                user = candidate
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
                  auth: ClientAuth,
                  transactions: rdf4j.TransactionRegistry | None = None) -> APIRouter:
    """``transactions``: the open RDF4J transactions (the service sweeps idle ones)."""
    router = APIRouter()
    transactions = transactions if transactions is not None else rdf4j.TransactionRegistry()

    def handler(endpoint: Callable) -> Callable:
        @wraps(endpoint)
        async def wrapped(request: Request) -> Response:
            if (problem := rdf4j.path_problem(request.scope["path"])) is not None:
                return _text(400, problem)
            try:
                return await endpoint(request)
            except ProtocolError as exc:
                return _text(exc.status, exc.message)
            except (NotWritable, WriteFailed) as exc:
                return _text(exc.status, str(exc))
            except Exception as exc:
                log.exception("%s %s failed", request.method, request.url.path)
                return _text(500, f"internal error: {type(exc).__name__}: {exc}")
        return wrapped

    def check_repo(request: Request) -> None:
        rid = request.path_params.get("repo_id")
        if rid is not None and rid != repository_id:
            raise ProtocolError(404, f"unknown repository '{rid}'")

    # ---- reads ----

    def query_timeout(request: Request, target: str, query: bytes,
                      body: bytes) -> float | None:
        """The timeout of a query (worker_service/query_limits.py): the smaller of the
        client's ``timeout`` and this master's query-timeout-s; None for other reads. A
        ``timeout`` that does not parse is left to the worker to refuse (400)."""
        if target != f"/repositories/{repository_id}":
            return None
        cap = getattr(request.app.state, "query_timeout_s",
                      query_limits.DEFAULT_QUERY_TIMEOUT_S)
        try:
            params = rdf4j.parse_params(query, body, request.headers.get("content-type"))
            asked = query_limits.parse_timeout(rdf4j.single_param(params, "timeout"),
                                               "timeout")
        except (ProtocolError, ValueError):
            asked = None
        return query_limits.effective_timeout(cap, asked)

    async def forward_read(request: Request, target: str | None = None,
                           query: bytes | None = None) -> Response:
        """Send a read to one worker; on a lost connection, to another. A query is sent
        with its timeout (the worker stops it there) and waited for that long plus a
        margin; a query that timed out is not re-sent (it would take as long elsewhere),
        and one whose client went away is abandoned. ``target`` / ``query``: another path
        and query string for the worker than the client's (a graph named by this
        master's URL)."""
        check_repo(request)
        if (denied := auth.problem(request, need_write=False)) is not None:
            return denied
        cluster = cluster_provider()
        body = await request.body()
        headers = {k: v for k, v in request.headers.items()
                   if k in ("accept", "content-type", "accept-encoding")}
        target = target or request.url.path
        query = query if query is not None else request.scope.get("query_string", b"")
        if _is_control_query(query, body):
            return await _to_every_worker(cluster, request.method, target, query, body,
                                          headers)
        timeout_s = query_timeout(request, target, query, body)
        wait_s = None  # other reads: request-timeout-s
        if timeout_s is not None:
            headers[query_limits.TIMEOUT_HEADER] = repr(timeout_s)
            wait_s = timeout_s + QUERY_WAIT_MARGIN_S
        # Read-your-writes (the default): the read sees every write this master
        # acknowledged before it arrived, so its floor is the head of the log now.
        floor = cluster.read_floor(
            request.headers.get(LOCAL_CONSISTENCY, "").lower() == "updating")
        url = target + (f"?{query.decode()}" if query else "")

        def send(w: Worker) -> Awaitable:
            return w.client.read(request.method, url, body, headers,
                                 timeout=wait_s and wait_s + 1)

        return await route_read(request, cluster, floor, send, timeout_s)

    # ---- writes ----

    async def run_write(request: Request, operations: list[dict]) -> Response:
        await cluster_provider().write(operations)
        return Response(status_code=204)

    async def write_guard(request: Request) -> Response | None:
        check_repo(request)
        return auth.problem(request, need_write=True)

    async def statements(request: Request) -> Response:
        if request.method == "GET":
            return await forward_read(request)
        if (denied := await write_guard(request)) is not None:
            return denied
        body = await request.body()
        ctype = request.headers.get("content-type")
        params = rdf4j.parse_params(request.scope.get("query_string", b""), body, ctype)
        return await run_write(request, rdf4j.statements_write(request.method, params, body,
                                                               ctype))

    async def namespaces(request: Request) -> Response:
        if request.method == "GET":
            return await forward_read(request)
        if (denied := await write_guard(request)) is not None:
            return denied
        return await run_write(request, [rdf4j.clear_namespaces_operation()])

    async def namespace(request: Request) -> Response:
        if request.method == "GET":
            return await forward_read(request)
        if (denied := await write_guard(request)) is not None:
            return denied
        body = await request.body()
        ops = rdf4j.namespace_write(request.method, request.path_params["prefix"], body,
                                    request.headers.get("content-type"))
        return await run_write(request, ops)

    async def graph_store(request: Request, graph) -> Response:
        if request.method in ("GET", "HEAD"):
            return await forward_read(request)
        if (denied := await write_guard(request)) is not None:
            return denied
        body = await request.body()
        ctype = request.headers.get("content-type")
        params = rdf4j.parse_params(request.scope.get("query_string", b""))
        return await run_write(request, rdf4j.graph_store_write(request.method, graph, params,
                                                                body, ctype))

    async def graph_service(request: Request) -> Response:
        if request.method in ("GET", "HEAD"):
            return await forward_read(request)
        params = rdf4j.parse_params(request.scope.get("query_string", b""))
        return await graph_store(request, rdf4j.graph_store_target(params))

    async def graph_named(request: Request) -> Response:
        # Indirect identification: the graph IRI is the URL the client used, this
        # master's; a worker would take its own URL, so reads name the graph explicitly.
        graph = rdf4j.check_iri(str(request.url.replace(query=None)), "graph")
        if request.method in ("GET", "HEAD"):
            return await forward_read(
                request, f"/repositories/{repository_id}/rdf-graphs/service",
                urlencode({"graph": graph.value}, quote_via=quote).encode())
        return await graph_store(request, graph)

    async def begin(request: Request) -> Response:
        if (denied := await write_guard(request)) is not None:
            return denied
        txid = transactions.begin()
        location = rdf4j.transaction_location(str(request.url.replace(query=None)), txid)
        return Response(status_code=201, headers={"Location": location})

    async def transaction(request: Request) -> Response:
        if (denied := await write_guard(request)) is not None:
            return denied
        txid = request.path_params["txid"]
        if request.method == "DELETE":
            transactions.get(txid, rollback=True)
            await end_views(txid)
            return Response(status_code=204)
        tx = transactions.get(txid)
        body = await request.body()
        ctype = request.headers.get("content-type")
        params = rdf4j.parse_params(request.scope.get("query_string", b""), body, ctype)
        step = rdf4j.parse_transaction_step(params, body, ctype)
        if step.action == "PING":
            # RDF4J's answer: the idle time (ms) after which the transaction is forgotten.
            transactions.pending(tx)
            return PlainTextResponse(str(int(transactions.idle_s * 1000)))
        if step.action in rdf4j.READ_ACTIONS:
            return await read_in_transaction(request, txid, transactions.pending(tx),
                                             step.action, body, ctype)
        to_execute = transactions.record(tx, step)
        if tx.closed:
            await end_views(txid)
        if to_execute:
            await cluster_provider().write(to_execute)
        return Response(status_code=200)

    # Workers holding a view for a transaction's reads (worker_service/tx_view.py): told
    # when it ends, so its private store goes at once rather than after the idle time.
    view_holders: dict[str, set[str]] = {}

    async def end_views(txid: str) -> None:
        for url in view_holders.pop(txid, ()):
            w = cluster_provider().workers.get(url)
            if w is not None:
                with contextlib.suppress(WorkerUnavailable):
                    await w.client.transaction_read({"txid": txid, "operations": [],
                                                     "action": "END"})

    async def read_in_transaction(request: Request, txid: str, operations: list[dict],
                                  action: str, body: bytes, ctype: str | None) -> Response:
        """SIZE, GET (EXPORT) or QUERY inside an open transaction: the committed state
        (read-your-writes, as every read) plus the transaction's pending operations, on
        a worker's private view of it (worker_service/tx_view.py). With nothing pending it
        is the plain read of the same thing."""
        cluster = cluster_provider()
        query = _without_action(request.scope.get("query_string", b""))
        accept = request.headers.get("accept")
        repo_path = f"/repositories/{repository_id}"
        if operations:
            try:
                text = body.decode()
            except UnicodeDecodeError:
                raise ProtocolError(400, "the body of a read inside a transaction must be "
                                         "UTF-8 text") from None
            payload = {"txid": txid, "operations": operations, "action": action,
                       "query_string": query, "body": text, "content_type": ctype,
                       "accept": accept}

            def send(w: Worker) -> Awaitable:
                view_holders.setdefault(txid, set()).add(w.url)
                return w.client.transaction_read(payload)
        else:
            headers = {k: v for k, v in (("accept", accept), ("content-type", ctype)) if v}
            target = {"SIZE": "/size", "QUERY": ""}.get(action, "/statements")
            method = "POST" if action == "QUERY" else "GET"
            url = f"{repo_path}{target}" + (f"?{query}" if query else "")

            def send(w: Worker) -> Awaitable:
                return w.client.read(method, url, body if method == "POST" else b"",
                                     headers)
        return await route_read(request, cluster, cluster.read_floor(), send, None)

    async def protocol(request: Request) -> Response:
        return PlainTextResponse(rdf4j.PROTOCOL_VERSION)

    async def repositories(request: Request) -> Response:
        if (denied := auth.problem(request, need_write=False)) is not None:
            return denied
        neg = rdf4j.negotiate_tuple_format(request.headers.get("accept"))
        writable = cluster_provider().writable_reason() is None
        rows = rdf4j.repository_list_rows(
            str(request.url.replace(query=None)),
            [(repository_id, f"txcluster cluster repository {repository_id}", True, writable)])
        body = rdf4j.serialize_table(rdf4j.REPOSITORY_LIST_VARIABLES, rows, neg.format)
        return Response(body, media_type=neg.content_type)

    async def query(request: Request) -> Response:
        return await forward_read(request)

    routes: list[tuple[str, Callable, list[str]]] = [
        ("/protocol", protocol, ["GET"]),
        ("/repositories", repositories, ["GET"]),
        ("/repositories/{repo_id}", query, ["GET", "POST"]),
        ("/repositories/{repo_id}/statements", statements, ["GET", "POST", "PUT", "DELETE"]),
        ("/repositories/{repo_id}/size", query, ["GET"]),
        ("/repositories/{repo_id}/contexts", query, ["GET"]),
        ("/repositories/{repo_id}/namespaces", namespaces, ["GET", "DELETE"]),
        ("/repositories/{repo_id}/namespaces/{prefix}", namespace, ["GET", "PUT", "DELETE"]),
        ("/repositories/{repo_id}/rdf-graphs", query, ["GET"]),
        ("/repositories/{repo_id}/rdf-graphs/service", graph_service,
         ["GET", "PUT", "POST", "DELETE"]),
        ("/repositories/{repo_id}/rdf-graphs/{name}", graph_named,
         ["GET", "PUT", "POST", "DELETE"]),
        ("/repositories/{repo_id}/transactions", begin, ["POST"]),
        ("/repositories/{repo_id}/transactions/{txid}", transaction, ["PUT", "POST", "DELETE"]),
    ]
    for path, endpoint, methods in routes:
        router.add_route(path, handler(endpoint), methods=methods,
                         name=f"client_{endpoint.__name__}")
    return router


def _without_action(query_string: bytes) -> str:
    """A transaction request's query string without its ``action`` parameter."""
    pairs = [(k, v) for k, v in parse_qsl(query_string.decode("latin-1"),
                                          keep_blank_values=True) if k != "action"]
    return urlencode(pairs, quote_via=quote)


def _is_control_query(query_string: bytes, body: bytes) -> bool:
    """A query FROM the control-query graph goes to every worker (spec README)."""
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
