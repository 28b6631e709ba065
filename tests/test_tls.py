"""Optional TLS (txinfra/tls.py) on real processes: a CA and node certificates made at
test time, a master and workers serving HTTPS only, the master verifying its workers
against tls-ca-file, workers verifying each other's image sources.

* writes and reads through the master over https, replicated to every worker over https;
* a full replication (an image pulled worker to worker) over https;
* a client without the CA is refused by verification, plain http to an https port fails;
* a master without the CA cannot talk to the workers (verification is never off);
* peered masters over https: the peer API is served by the master's one HTTPS server,
  the sync driver verifies peers with tls-ca-file; writes on each master are agreed and
  executed on both; a peer presenting a certificate of another CA is refused, logged,
  and nothing is agreed;
* configuration: a certificate without its key, a key readable by others, a file that is
  not PEM are errors naming the key.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pyoxigraph as ox
import pytest
from click.testing import CliRunner

from tests.procs import free_port, make_secret
from tests.tlslab import TlsCluster, make_ca_and_cert, tls_props
from txcluster.cli import main
from txcluster.local import master_node


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, Path]:
    return make_ca_and_cert(tmp_path_factory.mktemp("tls"))


@pytest.mark.processes
def test_cluster_over_https(tmp_path, certs):
    c = TlsCluster(tmp_path / "c", make_secret(tmp_path / "secrets"), 2, certs)
    try:
        c.start()
        assert c.master.url.startswith("https://")
        assert all(w.url.startswith("https://") for w in c.workers)
        for i in range(3):
            assert c.update(f"INSERT DATA {{ <urn:tls:{i}> <urn:tls:p> {i} }}").status_code \
                == 204
        status = c.wait_in_sync()
        assert all(w["url"].startswith("https://") for w in status["workers"])
        for w in c.workers:
            assert len(c.select("SELECT * { ?s <urn:tls:p> ?o }", w.url)) == 3
        # A full replication (image pulled worker to worker over https, verified by the
        # puller's tls-ca-file): a worker changed behind the master's back.
        victim = c.workers[1]
        victim.stop()
        store = ox.Store(str(Path(victim.properties["data-dir"]) / "current" / "store"))
        store.add(ox.Quad(ox.NamedNode("urn:tls:rogue"), ox.NamedNode("urn:tls:p"),
                          ox.Literal("x")))
        store.flush()
        del store
        victim.start()
        c.wait_in_sync()
        assert f"replication of {victim.url} done" in c.master.log_tail(100_000)
        assert set(c.fingerprints().values()) == {c.status()["head"]["fingerprint"]}
        # Without the CA a client's verification fails; plain http gets no answer.
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{c.master.url}/health", timeout=10)
        with pytest.raises(httpx.HTTPError):
            httpx.get(c.master.url.replace("https://", "http://") + "/health", timeout=10)
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{c.workers[0].url}/health", timeout=10)
        # The operator's commands check the master with --ca-file, and refuse it without.
        cli, m, ca = CliRunner(), c.master.url, str(certs["ca"])
        for command in (["status", "--master", m], ["wait-sync", "--master", m],
                        ["backup", "tls", "--master", m]):
            refused = cli.invoke(main, command)
            assert refused.exit_code != 0 and "CERTIFICATE_VERIFY_FAILED" in \
                refused.output, (command, refused.output)
            done = cli.invoke(main, [*command, "--ca-file", ca])
            assert done.exit_code == 0, (command, done.output)
            if command[0] == "wait-sync":
                assert "2 workers in sync at seq 3" in done.output, done.output
        bad = cli.invoke(main, ["status", "--master", m, "--ca-file", str(tmp_path)])
        assert bad.exit_code == 2 and "Invalid value for --ca-file: cannot be read" in \
            bad.output, bad.output
    finally:
        c.stop_all()


@pytest.mark.processes
def test_master_without_the_ca_does_not_trust_workers(tmp_path, certs):
    """Verification is never off: a master that does not know the workers' CA refuses
    them (its workers stay OFF, the reason names the certificate)."""
    c = TlsCluster(tmp_path / "c", make_secret(tmp_path / "secrets"), 1, certs)
    try:
        for w in c.workers:
            w.start()
        del c.master.properties["tls-ca-file"]
        c.master.start(wait=False)  # (its readiness check would use its own CA)
        status = c.wait_for(lambda s: s["workers"][0]["last_error"], "a worker error", 30)
        assert status["workers"][0]["status"] == "OFF"
        assert "certificate" in status["workers"][0]["last_error"].lower(), status
    finally:
        c.stop_all()


# ---- peered masters over https (the peer API and the sync driver's client) ----


class TlsDataCentres:
    """Two data centres (a master and one worker each), the masters sync peers at https
    URLs. ``certs[i]``: what data centre i's nodes serve (a CA and a certificate signed
    by it); ``trust[i]``: the CA bundle its nodes verify others with (tls-ca-file)."""

    def __init__(self, root: Path, certs: list[dict[str, Path]], trust: list[Path],
                 **master_extra: str) -> None:
        secret = make_secret(root / "secrets")
        ports = [free_port() for _ in certs]
        self.dcs: list[TlsCluster] = []
        for i, dc_certs in enumerate(certs):
            other = 1 - i
            dc = TlsCluster(root / f"dc{i + 1}", secret, 1, dc_certs, master_port=ports[i],
                            node_id=f"m{i + 1}", **{
                                "data-centre": f"dc{i + 1}", "sync-idle-interval-ms": "300",
                                "peer.1.id": f"m{other + 1}",
                                "peer.1.url": f"https://127.0.0.1:{ports[other]}",
                                **master_extra})
            for node in dc.nodes:
                node.properties["tls-ca-file"] = str(trust[i])
            self.dcs.append(dc)

    def start(self) -> TlsDataCentres:
        for dc in self.dcs:
            for w in dc.workers:
                w.start()
        for dc in self.dcs:
            dc.master.start()
        for dc in self.dcs:
            # Not wait_in_sync: a peered master is writable only once its peers answer.
            dc.wait_for(lambda s: all(w["status"] == "ON" for w in s["workers"]),
                        "workers ON")
        return self

    def stop_all(self) -> None:
        for dc in self.dcs:
            dc.stop_all()

    @staticmethod
    def sync(dc: TlsCluster) -> dict:
        r = httpx.get(f"{dc.master.url}/admin/sync", timeout=10, verify=dc.verify)
        r.raise_for_status()
        return r.json()

    @staticmethod
    def agreed(dc: TlsCluster) -> list[str]:
        r = httpx.get(f"{dc.master.url}/admin/sync/agreed", params={"limit": 5000},
                      timeout=10, verify=dc.verify)
        r.raise_for_status()
        return [e["txid"] for e in r.json()]

    def wait_converged(self, timeout: float = 60.0) -> list[dict]:
        """Both masters at one agreed position, all of it executed on their workers."""
        deadline = time.monotonic() + timeout
        last: list[dict] = []
        while time.monotonic() < deadline:
            last = [self.sync(dc) for dc in self.dcs]
            if (len({s["seq"] for s in last}) == 1
                    and all(s["incoming"] == 0 and s["executed_seq"] == s["seq"]
                            for s in last)
                    and all(TlsCluster.in_sync(dc.status()) for dc in self.dcs)):
                return last
            time.sleep(0.1)
        logs = "\n".join(dc.master.log_tail(3000) for dc in self.dcs)
        raise AssertionError(f"not converged after {timeout}s: {last}\n{logs}")


@pytest.mark.processes
def test_peered_masters_agree_over_https(tmp_path, certs):
    """The peer API is served by the master's one HTTPS server (tls-cert-file), and the
    sync driver verifies its peers with tls-ca-file: a write through each master is
    agreed and executed in both data centres, every peer call over https."""
    dcs = TlsDataCentres(tmp_path, [certs, certs], [certs["ca"], certs["ca"]])
    try:
        dcs.start()
        for i, dc in enumerate(dcs.dcs):
            r = dc.update(f"INSERT DATA {{ <urn:tls:peer{i}> <urn:tls:p> {i} }}")
            assert r.status_code == 204, r.text
        syncs = dcs.wait_converged()
        assert syncs[0]["seq"] >= 2
        assert dcs.agreed(dcs.dcs[0]) == dcs.agreed(dcs.dcs[1])
        for s in syncs:
            [peer] = s["peers"]
            assert peer["url"].startswith("https://") and peer["reachable"], s
            assert s["state"] == "connected" and not s["divergences"], s
        for dc in dcs.dcs:
            rows = dc.select("SELECT ?s { ?s <urn:tls:p> ?o }", dc.workers[0].url)
            assert {r["s"] for r in rows} == {"urn:tls:peer0", "urn:tls:peer1"}
        # The peer API itself takes no plain http.
        with pytest.raises(httpx.HTTPError):
            httpx.post(dcs.dcs[0].master.url.replace("https://", "http://") + "/peer/status",
                       content=b"{}", timeout=10)
    finally:
        dcs.stop_all()


@pytest.mark.processes
def test_a_peer_with_a_certificate_of_another_ca_is_refused(tmp_path, certs):
    """m2 serves a certificate of a CA that m1 does not trust (m2 trusts both, so its
    own calls to m1 go through): m1 refuses to talk to m2 and logs why, so nothing m1
    takes is agreed, and m2 and its worker change nothing."""
    rogue = make_ca_and_cert(tmp_path / "rogue", "txcluster rogue CA")
    both = tmp_path / "both-cas.pem"
    both.write_bytes(certs["ca"].read_bytes() + rogue["ca"].read_bytes())
    dcs = TlsDataCentres(tmp_path, [certs, rogue], [certs["ca"], both],
                         **{"request-timeout-s": "3"})
    m1, m2 = dcs.dcs
    try:
        dcs.start()
        m2_worker_before = m2.worker_states()
        r = m1.update("INSERT DATA { <urn:tls:unagreed> <urn:tls:p> 1 }", timeout=30)
        assert r.status_code == 504 and "not yet agreed" in r.text, r.text
        peer = dcs.sync(m1)["peers"][0]
        assert peer["id"] == "m2" and peer["reachable"] is False, peer
        log = m1.master.log_tail(20_000)
        assert f"ERROR txinfra.tls: TLS: {m2.master.url} presented a certificate this " \
               f"node does not trust (unable to get local issuer certificate; trusted: " \
               f"tls-ca-file" in log, log
        assert dcs.agreed(m1) == [] and dcs.agreed(m2) == []
        assert m2.worker_states() == m2_worker_before
        assert not m2.select("SELECT * { <urn:tls:unagreed> ?p ?o }", m2.workers[0].url)
    finally:
        dcs.stop_all()


@pytest.mark.parametrize(("change", "message"), [
    ({"tls-key-file": None}, "'tls-cert-file' needs 'tls-key-file'"),
    ({"tls-cert-file": None}, "'tls-key-file' needs 'tls-cert-file'"),
    ({"tls-ca-file": "/nonexistent/ca.pem"}, "invalid value for 'tls-ca-file'"),
    ({"tls-cert-file": "NOT_PEM"}, "is not a PEM file"),
    ({"tls-key-file": "WORLD_READABLE"}, "accessible by group or others (mode 644)"),
    ({"tls-cert-file": "CA_AS_CERT"}, "do not make a usable pair"),
])
def test_tls_configuration_errors_name_the_key(tmp_path, certs, change, message):
    from master_service.config import check_config
    from worker_service.config import WorkerConfig

    props = tls_props(certs)
    for key, value in change.items():
        if value is None:
            del props[key]
        elif value == "NOT_PEM":
            (tmp_path / "x.pem").write_text("hello")
            props[key] = str(tmp_path / "x.pem")
        elif value == "WORLD_READABLE":
            copy = tmp_path / "key.pem"
            copy.write_bytes(certs["key"].read_bytes())
            copy.chmod(0o644)
            props[key] = str(copy)
        elif value == "CA_AS_CERT":
            props[key] = str(certs["ca"])
        else:
            props[key] = value
    secret = make_secret(tmp_path / "secrets")[0]
    master = master_node(tmp_path / "m", secret, "m1", ["https://127.0.0.1:7301"], **props)
    master.write_config()
    problems = check_config(master.config)
    assert any(message in p for p in problems), problems
    worker = tmp_path / "worker.properties"
    worker.write_text("".join(f"{k}={v}\n" for k, v in {
        "repository-id": "repo", "data-dir": str(tmp_path / "w"),
        "listen-address": "127.0.0.1:7301", "cluster-secret-file": str(secret),
        **props}.items()))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        WorkerConfig.load(worker)
