"""Reads inside an open RDF4J transaction: the committed state plus the transaction's own
uncommitted operations, as RDF4J's server shows them (its SIZE, GET and QUERY actions).

The live store is never touched: a read would otherwise see, or make others see, writes
that are not committed, and taking them back would hold the write lock for the length of
a query. Instead a transaction's *view* is a private copy of the store: a RocksDB
checkpoint (hard links, milliseconds; docs/design/dependencies.md#pyoxigraph-the-workers-store:
a checkpoint opens at once as an independent read-write store) taken under the repository's read
lock, so it is one committed state, with the transaction's operations executed on it by the same
code that executes them for real (steps.py: exact changesets, step by step). Measured on
100,000 quads: checkpoint ~8 ms, open ~60 ms, apply a small update ~30 ms.

A view is kept while its transaction goes on: the next read applies only the operations
added since (the master sends the whole list every time; a view whose applied operations
are not a prefix of it is rebuilt). Views idle for ``idle_s`` are closed and deleted, and
at most ``max_views`` are kept (the least recently used goes first).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyoxigraph as ox

from rdfcore.changeset import apply_to
from txinfra import heap

log = logging.getLogger("txcluster.worker.txview")


def _digest(operation: Any) -> str:
    return hashlib.blake2b(json.dumps(operation, sort_keys=True).encode(),
                           digest_size=16).hexdigest()


@dataclass
class TransactionView:
    """One transaction's private store and what has been executed on it."""

    txid: str
    directory: Path
    store: ox.Store
    base_seq: int
    namespaces: dict[str, str]
    applied: list[str] = field(default_factory=list)  # digests of executed operations
    used: float = 0.0
    # Re-entrant: an operation that fails while the view is brought up to date drops the
    # view (forget -> _drop) with this lock still held.
    lock: threading.RLock = field(default_factory=threading.RLock)
    quads: int = 0
    created_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    # The repository-like face the read code uses (worker_service/api/rdf4j.py).
    @property
    def id(self) -> str:
        return self._repo_id

    _repo_id: str = ""

    @contextmanager
    def reading(self) -> Iterator[ox.Store]:
        yield self.store


class TransactionViews:
    """The views of one repository's open transactions; thread-safe."""

    def __init__(self, repository: Callable[[], Any], idle_s: float = 600.0,
                 max_views: int = 8, clock: Callable[[], float] = time.monotonic) -> None:
        self.repository = repository  # the current Repository (an image install swaps it)
        self.idle_s = idle_s
        self.max_views = max_views
        self._clock = clock
        self._views: OrderedDict[str, TransactionView] = OrderedDict()
        self._lock = threading.Lock()
        self._swept = False  # views left by a previous process are deleted once

    def __len__(self) -> int:
        return len(self._views)

    def _root(self) -> Path:
        return Path(self.repository().data_dir) / "tmp" / "tx-views"

    def view(self, txid: str, operations: Sequence[dict]) -> TransactionView:
        """The view of ``txid`` with every one of ``operations`` executed on it (built or
        brought up to date). Raises the transaction's own error (a TransactionError with
        its status) when an operation cannot execute: the commit would fail the same way."""
        digests = [_digest(op) for op in operations]
        with self._lock:
            self._expire(self._clock())
            view = self._views.pop(txid, None)
            if view is not None and view.applied != digests[:len(view.applied)]:
                self._drop(view)
                view = None
            if view is None:
                view = self._build(txid)
            self._views[txid] = view  # most recently used last
            while len(self._views) > self.max_views:
                _, oldest = self._views.popitem(last=False)
                self._drop(oldest)
        with view.lock:
            view.used = self._clock()
            todo = list(range(len(view.applied), len(operations)))
            if todo:
                try:
                    self._execute(view, [operations[i] for i in todo])
                except Exception:
                    self.forget(txid)  # half-applied: never reused
                    raise
                view.applied.extend(digests[i] for i in todo)
        return view

    def forget(self, txid: str) -> None:
        """Close and delete the view of a transaction that ended."""
        with self._lock:
            view = self._views.pop(txid, None)
        if view is not None:
            self._drop(view)

    def expire(self) -> int:
        """Close views idle for longer than ``idle_s``; how many were closed."""
        with self._lock:
            return self._expire(self._clock())

    def close(self) -> None:
        with self._lock:
            views, self._views = list(self._views.values()), OrderedDict()
        for view in views:
            self._drop(view)
        repo = self.repository()
        if repo is not None:
            shutil.rmtree(self._root(), ignore_errors=True)

    # ---- internals ----

    def _expire(self, now: float) -> int:
        idle = [t for t, v in self._views.items() if now - v.used > self.idle_s]
        for txid in idle:
            self._drop(self._views.pop(txid))
        return len(idle)

    def _build(self, txid: str) -> TransactionView:
        repo = self.repository()
        root = self._root()
        if not self._swept:
            shutil.rmtree(root, ignore_errors=True)
            self._swept = True
        root.mkdir(parents=True, exist_ok=True)
        directory = root / uuid.uuid4().hex
        # Under the read lock: no changeset is half applied, so the checkpoint is one
        # committed state, the one ``state()`` names.
        with repo.reading() as store:
            store.backup(str(directory))
            st = repo.state()
        view = TransactionView(txid=txid, directory=directory, store=ox.Store(str(directory)),
                               base_seq=st.seq, namespaces=dict(st.namespaces),
                               used=self._clock(), quads=st.quads)
        view._repo_id = repo.id
        return view

    @staticmethod
    def _execute(view: TransactionView, operations: list[dict]) -> None:
        from worker_service.transaction import BlankNodeMinter
        from worker_service.wire_parsing import parse_operations

        # The view's own clock reading: NOW() stays one value while the view lives (the
        # commit, later, gets the transaction's agreed timestamp).
        minter = BlankNodeMinter(f"view-{view.txid}-{len(view.applied)}", view.created_ms)
        for op in parse_operations(operations):
            for step in op.steps():
                cs = step.changeset(view.store, minter, view.namespaces)
                if cs.empty:
                    continue
                apply_to(view.store, cs)
                for prefix, iri in cs.namespaces.items():
                    if iri is None:
                        view.namespaces.pop(prefix, None)
                    else:
                        view.namespaces[prefix] = iri
                view.quads += len(cs.added) - len(cs.removed)

    @staticmethod
    def _drop(view: TransactionView) -> None:
        with view.lock:
            view.store = None  # type: ignore[assignment]
            heap.collect()  # RocksDB releases the directory when the handle is collected
            with contextlib.suppress(OSError):
                shutil.rmtree(view.directory)
