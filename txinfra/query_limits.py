"""How long a query may run: the timeout rule both node kinds apply, and its answers.

The timeout of a query (:func:`effective_timeout`) is the smallest of the request's
``timeout`` parameter (seconds, RDF4J's name; 0 or absent: none asked), the one its master
passed on in :data:`TIMEOUT_HEADER`, and the node's ``query-timeout-s``. There is always
one: ``query-timeout-s`` is required to be positive, so no query can run unbounded. A
master applies it to the queries it forwards and passes it on; the worker stops the
evaluation at it (worker_service/query_isolation.py, worker_service/query_process.py).

A query that reaches it is answered as RDF4J's server answers a QueryInterruptedException:
HTTP 503 with a message starting "Query evaluation took too long" (RDF4J's
RepositoryController / QueryResultView; its HTTP client turns any 503 to a query into a
QueryInterruptedException). A 503 also means "busy" (too many queries at once), which a
master retries on another worker; a timeout must not be retried (the same query would
take as long there), so timeout answers also carry :data:`TIMED_OUT_HEADER`.

A query whose client has gone is abandoned as well (:func:`wait_for_disconnect`).

Pure code apart from :func:`wait_for_disconnect`: no clock, no IO.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

# Why 300 s: long enough for the analytical queries a repository of a few million quads
# answers at all (a full dump of 1M quads takes ~13 s,
# docs/design/dependencies.md#pyoxigraph-the-workers-store), short enough that a
# runaway query burns at most five CPU-minutes of a worker before it is killed.
DEFAULT_QUERY_TIMEOUT_S = 300.0
# Master -> worker: the timeout the master applied (a worker takes the smaller of this,
# the request's own and its query-timeout-s, so a header can only shorten a query).
TIMEOUT_HEADER = "x-txcluster-query-timeout"
# Worker -> master: this 503 is a query timeout; do not send the query to another worker.
TIMED_OUT_HEADER = "x-txcluster-query-timed-out"
TIMED_OUT_STATUS = 503
BUSY_STATUS = 503
TOO_LONG = "Query evaluation took too long"


def parse_query_timeout(text: str) -> float:
    """``query-timeout-s`` of worker.properties and cluster.properties: seconds, > 0 (no
    "unlimited": a query that can never be stopped is what this limit exists to prevent)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of seconds, got '{text}'") from None
    if not value > 0 or math.isinf(value):
        raise ValueError(f"must be a number of seconds > 0, got {text}")
    return value


def parse_timeout(text: str | None, name: str) -> float | None:
    """A timeout in seconds as RDF4J's ``timeout`` parameter gives it: absent, empty or 0
    is None (no limit asked); ValueError (its message names ``name``) for anything that
    is not a non-negative number."""
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got '{text}'") from None
    if not value >= 0:  # negative or NaN
        raise ValueError(f"{name} must not be negative, got '{text}'")
    return value or None


def effective_timeout(server_max_s: float, *asked: float | None) -> float:
    """The timeout a query runs under: the smallest of the node's ``query-timeout-s`` and
    every timeout asked for (None: not asked)."""
    return min([server_max_s, *(a for a in asked if a is not None and a > 0)])


def timed_out_message(timeout_s: float) -> str:
    return f"{TOO_LONG}: it was stopped at its timeout of {timeout_s:g} s"


def busy_message(limit: int, depth: int = 0, waited_s: float | None = None) -> str:
    """A worker's 503 "busy" (worker_service/query_slots.py): every one of its ``limit``
    query slots taken and its queue of ``depth`` full, or this query's wait of
    ``waited_s`` in that queue expired; what was full and the keys that size it."""
    running = (f"this worker is already evaluating its maximum of {limit} queries at once "
               f"(max-concurrent-queries={limit})")
    if waited_s is not None:
        return (f"{running} and this query waited {waited_s:g} s in its queue without "
                f"getting a turn (query-queue-wait-s={waited_s:g}): retry later")
    if depth == 0:
        return f"{running}: retry later"
    return (f"{running} and {depth} more wait in its queue (query-queue-depth={depth}): "
            "retry later")


async def wait_for_disconnect(receive: Callable[[], Awaitable[dict]]) -> None:
    """Return when the ASGI client of this request has gone (``http.disconnect``). Only
    after the request body was read: until then ``receive`` gives its chunks."""
    while (await receive())["type"] != "http.disconnect":
        pass


# Default idle time after which an open RDF4J transaction is forgotten (both node kinds;
# key transaction-idle-timeout-s; rdf4j_protocol/transactions.py applies it). RDF4J's
# server forgets after 60 s and its client pings to keep a transaction alive; a longer
# default spares clients that do not ping.
TRANSACTION_IDLE_S = 600.0
