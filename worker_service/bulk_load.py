"""Initial bulk load of an empty worker (``txcluster load --initial``, issue "data pipeline").

The fastest safe way to fill a new cluster: the prepared data (canonical, deduplicated
N-Quads from the Spark job) goes into ONE worker with ``Store.bulk_extend`` — no
transactions, changesets or journal — and the master makes that worker's state the base
of its new transaction log; the other workers are replicated from it ("Replicating
(empty)"). The master forwards the loader's calls (cluster credential):

    PUT    /cluster/bulk-load/{id}/parts/{n}   N-Quads; n = 0, 1, 2 ..., each once
    POST   /cluster/bulk-load/{id}             {"fingerprint", "quads"}: commit
    DELETE /cluster/bulk-load/{id}             abort

Safety: parts go into a staging store under ``data-dir/tmp`` (removed at start), never
into the live store. Each quad is hashed here in the form the store holds it
(``canonical_quad``, as an RDF4J add does), so the commit checks that the staged content
is exactly what the loader computed (fingerprint and count: a missing part or a quad in
two parts fails it; a part number sent twice is refused). The staged store is then
installed as a new generation with state (seq 0, txid = load id, fingerprint, quads),
atomically and only while the repository is still empty (``Repository.install_store``).
A worker that holds anything is refused (409) at every step.
"""

from __future__ import annotations

import gc
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pyoxigraph as ox

from rdfcore import fingerprint
from rdfcore.canonical import canonical_quad
from worker_service.repository import Repository, WorkerError
from worker_service.state import WorkerState

LOAD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# bulk_extend holds the GIL for its whole call (measured: ~6 s for 300k quads); slices
# keep the worker answering its master's health checks between them.
SLICE = 50_000


class BulkLoadError(WorkerError):
    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Staging:
    load_id: str
    folder: Path
    store: ox.Store | None
    parts: set[int] = field(default_factory=set)
    quads: int = 0
    fingerprint: int = fingerprint.ZERO


class BulkLoader:
    """The one bulk load a worker stages at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._staging: _Staging | None = None

    @staticmethod
    def _require_empty(repo: Repository) -> None:
        st = repo.state()
        if st.seq or st.quads:
            raise BulkLoadError(
                f"a bulk load needs an empty repository: '{repo.id}' is at seq {st.seq} "
                f"with {st.quads} quads")

    @staticmethod
    def _check_id(load_id: str) -> None:
        if not LOAD_ID.fullmatch(load_id):
            raise BulkLoadError(f"'{load_id}' is not a valid bulk load id", 400)

    def _current(self, load_id: str) -> _Staging:
        staging = self._staging
        if staging is None or staging.load_id != load_id:
            raise BulkLoadError(f"no bulk load '{load_id}' is in progress here", 404)
        return staging

    def _discard(self) -> None:
        staging, self._staging = self._staging, None
        if staging is not None:
            staging.store = None
            gc.collect()  # closes RocksDB (pyoxigraph has no close())
            shutil.rmtree(staging.folder, ignore_errors=True)

    def add_part(self, repo: Repository, load_id: str, part: int, data: bytes) -> dict:
        """Stage one part. Parts may come in any order (the loader sends the next while
        this one loads), each once; a part of another load id replaces an abandoned
        staging."""
        self._check_id(load_id)
        try:
            parsed = ox.parse(data, format=ox.RdfFormat.N_QUADS)
            quads, total = [], 0
            for q in parsed:
                q, line = canonical_quad(q)
                quads.append(q)
                total += fingerprint.line_hash(line.encode())
        except SyntaxError as exc:  # nothing is staged
            raise BulkLoadError(f"part {part} is not valid N-Quads: {exc}", 400) from None
        with self._lock:
            self._require_empty(repo)
            staging = self._staging
            if staging is None or staging.load_id != load_id:
                self._discard()
                folder = repo.data_dir / "tmp" / f"bulk-{load_id}"
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True)
                staging = self._staging = _Staging(load_id, folder,
                                                   ox.Store(str(folder / "store")))
            if part in staging.parts:
                raise BulkLoadError(f"part {part} of bulk load '{load_id}' is staged already")
            assert staging.store is not None
            for i in range(0, len(quads), SLICE):
                staging.store.bulk_extend(quads[i:i + SLICE])
            staging.parts.add(part)
            staging.quads += len(quads)
            staging.fingerprint = (staging.fingerprint + total) % fingerprint.MOD
            return {"load": load_id, "parts": len(staging.parts), "quads": staging.quads}

    def commit(self, repo: Repository, load_id: str, expected_fingerprint: int,
               expected_quads: int) -> WorkerState:
        self._check_id(load_id)
        with self._lock:
            staging = self._current(load_id)
            got = (staging.fingerprint, staging.quads)
            if got != (expected_fingerprint, expected_quads):
                self._discard()
                raise BulkLoadError(
                    f"bulk load '{load_id}' staged {got[1]} quads with fingerprint "
                    f"{fingerprint.to_hex(got[0])}, the loader expected {expected_quads} "
                    f"with {fingerprint.to_hex(expected_fingerprint)}: discarded")
            assert staging.store is not None
            staging.store.flush()
            self._staging = None
            staging.store = None
            gc.collect()
            new_state = WorkerState(seq=0, txid=load_id, fingerprint=staging.fingerprint,
                                    quads=staging.quads)
            try:
                return repo.install_store(staging.folder / "store", new_state)
            except ValueError as exc:
                raise BulkLoadError(str(exc)) from None
            finally:
                shutil.rmtree(staging.folder, ignore_errors=True)

    def abort(self, load_id: str) -> None:
        self._check_id(load_id)
        with self._lock:
            self._current(load_id)
            self._discard()
