"""RDF4J transactions (``/repositories/{id}/transactions``): the steps a client sends on
an open transaction, and the open transactions of one endpoint with their pending
operations. Both node kinds keep their open transactions here; the route table
(rdf4j_protocol.routes) answers the steps, the backend runs the reads inside a
transaction and the commit.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from rdf4j_protocol.negotiation import BINARY_RDF, binary_rdf_quads, rdf_format_of_body
from rdf4j_protocol.parameters import (
    FORM,
    Params,
    ProtocolError,
    decode_contexts,
    decode_text,
    media_type,
    single_param,
)
from rdf4j_protocol.reads import parse_statement_pattern
from rdf4j_protocol.writes import (
    add_from,
    remove_operation,
    remove_quads_operations,
    remove_statements_operations,
    update_from,
)
from txinfra.query_limits import TRANSACTION_IDLE_S

log = logging.getLogger("txcluster.rdf4j")

TRANSACTION_ACTIONS = frozenset(
    {"ADD", "DELETE", "UPDATE", "COMMIT", "ROLLBACK", "PING", "PREPARE", "GET", "EXPORT",
     "SIZE", "QUERY"})
# Actions that change the pending transaction's operations.
WRITE_ACTIONS = frozenset({"ADD", "DELETE", "UPDATE"})
# Reads inside a transaction: they see the committed state plus the transaction's own
# pending operations (RDF4J's TransactionController: SIZE, GET, QUERY; EXPORT is taken as
# GET, the statements export some clients name so). The HTTP shells answer them.
READ_ACTIONS = frozenset({"GET", "EXPORT", "SIZE", "QUERY"})


@dataclass(frozen=True)
class TransactionStep:
    """One request on an open transaction: its action and the operations it adds."""

    action: str
    operations: tuple[dict, ...] = ()

    def __post_init__(self) -> None:
        if self.action not in TRANSACTION_ACTIONS:
            raise ProtocolError(400, f"unknown transaction action '{self.action}' (one of "
                                     f"{', '.join(sorted(TRANSACTION_ACTIONS))})")


def parse_transaction_step(params: Params, body: bytes = b"",
                           content_type: str | None = None) -> TransactionStep:
    """``PUT|POST /transactions/{txid}?action=...`` as a step.

    ADD: RDF body (``context``, ``baseURI``). DELETE: an RDF body of statements to remove,
    or ``subj``/``pred``/``obj``/``context`` filters. UPDATE: ``update=`` or an
    application/sparql-update body."""
    raw = single_param(params, "action")
    if raw is None:
        raise ProtocolError(400, "missing parameter 'action'")
    action = raw.upper()
    if action not in TRANSACTION_ACTIONS:
        TransactionStep(action)  # raises with the list of actions
    if action == "ADD":
        return TransactionStep(action, (add_from(params, body, content_type),))
    if action == "UPDATE":
        op = update_from(params, body, content_type)
        if op is None:
            raise ProtocolError(400, "transaction action UPDATE needs an 'update' parameter "
                                     "or an application/sparql-update body")
        return TransactionStep(action, (op,))
    if action == "DELETE":
        mtype = media_type(content_type)
        if body and mtype not in ("", FORM):
            if mtype == BINARY_RDF:
                ops = remove_quads_operations(binary_rdf_quads(body), decode_contexts(params))
                return TransactionStep(action, tuple(ops))
            fmt = rdf_format_of_body(content_type)
            data = decode_text(body, content_type, "RDF data")
            ops = remove_statements_operations(data, fmt, decode_contexts(params),
                                               single_param(params, "baseURI") or None)
            return TransactionStep(action, tuple(ops))
        p = parse_statement_pattern(params)
        return TransactionStep(action, (remove_operation(p.subject, p.predicate, p.object,
                                                         p.contexts),))
    return TransactionStep(action)


@dataclass
class PendingTransaction:
    """The operations of an open RDF4J transaction, run as one transaction on COMMIT.

    Mutable on purpose (one per open transaction, owned by the HTTP shell under its lock);
    once committed or rolled back it refuses further steps."""

    id: str
    operations: list[dict] = field(default_factory=list)
    closed: bool = False

    def record(self, step: TransactionStep) -> list[dict] | None:
        """Apply one step: the operations to execute now (on COMMIT), else None."""
        if self.closed:
            raise ProtocolError(409, f"transaction '{self.id}' is already closed")
        if step.action in WRITE_ACTIONS:
            self.operations.extend(step.operations)
            return None
        if step.action == "COMMIT":
            self.closed = True
            return list(self.operations)
        if step.action == "ROLLBACK":
            self.rollback()
            return None
        return None  # PING, PREPARE, reads (answered by the shell): nothing to record

    def rollback(self) -> None:
        self.closed = True
        self.operations.clear()


class TransactionRegistry:
    """The open RDF4J transactions of one endpoint (master or worker), thread-safe.

    A transaction no client touched for ``idle_s`` is forgotten (a client that died
    between BEGIN and COMMIT must not keep its operations in memory for ever); the next
    step on it is a 404 naming it. ``clock`` is a value source, for tests."""

    def __init__(self, idle_s: float = TRANSACTION_IDLE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._open: dict[str, tuple[PendingTransaction, float]] = {}
        self._lock = threading.Lock()
        self._idle_s = idle_s
        self._clock = clock

    def __len__(self) -> int:
        return len(self._open)

    @property
    def idle_s(self) -> float:
        return self._idle_s

    def _forget_idle(self, now: float) -> list[str]:
        forgotten = []
        for txid, (_, touched) in list(self._open.items()):
            if now - touched > self._idle_s:
                log.warning("forgetting RDF4J transaction %s: idle for %.0f s", txid,
                            now - touched)
                del self._open[txid]
                forgotten.append(txid)
        return forgotten

    def sweep(self) -> list[str]:
        """Forget the transactions idle for too long (run periodically, so that an
        abandoned one does not wait for the next request); their ids."""
        with self._lock:
            return self._forget_idle(self._clock())

    def pending(self, tx: PendingTransaction) -> list[dict]:
        """The operations ``tx`` has recorded so far, for a read inside it; the read
        counts as activity (keeps the transaction from being forgotten)."""
        with self._lock:
            if tx.closed:
                raise ProtocolError(409, f"transaction '{tx.id}' is already closed")
            self._open[tx.id] = (tx, self._clock())
            return list(tx.operations)

    def begin(self) -> str:
        txid = uuid.uuid4().hex
        with self._lock:
            now = self._clock()
            self._forget_idle(now)
            self._open[txid] = (PendingTransaction(txid), now)
        return txid

    def get(self, txid: str, rollback: bool = False) -> PendingTransaction:
        """The open transaction ``txid`` (ProtocolError 404 if unknown or forgotten);
        ``rollback``: also close and forget it (DELETE)."""
        with self._lock:
            self._forget_idle(self._clock())
            entry = self._open.get(txid)
            if entry is None:
                raise ProtocolError(404, f"unknown transaction '{txid}'")
            if rollback:
                del self._open[txid]
                entry[0].rollback()
            return entry[0]

    def record(self, tx: PendingTransaction, step: TransactionStep) -> list[dict] | None:
        """Apply one step (PendingTransaction.record); a closed transaction is forgotten."""
        with self._lock:
            to_execute = tx.record(step)
            if tx.closed:
                self._open.pop(tx.id, None)
            else:
                self._open[tx.id] = (tx, self._clock())
            return to_execute


def transaction_location(transactions_url: str, txid: str) -> str:
    """The ``Location`` of a new transaction, below ``.../transactions``."""
    return f"{transactions_url.rstrip('/')}/{txid}"
