"""The peer API's statuses and tail segments past the framework's routing (routes.HotPaths
with master_service/api/peer.py's hot endpoints): every answer, refusals included, is
the one the route table gives, and the hot ones never reach the router. A payload's fetch
takes the credential its sender signed whatever the transaction id holds.

The driver here only raises what a real one raises for a message (the whole protocol
behind these routes is tests/test_sync_peering.py's, on real masters)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from master_service.api.peer import peer_router
from master_service.errors import NotWritable
from master_service.sync.messages import InvalidMessage
from master_service.sync.ready import UnknownPeer
from rdf4j_protocol.routes import HotPaths, HotRoutes
from txinfra.auth import NodeAuthorities, Verifier, sign

SECRET = b"s" * 32
BASE = "http://testserver"


class Driver:
    """Takes a message, or refuses it as SyncDriver does, by the body's "do"."""

    def __init__(self) -> None:
        self.taken: list[Any] = []

    def _take(self, body: Any) -> None:
        do = body.get("do") if isinstance(body, dict) else None
        if do == "invalid":
            raise InvalidMessage("status lacks the field 'queue'")
        if do == "stranger":
            raise UnknownPeer("'m9' is not a configured peer of m1")
        if do == "stopped":
            raise NotWritable("peering stopped: disk full")
        self.taken.append(body)

    receive_status = receive_tail = _take

    def payload(self, txid: str, peer: str) -> bytes | None:
        return json.dumps([{"txid": txid, "asked by": peer}]).encode()


def app(hot: bool, driver: Driver | None, routed: list[str]) -> FastAPI:
    a = FastAPI()
    routes = HotRoutes()
    a.include_router(peer_router(lambda: driver,
                                 Verifier(SECRET, NodeAuthorities("testserver", 80)), routes))

    @a.middleware("http")
    async def count(request, call_next):  # added first: inside HotPaths, before the router
        routed.append(request.url.path)
        return await call_next(request)

    if hot:
        a.add_middleware(HotPaths, routes=routes)
    return a


def signed(path: str, body: bytes, secret: bytes = SECRET) -> dict[str, str]:
    return {"authorization": sign(secret, "POST", BASE + path, body),
            "content-type": "application/json"}


CASES = {
    "taken": (b'{"status": {}}', SECRET, "present"),
    "unsigned": (b'{"status": {}}', None, "present"),
    "another secret": (b'{"status": {}}', b"x" * 32, "present"),
    "not JSON": (b"{nope", SECRET, "present"),
    "invalid message": (b'{"do": "invalid"}', SECRET, "present"),
    "unknown peer": (b'{"do": "stranger"}', SECRET, "present"),
    "peering stopped": (b'{"do": "stopped"}', SECRET, "present"),
    "no peers configured": (b'{"status": {}}', SECRET, None),
}


@pytest.mark.parametrize("path", ["/peer/status", "/peer/tail"])
@pytest.mark.parametrize("case", list(CASES))
def test_peer_messages_answer_as_the_route_table(path, case):
    body, secret, present = CASES[case]
    answers = []
    for hot in (True, False):
        routed: list[str] = []
        driver = Driver() if present else None
        with TestClient(app(hot, driver, routed), base_url=BASE) as c:
            headers = signed(path, body, secret) if secret else {
                "content-type": "application/json"}
            r = c.post(path, content=body, headers=headers)
        answers.append((r.status_code, r.text, r.headers.get("content-type"),
                        driver.taken if driver else None))
        assert routed == ([] if hot else [path])
    assert answers[0] == answers[1]
    status, text = answers[0][:2]
    expected = {"taken": 204, "unsigned": 403, "another secret": 403, "not JSON": 400,
                "invalid message": 400, "unknown peer": 403, "peering stopped": 503,
                "no peers configured": 404}[case]
    assert status == expected, text
    if status != 204:
        assert json.loads(text)["detail"], text  # says what is wrong
    assert answers[0][3] == ([json.loads(body)] if case == "taken" else [] if present else None)


@pytest.mark.parametrize("method,path", [("GET", "/peer/status"), ("POST", "/peer/status/"),
                                         ("PUT", "/peer/tail"), ("POST", "/peer")])
def test_what_is_not_a_peer_message_takes_the_route_table(method, path):
    answers = []
    for hot in (True, False):
        routed: list[str] = []
        with TestClient(app(hot, Driver(), routed), base_url=BASE) as c:
            r = c.request(method, path, content=b"{}", follow_redirects=False)
        answers.append((r.status_code, r.text, r.headers.get("content-type")))
        assert routed == [path]
    assert answers[0] == answers[1]
    assert answers[0][0] in (404, 405, 307)


# Not an id holding "%": Starlette's TestClient decodes the path twice (uvicorn once).
@pytest.mark.parametrize("txid", ["plain", "a?b", "a#b", "a\\b", "é?"])
def test_a_payload_is_fetched_whatever_its_id_holds(txid):
    """A transaction id is any string (messages.py): its fetch quotes it in the path, and
    the credential signs the path as decoded (auth.signed_target). The receiver checks it
    against the same (the ASGI path): a '?', '#' or '\\' in the id was refused as a wrong
    credential while the check read Starlette's request.url, which escapes them again."""
    path = f"/peer/transactions/{quote(txid, safe='')}?peer=m2"
    with TestClient(app(True, Driver(), []), base_url=BASE) as c:
        r = c.get(path, headers={"authorization": sign(SECRET, "GET", BASE + path)})
        assert r.status_code == 200, r.text
        assert r.json() == [{"txid": txid, "asked by": "m2"}]
        other = f"/peer/transactions/{quote(txid + 'x', safe='')}?peer=m2"
        r = c.get(path, headers={"authorization": sign(SECRET, "GET", BASE + other)})
        assert r.status_code == 403 and "credential" in r.text, r.text
