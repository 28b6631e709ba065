"""A real worker process fenced by the write epoch (docs/design/failover.md,
worker_service/promise.py, worker_service/api/epoch.py): a granted epoch refuses every
change of an older one, whichever route it takes, and survives kill -9."""

from __future__ import annotations

import time

import httpx

from tests.procs import signed_client
from tests.worker_calls import apply_body, batch, settled

EX = "http://example.org/"


def grant(c: httpx.Client, epoch: int, candidate: str, manual: bool = False) -> dict:
    r = c.post("/cluster/epoch", json={"epoch": epoch, "candidate": candidate,
                                        "manual": manual})
    assert r.status_code == 200, r.text
    return r.json()


def epoch(n: int, master: str | None = None) -> dict[str, str]:
    return {"X-Write-Epoch": str(n), **({"X-Write-Master": master} if master else {})}


def everything(c: httpx.Client) -> tuple[dict, list, str]:
    """What a change could alter: the state, the named images, the store's statements."""
    dump = c.get("/repositories/repo/statements", headers={"Accept": "application/n-quads"})
    return settled(c.get("/cluster/state").json()), c.get("/cluster/backups").json(), \
        "".join(sorted(dump.text.splitlines(keepends=True)))


def changes(seq: int) -> list[tuple[str, str, dict]]:
    """One request of each kind that changes a worker: (method, path, arguments)."""
    return [
        ("POST", "/cluster/apply", {"json": apply_body(seq, batch(seq * 10, 3))}),
        ("POST", "/cluster/execute", {"json": {"start_seq": seq, "transactions": [
            {"txid": f"x{seq}", "operations": [
                {"type": "update", "update": f"INSERT DATA {{ <{EX}x> <{EX}p> {seq} }}"}]}]}}),
        ("POST", "/cluster/backups/b1", {}),
        ("POST", "/cluster/restore", {"json": {"name": "b1"}}),
        ("PUT", "/cluster/bulk-load/l1/parts/0", {"content": b""}),
        ("POST", "/cluster/image/pull", {"json": {"source": "http://127.0.0.1:9/image"}}),
        ("POST", "/repositories/repo/statements", {
            "content": f"<{EX}d> <{EX}p> <{EX}o> .", "headers": {
                "Content-Type": "text/plain"}}),
        ("DELETE", "/repositories/repo/statements", {}),
    ]


def test_a_granted_epoch_fences_every_older_change_and_survives_kill9(worker_factory, secret):
    w = worker_factory("w")
    with signed_client(w, secret[1]) as c:
        assert c.post("/cluster/apply", json=apply_body(1, batch(0, 2))).status_code == 200
        assert grant(c, 2, "m1") == {"granted": True, "kind": "granted", "promised": 2,
                                     "holder": "m1"}
        before = everything(c)
        for method, path, args in changes(2):
            for headers in (epoch(1), {}):  # older, and none at all (epoch 0)
                more = {k: v for k, v in args.items() if k != "headers"}
                r = c.request(method, path, **more, headers={**args.get("headers", {}),
                                                             **headers})
                older = headers.get("X-Write-Epoch", "0")
                assert r.status_code == 409, (method, path, r.status_code, r.text)
                assert f"write epoch {older} is older than epoch 2 granted to master m1: " \
                       "this master was replaced" in r.text, r.text
        assert everything(c) == before
        r = c.post("/cluster/apply", json=apply_body(2, batch(20, 3)), headers=epoch(2))
        assert r.status_code == 200, r.text
        assert r.json()["seq"] == 2
        after = everything(c)

    w.kill9()
    w.start()
    with signed_client(w, secret[1]) as c:
        assert everything(c) == after
        r = c.post("/cluster/apply", json=apply_body(3, batch(30, 3)), headers=epoch(1))
        assert r.status_code == 409 and "granted to master m1" in r.text, r.text
        assert grant(c, 2, "m2", manual=True) == {"granted": False, "kind": "refused",
                                                  "promised": 2, "holder": "m1"}
        assert grant(c, 1, "m2", manual=True)["granted"] is False
        # A newer epoch seen on a change (its master won a majority elsewhere) is taken,
        # on disk before the change: after another kill -9, epoch 2 is refused.
        r = c.post("/cluster/apply", json=apply_body(3, batch(30, 3)), headers=epoch(3, "m3"))
        assert r.status_code == 200, r.text
    w.kill9()
    w.start()
    with signed_client(w, secret[1]) as c:
        r = c.post("/cluster/apply", json=apply_body(4, batch(40, 3)), headers=epoch(2))
        assert r.status_code == 409, r.text
        assert "write epoch 2 is older than epoch 3 granted to master m3" in r.text
        assert c.get("/cluster/state").json()["seq"] == 3
        assert grant(c, 3, "m1", manual=True)["granted"] is False
        assert grant(c, 4, "m1", manual=True)["granted"] is True


def test_reads_pass_the_fence(worker_factory, secret):
    w = worker_factory("w")
    with signed_client(w, secret[1]) as c:
        grant(c, 5, "m1")
        assert c.get("/cluster/state").status_code == 200
        assert c.post("/cluster/verify").json()["matches"] is True
        assert c.get("/cluster/journal", params={"after": 0}).status_code == 200
        r = c.post("/repositories/repo", data={"query": "ASK { ?s ?p ?o }"},
                   headers={"Accept": "application/sparql-results+json"})
        assert r.status_code == 200 and r.json()["boolean"] is False


def test_an_unsigned_change_is_refused_as_before_and_moves_no_epoch(worker_factory, secret):
    """The epoch is not under the signature: a request without a valid credential is
    refused by its route (403) whatever epoch it names, and names none that counts."""
    w = worker_factory("w")
    with signed_client(w, secret[1]) as c:
        grant(c, 2, "m1")
    with httpx.Client(base_url=w.url, timeout=30) as stranger:
        for n in (1, 2, 99):
            r = stranger.post("/cluster/apply", json=apply_body(1, batch(0, 1)),
                              headers=epoch(n, "evil"))
            assert r.status_code == 403, (n, r.text)
    with signed_client(w, secret[1]) as c:
        r = c.post("/cluster/apply", json=apply_body(1, batch(0, 1)), headers=epoch(2))
        assert r.status_code == 200, r.text
        assert grant(c, 3, "m2", manual=True)["holder"] == "m2"


def test_a_malformed_epoch_is_refused(worker_factory, secret):
    w = worker_factory("w")
    with signed_client(w, secret[1]) as c:
        for bad in ("-1", "two", "1.0", "9" * 40):
            r = c.post("/cluster/apply", json=apply_body(1, batch(0, 1)),
                       headers={"X-Write-Epoch": bad})
            assert r.status_code == 400, r.text
            assert "X-Write-Epoch" in r.text
        for body in ({"epoch": 0, "candidate": "m1"}, {"epoch": 1, "candidate": ""},
                     {"epoch": True, "candidate": "m1"}, {"epoch": 1, "candidate": "m1",
                                                          "manual": "yes"}):
            assert c.post("/cluster/epoch", json=body).status_code == 400, body
        assert c.get("/cluster/state").json()["seq"] == 0


def test_the_lease_keeps_a_live_holder_until_it_falls_silent(worker_factory, secret):
    """An automatic candidate is not granted while the holder changed this worker within
    the lease; an operator's (manual) is; after the lease, anyone newer is."""
    w = worker_factory("w", **{"epoch-grant-lease-ms": "1500"})
    with signed_client(w, secret[1]) as c:
        grant(c, 1, "m1")
        # Granted but not yet heard: a candidacy alone does not hold the others out.
        assert grant(c, 2, "m2")["granted"] is True
        r = c.post("/cluster/apply", json=apply_body(1, batch(0, 1)), headers=epoch(2))
        assert r.status_code == 200, r.text
        heard = time.monotonic()
        refused = grant(c, 3, "m3")
        if time.monotonic() - heard < 1.4:  # under load the lease may have run out
            assert refused == {"granted": False, "kind": "refused", "promised": 2,
                               "holder": "m2"}
        time.sleep(1.6)
        assert grant(c, 3, "m3")["granted"] is True
        r = c.post("/cluster/apply", json=apply_body(2, batch(1, 1)), headers=epoch(3))
        assert r.status_code == 200, r.text
        assert grant(c, 4, "m1", manual=True)["granted"] is True
