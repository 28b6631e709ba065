"""Configuration keys both node kinds declare, each defined once: cluster.properties
(master_service/config.py) and worker.properties (worker_service/config.py) list these
same Key objects, so a key's name, bound, default and description cannot differ
between a master and a worker. Keys whose meaning depends on the node (data-dir,
advertised-hosts, tls-cert-file, tls-ca-file) are declared by each schema.
"""

from __future__ import annotations

import math

from txinfra import query_limits, tls
from txinfra.properties import (
    Key,
    parse_choice,
    parse_float,
    parse_listen_address,
    parse_path,
    parse_repository_id,
)


def parse_transaction_idle_timeout(text: str) -> float:
    """Seconds, at least 1 and finite: a transaction forgotten sooner than a client can
    send its next request is useless, one never forgotten keeps its pending operations
    (and a worker's view of them) for ever."""
    value = parse_float(1.0)(text)
    if math.isinf(value):
        raise ValueError(f"must be finite, got {text}")
    return value


REPOSITORY_ID = Key(
    "repository-id", parse_repository_id, required=True,
    description="id of the repository served: the same on a cluster's masters and workers "
    "(a worker serves this one repository)")
LISTEN_ADDRESS = Key("listen-address", parse_listen_address, required=True,
                     description="host:port of the HTTP APIs")
CLUSTER_SECRET_FILE = Key(
    "cluster-secret-file", parse_path, required=True,
    description="file (mode 600, checked at startup) holding the secret a master and its "
    "workers share")
LOG_LEVEL = Key("log-level", parse_choice("DEBUG", "INFO", "WARNING", "ERROR"),
                default="INFO")
TLS_KEY_FILE = Key("tls-key-file", tls.parse_pem_file,
                   description="its private key (mode 600)")
# txinfra/query_limits.py: a master passes a query's timeout on to the worker, waits
# for it that long plus a margin, and never re-sends a query that timed out; a worker
# stops the query at the smaller of the two.
QUERY_TIMEOUT = Key(
    "query-timeout-s", query_limits.parse_query_timeout,
    default=query_limits.DEFAULT_QUERY_TIMEOUT_S,
    description="default and maximum timeout of a query in seconds (> 0): a client's "
    "timeout parameter can only shorten it; a master passes it on to the worker, which "
    "also applies its own; a query that reaches it is stopped (its process killed) and "
    "answered 503 'Query evaluation took too long', never re-sent to another worker")
TRANSACTION_IDLE_TIMEOUT = Key(
    "transaction-idle-timeout-s", parse_transaction_idle_timeout,
    default=query_limits.TRANSACTION_IDLE_S,
    description="an open RDF4J transaction untouched for this long (seconds, >= 1) is "
    "forgotten, with its pending operations (PING answers it in ms)")
