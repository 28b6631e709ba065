"""cluster.properties: the master's configuration file (Java properties).

Keys are the documented MBean attribute names with camel case mapped to hyphens
(docs/design/cluster-basics.md#configuration-clusterproperties-and-workerproperties):
NetSpeedBitsPerSec -> net-speed-bits-per-sec, NodeID -> node-id; workers
are ``worker.<n>.url`` and synchronised peers ``peer.<n>.id`` / ``peer.<n>.url``
(same section). Runtime changes (admin API, JMX
attribute writes) persist here through ``update_properties``, which validates the whole
resulting file exactly as a restart would before it writes anything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyoxigraph as ox

from rdfcore.sparql_text import uses_service
from txinfra import node_keys, query_limits, tls
from txinfra.auth import parse_advertised_hosts
from txinfra.properties import (
    ConfigError,
    Key,
    Schema,
    duplicate_keys,
    parse_bool,
    parse_choice,
    parse_float,
    parse_int,
    parse_nonempty,
    parse_path,
    parse_url,
    read_properties,
    rewrite_properties,
)

# ---- value parsers specific to the master ----

_NODE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


def parse_node_id(text: str) -> str:
    """A node id is unique across the whole cluster, across data centres (sync protocol)."""
    if not _NODE_ID.fullmatch(text):
        raise ValueError(f"'{text}' is not a node id (letters, digits, '_', '-'; max 128)")
    return text


# MaxPeerLag's default, seconds: see the max-peer-lag-s key below and docs/operations.md
DEFAULT_MAX_PEER_LAG_S = 20.0


def _finite(parse: Any) -> Any:
    def check(text: str) -> Any:
        value = parse(text)
        if isinstance(value, float) and math.isinf(value):
            raise ValueError(f"must be finite, got {text}")
        return value

    return check


def _above_zero(parse: Any) -> Any:
    def check(text: str) -> Any:
        value = parse(text)
        if not value > 0 or (isinstance(value, float) and math.isinf(value)):
            raise ValueError(f"must be > 0, got {text}")
        return value

    return check


def _parse_port(text: str) -> int:
    port = parse_int(1)(text)
    if port > 65535:
        raise ValueError(f"port out of range: {port}")
    return port


# Control queries (docs/design/write-path.md#the-probe-worker-and-control-queries):
# ASK queries evaluated on the probe worker
# after an update; all must be true. A file holds them separated by lines of '---'.
CONTROL_QUERY_SEPARATOR = "---"


def split_control_queries(text: str) -> list[tuple[int, str]]:
    """(first line number, query) for each non-blank query of a control-queries file."""
    queries: list[tuple[int, str]] = []
    lines: list[str] = []
    start = 0  # first non-blank line of the current query
    for number, line in enumerate([*text.splitlines(), CONTROL_QUERY_SEPARATOR], 1):
        if line.strip() == CONTROL_QUERY_SEPARATOR:
            if start:
                queries.append((start, "\n".join(lines).strip()))
            lines, start = [], 0
        else:
            lines.append(line)
            start = start or (number if line.strip() else 0)
    return queries


def ask_query_problem(query: str, store: ox.Store | None = None) -> str | None:
    """None if ``query`` is an ASK query pyoxigraph accepts, else what is wrong with it.

    It is evaluated on an empty in-memory store, which parses it. SERVICE is refused
    before that: a control query checks the worker's own data, and evaluating one here
    would make the configuration check call out to the network.
    """
    if uses_service(query):
        return "uses SERVICE, which a control query may not"
    try:
        result = (store or ox.Store()).query(query)
    except SyntaxError as exc:
        return f"does not parse: {exc}"
    except (OSError, ValueError) as exc:
        return f"cannot be evaluated: {exc}"
    if isinstance(result, ox.QueryBoolean):
        return None
    kind = "SELECT" if isinstance(result, ox.QuerySolutions) else "CONSTRUCT or DESCRIBE"
    return f"is a {kind} query, not an ASK query"


def read_control_queries(path: Path) -> tuple[str, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read control queries file {path}: {exc}") from None
    queries = split_control_queries(text)
    if not queries:
        raise ValueError(f"control queries file {path} holds no query")
    store = ox.Store()
    problems = [
        f"query {number} (line {line}) {problem}"
        for number, (line, query) in enumerate(queries, 1)
        if (problem := ask_query_problem(query, store)) is not None
    ]
    if problems:
        raise ValueError(f"control queries file {path}: " + "; ".join(problems))
    return tuple(query for _, query in queries)


def parse_control_queries(text: str) -> tuple[Path, tuple[str, ...]]:
    path = parse_path(text)
    return path, read_control_queries(path)


@dataclass(frozen=True)
class ClientUser:
    """One client account of the client-auth file: ``user:password:role``."""

    name: str
    password: str = field(repr=False)
    role: str  # "read" | "write"


_parse_role = parse_choice("read", "write")


def read_client_auth(path: Path) -> tuple[ClientUser, ...]:
    """Lines ``user:password:role`` (role read or write); blank lines and # comments skipped.

    The password is everything between the first and the last colon, so it may hold colons.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read client auth file {path}: {exc}") from None
    users: dict[str, ClientUser] = {}
    problems: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, rest = line.strip().partition(":")
        password, _, role = rest.rpartition(":")
        if not name or not password or not role:
            problems.append(f"line {number}: expected user:password:role")
            continue
        try:
            role = _parse_role(role)
        except ValueError as exc:
            problems.append(f"line {number}: role {exc}")
            continue
        if name in users:
            problems.append(f"line {number}: user '{name}' is listed twice")
            continue
        users[name] = ClientUser(name, password, role)
    if problems:
        raise ValueError(f"client auth file {path}: " + "; ".join(problems))
    return tuple(users.values())


def parse_client_auth(text: str) -> tuple[Path, tuple[ClientUser, ...]]:
    path = parse_path(text)
    return path, read_client_auth(path)


WORKER_KEY = re.compile(r"worker\.([^.]+)\.url")
PEER_ID_KEY = re.compile(r"peer\.([^.]+)\.id")
PEER_URL_KEY = re.compile(r"peer\.([^.]+)\.url")

SCHEMA = Schema(
    keys=(
        Key("node-id", parse_node_id, required=True,
            description="NodeID: unique and consistent throughout the cluster, across DCs"),
        Key("master-url", parse_url, required=True,
            description="MasterURL: how peers and clients reach this master"),
        node_keys.REPOSITORY_ID,
        node_keys.LISTEN_ADDRESS,
        Key("data-dir", parse_path, required=True,
            description="directory holding the transaction log and backups metadata"),
        node_keys.CLUSTER_SECRET_FILE,
        Key("net-speed-bits-per-sec", parse_int(1), default=104_857_600,
            description="NetSpeedBitsPerSec: estimates full replication time"),
        Key("full-replication-time-factor", _above_zero(parse_float()), default=1.3,
            description="FullReplicationTimeFactor: speed-up ratio"),
        Key("min-time-to-consider-full-replication-s", parse_int(0), default=600,
            description="MinTimeToConsiderFullReplicationS: minimum absolute time"),
        # tx-log-max-size / tx-log-max-depth: the names of the original's documentation
        # (docs/design/cluster-basics.md#the-logs-limits).
        # The original's -Dreplication.compression (docs/design/smart-replication.md).
        Key("replication.compression", parse_bool, default=True,
            description="snappy-frame the storage images of full replications and backups; "
            "false: plain tar (any worker reads both)"),
        Key("log-max-size", parse_int(1), default=100_000, aliases=("tx-log-max-size",),
            description="LogMaxSize: transactions kept in the log"),
        Key("log-max-depth", parse_int(1), default=168, aliases=("tx-log-max-depth",),
            description="LogMaxDepth: hours transactions are kept in the log (7 days)"),
        Key("read-only", parse_bool, default=False,
            description="ReadOnly: writes only from other masters, not applied to workers"),
        Key("mode", parse_choice("NORMAL", "MUTE"), default="NORMAL",
            description="Mode: MUTE applies peers' transactions, takes no client writes"),
        Key("protect-single-worker", parse_bool, default=True,
            description="ProtectSingleWorker"),
        Key("control-queries", parse_control_queries,
            description="file of ASK queries separated by '---' lines, checked after updates"),
        Key("consistency", parse_choice("read-your-writes", "eventual", "strict"),
            default="read-your-writes",
            description="read-your-writes: a read sees every write this master acknowledged "
                        "before it arrived; eventual: any in-sync worker answers, maybe "
                        "before the latest forward; strict: as read-your-writes, and a write "
                        "is acknowledged once every in-sync worker applied it"),
        Key("health-interval-s", _above_zero(parse_float()), default=1.0,
            description="seconds between worker health checks"),
        Key("request-timeout-s", _above_zero(parse_float()), default=30.0,
            description="timeout of one request to a worker or peer (not of queries: "
            "query-timeout-s); within it, a TCP connect not answered in 1 s is tried "
            "again at once, so calls resume within a second of a partition's end"),
        node_keys.QUERY_TIMEOUT,
        node_keys.TRANSACTION_IDLE_TIMEOUT,
        Key("client-auth-file", parse_client_auth,
            description="lines user:password:role (read|write); absent: no client auth"),
        Key("split-recovery", parse_choice("None", "Simple", "Smart"), default="None",
            description="SplitRecovery: strategy after a cluster split"),
        # TxLog sync protocol between peer masters (master_service/sync/driver.py).
        Key("data-centre", parse_node_id,
            description="name of this master's data centre, for status pages (default: "
            "node-id)"),
        Key("peer-secret-file", parse_path,
            description="secret shared by peer masters (mode 600); default: "
            "cluster-secret-file"),
        # txinfra/auth.py NodeAuthorities: a signed peer request names the master it is for.
        Key("advertised-hosts", parse_advertised_hosts,
            description="host or host:port (comma-separated) peers reach this master at, "
            "besides master-url and its listen address; a signed peer request for any "
            "other Host is refused"),
        Key("sync-round-timeout-ms", parse_int(1), default=300,
            description="a busy sync round ends here if some peer did not post"),
        Key("sync-seed-from", parse_node_id,
            description="a peer's node-id: a master that never peered seeds its data centre "
            "from that peer's worker image before it starts peering (a data centre that "
            "joins a cluster holding data: docs/design/sync-protocol.md#seeding-a-data-centre)"),
        Key("sync-idle-interval-ms", parse_int(1), default=1000,
            description="rounds while nothing is unsynchronised (spec: 1 s to 1 min)"),
        # MaxPeerLag (docs/design/sync-protocol.md#maxpeerlag-and-the-split). The default is below
        # request-timeout-s (30): a write under way when a peer dies is still answered within a
        # client's request timeout, while a master restart or a network blip of a few seconds is
        # not taken for a split.
        Key("max-peer-lag-s", _finite(parse_float(0.0)), default=DEFAULT_MAX_PEER_LAG_S,
            description="MaxPeerLag: seconds without progress after which peers unheard "
            "for that long are left out (split detection; writes wait that long for a "
            "dead peer); 0: wait for them indefinitely"),
        Key("jmx.port", _parse_port, description="JMX remote port; absent: no remote JMX"),
        Key("jmx.host", parse_nonempty, default="127.0.0.1",
            description="address the JMX registry and connector listen on"),
        # JMX authentication and TLS (the JDK agent's own file formats, master_service/jmx).
        Key("jmx.password-file", parse_path,
            description="JMX users: 'user password' per line, mode 600; absent: no JMX auth"),
        Key("jmx.access-file", parse_path,
            description="JMX roles: 'user readonly|readwrite' per line (needs password-file)"),
        Key("jmx.ssl", parse_bool, default=False,
            description="TLS for the JMX registry and connector (needs jmx.ssl.keystore)"),
        Key("jmx.ssl.keystore", parse_path, description="JKS/PKCS12 keystore for JMX TLS"),
        Key("jmx.ssl.keystore-password-file", parse_path,
            description="file holding the keystore password (mode 600)"),
        node_keys.LOG_LEVEL,
        # Optional TLS (txinfra/tls.py): every API of the master over HTTPS (client,
        # admin and peer API: one server), and the CA that verifies https workers and peers.
        Key("tls-cert-file", tls.parse_pem_file,
            description="PEM certificate: serve the client, admin and peer APIs over HTTPS"),
        node_keys.TLS_KEY_FILE,
        Key("tls-ca-file", tls.parse_pem_file,
            description="CA bundle that verifies https workers and peers (default: system "
            "CAs)"),
    ),
    patterns=(
        (WORKER_KEY, parse_url),
        (PEER_ID_KEY, parse_node_id),
        (PEER_URL_KEY, parse_url),
    ),
)


def key_for_attribute(attribute: str) -> str:
    """The cluster.properties key of a documented MBean attribute (camel case -> hyphens)."""
    key = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", attribute).lower()
    if SCHEMA.key(key) is None:
        raise KeyError(f"no configuration key for attribute {attribute} ({key})")
    return key


def _numbered(values: Mapping[str, Any], rx: re.Pattern[str],
              problems: list[str]) -> dict[int, tuple[str, Any]]:
    """{n: (key, value)} for keys like worker.<n>.url; a bad <n> is a problem."""
    found: dict[int, tuple[str, Any]] = {}
    for name, value in values.items():
        m = rx.fullmatch(name)
        if m is None:
            continue
        if not re.fullmatch(r"[1-9][0-9]*", m.group(1)):
            problems.append(f"'{name}': '{m.group(1)}' must be an integer >= 1")
            continue
        found[int(m.group(1))] = (name, value)
    return dict(sorted(found.items()))


def _url_identity(url: str) -> str:
    # Scheme and host are case-insensitive; the path is not.
    parts = urlsplit(url)
    return parts._replace(scheme=parts.scheme.lower(), netloc=parts.netloc.lower()).geturl()


def _duplicates(what: str, items: list[tuple[str, str]], identity: Any = str) -> list[str]:
    """Problems for values used by more than one key; items are (key, value)."""
    first: dict[str, str] = {}
    problems = []
    for name, value in items:
        ident = identity(value)
        if ident in first:
            problems.append(f"duplicate {what} '{value}' in '{first[ident]}' and '{name}'")
        else:
            first[ident] = name
    return problems


def _cross_key_problems(values: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    workers = _numbered(values, WORKER_KEY, problems)
    problems += _duplicates("worker URL", list(workers.values()), _url_identity)
    ids = _numbered(values, PEER_ID_KEY, problems)
    urls = _numbered(values, PEER_URL_KEY, problems)
    for n in sorted(ids.keys() ^ urls.keys()):
        have, missing = (ids[n][0], f"peer.{n}.url") if n in ids else (urls[n][0], f"peer.{n}.id")
        problems.append(f"'{have}' has no matching '{missing}'")
    problems += _duplicates("peer id", list(ids.values()))
    problems += _duplicates("peer URL", list(urls.values()), _url_identity)
    problems += _jmx_problems(values)
    node_id, master_url = values.get("node-id"), values.get("master-url")
    for name, peer_id in ids.values():
        if peer_id == node_id:
            problems.append(f"'{name}' is this master's own node-id '{peer_id}'")
    for name, url in urls.values():
        if master_url is not None and _url_identity(url) == _url_identity(master_url):
            problems.append(f"'{name}' is this master's own master-url '{url}'")
    seed_from = values.get("sync-seed-from")
    if seed_from is not None and seed_from not in {i for _, i in ids.values()}:
        problems.append(f"'sync-seed-from' is '{seed_from}', which no peer.<n>.id names")
    return problems


def _jmx_problems(values: dict[str, Any]) -> list[str]:
    """JMX keys that only make sense together (checked at load, like every key)."""
    problems = []
    if values.get("jmx.access-file") and not values.get("jmx.password-file"):
        problems.append("'jmx.access-file' needs 'jmx.password-file'")
    if values.get("jmx.ssl") and not values.get("jmx.ssl.keystore"):
        problems.append("'jmx.ssl' is true but 'jmx.ssl.keystore' is not set")
    return problems


def _check_raw(raw: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    values, problems = SCHEMA.check(raw)
    return values, problems + _cross_key_problems(values) + tls.problems(values)


@dataclass(frozen=True)
class MasterConfig:
    path: Path  # the cluster.properties it was loaded from; runtime changes persist there
    node_id: str
    master_url: str
    repository_id: str
    host: str
    port: int
    data_dir: Path
    cluster_secret_file: Path
    workers: tuple[str, ...]  # ordered by <n> of worker.<n>.url
    peers: tuple[tuple[str, str], ...]  # (id, url), ordered by <n> of peer.<n>.*
    net_speed_bits_per_sec: int
    full_replication_time_factor: float
    min_time_to_consider_full_replication_s: int
    replication_compression: bool
    log_max_size: int
    log_max_depth_hours: int  # key log-max-depth
    read_only: bool
    mode: str  # "NORMAL" | "MUTE"
    protect_single_worker: bool
    control_queries_file: Path | None
    control_queries: tuple[str, ...]
    consistency: str  # "read-your-writes" | "eventual" | "strict"
    health_interval_s: float
    request_timeout_s: float
    transaction_idle_timeout_s: float
    client_auth_file: Path | None
    client_users: tuple[ClientUser, ...]
    split_recovery: str  # "None" | "Simple" | "Smart"
    jmx_port: int | None
    jmx_host: str
    log_level: str
    data_centre: str | None = None
    peer_secret_file: Path | None = None
    advertised_hosts: tuple[str, ...] = ()
    sync_round_timeout_ms: int = 300
    sync_idle_interval_ms: int = 1000
    sync_seed_from: str | None = None
    max_peer_lag_s: float | None = None
    jmx_password_file: Path | None = None
    jmx_access_file: Path | None = None
    jmx_ssl: bool = False
    jmx_ssl_keystore: Path | None = None
    jmx_ssl_keystore_password_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_ca_file: Path | None = None
    query_timeout_s: float = query_limits.DEFAULT_QUERY_TIMEOUT_S
    # The <n> of each worker / peer, to name their keys when they are changed at runtime.
    worker_numbers: tuple[int, ...] = field(default=(), repr=False)
    peer_numbers: tuple[int, ...] = field(default=(), repr=False)

    @classmethod
    def load(cls, path: str | Path) -> MasterConfig:
        values, problems = _check_file(Path(path))
        if problems:
            raise ConfigError(f"{path}: " + "; ".join(problems))
        return cls._from_values(Path(path), values)

    @classmethod
    def _from_values(cls, path: Path, values: dict[str, Any]) -> MasterConfig:
        host, port = values["listen-address"]
        workers = _numbered(values, WORKER_KEY, [])
        ids = _numbered(values, PEER_ID_KEY, [])
        urls = _numbered(values, PEER_URL_KEY, [])
        queries_file, queries = values["control-queries"] or (None, ())
        auth_file, users = values["client-auth-file"] or (None, ())
        return cls(
            path=path,
            host=host,
            port=port,
            workers=tuple(url for _, url in workers.values()),
            peers=tuple((ids[n][1], urls[n][1]) for n in ids),
            log_max_depth_hours=values["log-max-depth"],
            control_queries_file=queries_file,
            control_queries=queries,
            client_auth_file=auth_file,
            client_users=users,
            advertised_hosts=values["advertised-hosts"] or (),
            max_peer_lag_s=values["max-peer-lag-s"] or None,  # 0: wait indefinitely
            worker_numbers=tuple(workers),
            peer_numbers=tuple(ids),
            # Every other key is the field of its name.
            **SCHEMA.fields(values, exclude=(
                "listen-address", "log-max-depth", "control-queries", "client-auth-file",
                "advertised-hosts", "max-peer-lag-s")),
        )

    # ---- changes for update_properties (admin API addClusterNode, addSyncPeer, ...) ----

    def add_worker_changes(self, url: str) -> dict[str, str | None]:
        """The change that appends a worker as worker.<max n + 1>.url."""
        return {f"worker.{max(self.worker_numbers, default=0) + 1}.url": url}

    def remove_worker_changes(self, url: str) -> dict[str, str | None]:
        for n, known in zip(self.worker_numbers, self.workers, strict=True):
            if _url_identity(known) == _url_identity(parse_url(url)):
                return {f"worker.{n}.url": None}
        raise ConfigError(f"{self.path}: no worker.<n>.url is '{url}'")

    def add_peer_changes(self, peer_id: str, url: str) -> dict[str, str | None]:
        n = max(self.peer_numbers, default=0) + 1
        return {f"peer.{n}.id": peer_id, f"peer.{n}.url": url}

    def remove_peer_changes(self, peer_id: str) -> dict[str, str | None]:
        for n, (known, _) in zip(self.peer_numbers, self.peers, strict=True):
            if known == peer_id:
                return {f"peer.{n}.id": None, f"peer.{n}.url": None}
        raise ConfigError(f"{self.path}: no peer.<n>.id is '{peer_id}'")


def _duplicate_key_problems(path: Path, ignore: Collection[str] = ()) -> list[str]:
    return [f"key '{k}' is set more than once" for k in duplicate_keys(path) if k not in ignore]


def _check_file(path: Path) -> tuple[dict[str, Any], list[str]]:
    raw = read_properties(path)
    values, problems = _check_raw(raw)
    return values, _duplicate_key_problems(path) + problems


def check_config(path: str | Path) -> list[str]:
    """Every problem of a cluster.properties (empty: it is fine), without the file name.

    For ``txcluster check-config FILE``: the same checks as ``MasterConfig.load``.
    """
    p = Path(path)
    try:
        return _check_file(p)[1]
    except ConfigError as exc:
        return [str(exc).removeprefix(f"{p}: ")]


def update_properties(path: str | Path, changes: Mapping[str, str | None]) -> MasterConfig:
    """Persist runtime changes to cluster.properties; returns the configuration they give.

    Keys mapped to a string are set (in place, or appended if new), keys mapped to None are
    removed; comments, blank lines and the order of the other keys are kept. The whole
    resulting file is validated first, as ``MasterConfig.load`` would: a bad value raises
    ConfigError naming its key and leaves the file byte-identical. The write is atomic.
    """
    p = Path(path)
    bad_types = [k for k, v in changes.items() if v is not None and not isinstance(v, str)]
    if bad_types:
        raise ConfigError(f"{p}: values must be strings: " + ", ".join(map(repr, bad_types)))
    valid: dict[str, Any] = {}

    def check(raw: dict[str, str]) -> None:
        values, problems = _check_raw(raw)
        problems = _duplicate_key_problems(p, ignore=changes) + problems
        if problems:
            raise ConfigError(f"{p}: change refused: " + "; ".join(problems))
        valid.update(values)

    # A key the file spells as its alias is changed under that spelling.
    changes = SCHEMA.respell(changes, read_properties(p))
    rewrite_properties(p, changes, check)
    return MasterConfig._from_values(p, valid)
