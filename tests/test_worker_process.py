"""A real worker process: crash safety under kill -9, images between processes, refusals."""

from __future__ import annotations

import hashlib
import socket
import threading
import time

import httpx
import pyoxigraph as ox
import pytest

from rdfcore import fingerprint
from rdfcore.changeset import Changeset
from tests.procs import free_port, signed_client
from tests.worker_calls import apply_body, batch, settled

EX = "http://example.org/"


def test_kill9_during_large_apply_leaves_a_consistent_state(worker_factory, secret):
    """kill -9 at several instants of a large apply: after restart, store, seq and
    fingerprint agree and the changeset is fully applied or not at all."""
    base = batch(0, 1000)
    big = Changeset(removed=base.added, added=batch(10_000, 60_000, "g").added)
    fp1 = base.moved_fingerprint(0)
    fp2 = big.moved_fingerprint(fp1)
    body = apply_body(2, big, fp2)
    w = worker_factory("w")
    with signed_client(w, secret[1]) as c:
        c.post("/cluster/apply", json=apply_body(1, base, fp1)).raise_for_status()
        started = time.monotonic()
        c.post("/cluster/apply", json=body).raise_for_status()
        full = time.monotonic() - started
    outcomes = set()
    # Each round: a fresh worker at seq 1, the large apply, kill -9 at a fraction of the
    # time a full apply took, restart.
    for i, fraction in enumerate((0.02, 0.3, 0.6, 0.9)):
        node = worker_factory(f"k{i}")
        with signed_client(node, secret[1]) as c:
            c.post("/cluster/apply", json=apply_body(1, base, fp1)).raise_for_status()

            def send(client=c):
                try:
                    client.post("/cluster/apply", json=body)
                except httpx.HTTPError:
                    pass  # the process is killed under it

            t = threading.Thread(target=send)
            t.start()
            time.sleep(full * fraction)
            node.kill9()
            t.join()
        node.start()
        with signed_client(node, secret[1]) as c:
            st = c.get("/cluster/state").json()
            check = c.post("/cluster/verify").json()
        assert check["matches"], check
        assert st["seq"] in (1, 2)
        assert st["fingerprint"] == fingerprint.to_hex(fp1 if st["seq"] == 1 else fp2)
        assert st["quads"] == (1000 if st["seq"] == 1 else 60_000)
        outcomes.add(st["seq"])
    print("outcomes (seq after restart):", sorted(outcomes))


def test_image_between_two_worker_processes(worker_factory, secret):
    src, dst = worker_factory("src"), worker_factory("dst")
    with signed_client(src, secret[1]) as c:
        c.post("/cluster/apply", json=apply_body(1, batch(0, 5000, "g"))).raise_for_status()
        c.post("/cluster/apply", json=apply_body(2, batch(5000, 5000))).raise_for_status()
        want = c.get("/cluster/state").json()
    with signed_client(dst, secret[1]) as c:
        c.post("/cluster/apply", json=apply_body(1, batch(90_000, 10))).raise_for_status()
        r = c.post("/cluster/image/pull", json={"source": f"{src.url}/cluster/image"})
        assert r.status_code == 200, r.text
        got = c.get("/cluster/state").json()
        assert c.post("/cluster/verify").json()["matches"]
    assert (got["seq"], got["fingerprint"], got["quads"]) == \
        (want["seq"], want["fingerprint"], want["quads"])
    # survives a restart of the receiver
    dst.stop()
    dst.start()
    with signed_client(dst, secret[1]) as c:
        assert c.get("/cluster/state").json()["fingerprint"] == want["fingerprint"]


def test_receivers_that_ask_at_once_share_one_image(worker_factory, secret):
    """Workers that pull a source's image while another receiver reads it get that same
    image (one packing of the store, streamed to each; its SHA-256 asked for at the
    location the answer names); a request once nobody reads it makes a new one; no image
    file is left behind; an unknown image's checksum is a 404."""
    src = worker_factory("src")
    dsts = [worker_factory("d1"), worker_factory("d2")]
    with signed_client(src, secret[1]) as c:
        c.post("/cluster/apply", json=apply_body(1, batch(0, 60_000, "g"))).raise_for_status()
        want = c.get("/cluster/state").json()
    answers: list = []

    def pull(node) -> None:
        with signed_client(node, secret[1]) as c:
            answers.append(c.post("/cluster/image/pull", timeout=120,
                                  json={"source": f"{src.url}/cluster/image"}))

    with signed_client(src, secret[1]) as c, c.stream("GET", "/cluster/image") as first:
        # A receiver that has the answer's head and reads nothing yet: the image is
        # read until it ends, whether its writing has finished or not.
        assert first.status_code == 200
        threads = [threading.Thread(target=pull, args=(d,)) for d in dsts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        body = first.read()
        location = first.headers["x-image-sha256-location"]
        sha = c.get(f"/cluster/{location}")
        assert sha.status_code == 200, sha.text
        assert sha.text == hashlib.sha256(body).hexdigest()
    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    for d in dsts:
        with signed_client(d, secret[1]) as c:
            got = c.get("/cluster/state").json()
            assert c.post("/cluster/verify").json()["matches"]
        assert (got["seq"], got["fingerprint"], got["quads"]) == \
            (want["seq"], want["fingerprint"], want["quads"])
    written = [line for line in src.log_path.read_text().splitlines()
               if "written while read" in line]
    assert len(written) == 1, written
    with signed_client(src, secret[1]) as c:
        r = c.get("/cluster/image")
        assert r.status_code == 200
        assert (r.headers["x-image-seq"], r.headers["x-image-fingerprint"]) == \
            (str(want["seq"]), want["fingerprint"])
        again = c.get(f"/cluster/{r.headers['x-image-sha256-location']}")
        assert again.status_code == 200, again.text
        assert again.text == hashlib.sha256(r.content).hexdigest()
        assert int(again.headers["x-image-bytes"]) == len(r.content)
        missing = c.get("/cluster/image/0123abcd/sha256")
        assert missing.status_code == 404 and "0123abcd" in missing.text
    written = [line for line in src.log_path.read_text().splitlines()
               if "written while read" in line]
    assert len(written) == 2, written
    assert not list((src.directory / "data" / "tmp").glob("image-*")), \
        "an image file was left behind"
    # A receiver that goes away mid-image leaves no file behind either.
    with signed_client(src, secret[1]) as c, c.stream("GET", "/cluster/image") as cut:
        assert len(next(cut.iter_raw(64 * 1024))) > 0
    deadline = time.monotonic() + 30
    while list((src.directory / "data" / "tmp").glob("image-*")):
        assert time.monotonic() < deadline, "a cut reader's image file was left behind"
        time.sleep(0.1)


def test_a_backup_streamed_while_written_is_pulled_and_resumed(worker_factory, secret):
    """POST /cluster/backups/<name>?stream=true answers the image's state at once (no
    SHA-256 yet); another worker pulls it while it is written, unpacking as it arrives,
    and checks the SHA-256 it asks for when the body ended; a Range read of it resumes at
    the offset asked; its checksum is then the backup's."""
    src, dst = worker_factory("src"), worker_factory("dst")
    with signed_client(src, secret[1]) as c:
        c.post("/cluster/apply", json=apply_body(1, batch(0, 10_000, "g"))).raise_for_status()
        want = c.get("/cluster/state").json()
        made = c.post("/cluster/backups/seed-x?stream=true").json()
        assert (made["seq"], made["fingerprint"], made["quads"], made["sha256"]) == \
            (want["seq"], want["fingerprint"], want["quads"], None)
    with signed_client(dst, secret[1]) as c:
        r = c.post("/cluster/image/pull",
                   json={"source": f"{src.url}/cluster/backups/seed-x"}, timeout=120)
        assert r.status_code == 200, r.text
        got = c.get("/cluster/state").json()
        assert c.post("/cluster/verify").json()["matches"]
    assert (got["seq"], got["fingerprint"], got["quads"]) == \
        (want["seq"], want["fingerprint"], want["quads"])
    with signed_client(src, secret[1]) as c:
        checksum = c.get("/cluster/backups/seed-x/sha256")
        assert checksum.status_code == 200, checksum.text
        listed = {b["name"]: b for b in c.get("/cluster/backups").json()}
        assert listed["seed-x"]["sha256"] == checksum.text
        assert listed["seed-x"]["bytes"] == int(checksum.headers["x-image-bytes"])
        whole = c.get("/cluster/backups/seed-x").content
        tail = c.get("/cluster/backups/seed-x", headers={"range": "bytes=1000-"})
        assert tail.status_code == 206 and tail.content == whole[1000:]
        assert c.get("/cluster/backups/nope/sha256").status_code == 404


def test_corrupted_backup_image_is_refused_and_nothing_changes(worker_factory, secret):
    w = worker_factory("w")
    with signed_client(w, secret[1]) as c:
        c.post("/cluster/apply", json=apply_body(1, batch(0, 2000))).raise_for_status()
        assert c.post("/cluster/backups/b1").status_code == 200
        c.post("/cluster/apply", json=apply_body(2, batch(2000, 10))).raise_for_status()
        before = settled(c.get("/cluster/state").json())
        image = w.directory / "data" / "backups" / "b1" / "image.tar.sz"
        data = bytearray(image.read_bytes())
        data[100] ^= 0x55
        image.write_bytes(bytes(data))
        r = c.post("/cluster/restore", json={"name": "b1"})
        assert r.status_code == 422 and "checksum mismatch" in r.text
        assert settled(c.get("/cluster/state").json()) == before
        assert c.post("/cluster/verify").json()["matches"]
        r = c.post("/cluster/restore", json={"name": "nope"})
        assert r.status_code == 404 and "no backup named 'nope'" in r.text


def _cut_image_server(sent: bytes) -> tuple[int, threading.Thread]:
    """A loopback server that answers one GET with an image's head and ``sent`` bytes of
    a chunked body, then closes the connection (a source that died mid-transfer)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Image-Sha256: " + b"0" * 64 +
                             b"\r\nTransfer-Encoding: chunked\r\n\r\n" +
                             f"{len(sent) + 1000:x}\r\n".encode() + sent)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def test_a_pull_whose_source_fails_answers_why_and_changes_nothing(worker_factory, secret):
    """POST /cluster/image/pull from a source that is not there, answers an error, is
    not an image source, or cuts the transfer: 502 saying which, the receiver's state and
    store as before, and it pulls a good image afterwards."""
    src, dst = worker_factory("src"), worker_factory("dst")
    with signed_client(src, secret[1]) as c:
        c.post("/cluster/apply", json=apply_body(1, batch(0, 3000))).raise_for_status()
        want = settled(c.get("/cluster/state").json())
    with signed_client(src, secret[1]) as c, c.stream("GET", "/cluster/image") as r:
        head = b"".join(r.iter_bytes())[:50_000]
    cut_port, cut = _cut_image_server(head)
    failures = [
        (f"http://127.0.0.1:{free_port()}/cluster/image", "cannot fetch image from"),
        (f"{src.url}/cluster/backups/nope", "image source answered 404"),
        (f"{src.url}/cluster/state", "image source sent no X-Image-Sha256 header"),
        (f"http://127.0.0.1:{cut_port}/cluster/image", "cannot fetch image from"),
    ]
    with signed_client(dst, secret[1]) as c:
        c.post("/cluster/apply", json=apply_body(1, batch(90_000, 10))).raise_for_status()
        before = settled(c.get("/cluster/state").json())
        for source, why in failures:
            r = c.post("/cluster/image/pull", json={"source": source})
            assert r.status_code == 502 and why in r.text, (source, r.status_code, r.text)
            assert settled(c.get("/cluster/state").json()) == before
            assert c.post("/cluster/verify").json()["matches"]
        cut.join(5)
        generations = sorted(p.name for p in (dst.directory / "data").glob("gen-*"))
        assert len(generations) == 1, generations  # nothing half-unpacked is left
        r = c.post("/cluster/image/pull", json={"source": f"{src.url}/cluster/image"})
        assert r.status_code == 200, r.text
        assert settled(c.get("/cluster/state").json()) == want


def test_restore_from_named_backup(worker_factory, secret):
    w = worker_factory("w")
    with signed_client(w, secret[1]) as c:
        c.post("/cluster/apply", json=apply_body(1, batch(0, 100))).raise_for_status()
        manifest = c.post("/cluster/backups/nightly").json()
        c.post("/cluster/apply", json=apply_body(2, batch(100, 100))).raise_for_status()
        assert [b["name"] for b in c.get("/cluster/backups").json()] == ["nightly"]
        r = c.post("/cluster/restore", json={"name": "nightly"})
        assert r.status_code == 200, r.text
        st = c.get("/cluster/state").json()
    assert (st["seq"], st["fingerprint"], st["quads"]) == \
        (1, manifest["fingerprint"], 100)


@pytest.mark.parametrize(("body", "status", "message"), [
    (apply_body(5, batch(0, 1)), 409, "does not follow"),
    (apply_body(1, batch(0, 1), expected=42), 409, "expected"),
    ({"entries": [{"seq": 1, "txid": "t", "changeset": {"added": "<a> <b> ."}}]}, 400,
     "not valid N-Quads"),
    # With an expected fingerprint an addition is loaded as text, unparsed: still named.
    ({"entries": [{"seq": 1, "txid": "t", "changeset": {"added": "<a> <b> .\n"},
                   "expected_fingerprint": "0" * 32}]}, 400, "not valid N-Quads"),
    ({"entries": "nope"}, 400, "'entries' must be a list"),
    ({"entries": [{"seq": "1", "txid": "t", "changeset": {}}]}, 400, "'seq' must be a int"),
])
def test_bad_control_requests_get_clear_errors_and_change_nothing(
        worker_factory, secret, body, status, message):
    w = worker_factory("w")
    with signed_client(w, secret[1]) as c:
        before = settled(c.get("/cluster/state").json())
        r = c.post("/cluster/apply", json=body)
        assert r.status_code == status and message in r.text, r.text
        assert settled(c.get("/cluster/state").json()) == before


def test_journal_of_executed_transactions_hands_out_changesets_to_apply_elsewhere(
        worker_factory, secret):
    """GET /cluster/journal: what the worker executed as probe after a seq, in the form a
    master forwards with /cluster/apply (another worker applying them reaches the same
    state); 410 when it does not hold them, 400 for bad parameters."""
    probe, other = worker_factory("probe"), worker_factory("other")
    txs = [{"txid": f"j{i}", "operations": [
        {"type": "update", "update": f"INSERT DATA {{ <{EX}j{i}> <{EX}p> {i} }}"}]}
        for i in (1, 2)]
    with signed_client(probe, secret[1]) as c:
        r = c.post("/cluster/execute", json={"start_seq": 1, "transactions": txs})
        assert [res["ok"] for res in r.json()["results"]] == [True, True], r.text
        state = c.get("/cluster/state").json()
        r = c.get("/cluster/journal", params={"after": 0})
        assert r.status_code == 200, r.text
        journal = r.json()
        assert (journal["seq"], journal["fingerprint"]) == (2, state["fingerprint"])
        assert [(e["seq"], e["txid"]) for e in journal["entries"]] == [(1, "j1"), (2, "j2")]
        assert journal["refused"] == []
        assert [e["seq"] for e in c.get("/cluster/journal?after=0&limit=1").json()[
            "entries"]] == [1]
        assert c.get("/cluster/journal?after=2").json()["entries"] == []
        for query, message in (("", "'after' must be an integer"),
                               ("?after=-1", "'after' must be an integer >= 0"),
                               ("?after=x", "'after' must be an integer"),
                               ("?after=0&limit=0", "'limit' must be an integer 1..10000")):
            r = c.get(f"/cluster/journal{query}")
            assert r.status_code == 400 and message in r.text, (query, r.text)
    with signed_client(other, secret[1]) as c:
        r = c.post("/cluster/apply", json={"entries": [
            {"seq": e["seq"], "txid": e["txid"], "changeset": e["changeset"],
             "expected_fingerprint": e["fingerprint"]} for e in journal["entries"]]})
        assert r.status_code == 200, r.text
        assert settled(c.get("/cluster/state").json()) == settled(state)
    # Applied there, not executed: the other worker's journal does not hold them.
    with signed_client(other, secret[1]) as c:
        r = c.get("/cluster/journal?after=0")
    assert r.status_code == 410, r.text
    assert "does not hold seq 1" in r.text


def test_control_api_refuses_missing_wrong_and_replayed_credentials(worker_factory, secret):
    w = worker_factory("w")
    plain = httpx.Client(base_url=w.url)
    r = plain.get("/cluster/state")
    assert r.status_code == 403 and "missing cluster credential" in r.text
    r = plain.post("/cluster/apply", json=apply_body(1, batch(0, 1)),
                   headers={"authorization": "TXC-HMAC ts=1,nonce=x,sig=y"})
    assert r.status_code == 403 and "expired" in r.text
    from txinfra.auth import sign

    body = b'{"entries": []}'
    header = sign(b"another secret of enough length", "POST", f"{w.url}/cluster/apply", body)
    r = plain.post("/cluster/apply", content=body, headers={"authorization": header})
    assert r.status_code == 403 and "wrong cluster credential" in r.text
    good = sign(secret[1], "GET", f"{w.url}/cluster/state")
    assert plain.get("/cluster/state", headers={"authorization": good}).status_code == 200
    r = plain.get("/cluster/state", headers={"authorization": good})
    assert r.status_code == 403 and "replayed" in r.text
    plain.close()
    with signed_client(w, secret[1]) as c:
        assert c.get("/cluster/state").json()["seq"] == 0


@pytest.mark.processes
def test_worker_refuses_a_bad_config_naming_the_key(tmp_path, secret):
    import subprocess
    import sys

    cfg = tmp_path / "worker.properties"
    cfg.write_text(f"repository-id=r\ndata-dir={tmp_path}/d\nlisten-address=localhost\n"
                   f"cluster-secret-file={secret[0]}\nfrobnicate=yes\n")
    r = subprocess.run([sys.executable, "-m", "txcluster.cli", "worker", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "invalid value for 'listen-address'" in r.stderr
    assert "unknown key 'frobnicate'" in r.stderr
    secret[0].chmod(0o644)
    cfg.write_text(f"repository-id=r\ndata-dir={tmp_path}/d\nlisten-address=127.0.0.1:1\n"
                   f"cluster-secret-file={secret[0]}\n")
    r = subprocess.run([sys.executable, "-m", "txcluster.cli", "worker", "--config", str(cfg)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "must be 600" in r.stderr


def test_ports_for_nodes_are_never_handed_out_twice():
    # Nodes are configured before any of them listens, so a port the kernel hands out
    # again after its probe socket closed would be given to two nodes (chaos seed 202).
    from txcluster.local import free_port

    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


QUERY_FORMATS = ["application/sparql-results+json", "application/sparql-results+xml",
                 "text/csv", "text/tab-separated-values",
                 "application/x-binary-rdf-results-table", "*/*", None]


def test_point_queries_by_get_answer_as_the_application_does(worker_factory, secret):
    """A GET of a provably cheap query is answered on the event loop (queries.run_inline,
    behind routes.HotPaths); the same query sent as a POST form is parsed from its body.
    Both must give the same status, type and bytes, in every result format, and the GET
    must see a write applied just before."""
    w = worker_factory("w")
    with signed_client(w, secret[1]) as c:
        assert c.post("/cluster/apply", json=apply_body(1, batch(0, 20))).status_code == 200
    path = "/repositories/repo"  # worker_node's default
    point = f"SELECT ?o WHERE {{ <{EX}s7> <{EX}p> ?o }}"
    ask = f"ASK {{ <{EX}s3> ?p ?o }}"
    with httpx.Client(base_url=w.url) as c:
        for query in (point, ask):
            for accept in QUERY_FORMATS if query == point else ["text/boolean", None]:
                headers = {"accept": accept} if accept else {}
                by_get = c.get(path, params={"query": query}, headers=headers)
                by_post = c.post(path, data={"query": query}, headers=headers)
                assert by_get.status_code == by_post.status_code == 200, by_get.text
                assert by_get.headers["content-type"] == by_post.headers["content-type"]
                assert by_get.content == by_post.content, (query, accept)
        assert b'"v7"' in c.get(path, params={"query": point},
                                headers={"accept": QUERY_FORMATS[0]}).content
        # Errors are the route's, by GET too.
        r = c.get(path, params={"query": point}, headers={"accept": "image/png"})
        assert r.status_code == 406, r.text
        r = c.get(path, params={"query": "SELECT ?o WHERE { <x"})
        assert r.status_code == 400 and "MALFORMED QUERY" in r.text, r.text
        r = c.get("/repositories/other", params={"query": point})
        assert r.status_code == 404 and "unknown repository 'other'" in r.text, r.text
    # A write applied, then read at once by GET on a new connection: the GET's snapshot
    # is taken after it.
    with signed_client(w, secret[1]) as c:
        cs = Changeset(added=frozenset({ox.Quad(ox.NamedNode(f"{EX}s7"), ox.NamedNode(EX + "p"),
                                                ox.Literal("new"))}))
        assert c.post("/cluster/apply", json=apply_body(2, cs)).status_code == 200
    r = httpx.get(w.url + path, params={"query": point}, headers={"accept": "text/csv"})
    assert r.status_code == 200 and sorted(r.text.split("\r\n")) == ["", "new", "o", "v7"]
