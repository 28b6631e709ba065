"""Seeding a data centre from a peer's worker image (issue 16 item 2;
master_service/sync/seeding.py, docs/design/sync-protocol.md#seeding-a-data-centre).

Real processes on loopback: two peered data centres hold data and have forgotten the
start of their agreed queue (every one executed it); a third data centre, started with
``sync-seed-from``, seeds itself from one of them — through a TCP relay that cuts the
first image download half-way, so the download resumes — and is then added as a peer by
the others at runtime. Its workers end up identical to theirs, a write through it reaches
the others, and no acknowledged write is lost.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.clusters import DataCentres, LocalCluster, Writers, insert
from tests.procs import free_port, make_secret

pytestmark = [pytest.mark.slow, pytest.mark.processes]


class CuttingRelay:
    """A TCP relay to ``port`` that closes the first connection carrying more than
    ``cut_after`` bytes back to the client (a cut in the middle of an image download);
    the others pass untouched. Threads; ``close`` stops it."""

    def __init__(self, listen: int, port: int, cut_after: int,
                 rate: float | None = None) -> None:
        self.target, self.cut_after = port, cut_after
        self.rate = rate  # bytes/s back to the client (a slow link), None: unlimited
        self.cuts = 0
        self.server = socket.create_server(("127.0.0.1", listen))
        self.port = listen
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:  # the master behind is gone (teardown)
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client, upstream, False),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True),
                             daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, downstream: bool) -> None:
        sent = 0
        began = time.monotonic()
        try:
            while data := src.recv(16384 if self.rate else 65536):
                dst.sendall(data)
                sent += len(data)
                if downstream and self.rate:
                    time.sleep(max(0.0, began + sent / self.rate - time.monotonic()))
                if downstream and self.cuts == 0 and sent > self.cut_after:
                    self.cuts += 1
                    break
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)  # wakes the other direction's recv at once
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        self._closing = True
        self.server.close()


def unacknowledged(*writers: Writers) -> set[str]:
    """Writes that got no acknowledgement: one answered 504 ("logged but not yet agreed")
    or cut by a timeout may still be agreed and applied later; nothing else may appear."""
    return {subject for w in writers for subject, _ in w.failed}


def sync_of(dc: LocalCluster) -> dict:
    r = httpx.get(f"{dc.master.url}/admin/sync", timeout=10)
    r.raise_for_status()
    return r.json()


def wait_until(condition, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = condition()
            if last:
                return last
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"not {what} after {timeout}s: {last}")


def test_a_new_data_centre_is_seeded_from_a_peer_and_joins_at_runtime(tmp_path):
    relay_port = free_port()
    old = DataCentres(tmp_path / "old", n=2, workers=2, extra={
        # m1 also answers signed requests sent to the relay's address
        0: {"advertised-hosts": f"127.0.0.1:{relay_port}"}})
    m1, m2 = old.dcs
    m1_port = int(m1.master.url.rsplit(":", 1)[1])
    relay = None
    new = None
    try:
        old.start()
        # Data enough for an image of a few hundred kB, and a floor past position 0.
        for batch in range(4):
            triples = " ".join(f'<urn:seed:s{batch}-{i}> <urn:seed:p> "{"v" * 40}{i}" .'
                               for i in range(2500))
            r = m1.update(f"INSERT DATA {{ {triples} }}", timeout=60)
            assert r.status_code == 204, r.text
        with Writers([("a", m1), ("b", m2)], per_thread=40) as writers:
            pass
        assert writers.acked, writers.failed[:3]
        old.wait_converged()
        wait_until(lambda: all(sync_of(dc)["floor"] > 0 for dc in old.dcs),
                   "the agreed queue forgotten up to a floor")

        relay = CuttingRelay(relay_port, m1_port, cut_after=200_000)
        new = LocalCluster(
            tmp_path / "dc3", old.secret, 2, master_port=free_port(), node_id="m3",
            **{"data-centre": "dc3", "sync-idle-interval-ms": "300",
               "peer.1.id": "m1", "peer.1.url": f"http://127.0.0.1:{relay.port}",
               "peer.2.id": "m2", "peer.2.url": m2.master.url,
               "sync-seed-from": "m1"})
        for w in new.workers:
            w.start(wait=False)
        for w in new.workers:
            w.wait_ready()
        new.master.start()
        # While writes go on at the old data centres.
        with Writers([("c", m1), ("d", m2)]) as during:
            seeded = wait_until(lambda: (s := sync_of(new)).get("seeding", {}).get(
                "phase") == "done" and s, "seeded")
        assert seeded["seeding"]["phase"] == "done", seeded
        assert relay.cuts == 1 and seeded["seeding"]["resumed"] >= 1, seeded["seeding"]
        assert seeded["seeding"]["bytes"] == seeded["seeding"]["total"] > 200_000
        assert seeded["floor"] == seeded["seeding"]["position"] > 0, seeded
        metrics = httpx.get(f"{new.master.url}/metrics", timeout=10).text
        values = dict(line.split(" ", 1) for line in metrics.splitlines()
                      if line.startswith("txcluster_seed_"))
        assert float(values["txcluster_seed_bytes"]) == seeded["seeding"]["total"], values
        assert float(values["txcluster_seed_position"]) == seeded["floor"], values
        # Both workers installed the image while it downloaded (none was replicated from
        # the other afterwards), and nothing reported a worker without a source.
        text = new.master.log_path.read_text()
        seeded_on = re.search(r"seeded from a peer's image at agreed position \d+ .* on (.*)",
                              text)
        assert seeded_on, new.master.log_tail()
        assert sorted(seeded_on.group(1).split(", ")) == sorted(w.url for w in new.workers)
        assert "cannot replicate" not in text and "replication of" not in text, \
            new.master.log_tail()
        # The others add it at runtime; it catches up by replay from its floor.
        for dc in old.dcs:
            r = httpx.post(f"{dc.master.url}/admin/sync/peers",
                           json={"id": "m3", "url": new.master.url}, timeout=10)
            assert r.status_code == 200, r.text
        old.dcs.append(new)
        insert_once_replicated(new, "urn:txc:through-m3")
        assert insert(m1, "urn:txc:through-m1").status_code == 204
        old.wait_converged(timeout=120)
        acked = writers.acked | during.acked | {"urn:txc:through-m3", "urn:txc:through-m1"}
        unanswered = unacknowledged(writers, during)
        for url, subjects in old.subjects_on_every_worker().items():
            assert acked <= subjects <= acked | unanswered, url
        assert len(set(old.fingerprints().values())) == 1
        for dc in old.dcs:
            st = sync_of(dc)
            assert st["state"] == "connected" and not st["divergences"], st
            assert all(p["fingerprint_match"] is not False for p in st["peers"]), st
        rows = new.select("SELECT (COUNT(*) AS ?n) WHERE { ?s <urn:seed:p> ?o }")
        assert rows == [{"n": "10000"}]
    finally:
        if relay is not None:
            relay.close()
        if new is not None and new not in old.dcs:
            new.stop_all()
        old.stop_all()


def test_a_worker_down_while_seeding_is_replicated_from_one_that_installed_the_image(
        tmp_path):
    """Every worker pulls the image while it downloads; one that cannot (here: not
    running) does not stop the seeding. The others install it, only they are named in
    the master's log, and the one that was down is replicated from them once it is
    back: both workers end up identical, holding the donor's data."""
    old = DataCentres(tmp_path / "old", n=1, workers=1)
    new = None
    try:
        old.start()
        [m1] = old.dcs
        triples = " ".join(f'<urn:down:s{i}> <urn:down:p> "v{i}" .' for i in range(500))
        assert m1.update(f"INSERT DATA {{ {triples} }}").status_code == 204
        new = LocalCluster(tmp_path / "dc2", old.secret, 2, master_port=free_port(),
                           node_id="m2", **{"data-centre": "dc2", "sync-seed-from": "m1",
                                            "peer.1.id": "m1", "peer.1.url": m1.master.url})
        up, down = new.workers
        up.start()
        new.master.start()
        seeded = wait_until(lambda: (s := sync_of(new)).get("seeding", {}).get(
            "phase") == "done" and s, "seeded with one worker down")
        assert seeded["seeding"]["error"] is None, seeded["seeding"]
        text = new.master.log_path.read_text()
        assert re.search(r"seeded from a peer's image at agreed position \d+ .* on "
                         rf"{re.escape(up.url)}$", text, re.M), new.master.log_tail()
        down.start()
        new.wait_for(lambda st: all(w["status"] == "ON" for w in st["workers"]),
                     "the worker that was down replicated", timeout=120)
        assert f"replication of {down.url} done" in new.master.log_path.read_text()
        assert len({httpx.get(f"{w.url}/health", timeout=10).json()["fingerprint"]
                    for w in (up, down, *m1.workers)}) == 1
        assert new.select("SELECT (COUNT(*) AS ?n) WHERE { ?s <urn:down:p> ?o }") == \
            [{"n": "500"}]
    finally:
        if new is not None:
            new.stop_all()
        old.stop_all()


def processes_under(directory: Path) -> list[int]:
    """PIDs of the processes whose command line names a path under ``directory``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if str(directory).encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
    return pids


def insert_once_replicated(dc: LocalCluster, subject: str) -> None:
    """Seeding is done once one worker holds the image; until the other is replicated
    from it, protect-single-worker refuses writes (503, nothing changed) and a client
    tries again. Any other answer fails the test."""
    def written() -> bool:
        r = insert(dc, subject)
        if r.status_code == 503 and "protect-single-worker" in r.text:
            return False
        assert r.status_code == 204, r.text
        return True

    wait_until(written, f"a write of {subject} through the seeded data centre", timeout=60)


def test_a_seeding_master_killed_mid_download_resumes_the_same_image(tmp_path):
    """A joining master killed -9 while it downloads its seed image (over a slow link)
    and restarted resumes that download where it stopped — the same image, not a new one
    from the donor — and its data centre ends up identical to the donor's."""
    relay_port = free_port()
    old = LocalCluster(tmp_path / "old", make_secret(tmp_path / "s"), 1, node_id="m1",
                       **{"advertised-hosts": f"127.0.0.1:{relay_port}"}).start()
    relay = new = None
    try:
        for batch in range(3):
            triples = " ".join(f'<urn:r:s{batch}-{i}> <urn:r:p> "{"v" * 40}{i}" .'
                               for i in range(2500))
            assert old.update(f"INSERT DATA {{ {triples} }}", timeout=60).status_code == 204
        relay = CuttingRelay(relay_port, int(old.master.url.rsplit(":", 1)[1]),
                             cut_after=1 << 40, rate=60_000)
        new = LocalCluster(tmp_path / "new", (old.secret_file, old.secret), 1,
                           master_port=free_port(), node_id="m2",
                           **{"data-centre": "dc2", "peer.1.id": "m1",
                              "peer.1.url": f"http://127.0.0.1:{relay.port}",
                              "sync-seed-from": "m1"})
        new.workers[0].start()
        new.master.start()
        held = wait_until(lambda: (b := sync_of(new).get("seeding", {}).get("bytes", 0))
                          > 100_000 and b, "a part of the image downloaded", timeout=60)
        new.master.kill9()
        part = next((tmp_path / "new" / "master" / "data" / "seeding").glob("*.part"))
        assert part.stat().st_size >= held
        new.master.start()
        seeded = wait_until(lambda: (s := sync_of(new)).get("seeding", {}).get(
            "phase") == "done" and s, "seeded after the restart", timeout=120)
        seeding = seeded["seeding"]
        assert seeding["restarted_at"] >= held, seeding
        assert seeding["bytes"] == seeding["total"] > seeding["restarted_at"], seeding
        # One image was made for m2: the restarted master did not ask for another.
        made = old.master.log_path.read_text().count("image 'seed-m2' of")
        assert made == 1, old.master.log_tail()
        assert "resuming the download of image 'seed-m2'" in new.master.log_path.read_text()
        new.wait_in_sync()
        fingerprints = {httpx.get(f"{w.url}/health", timeout=10).json()["fingerprint"]
                        for w in (*old.workers, *new.workers)}
        assert len(fingerprints) == 1
        assert new.select("SELECT (COUNT(*) AS ?n) WHERE { ?s <urn:r:p> ?o }") == \
            [{"n": "7500"}]
    finally:
        if relay is not None:
            relay.close()
        if new is not None:
            new.stop_all()
        old.stop_all()


def test_a_wiped_data_centre_behind_every_floor_seeds_itself_while_the_others_write(
        tmp_path):
    """One data centre loses everything (master log and workers) while the others go on
    writing past their horizon (log-max-size 20): when it comes back empty no peer can
    replay to it; it needs seeding, seeds itself from the peer that executed the most —
    while the others keep writing — and converges with them."""
    import shutil

    limits = {"log-max-size": "20", "max-peer-lag-s": "2"}
    dcs = DataCentres(tmp_path, n=3, workers=2, extra={i: dict(limits) for i in range(3)})
    try:
        dcs.start()
        m1, m2, m3 = dcs.dcs
        with Writers([("a", m1), ("b", m2), ("c", m3)], per_thread=20) as before:
            pass
        assert before.acked, before.failed[:3]
        dcs.wait_converged()
        for node in m3.nodes:
            node.kill9()
            shutil.rmtree(Path(node.properties["data-dir"]))
        with Writers([("d", m1), ("e", m2)], per_thread=40) as lost:
            pass
        wait_until(lambda: all(sync_of(dc)["floor"] > 60 for dc in (m1, m2)),
                   "the others forgot past the wiped data centre's position")
        for w in m3.workers:
            w.start(wait=False)
        for w in m3.workers:
            w.wait_ready()
        m3.master.start()
        with Writers([("f", m1), ("g", m2)]) as during:
            seeded = wait_until(lambda: (s := sync_of(m3)).get("seeding", {}).get(
                "phase") == "done" and s, "seeded")
        assert seeded["seeding"]["peer"] in ("m1", "m2"), seeded
        insert_once_replicated(m3, "urn:txc:after-wipe")
        dcs.wait_converged(timeout=120)
        acked = before.acked | lost.acked | during.acked | {"urn:txc:after-wipe"}
        unanswered = unacknowledged(before, lost, during)
        for url, subjects in dcs.subjects_on_every_worker().items():
            assert acked <= subjects <= acked | unanswered, url
        assert len(set(dcs.fingerprints().values())) == 1
        for dc in dcs.dcs:
            st = sync_of(dc)
            assert not st["needs_seeding"] and not st["beyond_horizon"], st
    finally:
        dcs.stop_all()


def test_txcluster_up_join_adds_a_data_centre_to_a_loaded_cluster(tmp_path):
    """`txcluster up --dir NEW --join EXISTING`, as an operator runs it, on a one-master
    cluster holding data (it never peered): the new data centre is seeded from it and
    both peer; their workers are identical, a write through either reaches the other.
    `txcluster down --dir NEW` takes it out of the old master's peers and stops it."""
    import json
    import subprocess
    import sys

    from txcluster import local

    cli = [sys.executable, "-m", "txcluster.cli"]
    old, new = tmp_path / "old", tmp_path / "new"
    try:
        r = subprocess.run([*cli, "up", "--dir", str(old), "--workers", "2", "--sample-data"],
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        first = json.loads((old / "cluster.json").read_text())["masters"][0]
        repo = f"{first['url']}/repositories/repo"
        w = httpx.post(f"{repo}/statements", content=b'INSERT DATA { <urn:j:1> <urn:p> "a" }',
                       headers={"content-type": "application/sparql-update"}, timeout=30)
        assert w.status_code == 204, w.text
        # A join that fails (here: not seeded in time) leaves no process running and no
        # peer behind on the old master. It fails for certain, however fast the machine:
        # it joins through a copy of the cluster's file that names another credential,
        # so the donor refuses every seed request (a short timeout alone raced a seed of
        # this small store, which can be done before the first look).
        impostor, failed = tmp_path / "impostor", tmp_path / "failed"
        listing = json.loads((old / "cluster.json").read_text())
        listing["secret_file"] = str(local.new_secret(impostor))
        (impostor / "cluster.json").write_text(json.dumps(listing))
        with pytest.raises(TimeoutError, match="not seeded"):
            local.join(failed, impostor, workers=1, timeout=5)
        assert not processes_under(failed)
        # The old master refused the impostor's every request: it is as it was, unpeered.
        r = httpx.get(f"{first['url']}/admin/sync", timeout=10)
        assert r.status_code == 404 and "no sync peers" in r.text, r.text
        r = subprocess.run([*cli, "up", "--dir", str(new), "--join", str(old),
                            "--workers", "2"], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        joined = json.loads((new / "cluster.json").read_text())
        [m2] = joined["masters"]
        assert m2["id"] == "master2" and joined["joined"] == str(old.resolve())
        assert [p["id"] for p in sync_of_url(first["url"])["peers"]] == ["master2"]
        # Bad requests are refused with the reason, and change nothing.
        r = httpx.post(f"{m2['url']}/admin/sync/seed", json={"peer": "nope"}, timeout=10)
        assert r.status_code == 404 and "'nope' is not a sync peer" in r.text, r.text
        r = httpx.post(f"{first['url']}/peer/seed", json={"peer": "x"}, timeout=10)
        assert r.status_code in (401, 403), r.text  # no peer credential
        assert sync_of_url(m2["url"])["seeding"]["phase"] == "done"
        for url, text in ((m2["url"], "b"), (first["url"], "c")):
            w = httpx.post(f"{url}/repositories/repo/statements",
                           content=f'INSERT DATA {{ <urn:j:{text}> <urn:p> "{text}" }}'.encode(),
                           headers={"content-type": "application/sparql-update"}, timeout=30)
            assert w.status_code == 204, w.text
        workers = [x["url"] for x in json.loads((old / "cluster.json").read_text())["workers"]]
        workers += [x["url"] for x in joined["workers"]]

        def states() -> set:
            return {(h["seq"], h["fingerprint"]) for h in
                    (httpx.get(f"{u}/health", timeout=10).json() for u in workers)}

        wait_until(lambda: len(states()) == 1, "every worker of both data centres identical",
                   timeout=60)
        sizes = {httpx.get(f"{u}/repositories/repo/size", timeout=10).text for u in workers}
        assert len(sizes) == 1 and int(sizes.pop()) > 3  # the sample data and the 3 writes
        r = subprocess.run([*cli, "down", "--dir", str(new)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert sync_of_url(first["url"])["peers"] == []
        w = httpx.post(f"{repo}/statements", content=b'INSERT DATA { <urn:j:d> <urn:p> "d" }',
                       headers={"content-type": "application/sparql-update"}, timeout=30)
        assert w.status_code == 204, w.text  # nobody to wait for
    finally:
        for d in (new, old):
            if (d / "cluster.json").exists():
                local.down(d)


def sync_of_url(url: str) -> dict:
    r = httpx.get(f"{url}/admin/sync", timeout=10)
    r.raise_for_status()
    return r.json()


def _seed_from(dcs, donor) -> int:
    """Five writes agreed everywhere, then a seed asked of ``donor`` for a data centre
    'joiner': the agreed position its image stands for."""
    from tests.clusters import insert
    from txinfra.auth import sign

    for i in range(5):
        assert insert(donor, f"urn:txc:before-{i}").status_code == 204
    dcs.wait_converged(timeout=60)
    body = b'{"peer": "joiner"}'
    url = f"{donor.master.url}/peer/seed"
    r = httpx.post(url, content=body, timeout=120, headers={
        "content-type": "application/json",
        "authorization": sign(dcs.secret[1], "POST", url, body)})
    assert r.status_code == 200, r.text
    return r.json()["pos"]


def test_a_donor_restarted_after_making_a_seed_still_holds_what_follows_it(tmp_path):
    """The donor's hold on what follows a seed point is persisted: killed (-9) and
    restarted right after it answered a seed, it still keeps its agreed entries after
    that point for the data centre it seeded, while its peer, which made no seed,
    forgets what both executed."""
    from tests.clusters import DataCentres, insert

    dcs = DataCentres(tmp_path, n=2, workers=1)
    try:
        dcs.start()
        m1, m2 = dcs.dcs
        pos = _seed_from(dcs, m1)
        assert pos >= 5
        m1.master.kill9()
        m1.master.start(wait=True)
        # More than a compaction batch (COMPACT_BATCH, 64) after the seed point.
        for i in range(100):
            assert insert(m1 if i % 2 else m2, f"urn:txc:after-{i}").status_code == 204
        dcs.wait_converged(timeout=120)
        wait_until(lambda: sync_of(m2)["floor"] > pos, "m2 forgot what both executed",
                   timeout=60)
        st = sync_of(m1)
        assert st["seq"] >= pos + 100 and st["floor"] <= pos, st
        assert st["agreed_held"] >= st["seq"] - pos, st
    finally:
        dcs.stop_all()


def test_a_donor_whose_horizon_passed_its_seed_hold_still_restarts(tmp_path):
    """LogMaxSize may forget what follows a seed point while the donor holds it. The
    hold is persisted; restarted (kill -9), the donor cannot keep it any more and starts
    without it, instead of refusing to start on it ('position .. is before our floor',
    multi-DC chaos seed 4319), and goes on agreeing writes."""
    from tests.clusters import DataCentres, insert

    dcs = DataCentres(tmp_path, n=2, workers=1, extra={0: {"log-max-size": "10"}})
    try:
        dcs.start()
        m1, m2 = dcs.dcs
        pos = _seed_from(dcs, m1)
        # More than a compaction batch (COMPACT_BATCH, 64) past the horizon of 10.
        for i in range(100):
            assert insert(m1 if i % 2 else m2, f"urn:txc:after-{i}").status_code == 204
        dcs.wait_converged(timeout=120)
        wait_until(lambda: sync_of(m1)["floor"] > pos, "m1's horizon passed the seed point",
                   timeout=60)
        m1.master.kill9()
        m1.master.start(wait=True)  # refused to start before the fix (exit 3)
        assert sync_of(m1)["floor"] > pos
        assert insert(m1, "urn:txc:after-restart").status_code == 204
        dcs.wait_converged(timeout=120)
    finally:
        dcs.stop_all()
