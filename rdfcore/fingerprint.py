"""Repository fingerprint: an order-independent hash of the content
(docs/design/write-path.md#the-fingerprint).

fingerprint = sum over quads of xxh3-128(canonical N-Quads line) mod 2**128, where the
line is ``str(quad) + " ."`` — byte-identical to the line pyoxigraph's ``dump`` writes
(docs/design/dependencies.md#pyoxigraph-the-workers-store), without the line terminator. Because it
is a sum, a changeset moves it by sum(added) - sum(removed), so workers keep it incrementally;
``recompute`` streams the whole store for verification. The Spark pipeline imports ``line_hash`` so
a data set and a store are hashed by the same function.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyoxigraph as ox
import xxhash

MOD = 1 << 128
ZERO = 0


def line_hash(line: bytes) -> int:
    """128-bit hash of one canonical N-Quads line (without ' .' terminator newline)."""
    return xxhash.xxh3_128_intdigest(line)


def quad_hash(quad: ox.Quad) -> int:
    return xxhash.xxh3_128_intdigest(f"{quad} .".encode())


def sum_hashes(quads: Iterable[ox.Quad]) -> int:
    h = xxhash.xxh3_128_intdigest
    return sum(h(f"{q} .".encode()) for q in quads) % MOD


def sum_line_hashes(text: str) -> int:
    """``sum_hashes`` of the quads of N-Quads ``text`` written one "<quad> ." line each, as
    changeset.nquads writes them (str(quad) escapes line breaks in literals): the same
    value without making each quad's text again."""
    h = xxhash.xxh3_128_intdigest
    return sum(h(line) for line in text.encode().split(b"\n") if line) % MOD


def moved(fingerprint: int, added: Iterable[ox.Quad], removed: Iterable[ox.Quad]) -> int:
    """The fingerprint after a changeset (the incremental rule)."""
    return (fingerprint + sum_hashes(added) - sum_hashes(removed)) % MOD


def moved_by_text(fingerprint: int, added: str, removed: str) -> int:
    """``moved`` for a changeset given as N-Quads text, one "<quad> ." line each."""
    return (fingerprint + sum_line_hashes(added) - sum_line_hashes(removed)) % MOD


def to_hex(fingerprint: int) -> str:
    return f"{fingerprint:032x}"


def from_hex(text: str) -> int:
    if len(text) != 32:
        raise ValueError(f"a fingerprint is 32 hex digits, got '{text}'")
    try:
        return int(text, 16)
    except ValueError:
        raise ValueError(f"a fingerprint is 32 hex digits, got '{text}'") from None


class _HashingWriter:
    """A file-like sink for ``Store.dump``: hashes complete lines as they stream past."""

    def __init__(self) -> None:
        self.total = 0
        self.count = 0
        self._rest = b""

    def write(self, chunk: bytes) -> int:
        data = self._rest + chunk
        lines = data.split(b"\n")
        self._rest = lines.pop()
        h = xxhash.xxh3_128_intdigest
        self.total += sum(h(line) for line in lines if line)
        self.count += sum(1 for line in lines if line)
        # docs/design/dependencies.md#pyoxigraph-the-workers-store:
        # dump needs write() to return the length of the chunk.
        return len(chunk)

    def flush(self) -> None:
        pass


def recompute(store: ox.Store) -> tuple[int, int]:
    """Full streamed recomputation: (fingerprint, quad count). Bounded memory."""
    writer = _HashingWriter()
    store.dump(writer, format=ox.RdfFormat.N_QUADS)
    if writer._rest:
        writer.write(b"\n")
    return writer.total % MOD, writer.count
