"""A worker's RDF4J REST API (and SPARQL 1.1 Protocol query side): a thin shell.

The routes are the protocol's one route table (rdf4j_protocol/routes.py), mounted here
over the worker's backend, which answers from the worker's store. Reads are served to
anyone. Writes are refused with 403 — before their body is parsed, changing nothing —
unless they carry the cluster credential of the worker's master
(docs/design/cluster-basics.md#masters-and-workers: a worker of a cluster takes writes only
from its master); with it, the write becomes transaction operations (rdf4j_protocol.writes)
run by ``Repository.execute_local``.

Queries (worker_service/api/queries.py, txinfra/query_limits.py,
worker_service/query_isolation.py): every query runs under a timeout, the smallest of
the request's ``timeout``, the one its master passed on and ``query-timeout-s``; when
``max-concurrent-queries`` query processes run, the next query that needs one waits for
one in a bounded queue (worker_service/query_slots.py), and is a 503 saying so only when
the queue is full or its wait expired. Reads inside a transaction run on the
transaction's private view (worker_service/tx_view.py): the worker's own RDF4J
transactions, and its master's through ``POST /cluster/transaction-read``."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import pyoxigraph as ox
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from rdf4j_protocol.negotiation import Negotiated, negotiate_rdf_format, negotiate_tuple_format
from rdf4j_protocol.parameters import (
    GraphName,
    Params,
    ProtocolError,
    decode_contexts,
    parse_params,
)
from rdf4j_protocol.reads import StatementPattern, parse_query_request, parse_statement_pattern
from rdf4j_protocol.results import namespace_rows, serialize_table
from rdf4j_protocol.routes import (
    Backend,
    HotRoutes,
    Route,
    query_params,
    rdf4j_routes,
    text,
)
from rdf4j_protocol.transactions import READ_ACTIONS, TRANSACTION_IDLE_S, TransactionRegistry
from txinfra import query_limits
from txinfra.auth import Verifier
from txinfra.http_auth import credential_problem
from worker_service import query_isolation, query_process
from worker_service.api.queries import (
    TimedOut,
    _excerpt,
    _fork_query,
    _negotiate_first,
    _pool,
    _query_request,
    _run_query,
    run_in_threadpool,
    run_inline,
    statements_response,
)
from worker_service.query_isolation import QueryLimits
from worker_service.tx_view import TransactionViews

log = logging.getLogger("txcluster.worker.rdf4j")

DIRECT_WRITE_REFUSED = ("this worker is part of a cluster: it rejects any direct write not "
                        "sent from its master")


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) and 400 <= status < 600 else None


def rdf4j_router(backend: WorkerBackend, hot: HotRoutes | None = None) -> APIRouter:
    """The RDF4J REST protocol over ``backend`` (its repository, credential check and
    limits); ``hot``: where the route table's hot routes are declared (routes.HotPaths:
    point reads and writes). The owner of ``backend`` closes it."""
    return rdf4j_routes(backend, TransactionRegistry(backend.transaction_idle_s), hot)


def _provably_cheap(q: Any) -> bool:
    """query_isolation.runs_in_process for a parsed query request."""
    return query_isolation.runs_in_process(
        q.query, {v.value for v, _ in q.bindings},
        None if q.default_graphs is None else len(q.default_graphs))


class WorkerBackend(Backend):
    """The worker under the RDF4J route table: reads and writes on its store."""

    log = log
    route_prefix = "rdf4j"

    def __init__(self, repo_provider: Callable[[], Any], verifier: Verifier,
                 transaction_idle_s: float = TRANSACTION_IDLE_S,
                 limits: QueryLimits | None = None) -> None:
        """Open transactions (credentialed) idle for longer than ``transaction_idle_s``
        are forgotten, with the views their reads used (tx_view.py). ``limits``: query
        timeout and concurrent query processes (query_isolation.py; default: its
        defaults)."""
        self.repo_provider = repo_provider
        self.verifier = verifier
        self.transaction_idle_s = transaction_idle_s
        self.views = TransactionViews(repo_provider, idle_s=transaction_idle_s)
        self.limits = limits or QueryLimits()
        self.processes = query_process.QueryProcesses(
            self.limits.max_concurrent_queries, _pool, self.limits.queue_depth,
            self.limits.queue_wait_s)

    def repository(self, request: Request) -> Any:
        repo = self.repo_provider()
        if repo is None:
            raise ProtocolError(503, "the repository is not available")
        rid = request.path_params["repo_id"]
        if rid != repo.id:
            raise ProtocolError(404, f"unknown repository '{rid}'")
        return repo

    def close(self) -> None:
        """What the backend holds goes with the process: the private stores of reads
        inside transactions (tx_view.py), and every query process (they also die with
        it: query_process.py)."""
        self.views.close()
        self.processes.kill_all()

    def repositories(self) -> list[tuple[str, str, bool, bool]]:
        repo = self.repo_provider()
        return [] if repo is None else [
            (repo.id, f"txcluster worker repository {repo.id}", True, False)]

    async def write_denied(self, request: Request) -> Response | None:
        """403 unless the request is signed by the master. Reads the body (the signature
        covers it) but does not parse it."""
        problem = await credential_problem(request, self.verifier)
        if problem is None:
            return None
        client = request.client.host if request.client else "?"
        log.warning("refused %s %s from %s: %s", request.method, request.url.path, client,
                    problem)
        return text(403, f"{DIRECT_WRITE_REFUSED} ({problem})")

    def error_status(self, exc: Exception) -> int | None:
        # The repository's errors carry the status to answer with.
        return _status_of(exc)

    # ---- queries ----

    async def query(self, request: Request, repo: Any) -> Response:
        accept = request.headers.get("accept")
        if request.method == "POST":
            body = await request.body()
            ctype = request.headers.get("content-type")
            params = parse_params(request.scope.get("query_string", b""), body, ctype)
            q = parse_query_request("POST", params, body, ctype)
        else:
            q = parse_query_request("GET", query_params(request))
        if not self.limits.isolate:  # the benchmark's baseline: stopped only while writing
            return await run_in_threadpool(_run_query, repo, q, accept, q.timeout_s)
        timeout_s = self.query_timeout(request.headers.get(query_limits.TIMEOUT_HEADER),
                                       q.timeout_s)
        if _provably_cheap(q):
            # First on the loop within a small budget (queries.run_inline), else in the
            # thread pool.
            answer = run_inline(repo, q, accept, timeout_s)
            if answer is not None:
                return Response(answer[0], media_type=answer[1])
            return await run_in_threadpool(_run_query, repo, q, accept, timeout_s)
        return await self.in_query_process(request, repo, q, timeout_s)

    def query_timeout(self, header: str | None, asked: float | None) -> float:
        try:
            passed = query_limits.parse_timeout(header, f"header {query_limits.TIMEOUT_HEADER}")
        except ValueError as exc:
            raise ProtocolError(400, str(exc)) from None
        return query_limits.effective_timeout(self.limits.query_timeout_s, asked, passed)

    async def in_query_process(self, request: Request, repo: Any, q: Any,
                               timeout_s: float) -> Response:
        accept = request.headers.get("accept")
        _negotiate_first(q, accept)  # a 406 costs no fork
        started = time.monotonic()
        try:
            answer = await self.processes.evaluate(
                _query_request(q, accept), partial(_fork_query, repo),
                lambda: repo.write_count, timeout_s,
                partial(query_limits.wait_for_disconnect, request.receive))
        except query_process.TooManyQueries as exc:
            raise ProtocolError(query_limits.BUSY_STATUS, str(exc)) from None
        except query_process.QueryTimedOut:
            log.warning("query stopped at its timeout of %g s (its process killed): %s",
                        timeout_s, _excerpt(q.query))
            raise TimedOut(timeout_s) from None
        except query_process.ClientGone:
            log.info("client gone after %.1f s: query process killed: %s",
                     time.monotonic() - started, _excerpt(q.query))
            return Response(status_code=499)  # nobody reads it
        except query_process.QueryFailed as exc:
            raise ProtocolError(exc.status, exc.message) from None
        return Response(answer.body, media_type=answer.content_type)

    # ---- statements, size, contexts, namespaces ----

    async def statements(self, request: Request, repo: Any) -> Response:
        pattern = parse_statement_pattern(query_params(request))
        neg = negotiate_rdf_format(request.headers.get("accept"), dataset=True)
        return await run_in_threadpool(_read_statements, repo, pattern, neg)

    async def size(self, request: Request, repo: Any) -> Response:
        contexts = decode_contexts(query_params(request))
        n = await run_in_threadpool(_count, repo, contexts)
        return PlainTextResponse(str(n))

    async def contexts(self, request: Request, repo: Any) -> Response:
        neg = negotiate_tuple_format(request.headers.get("accept"))
        rows = await run_in_threadpool(_context_rows, repo)
        return Response(serialize_table(("contextID",), rows, neg.format),
                        media_type=neg.content_type)

    async def namespaces(self, request: Request, repo: Any) -> Response:
        neg = negotiate_tuple_format(request.headers.get("accept"))
        rows = namespace_rows(repo.namespaces)
        return Response(serialize_table(("prefix", "namespace"), rows, neg.format),
                        media_type=neg.content_type)

    async def namespace(self, request: Request, repo: Any, prefix: str) -> Response:
        iri = repo.namespaces.get(prefix)
        if iri is None:
            return text(404, f"undefined prefix: {prefix}")
        return PlainTextResponse(iri)

    # ---- graph store protocol ----

    async def graph(self, request: Request, repo: Any, graph: GraphName,
                    named_by_url: bool) -> Response:
        neg = negotiate_rdf_format(request.headers.get("accept"))
        return await run_in_threadpool(_read_graph, repo, graph, neg)

    async def graph_missing(self, repo: Any, graph: GraphName) -> Response | None:
        return await run_in_threadpool(_graph_missing, repo, graph)

    # ---- writes ----

    async def write(self, repo: Any, operations: list[dict]) -> None:
        await run_in_threadpool(_execute, repo, operations)

    # ---- reads inside a transaction ----

    async def read_in_transaction(self, request: Request, repo: Any, txid: str,
                                  operations: list[dict], action: str, params: Params,
                                  body: bytes, content_type: str | None) -> Response:
        return await run_in_threadpool(self.read_on_view, txid, operations, action, params,
                                       body, content_type, request.headers.get("accept"))

    def read_on_view(self, txid: str, operations: list[dict], action: str, params: Params,
                     body: bytes, ctype: str | None, accept: str | None) -> Response:
        """A read inside a transaction: over the committed state plus ``operations``
        (the transaction's pending ones), on the transaction's view (tx_view.py)."""
        view = self.views.view(txid, operations)
        if action == "SIZE":
            contexts = decode_contexts(params)
            if contexts is None:
                return PlainTextResponse(str(view.quads))
            with view.reading() as store:
                n = sum(1 for g in dict.fromkeys(contexts)
                        for _ in store.quads_for_pattern(None, None, None, g))
            return PlainTextResponse(str(n))
        if action in ("GET", "EXPORT"):
            pattern = parse_statement_pattern(params)
            neg = negotiate_rdf_format(accept, dataset=True)
            return _read_statements(view, pattern, neg)
        q = parse_query_request("POST", params, body, ctype)
        # On the transaction's private view, in this thread: stopped at a write of its
        # results past the timeout (no query process for views yet).
        return _run_query(view, q, accept, query_limits.effective_timeout(
            self.limits.query_timeout_s, q.timeout_s))

    async def transaction_ended(self, txid: str) -> None:
        await run_in_threadpool(self.views.forget, txid)

    def extra_routes(self) -> list[Route]:
        return [("/cluster/transaction-read", self.master_transaction_read, ["POST"])]

    async def master_transaction_read(self, request: Request) -> Response:
        """``POST /cluster/transaction-read`` (signed by the master): a read inside one
        of the master's open transactions, whose pending operations come with it."""
        if self.repo_provider() is None:
            raise ProtocolError(503, "the repository is not available")
        if (response := await self.write_denied(request)) is not None:
            return response
        try:
            payload = json.loads(await request.body())
            txid, operations = str(payload["txid"]), payload["operations"]
            action = str(payload["action"]).upper()
            body = str(payload.get("body") or "").encode()
            ctype = payload.get("content_type")
            params = parse_params(str(payload.get("query_string") or ""), body, ctype)
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(400, f"malformed transaction read: {exc}") from None
        if action == "END":  # the transaction was committed or rolled back
            await self.transaction_ended(txid)
            return Response(status_code=204)
        if action not in READ_ACTIONS or not isinstance(operations, list):
            raise ProtocolError(400, f"malformed transaction read: action {action!r}")
        return await run_in_threadpool(self.read_on_view, txid, operations, action, params,
                                       body, ctype, payload.get("accept"))


# ---- store work, in the thread pool ----


def _read_statements(repo: Any, pattern: StatementPattern, neg: Negotiated) -> Response:
    with repo.reading() as store:
        iterators = [store.quads_for_pattern(pattern.subject, pattern.predicate,
                                             pattern.object, g)
                     for g in pattern.graph_names()]
    return statements_response(iterators, neg, repo.namespaces,
                               getattr(repo, "data_dir", None))


def _count(repo: Any, contexts: tuple | None) -> int:
    with repo.reading() as store:
        if contexts is None:
            return repo.state().quads  # kept exactly with every changeset
        iterators = [store.quads_for_pattern(None, None, None, g)
                     for g in dict.fromkeys(contexts)]
    return sum(1 for it in iterators for _ in it)


def _context_rows(repo: Any) -> list:
    with repo.reading() as store:
        graphs = [(g, store.quads_for_pattern(None, None, None, g))
                  for g in store.named_graphs()]
    # RDF4J lists the contexts that hold statements, not empty named graphs.
    return [(g,) for g, it in graphs if next(it, None) is not None]


def _read_graph(repo: Any, graph: GraphName, neg: Negotiated) -> Response:
    with repo.reading() as store:
        if isinstance(graph, ox.NamedNode | ox.BlankNode) and not \
                store.contains_named_graph(graph):
            raise ProtocolError(404, f"graph {graph} not found")
        iterators = [store.quads_for_pattern(None, None, None, graph)]
    return statements_response(iterators, neg, repo.namespaces,
                               getattr(repo, "data_dir", None))


def _graph_missing(repo: Any, graph: GraphName) -> Response | None:
    # Graph Store Protocol: deleting a graph that does not exist is a 404.
    with repo.reading() as store:
        if store.contains_named_graph(graph):
            return None
    return text(404, f"graph {graph} not found")


def _execute(repo: Any, operations: list[dict]) -> Any:
    try:
        return repo.execute_local(operations)
    except Exception as exc:
        # worker_service.transaction.TransactionError and the repository's
        # WorkerError carry the status to answer with.
        status = _status_of(exc)
        if status is not None:
            raise ProtocolError(status, str(exc)) from None
        raise
