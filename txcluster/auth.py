"""The cluster credential: an HMAC over each request, keyed by a shared secret file.

The secret never travels: a request carries ``Authorization: TXC-HMAC ts=..,nonce=..,sig=..``
where sig = HMAC-SHA256(secret, method, path?query, ts, nonce, SHA-256(body)). The
receiver checks the signature, that ``ts`` is within a window of its clock, and that the
nonce was not seen in that window (a captured request cannot be re-sent). The secret is
read from a file that only its owner may read (mode 600); anything looser is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import threading
import time
from collections import OrderedDict
from pathlib import Path

import httpx

SCHEME = "TXC-HMAC"
WINDOW_S = 300


class CredentialError(Exception):
    """The secret file is unusable (missing, empty, readable by others)."""


def load_secret(path: str | Path) -> bytes:
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise CredentialError(f"cluster secret file {p} does not exist") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CredentialError(
            f"cluster secret file {p} is accessible by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):o}); it must be 600"
        )
    secret = p.read_bytes().strip()
    if len(secret) < 16:
        raise CredentialError(f"cluster secret file {p} must hold at least 16 bytes")
    return secret


def write_secret(path: str | Path) -> bytes:
    """Create a fresh secret file with mode 600 (used by `txcluster up` and tests)."""
    secret = secrets.token_hex(32).encode()
    p = Path(path)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secret + b"\n")
    os.chmod(p, 0o600)
    return secret


def _signature(secret: bytes, method: str, target: str, ts: str, nonce: str, body: bytes) -> str:
    msg = "\n".join([method.upper(), target, ts, nonce, hashlib.sha256(body).hexdigest()])
    return hmac.new(secret, msg.encode(), hashlib.sha256).hexdigest()


def sign(secret: bytes, method: str, target: str, body: bytes = b"") -> str:
    ts = str(int(time.time()))
    nonce = secrets.token_hex(12)
    sig = _signature(secret, method, target, ts, nonce, body)
    return f"{SCHEME} ts={ts},nonce={nonce},sig={sig}"


class HmacAuth(httpx.Auth):
    """httpx authentication that signs every request with the cluster secret."""

    requires_request_body = True

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def auth_flow(self, request: httpx.Request):  # type: ignore[override]
        target = request.url.raw_path.decode("ascii")
        request.headers["Authorization"] = sign(
            self._secret, request.method, target, request.content
        )
        yield request


class Verifier:
    """Checks signed requests; remembers recent nonces to refuse replays."""

    def __init__(self, secret: bytes, window_s: int = WINDOW_S) -> None:
        self._secret = secret
        self._window = window_s
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, header: str | None, method: str, target: str, body: bytes) -> str | None:
        """None when the request is authentic, else the reason it is not."""
        if not header:
            return "missing cluster credential"
        scheme, _, rest = header.partition(" ")
        if scheme != SCHEME:
            return "wrong credential scheme"
        try:
            fields = dict(part.split("=", 1) for part in rest.split(","))
            ts, nonce, sig = fields["ts"], fields["nonce"], fields["sig"]
            when = int(ts)
        except (ValueError, KeyError):
            return "malformed cluster credential"
        now = time.time()
        if abs(now - when) > self._window:
            return "cluster credential expired (clock skew or replay)"
        expected = _signature(self._secret, method, target, ts, nonce, body)
        if not hmac.compare_digest(expected, sig):
            return "wrong cluster credential"
        with self._lock:
            while self._seen and next(iter(self._seen.values())) < now - 2 * self._window:
                self._seen.popitem(last=False)
            if nonce in self._seen:
                return "replayed cluster credential"
            self._seen[nonce] = now
        return None
