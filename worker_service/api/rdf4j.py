"""A worker's RDF4J REST API (and SPARQL 1.1 Protocol query side): a thin shell.

Reads are served to anyone. Writes are refused with 403 — before their body is parsed,
changing nothing — unless they carry the cluster credential of the worker's master
(cluster-basics.txt: "a worker node part of the cluster will reject any direct write
transaction not sent from the master"); with it, the write becomes transaction
operations (txcluster.rdf4j) run by ``Repository.execute_local``.

Reading: ``repo.reading()`` is held only around the call that *starts* a query or a
pattern iteration. pyoxigraph evaluates over a snapshot taken then, so results are
serialised after the lock is released and a reader never sees half a changeset.

Queries (worker_service/query_limits.py): every query runs under a timeout, the smallest
of the request's ``timeout``, the one its master passed on and ``query-timeout-s``.
Provably cheap queries (a single triple pattern) run in the thread pool and are stopped
while their results are written; every other query runs in a query process
(worker_service/query_process.py) forked under the read lock, killed at the deadline or
when its client goes. A query that timed out is a 503 "Query evaluation took too long"
(RDF4J's answer); when ``max-concurrent-queries`` query processes run, the next such
query is a 503 saying so.

The routes are plain Starlette routes taking a ``Request`` and returning a ``Response``:
no pydantic, no dependency injection on the hot path (point SELECT throughput), and
pyoxigraph always runs in the thread pool, never on the event loop. Errors are
``text/plain`` bodies, which is what RDF4J clients read as the error message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import partial, wraps
from itertools import chain
from typing import Any

import pyoxigraph as ox
from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from rdf4j_protocol.binary_rdf import write_rdf
from rdf4j_protocol.binary_results import write_results
from rdf4j_protocol.negotiation import (
    Negotiated,
    negotiate_boolean_format,
    negotiate_rdf_format,
    negotiate_tuple_format,
)
from rdf4j_protocol.parameters import (
    GraphName,
    Params,
    ProtocolError,
    check_iri,
    decode_contexts,
    parse_params,
    path_problem,
)
from rdf4j_protocol.reads import (
    QueryRequest,
    StatementPattern,
    is_update,
    parse_query_request,
    parse_statement_pattern,
    sparql_keyword,
)
from rdf4j_protocol.results import (
    REPOSITORY_LIST_VARIABLES,
    namespace_rows,
    repository_list_rows,
    serialize_boolean,
    serialize_table,
)
from rdf4j_protocol.routes import PROTOCOL_VERSION
from rdf4j_protocol.transactions import (
    READ_ACTIONS,
    TRANSACTION_IDLE_S,
    TransactionRegistry,
    parse_transaction_step,
    transaction_location,
)
from rdf4j_protocol.writes import (
    clear_namespaces_operation,
    graph_store_target,
    graph_store_write,
    namespace_write,
    statements_write,
)
from txcluster.auth import Verifier
from txcluster.http_auth import credential_problem
from worker_service import query_limits, query_process
from worker_service.query_limits import QueryLimits
from worker_service.tx_view import TransactionViews

log = logging.getLogger("txcluster.worker.rdf4j")

DIRECT_WRITE_REFUSED = ("this worker is part of a cluster: it rejects any direct write not "
                        "sent from its master")
READS = ("GET", "HEAD")
# Threads that run pyoxigraph. A plain executor costs about half of what anyio's
# to_thread costs per hop (~26 vs ~57 us CPU measured), which shows on point queries.
STORE_THREADS = 16
_pool = ThreadPoolExecutor(STORE_THREADS, thread_name_prefix="rdf4j-store")


async def run_in_threadpool(fn: Callable, *args: Any) -> Any:
    """Run blocking store work off the event loop."""
    return await asyncio.get_running_loop().run_in_executor(_pool, partial(fn, *args))


class QueryTimeout(Exception):
    pass


class TimedOut(ProtocolError):
    """A query stopped at its timeout: RDF4J's 503, marked so that a master does not send
    the query to another worker (query_limits.TIMED_OUT_HEADER)."""

    def __init__(self, timeout_s: float) -> None:
        super().__init__(query_limits.TIMED_OUT_STATUS,
                         query_limits.timed_out_message(timeout_s))
        self.headers = {query_limits.TIMED_OUT_HEADER: f"{timeout_s:g}"}


class _DeadlineWriter:
    """A sink for pyoxigraph's ``serialize`` that fails once the deadline has passed.

    pyoxigraph evaluates lazily while it writes (about one write() per 8 KiB), so this
    stops evaluation as well as serialisation."""

    def __init__(self, deadline: float, timeout_s: float) -> None:
        self.deadline = deadline
        self.timeout_s = timeout_s
        self.chunks: list[bytes] = []

    def write(self, chunk: bytes) -> int:
        if time.monotonic() > self.deadline:
            raise QueryTimeout
        self.chunks.append(bytes(chunk))
        return len(chunk)  # FACTS.md: serialize needs the length back

    def flush(self) -> None:
        pass

    def getvalue(self) -> bytes:
        return b"".join(self.chunks)


def _write_results(result: Any, fmt: Any, timeout_s: float | None) -> bytes:
    if timeout_s is None:
        return result.serialize(format=fmt)
    sink = _DeadlineWriter(time.monotonic() + timeout_s, timeout_s)
    result.serialize(sink, format=fmt)
    return sink.getvalue()


def _text(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return PlainTextResponse(message, status_code=status, headers=headers)


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) and 400 <= status < 600 else None


def _handler(endpoint: Callable) -> Callable:
    """Turn protocol errors (and the repository's errors, which carry ``.status``) into
    plain-text responses with that status."""

    @wraps(endpoint)
    async def wrapped(request: Request) -> Response:
        if (problem := path_problem(request.scope["path"])) is not None:
            return _text(400, problem)
        try:
            return await endpoint(request)
        except ProtocolError as exc:
            return _text(exc.status, exc.message, getattr(exc, "headers", None))
        except Exception as exc:
            status = _status_of(exc)
            if status is not None:
                return _text(status, str(exc))
            log.exception("%s %s failed", request.method, request.url.path)
            return _text(500, f"internal error: {type(exc).__name__}: {exc}")

    return wrapped


# The result negotiation for each query form, chosen before the query starts.
_NEGOTIATORS = {
    "SELECT": negotiate_tuple_format,
    "ASK": negotiate_boolean_format,
    "CONSTRUCT": negotiate_rdf_format,
    "DESCRIBE": negotiate_rdf_format,
}


def _negotiate_first(q: QueryRequest, accept: str | None) -> Negotiated | None:
    negotiate = _NEGOTIATORS.get(sparql_keyword(q.query) or "")
    return negotiate(accept) if negotiate is not None else None


def _negotiate_for(result: Any, accept: str | None) -> Negotiated:
    """The format for a result whose form was not known before the query started."""
    if isinstance(result, ox.QueryBoolean):
        return negotiate_boolean_format(accept)
    if isinstance(result, ox.QuerySolutions):
        return negotiate_tuple_format(accept)
    return negotiate_rdf_format(accept)


def _start_query(store: ox.Store, q: QueryRequest, repo_id: str) -> Any:
    """``store.query`` with its errors as protocol errors (no result exists yet)."""
    try:
        return store.query(q.query, **q.query_kwargs())
    except SyntaxError as exc:
        if is_update(q.query):
            raise ProtocolError(
                400, "a SPARQL update cannot be sent to the query endpoint: send it to "
                     f"/repositories/{repo_id}/statements ({exc})") from None
        raise ProtocolError(400, f"MALFORMED QUERY: {exc}") from None
    except RuntimeError as exc:  # e.g. a binding pyoxigraph cannot substitute
        raise ProtocolError(400, f"query cannot be evaluated: {exc}") from None


def _run_query(repo: Any, q: QueryRequest, accept: str | None,
               timeout_s: float | None) -> Response:
    """Start, evaluate and serialise a query, all in the calling (pool) thread; stopped
    (TimedOut) when ``timeout_s`` has passed at a write of its results.

    pyoxigraph's result iterators are "unsendable": they must be used and dropped by the
    thread that created them. So the format is negotiated before the query starts, and
    no exception leaves this function while a frame still holds a result (an exception's
    traceback would keep it alive until another thread collects it)."""
    neg = _negotiate_first(q, accept)
    with repo.reading() as store:
        result = _start_query(store, q, repo.id)
    failure: ProtocolError | None = None
    try:
        neg = neg or _negotiate_for(result, accept)
        if isinstance(result, ox.QueryBoolean):
            body = serialize_boolean(bool(result), neg)
        elif isinstance(result, ox.QuerySolutions):
            body = (_binary_solutions(result, timeout_s) if neg.binary
                    else _write_results(result, neg.format, timeout_s))
        else:
            body = (_binary_graph(result, timeout_s) if neg.binary
                    else _write_results(result, neg.format, timeout_s))
    except ProtocolError as exc:
        failure = ProtocolError(exc.status, exc.message)
    except QueryTimeout:
        failure = TimedOut(timeout_s or 0.0)
    except (OSError, RuntimeError, ValueError) as exc:
        failure = ProtocolError(500, f"query evaluation failed: {exc}")
    # Out of the except blocks: the exception and its frames are gone; drop the result
    # here, in its own thread, before raising anything.
    del result
    if failure is not None:
        raise failure
    return Response(body, media_type=neg.content_type)


def _within(items: Iterable, timeout_s: float | None) -> Iterable:
    """``items``, failing with QueryTimeout once ``timeout_s`` has passed (checked every
    256 items): the query timeout for results written by txcluster.binary_rdf, as
    _DeadlineWriter is for pyoxigraph's writers."""
    if timeout_s is None:
        yield from items
        return
    deadline = time.monotonic() + timeout_s
    for i, item in enumerate(items):
        if not i & 255 and time.monotonic() > deadline:
            raise QueryTimeout
        yield item


def _binary_solutions(result: ox.QuerySolutions, timeout_s: float | None) -> bytes:
    """SELECT results as RDF4J's binary results table."""
    variables = [v.value for v in result.variables]
    return write_results(variables, (tuple(s) for s in _within(result, timeout_s)))


def _binary_graph(result: ox.QueryTriples, timeout_s: float | None) -> bytes:
    """CONSTRUCT/DESCRIBE results as Binary RDF (statements without context)."""
    return write_rdf(_within(result, timeout_s))


def _answer_in_child(store: ox.Store, q: QueryRequest, accept: str | None,
                     neg: Negotiated | None, repo_id: str,
                     out: query_process.FrameWriter) -> None:
    """In a query process: evaluate ``q`` on ``store`` (the snapshot the fork took) and
    write the answer's frames; errors as the thread pool's ``_run_query`` answers them.
    No deadline here: the worker kills this process at it."""
    try:
        result = _start_query(store, q, repo_id)
        neg = neg or _negotiate_for(result, accept)
    except ProtocolError as exc:
        out.fail(exc.status, exc.message)
        return
    out.header(neg.content_type)
    try:
        if isinstance(result, ox.QueryBoolean):
            out.write(serialize_boolean(bool(result), neg))
        elif neg.binary:
            out.write(_binary_solutions(result, None) if isinstance(result, ox.QuerySolutions)
                      else _binary_graph(result, None))
        else:
            result.serialize(out, format=neg.format)
    except (OSError, RuntimeError, ValueError) as exc:
        out.fail(500, f"query evaluation failed: {exc}")


def _fork_query(repo: Any, q: QueryRequest, accept: str | None,
                neg: Negotiated | None) -> tuple[int, int]:
    """In a pool thread: fork a query process while holding the read lock (no changeset
    half-applied in what it inherits); its pid and the read end of its pipe."""
    r, w = os.pipe()
    try:
        with repo.reading() as store:
            parent = os.getpid()
            pid = os.fork()
            if pid == 0:  # the child: never returns
                query_process.child_main(
                    parent, w, partial(_answer_in_child, store, q, accept, neg, repo.id))
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return pid, r


def _excerpt(query: str, limit: int = 200) -> str:
    text = " ".join(query.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _serialize_quads(iterators: list, neg: Negotiated,
                     prefixes: dict[str, str]) -> bytes:
    """Serialise quad iterators (started under ``reading()``) and drop them, in this
    thread: like query results, pyoxigraph's iterators must not outlive it (see
    ``_run_query``), so no exception leaves while a frame holds one."""
    quads: Iterable[ox.Quad] = chain.from_iterable(iterators)
    # Triples-only formats drop graph names (as RDF4J does); pyoxigraph needs triples.
    items: Iterable = quads if neg.supports_datasets else (q.triple for q in quads)
    kwargs = {"prefixes": prefixes} if prefixes and neg.format in (
        ox.RdfFormat.TURTLE, ox.RdfFormat.TRIG, ox.RdfFormat.N3, ox.RdfFormat.RDF_XML) else {}
    failure: ProtocolError | None = None
    try:
        body = (write_rdf(quads, sorted(prefixes.items())) if neg.binary
                else ox.serialize(items, format=neg.format, **kwargs))
    except (OSError, RuntimeError, TypeError, ValueError) as exc:
        failure = ProtocolError(500, f"cannot write the statements as {neg.media_type}: {exc}")
    del quads, items
    iterators.clear()
    if failure is not None:
        raise failure
    return body


def rdf4j_router(repo_provider: Callable[[], Any], verifier: Verifier,
                 transaction_idle_s: float = TRANSACTION_IDLE_S,
                 limits: QueryLimits | None = None) -> APIRouter:
    """The RDF4J REST protocol for the repository ``repo_provider()`` returns.

    Open transactions (credentialed) idle for longer than ``transaction_idle_s`` are
    forgotten, with the views their reads used (tx_view.py). ``limits``: query timeout and
    concurrent query processes (query_limits.py; default: its defaults)."""
    router = APIRouter()
    transactions = TransactionRegistry(transaction_idle_s)
    views = TransactionViews(repo_provider, idle_s=transaction_idle_s)
    router.transaction_views = views  # type: ignore[attr-defined]  # closed by the app
    qlimits = limits or QueryLimits()
    processes = query_process.QueryProcesses(qlimits.max_concurrent_queries, _pool)
    router.query_processes = processes  # type: ignore[attr-defined]  # killed by the app

    def repository(request: Request) -> Any:
        repo = repo_provider()
        if repo is None:
            raise ProtocolError(503, "the repository is not available")
        rid = request.path_params["repo_id"]
        if rid != repo.id:
            raise ProtocolError(404, f"unknown repository '{rid}'")
        return repo

    def accept(request: Request) -> str | None:
        return request.headers.get("accept")

    def query_params(request: Request) -> tuple[tuple[str, str], ...]:
        return parse_params(request.scope.get("query_string", b""))

    async def refused(request: Request) -> Response | None:
        """403 unless the request is signed by the master. Reads the body (the signature
        covers it) but does not parse it."""
        problem = await credential_problem(request, verifier)
        if problem is None:
            return None
        client = request.client.host if request.client else "?"
        log.warning("refused %s %s from %s: %s", request.method, request.url.path, client,
                    problem)
        return _text(403, f"{DIRECT_WRITE_REFUSED} ({problem})")

    def execute(repo: Any, operations: list[dict]) -> Any:
        try:
            return repo.execute_local(operations)
        except Exception as exc:
            # worker_service.transaction.TransactionError and the repository's
            # WorkerError carry the status to answer with.
            status = _status_of(exc)
            if status is not None:
                raise ProtocolError(status, str(exc)) from None
            raise

    async def write(request: Request, build: Callable[[bytes], list[dict]],
                    precheck: Callable[[Any], Response | None] | None = None) -> Response:
        """Credential first (403, nothing parsed), then ``precheck(repo)`` in the thread
        pool (a response ends the request), then the operations, run as one
        transaction."""
        repo = repository(request)
        if (response := await refused(request)) is not None:
            return response
        if precheck is not None and (
                response := await run_in_threadpool(precheck, repo)) is not None:
            return response
        operations = build(await request.body())
        await run_in_threadpool(execute, repo, operations)
        return Response(status_code=204)

    # ---- protocol, repository list ----

    async def protocol(request: Request) -> Response:
        return PlainTextResponse(PROTOCOL_VERSION)

    async def repositories(request: Request) -> Response:
        neg = negotiate_tuple_format(accept(request))
        repo = repo_provider()
        entries = [] if repo is None else [
            (repo.id, f"txcluster worker repository {repo.id}", True, False)]
        url = str(request.url.replace(query=None))
        rows = repository_list_rows(url, entries)
        body = serialize_table(REPOSITORY_LIST_VARIABLES, rows, neg.format)
        return Response(body, media_type=neg.content_type)

    # ---- queries ----

    async def query(request: Request) -> Response:
        repo = repository(request)
        if request.method == "POST":
            body = await request.body()
            ctype = request.headers.get("content-type")
            params = parse_params(request.scope.get("query_string", b""), body, ctype)
            q = parse_query_request("POST", params, body, ctype)
        else:
            q = parse_query_request("GET", query_params(request))
        if not qlimits.isolate:  # the benchmark's baseline: stopped only while writing
            return await run_in_threadpool(_run_query, repo, q, accept(request), q.timeout_s)
        timeout_s = query_timeout(request, q)
        if query_limits.runs_in_process(
                q.query, {v.value for v, _ in q.bindings},
                None if q.default_graphs is None else len(q.default_graphs)):
            return await run_in_threadpool(_run_query, repo, q, accept(request), timeout_s)
        return await in_query_process(request, repo, q, timeout_s)

    def query_timeout(request: Request, q: QueryRequest) -> float:
        try:
            passed = query_limits.parse_timeout(request.headers.get(
                query_limits.TIMEOUT_HEADER), f"header {query_limits.TIMEOUT_HEADER}")
        except ValueError as exc:
            raise ProtocolError(400, str(exc)) from None
        return query_limits.effective_timeout(qlimits.query_timeout_s, q.timeout_s, passed)

    async def in_query_process(request: Request, repo: Any, q: QueryRequest,
                               timeout_s: float) -> Response:
        accept_ = accept(request)
        neg = _negotiate_first(q, accept_)  # a 406 costs no fork
        started = time.monotonic()
        try:
            answer = await processes.evaluate(
                partial(_fork_query, repo, q, accept_, neg), timeout_s,
                partial(query_process.wait_for_disconnect, request.receive))
        except query_process.TooManyQueries:
            raise ProtocolError(query_limits.BUSY_STATUS,
                                query_limits.busy_message(qlimits.max_concurrent_queries)
                                ) from None
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

    # ---- statements ----

    def read_statements(repo: Any, pattern: StatementPattern,
                        neg: Negotiated) -> Response:
        with repo.reading() as store:
            iterators = [store.quads_for_pattern(pattern.subject, pattern.predicate,
                                                 pattern.object, g)
                         for g in pattern.graph_names()]
        body = _serialize_quads(iterators, neg, repo.namespaces)
        return Response(body, media_type=neg.content_type)

    async def statements(request: Request) -> Response:
        repo = repository(request)
        if request.method in READS:
            pattern = parse_statement_pattern(query_params(request))
            neg = negotiate_rdf_format(accept(request), dataset=True)
            return await run_in_threadpool(read_statements, repo, pattern, neg)

        def build(body: bytes) -> list[dict]:
            ctype = request.headers.get("content-type")
            params = parse_params(request.scope.get("query_string", b""), body, ctype)
            return statements_write(request.method, params, body, ctype)

        return await write(request, build)

    # ---- size, contexts, namespaces ----

    def count(repo: Any, contexts: tuple | None) -> int:
        with repo.reading() as store:
            if contexts is None:
                return repo.state().quads  # kept exactly with every changeset
            iterators = [store.quads_for_pattern(None, None, None, g)
                         for g in dict.fromkeys(contexts)]
        return sum(1 for it in iterators for _ in it)

    async def size(request: Request) -> Response:
        repo = repository(request)
        contexts = decode_contexts(query_params(request))
        n = await run_in_threadpool(count, repo, contexts)
        return PlainTextResponse(str(n))

    def context_rows(repo: Any) -> list:
        with repo.reading() as store:
            graphs = [(g, store.quads_for_pattern(None, None, None, g))
                      for g in store.named_graphs()]
        # RDF4J lists the contexts that hold statements, not empty named graphs.
        return [(g,) for g, it in graphs if next(it, None) is not None]

    async def contexts(request: Request) -> Response:
        repo = repository(request)
        neg = negotiate_tuple_format(accept(request))
        rows = await run_in_threadpool(context_rows, repo)
        return Response(serialize_table(("contextID",), rows, neg.format),
                        media_type=neg.content_type)

    async def namespaces(request: Request) -> Response:
        repo = repository(request)
        if request.method == "DELETE":
            return await write(request, lambda body: [clear_namespaces_operation()])
        neg = negotiate_tuple_format(accept(request))
        rows = namespace_rows(repo.namespaces)
        return Response(serialize_table(("prefix", "namespace"), rows, neg.format),
                        media_type=neg.content_type)

    async def namespace(request: Request) -> Response:
        repo = repository(request)
        prefix = request.path_params["prefix"]
        if request.method in READS:
            iri = repo.namespaces.get(prefix)
            if iri is None:
                return _text(404, f"undefined prefix: {prefix}")
            return PlainTextResponse(iri)
        ctype = request.headers.get("content-type")
        return await write(
            request, lambda body: namespace_write(request.method, prefix, body, ctype))

    # ---- graph store protocol ----

    def read_graph(repo: Any, graph: GraphName, neg: Negotiated) -> Response:
        with repo.reading() as store:
            if isinstance(graph, ox.NamedNode | ox.BlankNode) and not \
                    store.contains_named_graph(graph):
                raise ProtocolError(404, f"graph {graph} not found")
            iterators = [store.quads_for_pattern(None, None, None, graph)]
        return Response(_serialize_quads(iterators, neg, repo.namespaces),
                        media_type=neg.content_type)

    async def graph_store(request: Request, graph: GraphName) -> Response:
        repo = repository(request)
        if request.method in READS:
            neg = negotiate_rdf_format(accept(request))
            return await run_in_threadpool(read_graph, repo, graph, neg)

        def build(body: bytes) -> list[dict]:
            ctype = request.headers.get("content-type")
            return graph_store_write(request.method, graph, query_params(request),
                                           body, ctype)

        def graph_exists(repo: Any) -> Response | None:
            # Graph Store Protocol: deleting a graph that does not exist is a 404.
            with repo.reading() as store:
                if store.contains_named_graph(graph):
                    return None
            return _text(404, f"graph {graph} not found")

        deleting_named = request.method == "DELETE" and isinstance(graph, ox.NamedNode)
        return await write(request, build, graph_exists if deleting_named else None)

    async def graph_service(request: Request) -> Response:
        repository(request)
        return await graph_store(request, graph_store_target(query_params(request)))

    async def graph_named(request: Request) -> Response:
        # Indirect identification: the graph IRI is the request URL itself.
        repository(request)
        graph = check_iri(str(request.url.replace(query=None)), "graph URL")
        return await graph_store(request, graph)

    async def graphs(request: Request) -> Response:
        return await contexts(request)

    # ---- transactions (master only) ----

    async def begin(request: Request) -> Response:
        repository(request)
        if (response := await refused(request)) is not None:
            return response
        txid = transactions.begin()
        location = transaction_location(str(request.url.replace(query=None)), txid)
        return Response(status_code=201, headers={"Location": location})

    def read_in_transaction(txid: str, operations: list[dict], action: str,
                            params: Params, body: bytes, ctype: str | None,
                            accept_: str | None) -> Response:
        """A read inside a transaction: over the committed state plus ``operations``
        (the transaction's pending ones), on the transaction's view (tx_view.py)."""
        view = views.view(txid, operations)
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
            neg = negotiate_rdf_format(accept_, dataset=True)
            return read_statements(view, pattern, neg)
        q = parse_query_request("POST", params, body, ctype)
        # On the transaction's private view, in this thread: stopped at a write of its
        # results past the timeout (no query process for views yet).
        return _run_query(view, q, accept_, query_limits.effective_timeout(
            qlimits.query_timeout_s, q.timeout_s))

    async def transaction(request: Request) -> Response:
        repo = repository(request)
        if (response := await refused(request)) is not None:
            return response
        txid = request.path_params["txid"]
        if request.method == "DELETE":
            transactions.get(txid, rollback=True)
            await run_in_threadpool(views.forget, txid)
            return Response(status_code=204)
        tx = transactions.get(txid)
        body = await request.body()
        ctype = request.headers.get("content-type")
        params = parse_params(request.scope.get("query_string", b""), body, ctype)
        step = parse_transaction_step(params, body, ctype)
        if step.action == "PING":
            # RDF4J's answer: the idle time (ms) after which the transaction is forgotten.
            transactions.pending(tx)
            return PlainTextResponse(str(int(transactions.idle_s * 1000)))
        if step.action in READ_ACTIONS:
            return await run_in_threadpool(read_in_transaction, txid, transactions.pending(tx),
                                           step.action, params, body, ctype, accept(request))
        to_execute = transactions.record(tx, step)
        if tx.closed:
            await run_in_threadpool(views.forget, txid)
        if to_execute is not None:
            await run_in_threadpool(execute, repo, to_execute)
        return Response(status_code=200)

    async def master_transaction_read(request: Request) -> Response:
        """``POST /cluster/transaction-read`` (signed by the master): a read inside one
        of the master's open transactions, whose pending operations come with it."""
        if repo_provider() is None:
            raise ProtocolError(503, "the repository is not available")
        if (response := await refused(request)) is not None:
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
            await run_in_threadpool(views.forget, txid)
            return Response(status_code=204)
        if action not in READ_ACTIONS or not isinstance(operations, list):
            raise ProtocolError(400, f"malformed transaction read: action {action!r}")
        return await run_in_threadpool(read_in_transaction, txid, operations, action, params,
                                       body, ctype, payload.get("accept"))

    routes: list[tuple[str, Callable, list[str]]] = [
        ("/protocol", protocol, ["GET"]),
        ("/repositories", repositories, ["GET"]),
        ("/repositories/{repo_id}", query, ["GET", "POST"]),
        ("/repositories/{repo_id}/statements", statements, ["GET", "POST", "PUT", "DELETE"]),
        ("/repositories/{repo_id}/size", size, ["GET"]),
        ("/repositories/{repo_id}/contexts", contexts, ["GET"]),
        ("/repositories/{repo_id}/namespaces", namespaces, ["GET", "DELETE"]),
        ("/repositories/{repo_id}/namespaces/{prefix}", namespace, ["GET", "PUT", "DELETE"]),
        ("/repositories/{repo_id}/rdf-graphs", graphs, ["GET"]),
        ("/repositories/{repo_id}/rdf-graphs/service", graph_service,
         ["GET", "PUT", "POST", "DELETE"]),
        ("/repositories/{repo_id}/rdf-graphs/{name}", graph_named,
         ["GET", "PUT", "POST", "DELETE"]),
        ("/repositories/{repo_id}/transactions", begin, ["POST"]),
        ("/repositories/{repo_id}/transactions/{txid}", transaction, ["PUT", "POST", "DELETE"]),
    ]
    routes.append(("/cluster/transaction-read", master_transaction_read, ["POST"]))
    for path, endpoint, methods in routes:
        router.add_route(path, _handler(endpoint), methods=methods,
                         name=f"rdf4j_{endpoint.__name__}")
    return router
