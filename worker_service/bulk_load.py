"""Initial bulk load of an empty worker (``txcluster load --initial``, issue "data pipeline").

The fastest safe way to fill a new cluster: the prepared data (canonical, deduplicated
N-Quads from the Spark job) goes into ONE worker with ``Store.bulk_extend`` — no
transactions, changesets or journal — and the master makes that worker's state the base
of its new transaction log; the other workers are replicated from it ("Replicating
(empty)"). The master forwards the loader's calls (cluster credential):

    PUT    /cluster/bulk-load/{id}/parts/{n}   N-Quads; n any number, a part sent again
                                               with the same content taken once
    POST   /cluster/bulk-load/{id}/sent        every part is sent: load what waits now
    POST   /cluster/bulk-load/{id}             {"fingerprint", "quads"}: commit
    DELETE /cluster/bulk-load/{id}             abort

Safety: parts go into a staging store under ``data-dir/tmp`` (removed at start), never
into the live store; those in the loader's form are loaded LOAD_EVERY quads at a time
(in the background, while the next parts come), the rest at the commit, and a load that
fails discards the whole staging (at the next part or the commit); a part of a load
that ended so (or was aborted, or replaced by another) is refused when it comes. Each
quad is hashed here in the form the store holds it (``canonical_quad``, as an RDF4J add
does; a part that is already in that form, as the loader sends it, is checked so and
loaded as text: ``_canonical_text``), and the commit checks that the staged content is
exactly what the loader computed: the count and the fingerprint of the DISTINCT quads
staged (``Digests``: a store is a set, and the loader sends a quad as often as its
inputs hold it, deduplicating only the hashes it computes; a missing part fails the
check; a part number sent again is taken once when its content is the same, as a
retried Spark task sends it, and refused otherwise). The staged store is then installed
as a new generation with state (seq 0, txid = load id, fingerprint, quads), atomically
and only while the repository is still empty (``Repository.install_store``).
A worker that holds anything is refused (409) at every step.
"""

from __future__ import annotations

import array
import re
import shutil
import sys
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pyoxigraph as ox
import xxhash

from rdfcore import fingerprint
from rdfcore.canonical import KEPT_OBJECT_AT_END, KEPT_OBJECT_AT_LINE_END, canonical_quad
from txinfra import heap
from worker_service.repository import Repository, WorkerError
from worker_service.state import WorkerState

LOAD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# bulk_extend holds the GIL for its whole call (measured: ~6 s for 300k quads); slices
# keep the worker answering its master's health checks between them (bulk_load releases
# it).
SLICE = 50_000
# Canonical parts wait until this many of their quads can be loaded together (and the
# rest at the commit): every bulk load call adds files that RocksDB then compacts with
# those before. Loaded part by part (3 calls a part: its plain lines as text in two
# slices, its lines with blank nodes as quads), the compaction threads of the loading
# worker took 12.4 of its 32.6 CPU-s for 1,000,000 quads; 800,000 quads bulk-loaded in
# 8 calls took 11.6 CPU-s (13.6 with the compaction after), in one 8.9 (bench/README,
# "The Spark pipeline").
LOAD_EVERY = 300_000
# Batches handed to the loading thread that may wait behind the one it loads.
QUEUED = 1
# Parts taken in at once (their bodies read, checked and staged): the loader's Spark tasks
# each send their own, and the others wait unread rather than all in memory together.
# Two keep one checked while another waits for the batch before it to load.
PARTS_AT_ONCE = 2


class BulkLoadError(WorkerError):
    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Staged:
    """One part, checked: what goes into the store, and the 16-byte xxh3-128 digests of
    its quads' canonical lines, one after the other."""

    digests: bytes
    text: bytes = b""  # canonical lines without a blank node: Store.bulk_load
    labelled: bytes = b""  # canonical lines that may hold one: parsed, Store.bulk_extend
    quads: list[ox.Quad] = field(default_factory=list)  # canonicalised (another form)

    @property
    def count(self) -> int:
        return len(self.digests) // 16


@dataclass
class _Staging:
    load_id: str
    folder: Path
    store: ox.Store | None
    digests: Digests
    # Each part staged, by its number: the xxh3-128 of its digests (a part sent again).
    parts: dict[int, bytes] = field(default_factory=dict)
    waiting: list[Staged] = field(default_factory=list)  # canonical, not loaded yet
    # The batches of waiting parts handed to the loading thread, in order: the one it
    # loads, and at most QUEUED more (load_waiting). The loader's next parts are taken
    # meanwhile. Answering a part only once its batch was in the store left the Spark
    # job idle for the batch's load (bench/README, "2026-12-02"); answering the part that
    # completes a batch (and the loader's "sent") only once the batch before was in the
    # store still left it idle for 2-3 s at a time, ~7 s of a 1,000,000-quad initial
    # load (bench/README, "2026-12-02 evening").
    pending: deque[Future] = field(default_factory=deque)
    loader: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="bulk-load"))

    def settle(self, wait: bool = True, keep: int = 0) -> None:
        """Wait for the batches loading in the background until at most ``keep`` are
        left (or, with ``wait`` false, only take those done); the first error is raised
        here."""
        while len(self.pending) > keep and (wait or self.pending[0].done()):
            self.pending.popleft().result()

    def close(self) -> None:
        """No load runs any more once this returns (the store can be dropped)."""
        self.loader.shutdown(wait=True, cancel_futures=True)
        self.pending.clear()

    def load(self, parts: list[Staged]) -> None:
        """The parts into the store: their text in one bulk load, their other quads in
        SLICE slices."""
        assert self.store is not None
        text = b"".join(p.text for p in parts)
        if text:
            # lenient: no second validation of the IRIs and literals; this text passed
            # the strict parse of _canonical_text and is what it gave back byte for byte.
            self.store.bulk_load(text, format=ox.RdfFormat.N_QUADS, lenient=True)
        labelled = b"".join(p.labelled for p in parts)
        quads = list(ox.parse(labelled, format=ox.RdfFormat.N_QUADS)) if labelled else []
        quads += [q for p in parts for q in p.quads]
        for i in range(0, len(quads), SLICE):
            self.store.bulk_extend(quads[i:i + SLICE])

    def load_waiting(self, at_least: int = 0, background: bool = False) -> None:
        """The waiting parts into the store once they hold ``at_least`` quads; in the
        background if asked, after the batches handed over before (one thread loads them
        in turn). When QUEUED batches wait for the one loading already, this waits for
        it first: so at most QUEUED + 2 batches are held in memory (loading, queued, and
        the parts waiting here), and the sender of the part that completes a batch is
        held back when the loading does not keep up. Without ``background``, every batch
        is loaded when this returns."""
        if sum(p.count for p in self.waiting) >= at_least:
            waiting, self.waiting = self.waiting, []
            if background:
                self.settle(keep=QUEUED)
                self.pending.append(self.loader.submit(self.load, waiting))
            else:
                self.settle()
                self.load(waiting)


class Digests:
    """The quads a bulk load staged, by their digests (the fingerprint's xxh3-128 of the
    canonical line, as bytes: equal digests, the same quad): how many were sent and the
    sum of their hashes, kept as they come, and the count and the fingerprint of the
    DISTINCT ones, computed only when asked (``distinct``).

    The loader sends a quad as often as its inputs hold it. When the number and the sum
    of everything sent are what the loader expects for its distinct quads, none came
    twice (then one would be missing, and the sum differ but for a 128-bit collision:
    what the fingerprint itself relies on), so the commit takes them as they are.
    Otherwise ``distinct`` reads the digests back (kept in one file, ~16 bytes per quad
    sent), spreads them into BUCKETS files by their first byte and deduplicates one
    bucket at a time, so a 64th of them is in memory at once, not the whole load's."""

    BUCKETS = 64
    CHUNK = 16 << 16  # digests read at a time

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.sent = 0
        self.total = fingerprint.ZERO

    def add(self, digests: bytes) -> None:
        with open(self.folder / "sent", "ab") as fh:
            fh.write(digests)
        self.sent += len(digests) // 16
        self.total = (self.total + _sum_of(digests)) % fingerprint.MOD

    def distinct(self) -> tuple[int, int]:
        """(count, fingerprint) of the distinct quads added."""
        shift = 8 - (self.BUCKETS.bit_length() - 1)
        buckets = [self.folder / f"bucket-{n:02x}" for n in range(self.BUCKETS)]
        sent = self.folder / "sent"
        if sent.exists():
            with open(sent, "rb") as fh:
                while chunk := fh.read(self.CHUNK):
                    spread: list[list[bytes]] = [[] for _ in buckets]
                    for i in range(0, len(chunk), 16):
                        spread[chunk[i] >> shift].append(chunk[i:i + 16])
                    for path, part in zip(buckets, spread, strict=True):
                        if part:
                            with open(path, "ab") as out:
                                out.write(b"".join(part))
        count = total = 0
        for path in buckets:
            if path.exists():
                data = path.read_bytes()
                path.unlink()
                unique = {data[i:i + 16] for i in range(0, len(data), 16)}
                count += len(unique)
                total += _sum_of(b"".join(unique))
        return count, total % fingerprint.MOD


def _sum_of(digests: bytes) -> int:
    """The sum of 16-byte digests read as 128-bit big-endian integers (the fingerprint's
    hashes), from their two 64-bit halves summed apart: in C, ~2.5x faster than an int
    per digest."""
    words = array.array("Q", digests)
    if sys.byteorder == "little":
        words.byteswap()
    return (sum(words[0::2]) << 64) + sum(words[1::2])


def _canonical_text(data: bytes) -> Staged | None:
    """``data`` as N-Quads text slices for ``Store.bulk_load`` (parsing in Rust, the GIL
    released: ~3x faster than Python quads through ``bulk_extend``; lines with blank
    nodes excepted), when every line is
    already the canonical line of its quad (``str(quad) + " ."``: what the fingerprint
    hashes and what the store gives back); None when a line is not (the caller takes the
    quad-by-quad path, which canonicalises). Checked without a Python loop per quad:
    pyoxigraph's own serialisation of the parsed text must give the text back byte for
    byte, and the typed literals (the only terms the store rewrites) must be canonical."""
    serialized = ox.serialize(ox.parse(data, format=ox.RdfFormat.N_QUADS),
                              format=ox.RdfFormat.N_QUADS)
    if serialized != data:
        return None
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    # When every '"^^<' of the text ends a kept object at the end of its line (counted,
    # in C: 30 against 72 ms per 100,000 lines), no line is looked at one by one.
    ends = data.count(b'"^^<')
    typed = [line for line in lines if b'"^^<' in line and not KEPT_OBJECT_AT_END.search(line)
             ] if ends and len(KEPT_OBJECT_AT_LINE_END.findall(data)) != ends else []
    if typed and not _stored_as_written(typed):
        return None
    digests = b"".join(map(xxhash.xxh3_128_digest, lines))  # fingerprint.line_hash
    # The store's loader gives blank nodes fresh labels, and the loader's labels must
    # stay (they are in the fingerprint, and a later add names them): lines that may
    # hold one go in as quads (a "_:" inside an IRI or a literal only costs speed). The
    # loader sends them after the others (spark_pipeline/transform.py, _QuadsOut), so
    # everything before the line of the first "_:" is bulk-loaded as text, the rest
    # parsed, without a look at each line; in another order, more is parsed, and the
    # same quads are staged.
    first = data.find(b"_:")
    if first < 0:
        return Staged(digests, text=data)
    cut = data.rfind(b"\n", 0, first) + 1
    return Staged(digests, text=data[:cut], labelled=data[cut:])


def _stored_as_written(lines: list[bytes]) -> bool:
    """Whether a store holds the quad of each of these N-Quads lines exactly as the line
    writes it. Checked in Rust, by loading them into an in-memory store and comparing
    what it gives back (as sets: a store has no order): ~2x faster than a Python
    ``canonical_quad`` per line, which showed in the worker's share of an initial load.
    Lines with a blank node are checked one by one (the store renames blank nodes)."""
    labelled = [line for line in lines if b"_:" in line]
    plain = [line for line in lines if b"_:" not in line] if labelled else lines
    if labelled:
        for q in ox.parse(b"\n".join(labelled), format=ox.RdfFormat.N_QUADS):
            if canonical_quad(q)[0] is not q:
                return False
    if not plain:
        return True
    scratch = ox.Store()
    scratch.bulk_load(b"\n".join(plain), format=ox.RdfFormat.N_QUADS)
    back = ox.serialize(scratch, format=ox.RdfFormat.N_QUADS).split(b"\n")
    if back and not back[-1]:
        back.pop()
    return sorted(back) == sorted(plain)  # a line given twice: not equal (slow path)


def _canonical_quads(data: bytes) -> Staged:
    """Each quad of ``data`` in the form the store holds it, with its hash."""
    quads, digests = [], []
    for q in ox.parse(data, format=ox.RdfFormat.N_QUADS):
        q, line = canonical_quad(q)
        quads.append(q)
        digests.append(xxhash.xxh3_128_digest(line.encode()))
    return Staged(b"".join(digests), quads=quads)


class BulkLoader:
    """The one bulk load a worker stages at a time."""

    # How many ended load ids are remembered (a load id is a fresh uuid per load).
    ENDED = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._staging: _Staging | None = None
        # Loads aborted, failed or replaced here: a part of one that comes later (a
        # Spark task still running when its job failed, each task sending its own parts)
        # is refused, never staged again, and never replaces the staging of a newer load.
        self._ended: dict[str, None] = {}

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

    def _end(self, load_id: str) -> None:
        self._ended[load_id] = None
        while len(self._ended) > self.ENDED:
            del self._ended[next(iter(self._ended))]

    def _discard(self) -> None:
        staging, self._staging = self._staging, None
        if staging is not None:
            self._end(staging.load_id)
            staging.close()
            staging.store = None
            heap.collect()  # closes RocksDB (pyoxigraph has no close())
            shutil.rmtree(staging.folder, ignore_errors=True)

    def _failed(self, load_id: str, what: str, exc: Exception) -> NoReturn:
        # A store load that failed may have loaded some of its quads, whose digests are
        # not counted (or waiting parts whose digests are): the staging cannot be trusted.
        self._discard()
        raise BulkLoadError(f"bulk load '{load_id}' discarded: {what} could not be loaded "
                            f"into the staging store: {exc}", 500) from exc

    def add_part(self, repo: Repository, load_id: str, part: int, data: bytes) -> dict:
        """Stage one part. Parts may come in any order (the loader's tasks send them as
        they parse, several at once). A part number sent again is taken once if its
        quads are the same (a Spark task that ran again: an executor lost, a speculative
        copy) and refused otherwise. A part of another load id replaces an abandoned
        staging; a part of a load that ended here (aborted, failed or replaced) is
        refused."""
        self._check_id(load_id)
        try:
            staged = _canonical_text(data)
            if staged is None:
                staged = _canonical_quads(data)
        except SyntaxError as exc:  # nothing is staged
            raise BulkLoadError(f"part {part} is not valid N-Quads: {exc}", 400) from None
        with self._lock:
            self._require_empty(repo)
            if load_id in self._ended:
                raise BulkLoadError(f"bulk load '{load_id}' was aborted or failed here: "
                                    f"part {part} is not staged (start another load)")
            staging = self._staging
            if staging is None or staging.load_id != load_id:
                self._discard()
                folder = repo.data_dir / "tmp" / f"bulk-{load_id}"
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True)
                staging = self._staging = _Staging(load_id, folder,
                                                   ox.Store(str(folder / "store")),
                                                   Digests(folder / "digests"))
            same = xxhash.xxh3_128_digest(staged.digests)
            if part in staging.parts:
                if staging.parts[part] != same:
                    raise BulkLoadError(f"part {part} of bulk load '{load_id}' is staged "
                                        "already, with other quads")
                return {"load": load_id, "parts": len(staging.parts),
                        "quads": staging.digests.sent}
            try:
                staging.settle(wait=False)  # a failed batch fails this part already
                if staged.quads:  # another form than the loader's: not worth waiting for
                    staging.settle()
                    staging.load([staged])
                else:
                    staging.waiting.append(staged)
                    staging.load_waiting(LOAD_EVERY, background=True)
            except Exception as exc:
                self._failed(load_id, f"part {part} or a part staged before it", exc)
            staging.digests.add(staged.digests)
            staging.parts[part] = same
            return {"load": load_id, "parts": len(staging.parts),
                    "quads": staging.digests.sent}

    def sent(self, load_id: str) -> dict:
        """The loader has sent every part (it is computing the commit's count and
        fingerprint meanwhile): the parts waiting for a batch start loading now, in the
        background, so that the commit finds them loaded. A part sent after it is still
        taken, as before."""
        self._check_id(load_id)
        with self._lock:
            staging = self._current(load_id)
            try:
                staging.load_waiting(background=True)
            except Exception as exc:
                self._failed(load_id, "a part", exc)
            return {"load": load_id, "parts": len(staging.parts),
                    "quads": staging.digests.sent}

    def commit(self, repo: Repository, load_id: str, expected_fingerprint: int,
               expected_quads: int) -> WorkerState:
        self._check_id(load_id)
        with self._lock:
            staging = self._current(load_id)
            digests = staging.digests
            got = (digests.total, digests.sent)
            if got != (expected_fingerprint, expected_quads):  # a quad sent twice, or lost
                quads, total = digests.distinct()
                got = (total, quads)
            if got != (expected_fingerprint, expected_quads):
                self._discard()
                raise BulkLoadError(
                    f"bulk load '{load_id}' staged {got[1]} quads with fingerprint "
                    f"{fingerprint.to_hex(got[0])}, the loader expected {expected_quads} "
                    f"with {fingerprint.to_hex(expected_fingerprint)}: discarded")
            assert staging.store is not None
            try:
                staging.load_waiting()
            except Exception as exc:
                self._failed(load_id, "parts staged before the commit", exc)
            staging.close()
            staging.store.flush()
            self._staging = None
            staging.store = None
            heap.collect()
            new_state = WorkerState(seq=0, txid=load_id, fingerprint=got[0], quads=got[1])
            try:
                return repo.install_store(staging.folder / "store", new_state)
            except ValueError as exc:
                raise BulkLoadError(str(exc)) from None
            finally:
                shutil.rmtree(staging.folder, ignore_errors=True)

    def abort(self, load_id: str) -> None:
        """Drop the staging of ``load_id``; its parts that come later are refused (also
        when none was staged yet: 404, but the id is ended all the same)."""
        self._check_id(load_id)
        with self._lock:
            try:
                self._current(load_id)
            finally:
                self._end(load_id)
            self._discard()
