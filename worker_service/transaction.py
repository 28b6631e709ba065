"""Transactions on a worker: their errors and their fresh blank nodes.

A worker executes a transaction step by step: each step's exact changeset is computed
against the store's current state (read-only), journaled, then applied with
``changeset.apply_to`` — so step k sees the effects of steps 1..k-1, as SPARQL 1.1 Update
requires of the operations of one request (docs/design/write-path.md#exact-changesets). Only the
probe worker computes; the others apply the same changeset, so NOW(), RAND(), UUID(), STRUUID(),
BNODE() and template blank nodes leave every worker identical: the WHERE part of an update is
evaluated exactly once, on the probe worker. Across data centres, each executing an agreed
transaction on its own probe, those values come from the transaction (determinism.py).

    transaction.py     the errors a transaction can fail with; fresh blank nodes
    steps.py           a step and its exact changeset against the current state
    operations.py      the operations of a transaction, each a list of steps
    update_parsing.py  a SPARQL 1.1 Update request as steps (pyoxigraph's grammar)
    determinism.py     NOW(), RAND(), UUID(), STRUUID(), BNODE() drawn from the transaction
    wire_parsing.py    a transaction's operations from the JSON wire form a master sends
"""

from __future__ import annotations

import hashlib
import itertools
import random
import time
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
    """The fresh values of one transaction, a function of the transaction alone: blank
    nodes, the timestamp NOW() returns and the generator RAND/UUID/STRUUID draw from
    (determinism.py). Every data centre executes an agreed transaction itself, so these
    must be the same in each (issue 16, "identical changesets in every data centre").

    Labels are ``t{h}{tag}{k}``: ``h`` 32 hex digits of blake2b(txid) (128 bits: two of
    a billion transactions share them with a probability below 10^-20), ``tag`` a letter
    (``n`` minted for a template or document blank node, ``b`` for BNODE()), ``k`` a
    counter of the transaction. Valid N-Triples labels, distinct between transactions and
    calls, and never of the form pyoxigraph mints (32 hex digits): they start with ``t``.
    Not the log's seq, which may differ between data centres for the same transaction.

    ``timestamp_ms``: the transaction's timestamp (milliseconds since the epoch) as its
    master sent it; None (an old master, a write sent to the worker itself, a
    transaction's private view) is this worker's clock when the minter is made."""

    txid: str
    timestamp_ms: int | None = None
    _prefix: str = field(init=False, repr=False, compare=False, default="")
    _counter: Iterator[int] = field(init=False, repr=False, compare=False,
                                    default_factory=itertools.count)
    _random: list[random.Random] = field(init=False, repr=False, compare=False,
                                         default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.txid, str) or not self.txid:
            raise ValueError(f"txid must be a non-empty string, got {self.txid!r}")
        ts = self.timestamp_ms
        if ts is None:
            object.__setattr__(self, "timestamp_ms", int(time.time() * 1000))
        elif isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
            raise ValueError(f"timestamp_ms must be a non-negative integer, got {ts!r}")
        h = hashlib.blake2b(self.txid.encode(), digest_size=16).hexdigest()
        object.__setattr__(self, "_prefix", f"t{h}")

    def fresh(self, tag: str = "n") -> ox.BlankNode:
        return ox.BlankNode(f"{self._prefix}{tag}{next(self._counter)}")

    def next_number(self) -> int:
        """A number of this transaction's counter (the one ``fresh`` uses)."""
        return next(self._counter)

    def labelled(self, suffix: str) -> ox.BlankNode:
        """The node ``t{h}{suffix}``; ``suffix`` starts with a letter other than n, b."""
        return ox.BlankNode(self._prefix + suffix)

    def random(self) -> random.Random:
        """The transaction's generator, seeded by its txid (one per transaction: the
        operations of a request draw one sequence)."""
        if not self._random:
            seed = hashlib.blake2b(b"rand:" + self.txid.encode(), digest_size=32).digest()
            self._random.append(random.Random(seed))
        return self._random[0]
