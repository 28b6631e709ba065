"""Transactions on a worker: their errors and their fresh blank nodes.

A worker executes a transaction step by step: each step's exact changeset is computed
against the store's current state (read-only), journaled, then applied with
``changeset.apply_to`` — so step k sees the effects of steps 1..k-1, as SPARQL 1.1 Update
requires of the operations of one request (docs/design/write-path.md#exact-changesets). Only the
probe worker computes; the others apply the same changeset, so NOW(), RAND(), UUID(), STRUUID(),
BNODE() and template blank nodes leave every worker identical: the WHERE part of an update is
evaluated exactly once, on the probe worker.

    transaction.py     the errors a transaction can fail with; fresh blank nodes
    steps.py           a step and its exact changeset against the current state
    operations.py      the operations of a transaction, each a list of steps
    update_parsing.py  a SPARQL 1.1 Update request as steps (pyoxigraph's grammar)
    wire_parsing.py    a transaction's operations from the JSON wire form a master sends
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyoxigraph as ox

# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


class TransactionError(Exception):
    """A transaction that cannot run; ``status`` is the HTTP status to answer with."""

    status = 400

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class UpdateSyntaxError(TransactionError):
    """Malformed SPARQL, RDF or wire JSON; the message says what and where."""


class OperationRefused(TransactionError):
    """A well-formed operation the cluster does not run (LOAD)."""


class UpdateExecutionError(TransactionError):
    """An operation that fails against the current state (e.g. CREATE of an existing
    graph without SILENT); the whole transaction is taken back."""


class UnsupportedFormat(TransactionError):
    """An RDF format (media type) pyoxigraph cannot parse."""

    status = 415


# ---------------------------------------------------------------------------------------
# Fresh blank nodes
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlankNodeMinter:
    """Deterministic fresh blank nodes for one transaction.

    Labels are ``t{seq}x{h}n{k}`` with ``h`` the first 8 hex digits of blake2b(txid) and
    ``k`` a counter: valid N-Triples labels, distinct between transactions (seq and txid)
    and between calls, and never of the form pyoxigraph mints (32 hex digits)."""

    seq: int
    txid: str
    _prefix: str = field(init=False, repr=False, compare=False, default="")
    _counter: Iterator[int] = field(init=False, repr=False, compare=False,
                                    default_factory=itertools.count)

    def __post_init__(self) -> None:
        if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 0:
            raise ValueError(f"seq must be a non-negative integer, got {self.seq!r}")
        if not isinstance(self.txid, str) or not self.txid:
            raise ValueError(f"txid must be a non-empty string, got {self.txid!r}")
        h = hashlib.blake2b(self.txid.encode(), digest_size=4).hexdigest()
        object.__setattr__(self, "_prefix", f"t{self.seq}x{h}n")

    def fresh(self) -> ox.BlankNode:
        return ox.BlankNode(f"{self._prefix}{next(self._counter)}")

