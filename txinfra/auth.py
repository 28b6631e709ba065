"""The cluster credential: an HMAC over each request, keyed by a shared secret file.

The secret never travels: a request carries ``Authorization: TXC-HMAC ts=..,nonce=..,sig=..``
where sig = HMAC-SHA256(secret, method, Host, path?query, ts, nonce, SHA-256(body)). The
receiver checks the signature, that ``ts`` is within a window of its clock, that the
nonce was not seen in that window (a captured request cannot be re-sent to it), and that
the Host the request was signed for is one of its own (``NodeAuthorities``): each node
keeps its own nonce cache, so without the Host a request captured on its way to one
worker could be replayed to another worker within the window. The secret is read from a
file that only its owner may read (mode 600); anything looser is refused.

The Host signed is the Host header as sent (``host_header``), compared as received: a
proxy in front of a node must pass the Host header on unchanged. The path signed is the
path as the receiver decodes it (percent-escapes undone), the query string as sent
(``signed_target``). A sender of a version before the Host was signed gets "wrong
cluster credential": masters and workers are upgraded together.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import stat
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

SCHEME = "TXC-HMAC"
_LOWER_HEX = frozenset("0123456789abcdef")
WINDOW_S = 300
# The ports a Host header without one stands for. http's or https's, whichever the
# sender used: behind a TLS-terminating proxy the node cannot tell which.
DEFAULT_PORTS = (80, 443)
_WILDCARDS = ("", "0.0.0.0", "::")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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


# ---- the signature ----

def host_header(url: str) -> str:
    """The Host header of a request to ``url``: its authority without user info.
    The signed-session helper (txinfra.signed_session) sends exactly this."""
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    if not netloc:
        raise ValueError(f"'{url}' is not an absolute http(s) URL")
    return netloc.lower()


def signed_target(raw_path: str, raw_query: str = "") -> str:
    """What is signed of a request's target: its path decoded as the receiver decodes it
    (ASGI's ``path``, which txinfra.http_auth checks), and the query string as sent."""
    return unquote(raw_path or "/") + (f"?{raw_query}" if raw_query else "")


def _signature(secret: bytes, method: str, host: str, target: str, ts: str, nonce: str,
               body: bytes) -> str:
    msg = "\n".join([method.upper(), host.strip().lower(), target, ts, nonce,
                     hashlib.sha256(body).hexdigest()])
    return hmac.new(secret, msg.encode(), hashlib.sha256).hexdigest()


def sign(secret: bytes, method: str, url: str, body: bytes = b"") -> str:
    """The Authorization header of a request to the absolute ``url`` (the receiving node
    is part of what is signed, so a bare path is refused)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"sign() needs the absolute http(s) URL of the request (it binds "
                         f"the receiving node), got '{url}'")
    return sign_for(secret, method, host_header(url), signed_target(parts.path, parts.query),
                    body)


def sign_for(secret: bytes, method: str, host: str, target: str, body: bytes = b"") -> str:
    """The Authorization header for a request with this Host header and this target
    (``signed_target``: the decoded path, ``?`` and the query as sent)."""
    ts = str(int(time.time()))
    nonce = secrets.token_hex(12)
    sig = _signature(secret, method, host, target, ts, nonce, body)
    return f"{SCHEME} ts={ts},nonce={nonce},sig={sig}"


class HmacAuth(httpx.Auth):
    """httpx authentication that signs every request with the cluster secret."""

    requires_request_body = True

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def auth_flow(self, request: httpx.Request):  # type: ignore[override]
        # The Host header httpx will send (set from the URL when the request was built).
        path, _, query = request.url.raw_path.decode("ascii").partition("?")
        request.headers["Authorization"] = sign_for(
            self._secret, request.method, request.headers["host"],
            signed_target(path, query), request.content
        )
        yield request


# ---- which Host headers are this node's ----

def split_authority(text: str) -> tuple[str, int | None]:
    """(host, port or None) of a Host header or an ``advertised-hosts`` entry: the host
    lowercased, an IPv6 address without its brackets. ValueError if it is not one."""
    text = text.strip()
    if not text or any(c in text for c in "/?#@ \t"):
        raise ValueError(f"'{text}' is not host or host:port")
    parts = urlsplit(f"//{text}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"bad port in '{text}'") from None
    if not parts.hostname:
        raise ValueError(f"'{text}' is not host or host:port")
    return parts.hostname, port


def url_authority(url: str) -> str:
    """``host:port`` of a URL, the port made explicit (e.g. master-url -> an authority
    that its peers' Host headers are checked against)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_advertised_hosts(text: str) -> tuple[str, ...]:
    """Configuration value of ``advertised-hosts``: comma-separated host or host:port."""
    entries = tuple(e.strip() for e in text.split(",") if e.strip())
    if not entries:
        raise ValueError("expected host or host:port entries separated by commas")
    for entry in entries:
        split_authority(entry)  # names the bad entry
    return entries


def _ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _is_local_address(ip: IPAddress) -> bool:
    """Whether ``ip`` is an address of this machine (of this network namespace): binding a
    socket to it succeeds only then. Asked at request time (NodeAuthorities keeps an answer
    ACCEPTS_REMEMBER_S), so addresses added after the start (a service IP, DHCP) count; no
    interface enumeration library needed. (With the net.ipv*.ip_nonlocal_bind sysctl on,
    every address binds: list advertised-hosts and bind listen-address to one address
    instead of a wildcard.)"""
    if ip.is_unspecified or ip.is_multicast:
        return False
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.bind((str(ip), 0))
    except OSError:
        return False
    return True


def _resolve(host: str) -> set[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return set()  # a name that does not resolve (yet) still counts as a name
    out: set[IPAddress] = set()
    for info in infos:
        if (ip := _ip(str(info[4][0]).partition("%")[0])) is not None:
            out.add(ip)
    return out


# How long NodeAuthorities keeps its answer for a Host header, and how many it keeps.
ACCEPTS_REMEMBER_S = 5.0
ACCEPTS_KEPT = 256


class NodeAuthorities:
    """The Host headers (host:port) a node takes as addressed to itself.

    A node is its listening port at its own addresses and names:

    * bound to a wildcard (0.0.0.0, ::): any address of this machine (``_is_local_address``),
      ``localhost``, the machine's host name and FQDN;
    * bound to one address or name (loopback in tests, a service IP in a network
      namespace): that address (a name: the name and what it resolves to at start), and
      ``localhost`` when it is a loopback address;
    * plus ``advertised`` entries: names or ``host:port`` the node is reached at that it
      cannot see itself (a DNS alias, a NAT or port mapping, a proxy that keeps the Host
      header; a master's master-url). An entry without a port takes the listening port.

    A Host header without a port stands for port 80 or 443 (DEFAULT_PORTS).

    Every signed request asks (``Verifier.check``, once the signature holds), and the
    answer for a Host took 6 us in process (split, address parsed) and 22 us on a
    wildcard asked for an address (a socket bound to it): answers are kept for
    ``remember_s`` seconds (an address added to the machine counts from then on), at
    most ACCEPTS_KEPT of them.
    """

    def __init__(self, listen_host: str, port: int, advertised: Iterable[str] = (),
                 remember_s: float = ACCEPTS_REMEMBER_S) -> None:
        self.port = port
        self._remember_s = remember_s
        # Host -> (answer, until). Asked from any thread: dict operations are atomic, and
        # a race between two of them only asks the question again.
        self._answers: dict[str | None, tuple[bool, float]] = {}
        self.wildcard = listen_host in _WILDCARDS
        self._names: set[str] = set()
        self._ips: set[IPAddress] = set()
        if self.wildcard:
            self._names |= {"localhost", socket.gethostname().lower(),
                            socket.getfqdn().lower()}
        else:
            host = listen_host.strip("[]").lower()
            if (ip := _ip(host)) is not None:
                self._ips.add(ip)
            else:
                self._names.add(host)
                self._ips |= _resolve(host)
            if any(ip.is_loopback for ip in self._ips) or host == "localhost":
                self._names.add("localhost")
        self._advertised: set[tuple[str, int]] = set()
        for entry in advertised:
            h, p = split_authority(entry)
            self._advertised.add((h, p if p is not None else port))

    def accepts(self, host: str | None) -> bool:
        """Whether a request with this Host header is addressed to this node."""
        now = time.monotonic()
        kept = self._answers.get(host)
        if kept is not None and now < kept[1]:
            return kept[0]
        answer = self._answer(host)
        if self._remember_s > 0:
            if len(self._answers) >= ACCEPTS_KEPT:
                self._answers.clear()
            self._answers[host] = (answer, now + self._remember_s)
        return answer

    @property
    def remembered(self) -> int:
        """How many answers are kept."""
        return len(self._answers)

    def _answer(self, host: str | None) -> bool:
        try:
            name, port = split_authority(host or "")
        except ValueError:
            return False
        return any(self._accepts(name, p)
                   for p in ((port,) if port is not None else DEFAULT_PORTS))

    def _accepts(self, host: str, port: int) -> bool:
        if (host, port) in self._advertised:
            return True
        if port != self.port:
            return False
        if host in self._names:
            return True
        ip = _ip(host.partition("%")[0])
        if ip is None:
            return False
        return _is_local_address(ip) if self.wildcard else ip in self._ips

    def describe(self) -> str:
        """What this node answers to, for a refusal's log line and message."""
        where = ["any address of this machine"] if self.wildcard else \
            sorted(str(ip) for ip in self._ips)
        own = ", ".join([*where, *sorted(self._names)])
        text = f"port {self.port} at {own}"
        if self._advertised:
            text += "; advertised: " + ", ".join(
                sorted(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self._advertised))
        return text


class Verifier:
    """Checks signed requests: authentic, recent, addressed to this node (``node``), and
    not seen before (a cache of recent nonces refuses replays)."""

    def __init__(self, secret: bytes, node: NodeAuthorities,
                 window_s: int = WINDOW_S) -> None:
        self._secret = secret
        self.node = node
        self._window = window_s
        # The nonces seen, by their timestamp: a nonce must be remembered while its
        # timestamp is accepted (until ts + window; after it the time check refuses a
        # replay), and a replay carries the same timestamp, so one set answers for it and
        # a whole second's set is forgotten at once. Sets of ints (the nonce's hex value)
        # hold a nonce in ~73 bytes where an ordered dict of strings with expiry times
        # took ~181 (measured with tracemalloc): a peered master under steady writes
        # remembers tens of thousands (~20,000 at 38 writes/s in issue 16's soak), and
        # their cache was the largest growth of its memory.
        self._seen: dict[int, set[int | str]] = {}
        self._forgotten_below = int(time.time()) - window_s  # timestamps swept so far
        self._lock = threading.Lock()

    def check(self, header: str | None, method: str, host: str | None, target: str,
              body: bytes, remember: bool = True) -> str | None:
        """None when the request is authentic, else the reason it is not. ``host`` is the
        Host header as received. ``remember=False``: a look before the request's own
        check (the worker's epoch fence), its nonce not remembered yet."""
        if not header:
            return "missing cluster credential"
        scheme, _, rest = header.partition(" ")
        if scheme != SCHEME:
            return "wrong credential scheme"
        try:
            fields = dict(part.split("=", 1) for part in rest.split(","))
            ts, nonce, sig = fields["ts"], fields["nonce"], fields["sig"]
        except (ValueError, KeyError):
            return "malformed cluster credential"
        # ts: 1-20 ASCII digits (int() takes other digits, "_", and thousands of digits,
        # too large to compare with the float clock: a 500); sig: ASCII (compare_digest
        # raises TypeError on other text: a 500).
        if not (ts.isascii() and ts.isdigit() and len(ts) <= 20 and sig.isascii()):
            return "malformed cluster credential"
        when = int(ts)
        now = time.time()
        if abs(now - when) > self._window:
            return "cluster credential expired (clock skew or replay)"
        if not host:
            return "request without a Host header (the credential signs it)"
        expected = _signature(self._secret, method, host, target, ts, nonce, body)
        if not hmac.compare_digest(expected, sig):
            # (A sender of a version that did not sign the Host also ends here.)
            return "wrong cluster credential (another secret, or signed for another " \
                "method, Host, path or body)"
        # Authentic, so the sender meant this Host: is it us? (Checked before the nonce is
        # remembered: a refused request changes nothing, not even the cache.)
        if not self.node.accepts(host):
            return (f"cluster credential for another node: Host '{host}' is not this node "
                    f"({self.node.describe()}; a name or address it is reached at that it "
                    f"cannot see belongs in advertised-hosts)")
        # Our senders' nonces (24 lower-case hex digits, sign_for) as ints: one int per
        # such string, and any other nonce stays a string (never equal to an int).
        key: int | str = int(nonce, 16) if len(nonce) == 24 and \
            _LOWER_HEX.issuperset(nonce) else nonce
        with self._lock:
            self._forget(now)
            seen = self._seen.setdefault(when, set())
            if key in seen:
                return "replayed cluster credential"
            if remember:
                seen.add(key)
        return None

    def _forget(self, now: float) -> None:
        """Forget the nonces whose timestamp is no longer accepted (ts < now - window)."""
        below = int(now) - self._window
        if below - self._forgotten_below > len(self._seen):  # a clock jump: by the keys
            gone = [ts for ts in self._seen if ts < below]
        else:
            gone = [ts for ts in range(self._forgotten_below, below) if ts in self._seen]
        for ts in gone:
            del self._seen[ts]
        self._forgotten_below = max(self._forgotten_below, below)

    @property
    def remembered(self) -> int:
        """How many nonces are remembered (replays they refuse are still possible)."""
        with self._lock:
            return sum(map(len, self._seen.values()))
