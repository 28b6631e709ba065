"""Optional TLS (txcluster/tls.py) on real processes: a CA and node certificates made at
test time, a master and workers serving HTTPS only, the master verifying its workers
against tls-ca-file, workers verifying each other's image sources.

* writes and reads through the master over https, replicated to every worker over https;
* a full replication (an image pulled worker to worker) over https;
* a client without the CA is refused by verification, plain http to an https port fails;
* a master without the CA cannot talk to the workers (verification is never off);
* configuration: a certificate without its key, a key readable by others, a file that is
  not PEM are errors naming the key.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import subprocess
from pathlib import Path

import httpx
import pyoxigraph as ox
import pytest

from tests.conftest import LocalCluster
from tests.procs import make_secret
from txcluster.local import master_node

UPDATE = {"content-type": "application/sparql-update"}


def make_ca_and_cert(folder: Path) -> dict[str, Path]:
    """A CA and a certificate for 127.0.0.1 / localhost signed by it (PEM files; the key
    mode 600). The cryptography package when installed, else the openssl command."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / f"{name}.pem" for name in ("ca", "cert", "key", "ca-key")}
    try:
        _with_cryptography(paths)
    except ImportError:
        _with_openssl(folder, paths)
    for key in ("key", "ca-key"):
        paths[key].chmod(0o600)
    return paths


def _with_cryptography(paths: dict[str, Path]) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "txcluster test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    paths["ca"].write_bytes(ca.public_bytes(pem))
    paths["cert"].write_bytes(cert.public_bytes(pem))
    for name, k in (("key", key), ("ca-key", ca_key)):
        paths[name].write_bytes(k.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))


def _with_openssl(folder: Path, paths: dict[str, Path]) -> None:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", str(paths["ca-key"]), "-out", str(paths["ca"]), "-days", "1",
        "-subj", "/CN=txcluster test CA")
    csr = folder / "node.csr"
    run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(paths["key"]), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    ext = folder / "san.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", str(csr), "-CA", str(paths["ca"]), "-CAkey",
        str(paths["ca-key"]), "-CAcreateserial", "-out", str(paths["cert"]), "-days", "1",
        "-extfile", str(ext))


def tls_props(certs: dict[str, Path]) -> dict[str, str]:
    return {"tls-cert-file": str(certs["cert"]), "tls-key-file": str(certs["key"]),
            "tls-ca-file": str(certs["ca"])}


class TlsCluster(LocalCluster):
    """A LocalCluster whose every node serves HTTPS; its helpers verify with the CA."""

    def __init__(self, root: Path, secret: tuple, workers: int, certs: dict[str, Path],
                 **master_extra: str) -> None:
        self.certs = certs
        super().__init__(root, secret, workers, **tls_props(certs), **master_extra)
        # The workers' URLs in cluster.properties and the master's own URL are https.
        for w in self.workers:
            w.properties.update(tls_props(certs))
        self.master.properties.update(
            {f"worker.{i}.url": w.url for i, w in enumerate(self.workers, 1)},
            **{"master-url": self.master.url})

    def status(self) -> dict:
        r = httpx.get(f"{self.master.url}/admin/status", timeout=10, verify=self.verify)
        r.raise_for_status()
        return r.json()

    @property
    def verify(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certs["ca"]))

    def update(self, text: str, timeout: float = 30, **headers: str) -> httpx.Response:
        return httpx.post(f"{self.repo_url}/statements", content=text.encode(),
                          headers={**UPDATE, **headers}, timeout=timeout, verify=self.verify)

    def select(self, query: str, base: str | None = None, **headers: str) -> list[dict]:
        url = f"{base or self.master.url}/repositories/{self.repository_id}"
        r = httpx.get(url, params={"query": query}, timeout=30, verify=self.verify,
                      headers={"accept": "application/sparql-results+json", **headers})
        assert r.status_code == 200, f"{url}: {r.status_code} {r.text}"
        return [{k: v["value"] for k, v in b.items()} for b in r.json()["results"]["bindings"]]

    def worker_states(self) -> dict[str, dict]:
        return {w.url: httpx.get(f"{w.url}/health", timeout=10, verify=self.verify).json()
                for w in self.workers}


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, Path]:
    return make_ca_and_cert(tmp_path_factory.mktemp("tls"))


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
    finally:
        c.stop_all()


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
