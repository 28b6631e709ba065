"""Authentication on every channel (issue 9), on real processes.

* A worker takes cluster-control calls and writes only with its master's credential
  (txinfra.auth: HMAC over method, Host, target, time, nonce and body): missing, wrong,
  malformed, expired, retargeted, tampered and replayed credentials, and credentials
  signed for another node (a request captured on its way to one worker and replayed to
  another), are refused with 403 and a reason, logged, and change nothing.
* A master with a client-auth-file takes reads from read users and writes from write
  users only (HTTP basic auth): missing, wrong and read-role-writing are refused (401 /
  403), logged, and change nothing.
* Secrets (the cluster secret, client passwords, signatures) appear in no log, even at
  DEBUG, and in no URL or status document.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import socket
import time

import httpx
import pytest

from tests.clusters import LocalCluster
from tests.procs import lone_worker, make_secret, signed_client, worker_node
from txinfra.auth import (
    ACCEPTS_KEPT,
    SCHEME,
    WINDOW_S,
    NodeAuthorities,
    _signature,
    host_header,
    parse_advertised_hosts,
    sign,
    sign_for,
    url_authority,
)
from txinfra.signed_session import SignedSession

STATEMENTS = "/repositories/repo/statements"


def apply_body(seq: int, n: int) -> bytes:
    """A changeset adding one quad at ``seq``, as the master sends it."""
    added = f"<urn:sec:s{n}> <urn:sec:p> \"{n}\" .\n"
    return json.dumps({"entries": [{"seq": seq, "txid": f"t{seq}",
                                    "changeset": {"added": added}}]}).encode()


def header_at(secret: bytes, method: str, base: str, target: str, body: bytes, ts: int,
              nonce: str | None = None) -> str:
    """A credential signed correctly but at time ``ts`` (for expired / future ones)."""
    nonce = nonce or secrets.token_hex(12)
    return f"{SCHEME} ts={ts},nonce={nonce},sig=" \
           f"{_signature(secret, method, host_header(base), target, str(ts), nonce, body)}"


# ---- a worker: every channel refuses what its master did not sign ----


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    with lone_worker(tmp_path_factory.mktemp("security-worker"), **{"log-level": "DEBUG"}) as w:
        yield w


def worker_state(node) -> tuple[int, str, int]:
    st = httpx.get(f"{node.url}/health", timeout=10).json()
    return st["seq"], st["fingerprint"], st["quads"]


def _bad_credentials(secret: bytes, method: str, base: str, target: str,
                     body: bytes) -> dict[str, tuple]:
    """{case: (authorization header or None, the reason the worker must give)} for a
    request to ``base`` + ``target``."""
    now = int(time.time())
    other = b"another secret of the right length, 0123456789"
    url = base + target
    # The same port at another address: another node (its Host is what httpx sends).
    elsewhere = base.replace("127.0.0.1", "127.0.0.2")
    return {
        "missing": (None, "missing cluster credential"),
        "wrong scheme": ("Bearer abc", "wrong credential scheme"),
        "basic auth": ("Basic " + base64.b64encode(b"master:pw").decode(),
                       "wrong credential scheme"),
        "malformed": (f"{SCHEME} ts=1", "malformed cluster credential"),
        "non-numeric time": (f"{SCHEME} ts=x,nonce=n,sig=s", "malformed cluster credential"),
        "wrong secret": (sign(other, method, url, body), "wrong cluster credential"),
        "expired": (header_at(secret, method, base, target, body, now - WINDOW_S - 60),
                    "expired"),
        "from the future": (header_at(secret, method, base, target, body,
                                      now + WINDOW_S + 60), "expired"),
        "signed for another path": (sign(secret, method, base + "/cluster/verify", body),
                                    "wrong cluster credential"),
        "signed for another method": (sign(secret, "PATCH", url, body),
                                      "wrong cluster credential"),
        "signed for another body": (sign(secret, method, url, body + b" "),
                                    "wrong cluster credential"),
        "signed for another node": (sign(secret, method, elsewhere + target, body),
                                    "wrong cluster credential"),
        "signature of another request": (
            sign(secret, method, url, body).replace("sig=", "sig=0"),
            "wrong cluster credential"),
    }


@pytest.mark.parametrize(("method", "target", "ctype"), [
    ("POST", "/cluster/apply", "application/json"),
    ("POST", "/cluster/execute", "application/json"),
    ("GET", "/cluster/state", None),
    ("GET", "/cluster/journal?after=0", None),
    ("POST", "/cluster/restore", "application/json"),
    ("POST", STATEMENTS, "application/sparql-update"),
    ("PUT", STATEMENTS, "text/turtle"),
    ("DELETE", STATEMENTS, None),
])
@pytest.mark.processes
def test_worker_refuses_every_bad_credential_and_changes_nothing(worker, method, target,
                                                                  ctype):
    node, secret = worker
    seq = worker_state(node)[0]
    body = {
        "/cluster/apply": apply_body(seq + 1, seq + 1),
        "/cluster/execute": json.dumps({"start_seq": seq + 1, "transactions": [
            {"txid": "x", "operations": [{"type": "update",
                                          "update": "INSERT DATA { <urn:a> <urn:b> 1 }"}]}]
        }).encode(),
        "/cluster/restore": b'{"name": "nightly"}',
        STATEMENTS: b"INSERT DATA { <urn:sec:x> <urn:sec:y> 1 }" if method == "POST"
        else b"<urn:sec:x> <urn:sec:y> 1 ." if method == "PUT" else b"",
    }.get(target, b"")
    before = worker_state(node)
    log_before = len(node.log_path.read_bytes())
    cases = _bad_credentials(secret, method, node.url, target, body)
    for case, (header, reason) in cases.items():
        headers = {"authorization": header} if header else {}
        if ctype:
            headers["content-type"] = ctype
        r = httpx.request(method, node.url + target, content=body, headers=headers,
                          timeout=30)
        assert r.status_code == 403, (case, r.status_code, r.text)
        assert reason in r.text, (case, r.text)
        assert worker_state(node) == before, case
    # Every refusal is in the worker's log, with its reason.
    new_log = node.log_path.read_bytes()[log_before:].decode(errors="replace")
    path = target.partition("?")[0]  # the log names the path
    refusals = [line for line in new_log.splitlines()
                if f"refused {method} {path} " in line]
    assert len(refusals) == len(cases), new_log
    assert any("wrong cluster credential" in line for line in refusals)


@pytest.mark.processes
def test_worker_refuses_a_replayed_request(worker):
    """A captured, valid request (here an apply that did change the worker) cannot be
    sent again: not as it was, not within the time window, not to another path."""
    node, secret = worker
    seq = worker_state(node)[0]
    body = apply_body(seq + 1, 10_000 + seq)
    header = sign(secret, "POST", f"{node.url}/cluster/apply", body)
    headers = {"authorization": header, "content-type": "application/json"}
    r = httpx.post(f"{node.url}/cluster/apply", content=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    after_first = worker_state(node)
    assert after_first[0] == seq + 1
    r = httpx.post(f"{node.url}/cluster/apply", content=body, headers=headers, timeout=30)
    assert r.status_code == 403 and "replayed cluster credential" in r.text, r.text
    # The same nonce with a fresh signature for another request is no replay of this
    # one, but the captured signature cannot be moved onto another path or body.
    r = httpx.post(f"{node.url}/cluster/execute", content=body, headers=headers, timeout=30)
    assert r.status_code == 403 and "wrong cluster credential" in r.text, r.text
    assert worker_state(node) == after_first
    assert "replayed cluster credential" in node.log_tail(20_000)


@pytest.mark.processes
def test_both_signers_sign_the_host_and_the_path_the_worker_decodes(worker):
    """The master's signed session (txinfra.signed_session, aiohttp) and HmacAuth
    (httpx: tests, image pulls between workers) sign the Host they send and the path as
    the worker decodes it: a backup name with escapes passes the credential and is
    refused by the handler for what it is (400), not as a wrong credential (403)."""
    node, secret = worker
    path = "/cluster/backups/no%20such%25name"

    async def via_session() -> tuple[int, bytes]:
        session = SignedSession(secret, timeout=30)
        try:
            return await session.request("GET", node.url + path)
        finally:
            await session.close()

    status, body = asyncio.run(via_session())
    assert status == 400 and "'no such%name' is not a valid backup name" in body.decode()
    with signed_client(node, secret) as c:
        r = c.get(path)
    assert r.status_code == 400 and "'no such%name' is not a valid backup name" in r.text


@pytest.mark.processes
def test_worker_refuses_a_world_readable_secret_file(tmp_path):
    """Secrets are read from files of mode 600 only: the worker does not start."""
    secret_file, _ = make_secret(tmp_path / "secrets")
    secret_file.chmod(0o640)
    node = worker_node(tmp_path / "w", secret_file)
    with pytest.raises(RuntimeError, match="exited"):
        node.start(timeout=30)
    assert "accessible by group or others (mode 640); it must be 600" in node.log_tail()


# ---- a master with client authentication, and the secrets of the whole cluster ----

READER = ("reader", "read-pass-31a7")
WRITER = ("writer", "write:pass:8c2e")  # a password may hold colons


class AuthenticatedCluster(LocalCluster):
    """A LocalCluster whose status polls authenticate as the write user."""

    def status(self) -> dict:
        r = httpx.get(f"{self.master.url}/admin/status", timeout=10, auth=WRITER)
        r.raise_for_status()
        return r.json()

    def select(self, query: str, base: str | None = None, **headers: str) -> list[dict]:
        url = f"{base or self.master.url}/repositories/{self.repository_id}"
        r = httpx.get(url, params={"query": query}, timeout=30, auth=READER,
                      headers={"accept": "application/sparql-results+json", **headers})
        assert r.status_code == 200, r.text
        return [{k: v["value"] for k, v in b.items()} for b in r.json()["results"]["bindings"]]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("security-cluster")
    secret = make_secret(root / "secrets")
    users = root / "clients"
    users.write_text(f"{READER[0]}:{READER[1]}:read\n{WRITER[0]}:{WRITER[1]}:write\n")
    users.chmod(0o600)
    c = AuthenticatedCluster(root, secret, 2, **{"client-auth-file": str(users),
                                                 "log-level": "DEBUG"})
    for w in c.workers:  # DEBUG everywhere: not even debug output may hold a secret
        w.properties["log-level"] = "DEBUG"
    try:
        yield c.start()
    finally:
        c.stop_all()


@pytest.mark.processes
def test_client_auth_refuses_missing_wrong_and_read_role_writes(secured):
    c = secured
    repo = c.repo_url
    update = {"content": b"INSERT DATA { <urn:sec:c> <urn:sec:p> 1 }",
              "headers": {"content-type": "application/sparql-update"}}
    head = c.wait_in_sync()["head"]
    log_before = len(c.master.log_path.read_bytes())
    refused = [
        # (what, method, url, kwargs, status)
        ("query without credentials", "GET", repo, {"params": {"query": "ASK {}"}}, 401),
        ("write without credentials", "POST", f"{repo}/statements", update, 401),
        ("write with a wrong password", "POST", f"{repo}/statements",
         {**update, "auth": (WRITER[0], "nope")}, 401),
        ("write by an unknown user", "POST", f"{repo}/statements",
         {**update, "auth": ("mallory", WRITER[1])}, 401),
        ("write with a non-ASCII password", "POST", f"{repo}/statements",
         {**update, "auth": (WRITER[0], "pässwörd")}, 401),
        ("query with a non-ASCII password", "GET", repo,
         {"params": {"query": "ASK {}"}, "auth": (READER[0], "ünïcode")}, 401),
        ("malformed basic token", "POST", f"{repo}/statements",
         {**update, "headers": {**update["headers"], "authorization": "Basic %%%"}}, 401),
        ("the cluster credential is no client credential", "POST", f"{repo}/statements",
         {**update, "headers": {**update["headers"],
                                "authorization": sign(c.secret, "POST", f"{c.master.url}/x",
                                                      b"")}}, 401),
        ("write by a read user", "POST", f"{repo}/statements", {**update, "auth": READER},
         403),
        ("transaction begun by a read user", "POST", f"{repo}/transactions",
         {"auth": READER}, 403),
        ("graph store write by a read user", "PUT", f"{repo}/rdf-graphs/service",
         {"params": {"graph": "urn:sec:g"}, "content": b"<urn:a> <urn:b> 1 .",
          "headers": {"content-type": "text/turtle"}, "auth": READER}, 403),
        ("admin status without credentials", "GET", f"{c.master.url}/admin/status", {}, 401),
        ("admin change by a read user", "PUT", f"{c.master.url}/admin/mode",
         {"json": {"read_only": True}, "auth": READER}, 403),
        ("worker removal by a read user", "DELETE", f"{c.master.url}/admin/workers",
         {"params": {"url": c.workers[0].url}, "auth": READER}, 403),
    ]
    for what, method, url, kwargs, status in refused:
        r = httpx.request(method, url, timeout=30, **kwargs)
        assert r.status_code == status, (what, r.status_code, r.text)
        assert r.text.strip(), what
        if status == 401:
            assert r.headers.get("www-authenticate", "").startswith("Basic"), what
    # Nothing changed: the log's head, every worker, the mode.
    status = c.wait_in_sync()
    assert status["head"] == head and not status["read_only"]
    assert len(status["workers"]) == 2
    log = c.master.log_path.read_bytes()[log_before:].decode(errors="replace")
    assert log.count("refused ") >= len(refused) - 1, log  # openapi-level 401s included
    assert "may only read" in log and "wrong or missing user/password" in log
    # The right roles get through.
    r = httpx.get(repo, params={"query": "ASK {}"}, auth=READER, timeout=30,
                  headers={"accept": "application/sparql-results+json"})
    assert r.status_code == 200, r.text
    r = httpx.post(f"{repo}/statements", auth=WRITER, timeout=30, **update)
    assert r.status_code == 204, r.text
    assert c.wait_in_sync()["head"]["seq"] == head["seq"] + 1


@pytest.mark.processes
def test_secrets_are_never_logged_nor_in_urls_or_status(secured):
    c = secured
    # Traffic on every channel: writes (probe + forwards), reads, a backup, status.
    for i in range(5):
        r = httpx.post(f"{c.repo_url}/statements", auth=WRITER, timeout=30,
                       content=f"INSERT DATA {{ <urn:sec:l{i}> <urn:sec:p> {i} }}".encode(),
                       headers={"content-type": "application/sparql-update"})
        assert r.status_code == 204, r.text
    assert c.select("SELECT * { ?s <urn:sec:p> ?o }")
    r = httpx.post(f"{c.master.url}/admin/backup", json={"name": "sec"}, auth=WRITER,
                   timeout=60)
    assert r.status_code == 200, r.text
    status = c.wait_in_sync()
    documents = {
        "status": json.dumps(status),
        "openapi": httpx.get(f"{c.master.url}/openapi.json", timeout=10).text,
        **{f"health {w.url}": httpx.get(f"{w.url}/health", timeout=10).text
           for w in c.workers},
        **{f"log {n.kind} {n.url}": n.log_path.read_text(errors="replace")
           for n in [c.master, *c.workers]},
    }
    assert any("refused" in text for name, text in documents.items() if "log" in name)
    forbidden = {"cluster secret": c.secret.decode(), "reader password": READER[1],
                 "writer password": WRITER[1], "a signature": f"{SCHEME} ts=",
                 "a basic token": base64.b64encode(f"{WRITER[0]}:{WRITER[1]}".encode())
                 .decode()}
    for name, text in documents.items():
        for what, secret in forbidden.items():
            assert secret not in text, f"{what} found in {name}"
    # URLs the master uses and shows hold no credential.
    for w in status["workers"]:
        assert "@" not in w["url"] and c.secret.decode() not in w["url"]


# ---- the credential names the node it is for (the Host it was sent to) ----


@pytest.mark.processes
def test_a_request_for_one_worker_cannot_be_replayed_to_another(tmp_path):
    """Each worker keeps its own nonce cache, so the credential signs the Host: a request
    captured on its way to worker A and sent to worker B within the time window is
    refused by B, whether sent as captured (B's Host is not the one signed) or with A's
    Host header kept (authentic, but not for B); B changes nothing."""
    secret_file, secret = make_secret(tmp_path / "secrets")
    a = worker_node(tmp_path / "a", secret_file).start()
    b = worker_node(tmp_path / "b", secret_file).start()
    try:
        body = apply_body(1, 1)
        headers = {"authorization": sign(secret, "POST", f"{a.url}/cluster/apply", body),
                   "content-type": "application/json"}
        assert httpx.post(f"{a.url}/cluster/apply", content=body, headers=headers,
                          timeout=30).status_code == 200
        before = worker_state(b)
        log_before = len(b.log_path.read_bytes())
        r = httpx.post(f"{b.url}/cluster/apply", content=body, headers=headers, timeout=30)
        assert r.status_code == 403 and "wrong cluster credential" in r.text, r.text
        r = httpx.post(f"{b.url}/cluster/apply", content=body, timeout=30,
                       headers={**headers, "host": host_header(a.url)})
        assert r.status_code == 403, r.text
        assert f"cluster credential for another node: Host '{host_header(a.url)}' is not " \
               f"this node (port {b.port} at 127.0.0.1, localhost" in r.text, r.text
        assert worker_state(b) == before and before[0] == 0
        log = b.log_path.read_bytes()[log_before:].decode(errors="replace")
        assert log.count("refused POST /cluster/apply") == 2, log
        assert "for another node" in log
        # B still takes what is signed for it.
        with signed_client(b, secret) as c:
            assert c.post("/cluster/apply", json=json.loads(body)).status_code == 200
        assert worker_state(b)[0] == 1
    finally:
        a.stop()
        b.stop()


def _local_non_loopback_address() -> str | None:
    """An address of this machine's other than loopback (the one a route out uses), if
    there is one; a UDP connect sends nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") else address


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.processes
def test_a_worker_on_a_wildcard_takes_its_addresses_names_and_advertised_hosts_only(
        tmp_path):
    """listen-address 0.0.0.0 (what the Ansible role configures): every local address,
    localhost and the host name at the listening port, and advertised-hosts (a name the
    worker cannot see itself, a port mapping) are its own; any other Host is refused
    with the reason, logged, and changes nothing."""
    secret_file, secret = make_secret(tmp_path / "secrets")
    node = worker_node(tmp_path / "w", secret_file,
                       **{"advertised-hosts": "worker.example:8443, Alias.example"})
    node.properties["listen-address"] = f"0.0.0.0:{node.port}"  # reached at 127.0.0.1
    node.start()
    port = node.port
    own = [f"127.0.0.1:{port}", f"LOCALHOST:{port}", f"{socket.gethostname()}:{port}",
           "worker.example:8443", f"alias.example:{port}"]
    if (address := _local_non_loopback_address()) is not None:
        own.append(f"{address}:{port}")
    if _ipv6_loopback():
        own.append(f"[::1]:{port}")
    others = [f"127.0.0.1:{port + 1}", f"192.0.2.1:{port}", f"0.0.0.0:{port}",
              f"worker.example:{port}", "alias.example:8443", f"elsewhere.example:{port}",
              "localhost", "worker.example", f"[2001:db8::1]:{port}"]
    try:
        for host in own:
            r = httpx.get(f"{node.url}/cluster/state", timeout=30, headers={
                "host": host, "authorization": sign_for(secret, "GET", host, "/cluster/state")})
            assert r.status_code == 200, (host, r.text)
        before = worker_state(node)
        log_before = len(node.log_path.read_bytes())
        body = apply_body(before[0] + 1, 77)
        for host in others:
            r = httpx.post(f"{node.url}/cluster/apply", content=body, timeout=30, headers={
                "host": host, "content-type": "application/json",
                "authorization": sign_for(secret, "POST", host, "/cluster/apply", body)})
            assert r.status_code == 403, (host, r.text)
            assert f"cluster credential for another node: Host '{host}'" in r.text, r.text
            assert f"port {port} at any address of this machine" in r.text, r.text
            assert "advertised: alias.example:" in r.text and "advertised-hosts" in r.text
        assert worker_state(node) == before
        log = node.log_path.read_bytes()[log_before:].decode(errors="replace")
        assert log.count("for another node") == len(others), log
    finally:
        node.stop()


def test_a_nonce_is_remembered_exactly_while_its_timestamp_is_accepted(monkeypatch):
    """The replay cache keeps a nonce until its timestamp stops being accepted (ts +
    window), not longer: a replay before that is refused as a replay, after it as
    expired, and the cache then forgets the nonce. A sender whose clock is a whole window
    ahead is still covered."""
    from txinfra import auth

    clock = [1_000_000.0]
    monkeypatch.setattr(auth.time, "time", lambda: clock[0])
    secret = secrets.token_bytes(32)
    verifier = auth.Verifier(secret, NodeAuthorities("127.0.0.1", 7200))

    def header(ts: int, nonce: str) -> str:
        sig = _signature(secret, "GET", "127.0.0.1:7200", "/x", str(ts), nonce, b"")
        return f"{SCHEME} ts={ts},nonce={nonce},sig={sig}"

    def check(h: str) -> str | None:
        return verifier.check(h, "GET", "127.0.0.1:7200", "/x", b"")

    now = int(clock[0])
    on_time, ahead = header(now, "a" * 24), header(now + WINDOW_S, "b" * 24)
    assert check(on_time) is None and check(ahead) is None
    clock[0] = now + WINDOW_S - 1
    assert check(on_time) == "replayed cluster credential"
    clock[0] = now + WINDOW_S + 1
    assert check(on_time) == "cluster credential expired (clock skew or replay)"
    clock[0] = now + 2 * WINDOW_S - 1
    assert check(ahead) == "replayed cluster credential"
    assert check(header(int(clock[0]), "c" * 24)) is None
    assert verifier.remembered == 2  # a's entry is gone; b's is kept until now + 2 windows
    clock[0] = now + 2 * WINDOW_S + 1
    assert check(header(int(clock[0]), "d" * 24)) is None
    assert verifier.remembered == 2  # c and d
    clock[0] = now + 100 * WINDOW_S  # a clock jump: everything before it is forgotten
    late = header(int(clock[0]), "e" * 24)
    assert check(late) is None and check(late) == "replayed cluster credential"
    assert verifier.remembered == 1
    odd = header(int(clock[0]), "not-hex")  # another sender's nonce, kept as it is
    assert check(odd) is None and check(odd) == "replayed cluster credential"


def test_which_host_headers_a_node_takes():
    """NodeAuthorities without processes: bound to one address, a name, a wildcard;
    advertised entries with and without a port; a Host without a port (80 or 443)."""
    loopback = NodeAuthorities("127.0.0.1", 7200)
    assert loopback.accepts("127.0.0.1:7200") and loopback.accepts("localhost:7200")
    assert loopback.accepts("LocalHost:7200")  # host names are case-insensitive
    assert not loopback.accepts("127.0.0.1:7201")
    assert not loopback.accepts("127.0.0.2:7200")  # local, but not what it is bound to
    assert not loopback.accepts(f"{socket.gethostname()}:7200")  # bound to loopback only
    for bad in (None, "", ":7200", "127.0.0.1:x", "a b:7200", "user@127.0.0.1:7200",
                "127.0.0.1:7200/path"):
        assert not loopback.accepts(bad), bad
    # A service IP in a network namespace: that address only (tests/netlab.py).
    service = NodeAuthorities("10.214.3.17", 7200)
    assert service.accepts("10.214.3.17:7200") and not service.accepts("localhost:7200")
    assert not service.accepts("10.214.3.18:7200")
    # A master: its master-url (default port made explicit) and advertised names.
    master = NodeAuthorities("10.0.0.5", 8080, [url_authority("https://m1.example"),
                                                "m1-alias.example", "[2001:db8::5]:9443"])
    assert master.accepts("m1.example") and master.accepts("m1.example:443")
    assert not master.accepts("m1.example:8080")
    assert master.accepts("m1-alias.example:8080")  # no port: the listening port
    assert master.accepts("[2001:db8::5]:9443") and not master.accepts("[2001:db8::5]:8080")
    assert "advertised: [2001:db8::5]:9443, m1-alias.example:8080, m1.example:443" in \
        master.describe()
    # On port 443 a Host without a port is the node's own.
    assert NodeAuthorities("localhost", 443).accepts("localhost")
    # A wildcard: local addresses (asked at request time), not others.
    wildcard = NodeAuthorities("0.0.0.0", 7200)
    assert wildcard.accepts("127.0.0.1:7200") and wildcard.accepts("127.0.0.53:7200")
    assert wildcard.accepts(f"{socket.gethostname()}:7200")
    assert not wildcard.accepts("192.0.2.1:7200") and not wildcard.accepts("0.0.0.0:7200")


def test_a_node_keeps_its_answers_for_host_headers_a_while():
    """Every signed request asks whose Host it is (a wildcard node binds a socket to an
    address to tell): the answers are kept a while, are those given without keeping
    them, and are bounded in number whatever Host headers arrive."""
    hosts = ["127.0.0.1:7200", "127.0.0.53:7200", "192.0.2.1:7200", "0.0.0.0:7200",
             f"{socket.gethostname()}:7200", "localhost:7201", None, "", "a b:7200"]
    for bind in ("0.0.0.0", "127.0.0.1"):
        kept, fresh = NodeAuthorities(bind, 7200), NodeAuthorities(bind, 7200, remember_s=0)
        for _ in range(2):  # the second time from what was kept
            assert [kept.accepts(h) for h in hosts] == [fresh.accepts(h) for h in hosts]
        assert kept.remembered == len(hosts) and fresh.remembered == 0
    node = NodeAuthorities("0.0.0.0", 7200)
    for i in range(3 * ACCEPTS_KEPT):  # requests signed for other nodes
        assert not node.accepts(f"192.0.2.{i % 250}:{7300 + i}")
        assert node.remembered <= ACCEPTS_KEPT
    assert node.accepts("127.0.0.1:7200")


def test_advertised_hosts_and_sign_refuse_what_they_cannot_use():
    assert parse_advertised_hosts(" a.example , b.example:8443,[::1]:7200 ") == (
        "a.example", "b.example:8443", "[::1]:7200")
    for bad in ("", " , ", "http://a.example", "a.example:port", "a.example/x",
                "a.example:99999"):
        with pytest.raises(ValueError):
            parse_advertised_hosts(bad)
    # The receiving node is part of the signature: a bare path is a programming error.
    with pytest.raises(ValueError, match="absolute http"):
        sign(b"s" * 32, "GET", "/cluster/state")
