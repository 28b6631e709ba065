"""rdf4j_protocol.routes: the one route table, over a recording backend (no store, no
cluster): which backend operation each request reaches, in which order the checks run,
and how errors are answered."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

with warnings.catch_warnings():  # Starlette asks for httpx2; httpx is what we have
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from rdf4j_protocol.routes import Backend, HotPaths, HotRoutes, rdf4j_routes, text
from rdf4j_protocol.transactions import TransactionRegistry

R = "/repositories/repo"


class Refused(Exception):
    status = 409


class Recording(Backend):
    """Answers every read with the operation's name; records writes."""

    log = logging.getLogger("test.routes")
    route_prefix = "test"

    def __init__(self, writer: bool = True) -> None:
        self.writer = writer
        self.written: list[list[dict]] = []
        self.ended: list[str] = []

    def repository(self, request: Request) -> Any:
        if request.path_params["repo_id"] != "repo":
            from rdf4j_protocol.parameters import ProtocolError
            raise ProtocolError(404, f"unknown repository '{request.path_params['repo_id']}'")
        return "the repo"

    def repositories(self) -> list[tuple[str, str, bool, bool]]:
        return [("repo", "a test repository", True, self.writer)]

    async def write_denied(self, request: Request) -> Response | None:
        return None if self.writer else text(403, "no writes here")

    def error_status(self, exc: Exception) -> int | None:
        return exc.status if isinstance(exc, Refused) else None

    async def _read(self, name: str, *args: Any) -> Response:
        return PlainTextResponse(" ".join([name, *map(str, args)]))

    async def query(self, request, repo):
        return await self._read("query")

    async def statements(self, request, repo):
        return await self._read("statements")

    async def size(self, request, repo):
        return await self._read("size")

    async def contexts(self, request, repo):
        return await self._read("contexts")

    async def namespaces(self, request, repo):
        return await self._read("namespaces")

    async def namespace(self, request, repo, prefix):
        return await self._read("namespace", prefix)

    async def graph(self, request, repo, graph, named_by_url):
        return await self._read("graph", graph, named_by_url)

    async def write(self, repo, operations):
        if operations and operations[0].get("prefix") == "boom":
            raise Refused("refused by the backend")
        self.written.append(operations)

    async def read_in_transaction(self, request, repo, txid, operations, action, params,
                                  body, content_type):
        return await self._read("tx-read", action, len(operations))

    async def transaction_ended(self, txid):
        self.ended.append(txid)


def client(backend: Backend, hot: bool = True) -> TestClient:
    """The route table as both node kinds mount it: with its hot paths (``hot``)."""
    app = FastAPI()
    routes = HotRoutes()
    app.include_router(rdf4j_routes(backend, TransactionRegistry(), routes))
    if hot:
        app.add_middleware(HotPaths, routes=routes)
    return TestClient(app)


@pytest.mark.parametrize("path,answer", [
    (R, "query"), (f"{R}/statements", "statements"), (f"{R}/size", "size"),
    (f"{R}/contexts", "contexts"), (f"{R}/rdf-graphs", "contexts"),
    (f"{R}/namespaces", "namespaces"), (f"{R}/namespaces/ex", "namespace ex"),
    (f"{R}/rdf-graphs/service?default", "graph DEFAULT False"),
])
def test_reads_reach_the_backend(path, answer):
    c = client(Recording())
    assert c.get(path).text == answer
    assert c.head(path).status_code == 200  # HEAD is a read too, never a write


def test_a_graph_named_by_its_url():
    r = client(Recording()).get(f"{R}/rdf-graphs/g1")
    assert r.text == "graph <http://testserver/repositories/repo/rdf-graphs/g1> True"


def test_writes_become_operations_and_a_204():
    b = Recording()
    c = client(b)
    r = c.post(f"{R}/statements", content=b"<http://e/s> <http://e/p> <http://e/o> .",
               headers={"content-type": "application/n-triples"})
    assert r.status_code == 204, r.text
    assert c.put(f"{R}/namespaces/ex", content=b"http://e/").status_code == 204
    assert c.delete(f"{R}/namespaces").status_code == 204
    assert [ops[0]["type"] for ops in b.written] == ["add", "namespace", "clear_namespaces"]


def test_a_write_is_refused_before_its_body_is_parsed():
    c = client(Recording(writer=False))
    r = c.post(f"{R}/statements", content=b"not RDF", headers={"content-type": "text/x-no"})
    assert (r.status_code, r.text) == (403, "no writes here")


def test_errors_are_plain_text_with_their_status():
    c = client(Recording())
    assert (c.get("/repositories/other").status_code,
            c.get("/repositories/other").text) == (404, "unknown repository 'other'")
    r = c.post(f"{R}/statements", content=b"x", headers={"content-type": "text/x-no"})
    assert r.status_code == 415 and r.headers["content-type"].startswith("text/plain")
    r = c.put(f"{R}/namespaces/boom", content=b"http://e/")
    assert (r.status_code, r.text) == (409, "refused by the backend")
    assert c.get(f"{R}%0A/size").status_code == 400


def test_a_transaction_with_a_read_and_a_commit():
    b = Recording()
    c = client(b)
    r = c.post(f"{R}/transactions")
    assert r.status_code == 201
    tx = r.headers["location"].removeprefix("http://testserver")
    r = c.put(f"{tx}?action=ADD", content=b"<http://e/s> <http://e/p> <http://e/o> .",
              headers={"content-type": "application/n-triples"})
    assert r.status_code == 200
    assert c.put(f"{tx}?action=SIZE").text == "tx-read SIZE 1"
    assert c.put(f"{tx}?action=COMMIT").status_code == 200
    assert [op["type"] for op in b.written[0]] == ["add"]
    assert b.ended == [tx.rsplit("/", 1)[1]]
    assert c.put(f"{tx}?action=PING").status_code == 404  # forgotten once committed


@pytest.mark.parametrize("method,path", [
    ("GET", R), ("POST", R), ("GET", f"{R}?query=ASK{{}}"), ("HEAD", R), ("OPTIONS", R),
    ("GET", f"{R}/"), ("GET", "/repositories/other"), ("GET", "/repositories/"),
    ("GET", f"{R}/statements"), ("POST", f"{R}/statements"), ("DELETE", f"{R}/statements"),
    ("PUT", f"{R}/statements"), ("GET", f"{R}/statements/"), ("GET", f"{R}%0A"),
    ("GET", f"{R}%0A/statements"), ("GET", f"{R}/size"), ("PATCH", f"{R}/statements"),
])
def test_the_hot_paths_answer_as_the_route_table(method, path):
    """HotPaths only skips the framework's routing: status, body and content type are
    the routed request's, for the hot paths and for what must not be taken as one."""
    headers = {"content-type": "application/n-triples"}
    body = b"<http://e/s> <http://e/p> <http://e/o> ." if method in ("POST", "PUT") else None
    answers = []
    for hot in (True, False):
        r = client(Recording(), hot=hot).request(method, path, content=body, headers=headers,
                                                follow_redirects=False)
        answers.append((r.status_code, r.text, r.headers.get("content-type")))
    assert answers[0] == answers[1]


def test_the_hot_paths_skip_the_router():
    app = FastAPI()
    routes = HotRoutes()
    app.include_router(rdf4j_routes(Recording(), TransactionRegistry(), routes))
    routed: list[str] = []

    @app.middleware("http")
    async def count(request, call_next):  # runs only for what reaches the router's side
        routed.append(request.url.path)
        return await call_next(request)

    app.add_middleware(HotPaths, routes=routes)
    c = TestClient(app)
    assert c.get(R).text == "query" and c.get(f"{R}/statements").text == "statements"
    assert c.get(f"{R}/size").text == "size"
    assert routed == [f"{R}/size"]
