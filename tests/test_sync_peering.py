"""Peered masters as real processes: one master and its workers per data centre, all on
loopback, agreeing on one order of transactions with the TxLog sync protocol.

What an operator relies on: concurrent writers on every master end with identical agreed
queues and identical workers everywhere; a master killed -9 mid-stream comes back as a
lagger and loses nothing acknowledged; strangers and forged or replayed messages are
refused; read-only and muted masters behave as docs/design/sync-protocol.md#master-modes says; sync
peers can be added and removed at runtime and that persists.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pytest

from master_service.sync.relaying import PUSH_BYTES
from master_service.sync.sqlite_storage import SqliteStorage
from master_service.txlog.log import TxLog
from tests.clusters import DataCentres, LocalCluster, P, Writers, insert
from tests.procs import same_agreed, signed_client
from txinfra.auth import sign

pytestmark = pytest.mark.processes


@pytest.fixture(scope="module")
def three_dcs(tmp_path_factory):
    with DataCentres.running(tmp_path_factory.mktemp("three-dcs"), n=3, workers=2) as dcs:
        yield dcs


def test_concurrent_writers_on_every_master_agree_everywhere(three_dcs):
    dcs = three_dcs
    targets = [(f"m{i + 1}t{t}", dc) for i, dc in enumerate(dcs.dcs) for t in range(3)]
    with Writers(targets, per_thread=15) as writers:
        pass
    assert not writers.failed, writers.failed[:5]
    assert len(writers.acked) == 9 * 15
    dcs.wait_converged()
    queues = [dcs.agreed(dc) for dc in dcs.dcs]
    assert same_agreed(*queues)  # positions every DC executed may be forgotten
    assert len(queues[0]) >= len(writers.acked)
    # Every acknowledged statement on all six workers, and nothing nobody wrote.
    for url, subjects in dcs.subjects_on_every_worker().items():
        assert subjects == writers.acked, url
    assert len(set(dcs.fingerprints().values())) == 1
    # The data centres compared fingerprints at the same agreed positions and agree.
    for dc in dcs.dcs:
        st = dcs.sync(dc)
        assert st["state"] == "connected" and not st["divergences"], st
        assert all(p["fingerprint_match"] is not False for p in st["peers"]), st


def test_a_write_through_one_master_is_readable_through_every_other(three_dcs):
    r = insert(three_dcs.dcs[1], "urn:txc:read-anywhere")
    assert r.status_code == 204, r.text
    three_dcs.wait_converged()
    for dc in three_dcs.dcs:
        rows = dc.select("SELECT ?p WHERE { <urn:txc:read-anywhere> ?p ?o }")
        assert rows, dc.master.url


NON_DETERMINISTIC = """PREFIX ex: <urn:txc:nd:>
INSERT {{ ?x ex:at ?now ; ex:rand ?r ; ex:uuid ?u ; ex:struuid ?s ; ex:bnode ?b ;
          ex:named ?k ; ex:tree [ ex:leaf ?x ] }}
WHERE {{ VALUES ?x {{ ex:{tag}-1 ex:{tag}-2 }}
         BIND(NOW() AS ?now) BIND(RAND() AS ?r) BIND(UUID() AS ?u) BIND(STRUUID() AS ?s)
         BIND(BNODE() AS ?b) BIND(BNODE("k") AS ?k) }} ;
INSERT DATA {{ _:a ex:data-of "{tag}" . _:a ex:next [ ex:n 1 ] }}"""


def test_non_deterministic_updates_give_one_state_in_every_data_centre(three_dcs):
    """Issue 16 item 5: each data centre executes every agreed transaction on its own
    probe; NOW(), RAND(), UUID(), STRUUID(), BNODE() and fresh blank nodes take their
    values from the agreed transaction (its txid and timestamp), so all six workers end
    with one fingerprint and no data centre reports a divergence."""
    dcs = three_dcs
    for round_ in range(3):
        for i, dc in enumerate(dcs.dcs):
            r = dc.update(NON_DETERMINISTIC.format(tag=f"m{i + 1}r{round_}"))
            assert r.status_code == 204, r.text
    dcs.wait_converged()
    fingerprints = dcs.fingerprints()
    assert len(fingerprints) == 6 and len(set(fingerprints.values())) == 1, fingerprints
    for dc in dcs.dcs:
        st = dcs.sync(dc)
        assert st["state"] == "connected" and not st["divergences"], st
        assert all(p["fingerprint_match"] is not False for p in st["peers"]), st
    # The values are really drawn (not constants): one per solution, and the same on every
    # worker of every data centre.
    query = "SELECT ?x ?r ?u WHERE { ?x <urn:txc:nd:rand> ?r ; <urn:txc:nd:uuid> ?u }"
    views = [sorted(map(str, dc.select(query, base=w.url))) for dc in dcs.dcs
             for w in dc.workers]
    assert len(views[0]) == 18 and all(v == views[0] for v in views)
    assert len({row["r"] for row in dcs.dcs[0].select(query)}) == 18


def _signed_post(url: str, path: str, body: dict, secret: bytes) -> httpx.Response:
    data = json.dumps(body).encode()
    return httpx.post(url + path, content=data, timeout=10, headers={
        "content-type": "application/json",
        "authorization": sign(secret, "POST", url + path, data)})


def test_strangers_forged_and_replayed_peer_messages_are_refused(three_dcs):
    m1 = three_dcs.dcs[0]
    secret = three_dcs.secret[1]
    before = three_dcs.sync(m1)
    status = {"sender": "intruder", "mode": "read-write", "merge_base": None, "seq": 0,
              "counter": 10**15, "chain": "",
              "queue": [{"txid": "evil", "timestamp": 1, "origin": "intruder", "size": 2,
                         "digest": "00"}]}
    # A node that is not a configured peer, with a valid credential.
    r = _signed_post(m1.master.url, "/peer/status", {"status": status}, secret)
    assert r.status_code == 403 and "not a configured peer" in r.text
    # A configured peer's name without the secret.
    status["sender"] = "m2"
    r = _signed_post(m1.master.url, "/peer/status", {"status": status}, b"x" * 32)
    assert r.status_code == 403 and "wrong cluster credential" in r.text
    r = httpx.post(f"{m1.master.url}/peer/status", json={"status": status}, timeout=10)
    assert r.status_code == 403 and "missing" in r.text
    # A captured, correctly signed message sent again (a harmless old status of m2's).
    data = json.dumps({"status": {**status, "counter": 0, "queue": []}}).encode()
    headers = {"content-type": "application/json",
               "authorization": sign(secret, "POST", f"{m1.master.url}/peer/status", data)}
    first = httpx.post(f"{m1.master.url}/peer/status", content=data, headers=headers)
    again = httpx.post(f"{m1.master.url}/peer/status", content=data, headers=headers)
    assert first.status_code in (204, 400), first.text
    assert again.status_code == 403 and "replayed" in again.text
    # Malformed messages name what is wrong.
    r = _signed_post(m1.master.url, "/peer/status", {"status": {"sender": "m2"}}, secret)
    assert r.status_code == 400 and "mode" in r.text
    # Tail segments in a status's request are its sender's only (transport.py): else the
    # whole request is refused. A status we take is answered with what we take in it.
    harmless = {**status, "counter": 0, "queue": []}
    # (past m1's agreed queue: a segment that does not continue it is ignored)
    tail = {"sender": "m2", "after_seq": 10**6, "after": "x", "after_chain": "0" * 32,
            "entries": [{"txid": "t", "timestamp": 1, "origin": "m2", "size": 2,
                         "digest": "00"}]}
    r = _signed_post(m1.master.url, "/peer/status",
                     {"status": harmless, "tails": [{**tail, "sender": "m3"}]}, secret)
    assert r.status_code == 400 and "another node's tail segment" in r.text
    r = _signed_post(m1.master.url, "/peer/status", {"status": harmless, "tails": tail}, secret)
    assert r.status_code == 400 and "must be a JSON array" in r.text
    r = _signed_post(m1.master.url, "/peer/status", {"status": harmless, "tails": [tail]},
                     secret)
    assert r.status_code == 204 and r.headers["x-txcluster-peer-takes"] == "tails", r.text
    # Payloads are only for configured peers.
    path = "/peer/transactions/anything?peer=intruder"
    r = httpx.get(m1.master.url + path,
                  headers={"authorization": sign(secret, "GET", m1.master.url + path)})
    assert r.status_code == 403
    after = three_dcs.sync(m1)
    assert after["counter"] < 10**15  # the stranger's counter was not observed
    assert after["seq"] >= before["seq"]
    assert "evil" not in three_dcs.agreed(m1)
    log = m1.master.log_path.read_text()
    assert "not a configured peer" in log and "wrong cluster credential" in log


def test_a_master_killed_mid_stream_catches_up_as_a_lagger(tmp_path):
    dcs = DataCentres(tmp_path, n=3, workers=2,
                      extra={i: {"max-peer-lag-s": "1.5"} for i in range(3)})
    try:
        dcs.start()
        m1, m2, m3 = dcs.dcs
        targets = [("a", m1), ("b", m2), ("c", m3), ("d", m2), ("e", m3)]
        with Writers(targets, timeout=20) as writers:
            time.sleep(2)
            m1.master.kill9()
            killed_at = time.monotonic()
            time.sleep(4)  # m2 and m3 go on without m1 after max-peer-lag
            progressed = {s for s in writers.acked if s.startswith(("urn:txc:b", "urn:txc:c"))}
            m1.master.start(wait=True)
            restarted_after = time.monotonic() - killed_at
            time.sleep(3)
            with_m1 = len(writers.acked)
        assert restarted_after > 2
        assert with_m1 > len(progressed) > 0
        dcs.wait_converged(timeout=120)
        queues = [dcs.agreed(dc) for dc in dcs.dcs]
        assert same_agreed(*queues)  # forgotten positions are None
        for url, subjects in dcs.subjects_on_every_worker().items():
            missing = writers.acked - subjects
            assert not missing, f"{url} lost acknowledged writes: {sorted(missing)[:5]}"
            assert subjects <= writers.acked | {s for s, _ in writers.failed}, url
        assert len(set(dcs.fingerprints().values())) == 1
        st = dcs.sync(m2)
        assert st["split_suspected"] == [] and st["state"] == "connected", st
    finally:
        dcs.stop_all()


def _payloads_from(dc: LocalCluster, origin: str) -> set[str]:
    """Transactions of ``origin`` whose payload ``dc``'s master holds (its log, read-only)."""
    path = Path(dc.master.properties["data-dir"]) / "txlog.db"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return {r[0] for r in db.execute("select txid from transactions where origin = ?",
                                         [origin])}


def test_a_payload_is_fetched_from_another_peer_while_its_origin_hangs(tmp_path):
    """A transaction's origin is asked for its payload first. When the origin hangs (a
    cut not detected yet; here: SIGSTOP), the fetch must not wait for its request timeout:
    another peer that holds the payload is asked too (acquisition.py, hedged). Chaos
    partition-dc found it: the UK side acknowledged nothing for seconds after it
    detected the split, fetching from us1 what uk1 already held."""
    timeout_s = 60  # a fetch that waits for the hung origin takes this long
    dcs = DataCentres(tmp_path, n=3, workers=1, extra={
        i: {"max-peer-lag-s": "120", "request-timeout-s": str(timeout_s)} for i in range(3)})
    paused: list[int] = []

    def pause(dc: LocalCluster) -> None:
        os.kill(dc.master.pid, signal.SIGSTOP)
        paused.append(dc.master.pid)

    def resume(dc: LocalCluster) -> None:
        os.kill(dc.master.pid, signal.SIGCONT)
        paused.remove(dc.master.pid)

    try:
        dcs.start()
        m1, m2, m3 = dcs.dcs
        pause(m2)  # m2 misses m3's transaction while m1 fetches it
        answers: list[httpx.Response | Exception] = []

        # Larger than a status carries (relaying.PUSH_BYTES): every peer must fetch it.
        big = " ".join(f'<urn:txc:hedged> <{P}> "{i:06d}{"x" * 60}" .' for i in range(5000))
        assert len(big) > PUSH_BYTES

        def write() -> None:
            try:
                answers.append(m3.update(f"INSERT DATA {{ {big} }}", timeout=3 * timeout_s))
            except httpx.HTTPError as exc:
                answers.append(exc)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        deadline = time.monotonic() + 20
        while not (held := _payloads_from(m1, "m3")):
            assert time.monotonic() < deadline, "m1 never fetched m3's payload"
            time.sleep(0.1)
        pause(m3)  # the origin hangs: its listening socket still takes connections
        resume(m2)
        resumed = time.monotonic()
        while not held <= _payloads_from(m2, "m3"):
            assert time.monotonic() - resumed < timeout_s / 3, \
                f"m2 waited for the hung origin: no payload after {timeout_s / 3:.0f}s"
            time.sleep(0.1)
        took = time.monotonic() - resumed
        resume(m3)
        writer.join(3 * timeout_s)
        assert answers and isinstance(answers[0], httpx.Response) and \
            answers[0].status_code == 204, answers
        dcs.wait_converged(timeout=120)
        queues = [dcs.agreed(dc) for dc in dcs.dcs]
        assert same_agreed(*queues)  # forgotten positions are None
        assert len(set(dcs.fingerprints().values())) == 1
        print(f"\nm2 held m3's payload {took:.2f}s after it resumed (origin hung, request "
              f"timeout {timeout_s}s)")
    finally:
        for pid in paused:
            os.kill(pid, signal.SIGCONT)
        dcs.stop_all()


def agreed_not_executed(dc: LocalCluster) -> int:
    """Agreed transactions of ``dc``'s master that it holds the payload of and has not
    executed (its log, read-only: the master is running)."""
    path = Path(dc.master.properties["data-dir"]) / "txlog.db"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return db.execute("select count(*) from sync_agreed a join transactions t on "
                          "t.txid = a.txid where a.fingerprint is null").fetchone()[0]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_master_killed_after_its_probe_executed_an_agreed_transaction_rolls_forward(
        tmp_path, workers):
    """Chaos seed 12 (multi-DC) made exact: m1's probe executes the next agreed
    transaction and m1 dies before recording it. Restarted, m1 records it from the
    probe's executed journal, at its agreed position: the probe stays in sync (with one
    worker it could not be replicated from anywhere; with two, the other's older state
    must not be replicated over it), the other worker receives its changeset, and every
    data centre goes on with the same data."""
    dcs = DataCentres(tmp_path, n=2, workers=workers)
    try:
        dcs.start()
        m1, m2 = dcs.dcs
        assert insert(m1, "urn:txc:before").status_code == 204
        dcs.wait_converged()
        # m1 cannot execute (its workers are down) but takes part in the agreement.
        for w in m1.workers:
            w.stop()
        assert insert(m2, "urn:txc:agreed").status_code == 204
        deadline = time.monotonic() + 30
        while agreed_not_executed(m1) < 1:
            assert time.monotonic() < deadline, "m1 never held the agreed transaction"
            time.sleep(0.1)
        m1.master.kill9()
        with TxLog.open(Path(m1.master.properties["data-dir"]) / "txlog.db") as txlog:
            agreement = SqliteStorage(txlog)
            executed_pos = agreement.executed()[0]
            [nxt] = agreement.to_execute(executed_pos, 10)
            head = txlog.head()
        for w in m1.workers:
            w.start()
        probe = m1.workers[0]
        with signed_client(probe, m1.secret) as client:
            r = client.post("/cluster/execute", json={
                "start_seq": head.seq + 1, "control_queries": [],
                "transactions": [{"txid": nxt.txid, "operations": nxt.operations}]})
        assert r.status_code == 200 and r.json()["results"][0]["ok"], r.text
        m1.master.start()
        dcs.wait_converged()
        log = m1.master.log_path.read_text()
        assert f"worker {probe.url} had executed 1 transactions the log had not recorded " \
            f"(master crash): recorded them" in log, log[-3000:]
        assert "Replicating" not in log and "cannot replicate" not in log
        sync1 = dcs.sync(m1)
        assert sync1["executed_seq"] == sync1["seq"] >= nxt.pos
        assert dcs.agreed(m1) == dcs.agreed(m2)
        # Writes go on through both masters.
        assert insert(m1, "urn:txc:after-1").status_code == 204
        assert insert(m2, "urn:txc:after-2").status_code == 204
        dcs.wait_converged()
        want = {"urn:txc:before", "urn:txc:agreed", "urn:txc:after-1", "urn:txc:after-2"}
        assert all(s == want for s in dcs.subjects_on_every_worker().values()), \
            dcs.subjects_on_every_worker()
        assert len(set(dcs.fingerprints().values())) == 1
    finally:
        dcs.stop_all()


def test_read_only_and_muted_masters(tmp_path):
    # m2 muted, m3 read-only (docs/design/sync-protocol.md#master-modes).
    dcs = DataCentres(tmp_path, n=3, workers=1,
                      extra={1: {"mode": "MUTE"}, 2: {"read-only": "true"}})
    try:
        dcs.start()
        m1, m2, m3 = dcs.dcs
        for dc, what in ((m2, "muted"), (m3, "read-only")):
            r = insert(dc, "urn:txc:refused")
            assert r.status_code == 503 and what in r.text, r.text
        assert insert(m1, "urn:txc:one").status_code == 204
        # The muted master applies what its peers agree; the read-only one takes part in
        # the agreement (m1 waited for it) but does not apply to its workers.
        dcs.wait_converged(masters=[0, 1])
        sync3 = dcs.sync(m3)
        assert sync3["seq"] == dcs.sync(m1)["seq"] and sync3["executed_seq"] == 0
        subjects = dcs.subjects_on_every_worker()
        assert subjects[m2.workers[0].url] == {"urn:txc:one"}
        assert subjects[m3.workers[0].url] == set()
        # Others do not wait for a muted master: with m2 dead, m1 still commits.
        m2.master.kill9()
        assert insert(m1, "urn:txc:two", timeout=20).status_code == 204
        # Others wait for a read-only master: with m3 dead, m1's write is not agreed.
        m3.master.kill9()
        r = insert(m1, "urn:txc:three", timeout=20)
        assert r.status_code == 504 and "not yet agreed" in r.text, r.text
        # m3 back and made read-write at runtime: the write is agreed, m3 applies the
        # whole backlog to its workers.
        m3.master.start()
        r = httpx.put(f"{m3.master.url}/admin/mode", json={"read_only": False}, timeout=10)
        assert r.status_code == 200, r.text
        m2.master.start()
        dcs.wait_converged()
        subjects = dcs.subjects_on_every_worker()
        want = {"urn:txc:one", "urn:txc:two", "urn:txc:three"}
        assert all(s == want for s in subjects.values()), subjects
        assert "read-only=false" in m3.master.config.read_text()
    finally:
        dcs.stop_all()


def test_sync_peers_are_added_and_removed_at_runtime_and_persisted(tmp_path):
    dcs = DataCentres(tmp_path, n=2, workers=1, peered=False)
    try:
        dcs.start()
        m1, m2 = dcs.dcs
        assert insert(m1, "urn:txc:before-peering").status_code == 204
        assert httpx.get(f"{m1.master.url}/admin/sync").status_code == 404
        config_before = m1.master.config.read_text()
        for body, why in (({"id": "m1", "url": m2.master.url}, "own node id"),
                          ({"id": "bad id!", "url": m2.master.url}, "not a node id"),
                          ({"id": "m2", "url": "not a url"}, "http(s) url")):
            r = httpx.post(f"{m1.master.url}/admin/sync/peers", json=body, timeout=10)
            assert r.status_code == 400 and why in r.text.lower(), r.text
        assert m1.master.config.read_text() == config_before
        # The two data centres hold different data: the peering base differs and the
        # fingerprint comparison at agreed position 0 reports it.
        for a, b in ((m1, m2), (m2, m1)):
            r = httpx.post(f"{a.master.url}/admin/sync/peers",
                           json={"id": b.master.properties["node-id"], "url": b.master.url},
                           timeout=10)
            assert r.status_code == 200, r.text
        assert "peer.1.id=m2" in m1.master.config.read_text()
        assert insert(m2, "urn:txc:after-peering").status_code == 204
        dcs.wait_converged()
        assert dcs.agreed(m1) == dcs.agreed(m2)
        kinds = {d["kind"] for d in dcs.sync(m1)["divergences"]}
        assert "fingerprint" in kinds
        r = httpx.post(f"{m1.master.url}/admin/sync/peers",
                       json={"id": "m2", "url": m2.master.url}, timeout=10)
        assert r.status_code == 400 and "already" in r.text
        r = httpx.delete(f"{m1.master.url}/admin/sync/peers/nobody", timeout=10)
        assert r.status_code == 404
        r = httpx.delete(f"{m1.master.url}/admin/sync/peers/m2", timeout=10)
        assert r.status_code == 200, r.text
        assert "peer.1.id" not in m1.master.config.read_text()
        # Without peers the master goes on alone through its agreed queue.
        assert insert(m1, "urn:txc:alone").status_code == 204
        # A restart keeps the peers as configured.
        m2.master.stop()
        m2.master.start()
        assert "peer.1.id=m1" in m2.master.config.read_text()
        assert [p["id"] for p in dcs.sync(m2)["peers"]] == ["m1"]
    finally:
        dcs.stop_all()


def test_txcluster_up_starts_one_peered_master_per_data_centre(tmp_path):
    import subprocess
    import sys
    run = tmp_path / "run"
    cli = [sys.executable, "-m", "txcluster.cli"]
    r = subprocess.run([*cli, "up", "--dir", str(run), "--masters", "3", "--workers", "2"],
                       capture_output=True, text=True, timeout=180)
    try:
        assert r.returncode == 0, r.stderr
        info = json.loads((run / "cluster.json").read_text())
        masters = info["masters"]
        assert [m["data_centre"] for m in masters] == ["dc1", "dc2", "dc3"]
        assert len(info["workers"]) == 6
        for m in masters:
            assert sorted(p["id"] for p in m["peers"]) == sorted(
                o["id"] for o in masters if o is not m)
        url = f"{masters[1]['url']}/repositories/repo"
        w = httpx.post(f"{url}/statements", content=b'INSERT DATA { <urn:up> <urn:p> "v" }',
                       headers={"content-type": "application/sparql-update"}, timeout=30)
        assert w.status_code == 204, w.text
        deadline = time.monotonic() + 30
        while True:
            sizes = [httpx.get(f"{x['url']}/repositories/repo/size", timeout=10).text
                     for x in info["workers"]]
            if sizes == ["1"] * 6 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert sizes == ["1"] * 6
    finally:
        subprocess.run([*cli, "down", "--dir", str(run)], capture_output=True, timeout=120)
