"""HTTPS for tests: a CA and a node certificate made at test time, and ``TlsCluster``, a
LocalCluster whose every node serves HTTPS only (shared by the TLS and pipeline tests).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import subprocess
from pathlib import Path

import httpx

from tests.clusters import LocalCluster

UPDATE = {"content-type": "application/sparql-update"}


def make_ca_and_cert(folder: Path, ca_name: str = "txcluster test CA") -> dict[str, Path]:
    """A CA and a certificate for 127.0.0.1 / localhost signed by it (PEM files; the key
    mode 600). The cryptography package when installed, else the openssl command.
    Two CAs meant to sit in one bundle need two names (a verifier finds the issuer by
    name)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {name: folder / f"{name}.pem" for name in ("ca", "cert", "key", "ca-key")}
    try:
        _with_cryptography(paths, ca_name)
    except ImportError:
        _with_openssl(folder, paths, ca_name)
    for key in ("key", "ca-key"):
        paths[key].chmod(0o600)
    return paths


def _with_cryptography(paths: dict[str, Path], ca_name_text: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name_text)])
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


def _with_openssl(folder: Path, paths: dict[str, Path], ca_name: str) -> None:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", str(paths["ca-key"]), "-out", str(paths["ca"]), "-days", "1",
        "-subj", f"/CN={ca_name}")
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
