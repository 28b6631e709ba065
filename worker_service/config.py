"""worker.properties: the worker's configuration file (Java properties)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rdf4j_protocol.transactions import TRANSACTION_IDLE_S
from txinfra import node_keys, query_limits, tls
from txinfra.auth import ACCEPTS_REMEMBER_S, parse_advertised_hosts
from txinfra.properties import (
    ConfigError,
    Key,
    Schema,
    parse_bool,
    parse_float,
    parse_int,
    parse_nonempty,
    parse_path,
    read_properties,
)
from worker_service import promise, query_isolation, query_slots

SCHEMA = Schema((
    node_keys.REPOSITORY_ID,
    Key("data-dir", parse_path, required=True,
        description="directory holding the store, its state, backups"),
    node_keys.LISTEN_ADDRESS,
    node_keys.CLUSTER_SECRET_FILE,
    # txinfra/auth.py NodeAuthorities: a signed request names the node it is for.
    Key("advertised-hosts", parse_advertised_hosts,
        description="host or host:port (comma-separated) the master reaches this worker "
        "at, besides its listen address (a wildcard: every local address, localhost, "
        f"its host name; an address added to the machine counts within "
        f"{ACCEPTS_REMEMBER_S:g} s); a signed request for any other Host is refused"),
    Key("repository-title", parse_nonempty, default="txcluster repository"),
    Key("verify-on-start", parse_bool, default=True,
        description="recompute the fingerprint at start; a mismatch reports the real one"),
    Key("sync-writes", parse_bool, default=False,
        description="fsync the journal and state file (power-loss safety of the metadata)"),
    node_keys.LOG_LEVEL,
    # Optional TLS (txinfra/tls.py): serve HTTPS; verify other workers' images' sources.
    Key("tls-cert-file", tls.parse_pem_file, description="PEM certificate: serve HTTPS"),
    node_keys.TLS_KEY_FILE,
    Key("tls-ca-file", tls.parse_pem_file,
        description="CA bundle to verify other workers (image pulls) over HTTPS"),
    node_keys.TRANSACTION_IDLE_TIMEOUT,
    node_keys.QUERY_TIMEOUT,
    Key("max-concurrent-queries", parse_int(1),
        description="query processes that may run at once (every query but a single "
        "triple pattern runs in one); those beyond wait in a queue (query-queue-depth) "
        "(default: twice the CPU cores)"),
    Key("query-queue-depth", parse_int(0), default=query_slots.DEFAULT_QUEUE_DEPTH,
        description="queries that may wait for a query process when max-concurrent-queries "
        "run already, in order of arrival; one more is answered 503 (busy: its master "
        "sends it to another worker); 0: no queue"),
    Key("query-queue-wait-s", parse_float(0), default=query_slots.DEFAULT_QUEUE_WAIT_S,
        description="seconds a query waits in that queue at most (its wait counts against "
        "its timeout, query-timeout-s); then it is answered 503 (busy: its master sends it "
        "to another worker)"),
    Key("epoch-grant-lease-ms", parse_int(1), default=promise.DEFAULT_GRANT_LEASE_MS,
        description="milliseconds after the last change from the master holding this "
        "worker's write epoch during which no other master is granted a newer one "
        "automatically (an operator's failover is); below the masters' takeover time "
        "(docs/design/failover.md)"),
))


@dataclass(frozen=True)
class WorkerConfig:
    repository_id: str
    data_dir: Path
    host: str
    port: int
    cluster_secret_file: Path
    repository_title: str
    verify_on_start: bool
    sync_writes: bool
    log_level: str
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_ca_file: Path | None = None
    advertised_hosts: tuple[str, ...] = ()
    transaction_idle_timeout_s: float = TRANSACTION_IDLE_S
    query_timeout_s: float = query_limits.DEFAULT_QUERY_TIMEOUT_S
    max_concurrent_queries: int | None = None  # None: twice the CPU cores
    query_queue_depth: int = query_slots.DEFAULT_QUEUE_DEPTH
    query_queue_wait_s: float = query_slots.DEFAULT_QUEUE_WAIT_S
    epoch_grant_lease_ms: int = promise.DEFAULT_GRANT_LEASE_MS

    def limits(self) -> query_isolation.QueryLimits:
        """The query limits this configuration sets (worker_service/query_isolation.py)."""
        return query_isolation.QueryLimits(
            self.query_timeout_s, self.max_concurrent_queries
            or query_isolation.default_max_concurrent_queries(os.cpu_count()),
            queue_depth=self.query_queue_depth, queue_wait_s=self.query_queue_wait_s)

    @classmethod
    def load(cls, path: str | Path) -> WorkerConfig:
        values = SCHEMA.validate(read_properties(path), source=str(path))
        if problems := tls.problems(values):
            raise ConfigError(f"{path}: " + "; ".join(problems))
        host, port = values["listen-address"]
        return cls(
            host=host,
            port=port,
            advertised_hosts=values["advertised-hosts"] or (),
            **SCHEMA.fields(values, exclude=("listen-address", "advertised-hosts")),
        )
