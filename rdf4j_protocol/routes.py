"""The one route table of the RDF4J REST protocol, mounted by both node kinds.

A master (master_service/api/client.py) and a worker (worker_service/api/rdf4j.py) answer
the same paths with the same methods, parse writes and transaction steps the same way and
turn errors into the same plain-text answers (what RDF4J clients read as the error
message). What differs is a :class:`Backend`: a worker runs reads and writes on its store;
a master forwards reads to its workers as they came (the worker parses them) and sends
writes through its write path. A backend also says who may read and who may write (client
auth on the master; reads for anyone and writes signed by the master on a worker).

The routes are plain Starlette routes taking a ``Request`` and returning a ``Response``:
no pydantic, no dependency injection on the hot path (point SELECT throughput).

Order of the checks on every repository route: a control character in the path (400),
the repository (404, or 503 where it is not available), then the request's own
parameters where the route needs them before anything else (a graph), then auth, then the
body. Writes are refused before their body is parsed, changing nothing.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import wraps
from typing import Any

import pyoxigraph as ox
from fastapi import APIRouter, HTTPException
from fastapi.exception_handlers import http_exception_handler
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from rdf4j_protocol.negotiation import negotiate_tuple_format
from rdf4j_protocol.parameters import (
    GraphName,
    Params,
    ProtocolError,
    check_iri,
    parse_params,
    path_problem,
)
from rdf4j_protocol.results import REPOSITORY_LIST_VARIABLES, repository_list_rows, serialize_table
from rdf4j_protocol.transactions import (
    READ_ACTIONS,
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
from txinfra.jsonbody import JSONAnswer

PROTOCOL_VERSION = "12"
READS = ("GET", "HEAD")

Endpoint = Callable[[Request], Any]
# (path, endpoint, methods) as Starlette's add_route takes them.
Route = tuple[str, Endpoint, list[str]]


def text(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """An error (or plain) answer: a ``text/plain`` body, which RDF4J clients show."""
    return PlainTextResponse(message, status_code=status, headers=headers)


def query_params(request: Request) -> tuple[tuple[str, str], ...]:
    """The parameters of the request's URL (not of a form body)."""
    return parse_params(request.scope.get("query_string", b""))


class Backend(ABC):
    """What a node kind runs under the one route table.

    ``repo`` below is whatever :meth:`repository` returned for the request (a worker's
    repository; nothing on a master, whose cluster is one repository). The read methods
    get the request as it came: a master forwards it to a worker as it is, a worker
    parses it (rdf4j_protocol.reads) and answers from its store."""

    log: logging.Logger
    route_prefix: str  # the routes' names: f"{route_prefix}_{endpoint}"

    @abstractmethod
    def repository(self, request: Request) -> Any:
        """The repository of the request's ``{repo_id}``: ProtocolError 404 when it names
        another, 503 when it is not available."""

    @abstractmethod
    def repositories(self) -> list[tuple[str, str, bool, bool]]:
        """``GET /repositories``: (id, title, readable, writable) per repository."""

    def read_denied(self, request: Request) -> Response | None:
        """The answer refusing a read (401/403), or None: reads are open by default."""
        return None

    @abstractmethod
    async def write_denied(self, request: Request) -> Response | None:
        """The answer refusing a write or a transaction step, or None."""

    def error_status(self, exc: Exception) -> int | None:
        """The status to answer an exception of the backend with (its message as the
        body), or None for an internal error (500)."""
        return None

    def refused(self, exc: ProtocolError) -> None:
        """A request refused with ``exc`` before it reached the backend's reads or
        writes (a master counts them by ``exc.reason``); a worker does nothing."""
        return None

    # ---- reads ----

    @abstractmethod
    async def query(self, request: Request, repo: Any) -> Response:
        """``GET|POST /repositories/{id}``: a SPARQL query."""

    @abstractmethod
    async def statements(self, request: Request, repo: Any) -> Response:
        """``GET /statements``: the statements matching ``subj``/``pred``/``obj``/
        ``context``."""

    @abstractmethod
    async def size(self, request: Request, repo: Any) -> Response:
        """``GET /size``."""

    @abstractmethod
    async def contexts(self, request: Request, repo: Any) -> Response:
        """``GET /contexts`` and ``GET /rdf-graphs``: the graphs that hold statements."""

    @abstractmethod
    async def namespaces(self, request: Request, repo: Any) -> Response:
        """``GET /namespaces``."""

    @abstractmethod
    async def namespace(self, request: Request, repo: Any, prefix: str) -> Response:
        """``GET /namespaces/{prefix}``."""

    @abstractmethod
    async def graph(self, request: Request, repo: Any, graph: GraphName,
                    named_by_url: bool) -> Response:
        """A Graph Store Protocol read of ``graph``; ``named_by_url``: the graph is the
        request's URL (indirect identification), else the ``graph``/``default``
        parameter."""

    # ---- writes ----

    async def graph_missing(self, repo: Any, graph: GraphName) -> Response | None:
        """Before deleting the named graph ``graph``: the answer when it does not exist
        (Graph Store Protocol: 404), or None to go on."""
        return None

    @abstractmethod
    async def write(self, repo: Any, operations: list[dict]) -> None:
        """Run ``operations`` (rdf4j_protocol.writes) as one transaction: a write, or a
        transaction's COMMIT."""

    # ---- reads inside a transaction ----

    @abstractmethod
    async def read_in_transaction(self, request: Request, repo: Any, txid: str,
                                  operations: list[dict], action: str, params: Params,
                                  body: bytes, content_type: str | None) -> Response:
        """SIZE, GET (EXPORT) or QUERY inside an open transaction: over the committed
        state plus ``operations``, the transaction's pending ones."""

    @abstractmethod
    async def transaction_ended(self, txid: str) -> None:
        """``txid`` was committed or rolled back: what its reads kept can go."""

    def extra_routes(self) -> list[Route]:
        """Routes of this node kind only, answered with the same error handling."""
        return []


def rdf4j_routes(backend: Backend, transactions: TransactionRegistry,
                 hot: HotRoutes | None = None) -> APIRouter:
    """The RDF4J REST protocol over ``backend``; ``transactions``: the endpoint's open
    RDF4J transactions (their owner sweeps the idle ones); ``hot``: where the routes of
    HOT_ROUTES are declared for the node's HotPaths."""
    router = APIRouter()
    log = backend.log

    def handler(endpoint: Endpoint) -> Endpoint:
        """Protocol errors (and the backend's errors that carry a status) as plain-text
        answers with that status; anything else is a 500 saying what failed."""

        @wraps(endpoint)
        async def wrapped(request: Request) -> Response:
            if (problem := path_problem(request.scope["path"])) is not None:
                return text(400, problem)
            try:
                return await endpoint(request)
            except ProtocolError as exc:
                backend.refused(exc)
                return text(exc.status, exc.message, getattr(exc, "headers", None))
            except Exception as exc:
                status = backend.error_status(exc)
                if status is not None:
                    return text(status, str(exc))
                log.exception("%s %s failed", request.method, request.url.path)
                return text(500, f"internal error: {type(exc).__name__}: {exc}")

        return wrapped

    async def write(request: Request, repo: Any, build: Callable[[bytes], list[dict]],
                    deleting: GraphName | None = None) -> Response:
        """Auth first (nothing parsed), then, when ``deleting`` a named graph, whether it
        exists, then the operations ``build`` makes of the body, run as one
        transaction."""
        if (denied := await backend.write_denied(request)) is not None:
            return denied
        if deleting is not None and (
                missing := await backend.graph_missing(repo, deleting)) is not None:
            return missing
        await backend.write(repo, build(await request.body()))
        return Response(status_code=204)

    async def read(request: Request, op: Callable, *args: Any) -> Response:
        repo = backend.repository(request)
        if (denied := backend.read_denied(request)) is not None:
            return denied
        return await op(request, repo, *args)

    # ---- protocol, repository list ----

    async def protocol(request: Request) -> Response:
        return PlainTextResponse(PROTOCOL_VERSION)

    async def repositories(request: Request) -> Response:
        if (denied := backend.read_denied(request)) is not None:
            return denied
        neg = negotiate_tuple_format(request.headers.get("accept"))
        rows = repository_list_rows(str(request.url.replace(query=None)),
                                    backend.repositories())
        return Response(serialize_table(REPOSITORY_LIST_VARIABLES, rows, neg.format),
                        media_type=neg.content_type)

    # ---- reads, and the writes on the same paths ----

    async def query(request: Request) -> Response:
        # The hot path (point queries): ``read`` written out, one coroutine less.
        repo = backend.repository(request)
        if (denied := backend.read_denied(request)) is not None:
            return denied
        return await backend.query(request, repo)

    async def size(request: Request) -> Response:
        return await read(request, backend.size)

    async def contexts(request: Request) -> Response:
        return await read(request, backend.contexts)

    async def statements(request: Request) -> Response:
        if request.method in READS:
            return await read(request, backend.statements)
        repo = backend.repository(request)
        method, ctype = request.method, request.headers.get("content-type")

        def build(body: bytes) -> list[dict]:
            params = parse_params(request.scope.get("query_string", b""), body, ctype)
            return statements_write(method, params, body, ctype)

        return await write(request, repo, build)

    async def namespaces(request: Request) -> Response:
        if request.method in READS:
            return await read(request, backend.namespaces)
        repo = backend.repository(request)
        return await write(request, repo, lambda body: [clear_namespaces_operation()])

    async def namespace(request: Request) -> Response:
        prefix = request.path_params["prefix"]
        if request.method in READS:
            return await read(request, backend.namespace, prefix)
        repo = backend.repository(request)
        method, ctype = request.method, request.headers.get("content-type")
        return await write(request, repo,
                           lambda body: namespace_write(method, prefix, body, ctype))

    # ---- graph store protocol ----

    async def graph_write(request: Request, repo: Any, graph: GraphName) -> Response:
        method, ctype = request.method, request.headers.get("content-type")

        def build(body: bytes) -> list[dict]:
            return graph_store_write(method, graph, query_params(request), body, ctype)

        deleting = graph if method == "DELETE" and isinstance(graph, ox.NamedNode) else None
        return await write(request, repo, build, deleting)

    async def graph_service(request: Request) -> Response:
        if request.method in READS:
            return await read(request, lambda request, repo: backend.graph(
                request, repo, graph_store_target(query_params(request)), False))
        repo = backend.repository(request)
        return await graph_write(request, repo, graph_store_target(query_params(request)))

    async def graph_named(request: Request) -> Response:
        # Indirect identification: the graph IRI is the request URL itself.
        repo = backend.repository(request)
        graph = check_iri(str(request.url.replace(query=None)), "graph URL")
        if request.method in READS:
            if (denied := backend.read_denied(request)) is not None:
                return denied
            return await backend.graph(request, repo, graph, True)
        return await graph_write(request, repo, graph)

    # ---- transactions ----

    async def begin(request: Request) -> Response:
        backend.repository(request)
        if (denied := await backend.write_denied(request)) is not None:
            return denied
        txid = transactions.begin()
        location = transaction_location(str(request.url.replace(query=None)), txid)
        return Response(status_code=201, headers={"Location": location})

    async def transaction(request: Request) -> Response:
        repo = backend.repository(request)
        if (denied := await backend.write_denied(request)) is not None:
            return denied
        txid = request.path_params["txid"]
        if request.method == "DELETE":
            transactions.get(txid, rollback=True)
            await backend.transaction_ended(txid)
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
            return await backend.read_in_transaction(
                request, repo, txid, transactions.pending(tx), step.action, params, body,
                ctype)
        to_execute = transactions.record(tx, step)
        if tx.closed:
            await backend.transaction_ended(txid)
        if to_execute is not None:
            await backend.write(repo, to_execute)
        return Response(status_code=200)

    routes: list[Route] = [
        ("/protocol", protocol, ["GET"]),
        ("/repositories", repositories, ["GET"]),
        ("/repositories/{repo_id}", query, ["GET", "POST"]),
        ("/repositories/{repo_id}/statements", statements, ["GET", "POST", "PUT", "DELETE"]),
        ("/repositories/{repo_id}/size", size, ["GET"]),
        ("/repositories/{repo_id}/contexts", contexts, ["GET"]),
        ("/repositories/{repo_id}/namespaces", namespaces, ["GET", "DELETE"]),
        ("/repositories/{repo_id}/namespaces/{prefix}", namespace, ["GET", "PUT", "DELETE"]),
        ("/repositories/{repo_id}/rdf-graphs", contexts, ["GET"]),
        ("/repositories/{repo_id}/rdf-graphs/service", graph_service,
         ["GET", "PUT", "POST", "DELETE"]),
        ("/repositories/{repo_id}/rdf-graphs/{name}", graph_named,
         ["GET", "PUT", "POST", "DELETE"]),
        ("/repositories/{repo_id}/transactions", begin, ["POST"]),
        ("/repositories/{repo_id}/transactions/{txid}", transaction, ["PUT", "POST", "DELETE"]),
        *backend.extra_routes(),
    ]
    # The hot routes are declared with their own wrapped endpoints and methods from this
    # table: the route table stays one, and HotPaths serves them as the router would.
    for path, endpoint, methods in routes:
        wrapped = handler(endpoint)
        router.add_route(path, wrapped, methods=methods,
                         name=f"{backend.route_prefix}_{endpoint.__name__}")
        if hot is not None and path in HOT_ROUTES:
            hot.add(path, wrapped, methods)
    return router


REPOSITORY_PREFIX = "/repositories/"
REPOSITORY_ROUTE = "/repositories/{repo_id}"
# The RDF4J routes HotPaths serves: a repository's queries (point reads, on a master
# forwarded as they came) and its statements (SPARQL updates and RDF uploads).
HOT_ROUTES = frozenset({REPOSITORY_ROUTE, f"{REPOSITORY_ROUTE}/statements"})

HotEndpoints = dict[str, tuple[Endpoint, tuple[str, ...]]]


class HotRoutes:
    """The routes a node serves past the framework's routing (HotPaths): each declared
    where it is mounted (``rdf4j_routes`` for HOT_ROUTES; the calls between nodes in
    master_service/api/peer.py and worker_service/api/control.py), with the endpoint and
    methods the framework's route has, so both ways to it answer the same."""

    def __init__(self) -> None:
        # Suffix after a repository's id ("" or "/statements") -> (endpoint, methods).
        self.repository: HotEndpoints = {}
        # Whole path -> (endpoint, methods).
        self.exact: HotEndpoints = {}

    def add(self, path: str, endpoint: Endpoint, methods: list[str] | tuple[str, ...]) -> None:
        """Declare ``path`` (a route path: ``/repositories/{repo_id}...`` or a fixed one)
        hot for ``methods``, answered by ``endpoint``."""
        if path.startswith(REPOSITORY_ROUTE):
            self.repository[path[len(REPOSITORY_ROUTE):]] = (endpoint, tuple(methods))
        elif "{" in path:
            raise ValueError(f"a hot route is a repository's or a fixed path: {path}")
        else:
            self.exact[path] = (endpoint, tuple(methods))


class HotPaths:
    """ASGI middleware, the one dispatcher of the hot routes (HotRoutes): a repository's
    query endpoint (``/repositories/{id}``) and its statements straight to their endpoints
    in the route table, and the calls between nodes declared hot by their whole path,
    past the framework's routing; every other request to the application as before.

    Why: routing a request through FastAPI's router cost about 250 us of CPU on this
    machine, five times what pyoxigraph takes to answer a point SELECT. The endpoints are
    the ones the routers mount, with the route table's methods and the same path checks,
    error handling, negotiation and auth; other methods (HEAD, OPTIONS) and any other path
    take the framework's route as before.

    A node mounts it around its FastAPI application (master_service/app.py), so a hot
    request also skips the framework's own middleware (none of it acts on these routes:
    no body limit or telemetry is configured); an error an endpoint does not answer
    itself is answered by the framework's ServerErrorMiddleware all the same (a 500,
    raised on for the server to log)."""

    def __init__(self, app: Any, routes: HotRoutes) -> None:
        self.app = app
        self.endpoints = {suffix: (_hot_app(endpoint), methods)
                          for suffix, (endpoint, methods) in routes.repository.items()}
        self.exact = {path: (_hot_app(endpoint), methods)
                      for path, (endpoint, methods) in routes.exact.items()}

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and (hit := self.exact.get(scope["path"])) is not None \
                and scope["method"] in hit[1]:
            await hit[0](scope, receive, send)
            return
        if scope["type"] == "http" and scope["path"].startswith(REPOSITORY_PREFIX):
            repo_id, slash, rest = scope["path"][len(REPOSITORY_PREFIX):].partition("/")
            suffix = slash + rest  # "" or "/statements"; "/" (a trailing slash) is not hot
            hot, methods = self.endpoints.get(suffix, (None, ()))
            if hot is not None and repo_id and scope["method"] in methods:
                scope["path_params"] = {"repo_id": repo_id}
                await hot(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _hot_app(endpoint: Endpoint) -> Callable:
    """``endpoint`` as the ASGI app HotPaths calls: its answer sent, an error it does not
    answer itself answered by the framework's ServerErrorMiddleware."""
    async def app(scope: dict, receive: Callable, send: Callable) -> None:
        response = await endpoint(Request(scope, receive))
        await response(scope, receive, send)
    return ServerErrorMiddleware(app)


def answered(endpoint: Callable[[Request], Any]) -> Endpoint:
    """``endpoint`` (a FastAPI route's function) for HotRoutes.add: its refusal
    (HTTPException) answered as the framework's handler answers it, and a dict it returns
    as JSON (JSONResponse, written by orjson: jsonbody.JSONAnswer); HotPaths calls it past
    the framework's routing and error handling."""
    async def hot(request: Request) -> Response:
        try:
            result = await endpoint(request)
        except HTTPException as exc:
            return await http_exception_handler(request, exc)
        return result if isinstance(result, Response) else JSONAnswer(result)
    return hot
