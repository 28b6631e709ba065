"""worker.properties: the worker's configuration file (Java properties)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rdf4j_protocol.transactions import TRANSACTION_IDLE_S
from txcluster import tls
from txcluster.auth import parse_advertised_hosts
from txcluster.properties import (
    ConfigError,
    Key,
    Schema,
    parse_bool,
    parse_float,
    parse_int,
    parse_listen_address,
    parse_nonempty,
    parse_path,
    parse_repository_id,
    read_properties,
)
from worker_service import query_limits

SCHEMA = Schema((
    Key("repository-id", parse_repository_id, required=True,
        description="id of the one repository this worker serves"),
    Key("data-dir", parse_path, required=True,
        description="directory holding the store, its state, backups"),
    Key("listen-address", parse_listen_address, required=True,
        description="host:port of the HTTP API"),
    Key("cluster-secret-file", parse_path, required=True,
        description="file (mode 600) with the secret shared with the master"),
    # txcluster/auth.py NodeAuthorities: a signed request names the node it is for.
    Key("advertised-hosts", parse_advertised_hosts,
        description="host or host:port (comma-separated) the master reaches this worker "
        "at, besides its listen address (a wildcard: every local address, localhost, "
        "its host name); a signed request for any other Host is refused"),
    Key("repository-title", parse_nonempty, default="txcluster repository"),
    Key("verify-on-start", parse_bool, default=True,
        description="recompute the fingerprint at start; a mismatch reports the real one"),
    Key("sync-writes", parse_bool, default=False,
        description="fsync the journal and state file (power-loss safety of the metadata)"),
    Key("log-level", lambda t: t.upper() if t.upper() in
        ("DEBUG", "INFO", "WARNING", "ERROR") else _bad_level(t), default="INFO"),
    # Optional TLS (txcluster/tls.py): serve HTTPS; verify other workers' images' sources.
    Key("tls-cert-file", tls.parse_pem_file, description="PEM certificate: serve HTTPS"),
    Key("tls-key-file", tls.parse_pem_file, description="its private key (mode 600)"),
    Key("tls-ca-file", tls.parse_pem_file,
        description="CA bundle to verify other workers (image pulls) over HTTPS"),
    Key("transaction-idle-timeout-s", parse_float(1.0), default=TRANSACTION_IDLE_S,
        description="an open RDF4J transaction untouched for this long is forgotten "
                    "(PING answers it in ms)"),
    # worker_service/query_limits.py: every query stops at a timeout, the smaller of the
    # request's `timeout` (and its master's) and this; then a 503 "Query evaluation took
    # too long", as RDF4J answers.
    Key("query-timeout-s", query_limits.parse_query_timeout,
        default=query_limits.DEFAULT_QUERY_TIMEOUT_S,
        description="default and maximum timeout of a query in seconds (> 0): a client's "
        "timeout parameter can only shorten it; a query that reaches it is stopped (its "
        "process killed) and answered 503 'Query evaluation took too long'"),
    Key("max-concurrent-queries", parse_int(1),
        description="query processes that may run at once (every query but a single "
        "triple pattern runs in one); one more is answered 503 (default: twice the CPU "
        "cores)"),
))


def _bad_level(text: str) -> str:
    raise ValueError(f"expected DEBUG, INFO, WARNING or ERROR, got '{text}'")


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

    def limits(self) -> query_limits.QueryLimits:
        """The query limits this configuration sets (worker_service/query_limits.py)."""
        return query_limits.QueryLimits(
            self.query_timeout_s, self.max_concurrent_queries
            or query_limits.default_max_concurrent_queries(os.cpu_count()))

    @classmethod
    def load(cls, path: str | Path) -> WorkerConfig:
        values = SCHEMA.validate(read_properties(path), source=str(path))
        if problems := tls.problems(values):
            raise ConfigError(f"{path}: " + "; ".join(problems))
        host, port = values["listen-address"]
        return cls(
            repository_id=values["repository-id"],
            data_dir=values["data-dir"],
            host=host,
            port=port,
            cluster_secret_file=values["cluster-secret-file"],
            repository_title=values["repository-title"],
            verify_on_start=values["verify-on-start"],
            sync_writes=values["sync-writes"],
            log_level=values["log-level"],
            tls_cert_file=values["tls-cert-file"],
            tls_key_file=values["tls-key-file"],
            tls_ca_file=values["tls-ca-file"],
            advertised_hosts=values["advertised-hosts"] or (),
            transaction_idle_timeout_s=values["transaction-idle-timeout-s"],
            query_timeout_s=values["query-timeout-s"],
            max_concurrent_queries=values["max-concurrent-queries"],
        )
