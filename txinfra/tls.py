"""Optional TLS on the HTTP APIs (issue 9): certificates from configuration.

Both node kinds take the same keys (worker.properties and cluster.properties):

    tls-cert-file=/etc/txcluster/tls/node.crt   # PEM certificate chain this node serves
    tls-key-file=/etc/txcluster/tls/node.key    # its private key (mode 600, like secrets)
    tls-ca-file=/etc/txcluster/tls/ca.crt       # CA bundle this node trusts as a client

A node with a certificate serves HTTPS only (http_server.run's ssl_certfile / ssl_keyfile); a
master serves its client, admin and peer APIs from one server, so all of them. As a
client — a master calling its workers or its peer masters (https peer.<n>.url), a worker
pulling an image from another worker — a node verifies the server against tls-ca-file
(a bundle may hold several CAs: the workers' and the other data centres'), or against
the system's CAs without it; verification is never turned off. Absent keys: plain HTTP,
as before.
"""

from __future__ import annotations

import ssl
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

KEYS = ("tls-cert-file", "tls-key-file", "tls-ca-file")


def parse_pem_file(text: str) -> Path:
    """A PEM file that exists and is readable (checked when the configuration loads, so
    a typo is a configuration error naming the key, not a failure at the first call)."""
    if not text:
        raise ValueError("must be a path")
    path = Path(text)
    try:
        head = path.read_bytes()[:4096]
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in head:
        raise ValueError(f"{path} is not a PEM file")
    return path


def problems(values: Mapping[str, Any]) -> list[str]:
    """Cross-key problems: a certificate needs its key and the other way round; the key
    must not be readable by group or others (as the cluster secret)."""
    cert, key = values.get("tls-cert-file"), values.get("tls-key-file")
    out: list[str] = []
    if (cert is None) != (key is None):
        have, missing = ("tls-cert-file", "tls-key-file") if cert else \
            ("tls-key-file", "tls-cert-file")
        out.append(f"'{have}' needs '{missing}'")
    if key is not None:
        mode = stat.S_IMODE(Path(key).stat().st_mode)
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            out.append(f"'tls-key-file' {key} is accessible by group or others "
                       f"(mode {mode:o}); it must be 600")
    if cert is not None and key is not None:
        try:  # the pair must match: found now rather than when the server starts
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:
            out.append(f"'tls-cert-file' and 'tls-key-file' do not make a usable pair: {exc}")
    ca = values.get("tls-ca-file")
    if ca is not None:
        try:
            ssl.create_default_context(cafile=str(ca))
        except (ssl.SSLError, OSError) as exc:
            out.append(f"'tls-ca-file' {ca} holds no usable CA certificate: {exc}")
    return out


def server_options(cert: Path | None, key: Path | None) -> dict[str, str]:
    """http_server.run keyword arguments: HTTPS with this pair, or nothing (plain HTTP)."""
    if cert is None or key is None:
        return {}
    return {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}


def client_context(ca_file: Path | None) -> ssl.SSLContext:
    """The context a node verifies servers with: tls-ca-file, else the system's CAs.
    Used for https URLs only; plain http URLs ignore it."""
    return ssl.create_default_context(cafile=str(ca_file) if ca_file else None)


def client_verify(cadata: str | None) -> ssl.SSLContext | bool:
    """httpx's ``verify`` for a client command (``--ca-file``): a context of the CA
    bundle's PEM text, else True (httpx's default: the system's CAs, or SSL_CERT_FILE);
    never unchecked. The Spark tasks build theirs with part_push.tls_context."""
    return ssl.create_default_context(cadata=cadata) if cadata else True


def read_ca_file(path: str) -> str:
    """The PEM text of a CA bundle that a client command checks https nodes with
    (``--ca-file``); ValueError saying what is wrong with it. The text rather than the
    path: the pipeline sends it to its Spark tasks (spark_pipeline/part_push.py)."""
    try:
        text = Path(path).read_text(encoding="ascii")
        if not text:  # ssl would take the system's CAs instead, silently
            raise ValueError(f"--ca-file {path}: is empty")
        ssl.create_default_context(cadata=text)
    except ssl.SSLError as exc:  # (an OSError too: first)
        raise ValueError(f"--ca-file {path}: holds no usable PEM CA certificate: {exc}"
                         ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--ca-file {path}: cannot be read: {exc}") from None
    return text
