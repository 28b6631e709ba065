"""Storage images: a consistent copy of a worker's storage folder, streamed to another.

An image is ``tar`` of {store checkpoint, state.json}, compressed with the snappy framing
format (cramjam), the documented format (docs/design/smart-replication.md#full-replication),
unless its master switched replication compression off (``replication.compression``): then
it is the plain tar. A reader tells the two apart by the framing's stream identifier, so
images of either form are read everywhere.
docs/design/dependencies.md#compression-replication-images:
RocksDB files are already compressed, so the gain is small on a store, but the format is
the documented one and decompression is cheap. The image is written to a file, which a
reader may follow while it is written (a seed image: worker_service/backups.py); its
SHA-256 and length are known once it is whole. A receiver unpacks an image as it arrives
into a directory nothing uses yet, hashing every byte, and the caller swaps that in only
when the checksum holds (``extract_image``): a corrupt image changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import queue
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import cramjam

CHUNK = 4 << 20
# Written out (and, for a followed image, flushed) this often: a reader of an image
# being written lags by at most this much.
EMIT = 1 << 20
_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"


class ImageError(ValueError):
    """An image is corrupt, truncated or does not match its checksum."""


class _ImageWriter(io.RawIOBase):
    """File-like sink that snappy-frames everything written to it into ``out`` (or, with
    ``compress`` False, copies it), with the SHA-256 and length of what it wrote.

    A write of EMIT bytes or more into an empty buffer is framed as it is, not copied
    first: the archive's file contents come in such blocks (``write_image``), so only
    the tar headers and each file's first block are buffered."""

    def __init__(self, out: io.BufferedWriter, compress: bool = True,
                 progress: Callable[[int], None] | None = None) -> None:
        self._out = out
        self._compress = compress
        self._progress = progress
        self._buf = bytearray()
        self._taken = 0
        self.digest = hashlib.sha256()
        self.compressed_bytes = 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        # tarfile's non-stream writer asks where the archive is once, at its start.
        return self._taken

    def write(self, data) -> int:  # type: ignore[override]
        n = memoryview(data).nbytes
        self._taken += n
        if not self._buf and n >= EMIT:
            self._frame(data)
            return n
        self._buf += data
        if len(self._buf) >= EMIT:
            self._emit()
        return n

    def _emit(self) -> None:
        if self._buf:
            self._frame(self._buf)
            self._buf.clear()

    def _frame(self, data) -> None:
        # Each chunk is a complete framed stream; concatenations of framed streams are
        # valid framed streams (the stream identifier may repeat). cramjam's Buffer is
        # written and hashed through the buffer protocol, not copied into bytes.
        frame = cramjam.snappy.compress(data) if self._compress else data
        self._out.write(frame)
        self.digest.update(frame)
        self.compressed_bytes += memoryview(frame).nbytes
        if self._progress is not None:
            # Readers of an image still being written follow it up to this point.
            self._out.flush()
            self._progress(self.compressed_bytes)

    def close(self) -> None:
        self._emit()
        super().close()


def write_image(sources: dict[str, Path], target: Path, compress: bool = True,
                progress: Callable[[int], None] | None = None) -> tuple[str, int]:
    """Tar ``{name in archive: path}`` into a snappy-framed file (a plain tar without
    ``compress``); return (sha256, bytes). ``progress`` is told the bytes written and
    flushed so far, every megabyte or so (an image read while it is written)."""
    with open(target, "wb") as out:
        sink = _ImageWriter(out, compress, progress)
        # Written in order all the same (the sink only counts where it is), but not in
        # tarfile's stream mode ("w|"), which cuts every write into 10 KB records; file
        # contents go in EMIT blocks, which the sink frames without a copy.
        with tarfile.open(fileobj=sink, mode="w", copybufsize=EMIT) as tar:
            for name, path in sources.items():
                tar.add(path, arcname=name)
        sink.close()
    return sink.digest.hexdigest(), sink.compressed_bytes


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    for chunk in file_chunks(path):
        digest.update(chunk)
    return digest.hexdigest()


class _Source(io.RawIOBase):
    """The raw bytes of an image from an iterable of chunks (a file read in blocks, or an
    HTTP body as it arrives), with the SHA-256 and length of everything read."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._it = iter(chunks)
        self._buf = memoryview(b"")
        self.digest = hashlib.sha256()
        self.length = 0

    def readable(self) -> bool:
        return True

    def _next(self) -> bool:
        for chunk in self._it:
            if chunk:
                self.digest.update(chunk)
                self.length += len(chunk)
                self._buf = memoryview(bytes(self._buf) + chunk) if self._buf else \
                    memoryview(chunk)
                return True
        return False

    def starts_with(self, prefix: bytes) -> bool:
        while len(self._buf) < len(prefix) and self._next():
            pass
        return bytes(self._buf[:len(prefix)]) == prefix

    def readinto(self, b) -> int:  # type: ignore[override]
        if not self._buf and not self._next():
            return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def drain(self) -> None:
        self._buf = memoryview(b"")
        while self._next():
            self._buf = memoryview(b"")


def file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


def _frames(fh: io.BufferedReader) -> Iterator[memoryview]:
    """Decompressed data of a snappy-framed stream, decoded a few frames at a time
    (cramjam's stream decompressor needs whole frames, so we split at frame headers)."""
    empty = len(_STREAM_ID)
    pending = bytearray(_STREAM_ID)
    while True:
        header = fh.read(4)
        if not header:
            break
        if len(header) < 4:
            raise ImageError("image truncated inside a frame header")
        length = int.from_bytes(header[1:4], "little")
        body = fh.read(length)
        if len(body) < length:
            raise ImageError("image truncated inside a frame")
        if header[0] == 0xFF:
            continue
        pending += header
        pending += body
        if len(pending) >= CHUNK:
            yield _decompress(pending)
            del pending[empty:]
    if len(pending) > empty:
        yield _decompress(pending)


def _decompress(frames: bytearray) -> memoryview:
    """A framed stream (its identifier first) decompressed, as a view of cramjam's own
    buffer (not copied into bytes)."""
    try:
        return memoryview(cramjam.snappy.decompress(frames))
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise ImageError(f"image does not decompress: {exc}") from None


class _FrameReader(io.RawIOBase):
    def __init__(self, fh: io.BufferedReader) -> None:
        self._it = _frames(fh)
        self._buf = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        while not self._buf:
            try:
                self._buf = next(self._it)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def extract_image(chunks: Iterable[bytes], expected_sha256: str | Callable[[], str],
                  target: Path) -> int:
    """Unpack an image into ``target`` (which must not exist) *as it arrives*, hashing
    every byte; return its length. The checksum is checked when the last byte is in
    (``expected_sha256`` may be a callable: a streamed image's SHA-256 is known only
    once its writer finished, docs/design/smart-replication.md#full-replication):
    ImageError if it does not match. ``target`` is a new generation directory that
    nothing uses before the caller swaps it in, so unpacking before the check touches
    nothing; a refused image's directory is removed by the caller."""
    source = _Source(chunks)
    raw = io.BufferedReader(source, CHUNK)
    # The tar inside: decompressed if snappy-framed (the framing's stream identifier),
    # else as it is (compression was off).
    framed = source.starts_with(_STREAM_ID)
    tar_bytes = io.BufferedReader(_FrameReader(raw), CHUNK) if framed else raw
    target.mkdir(parents=True)
    problem = None
    # Read in EMIT blocks, not tarfile's 10 KB records and 16 KB copies: fewer Python
    # calls and copies per byte (with the frames decompressed into views of cramjam's
    # buffers: 0.56-0.59 against 0.79 CPU-s for a 160 MB image, bench/README.md).
    try:
        with tarfile.open(fileobj=tar_bytes, mode="r|", bufsize=EMIT,
                          copybufsize=EMIT) as tar:
            _extract_all(tar, target)
        while tar_bytes.read(CHUNK):  # the tar's end padding: the digest covers it all
            pass
    except (tarfile.TarError, OSError) as exc:
        problem = ImageError(f"image is not a valid archive: {exc}")
    except ImageError as exc:
        problem = exc
    if problem is not None:
        # A corrupt image usually breaks the archive first; its checksum is the cause to
        # report, so read the rest before saying which.
        source.drain()
    expected = expected_sha256() if callable(expected_sha256) else expected_sha256
    actual = source.digest.hexdigest()
    if actual != expected:
        raise ImageError(f"image checksum mismatch: expected {expected}, got {actual}")
    if problem is not None:
        raise problem
    return source.length


def _extract_all(tar: tarfile.TarFile, target: Path) -> None:
    if hasattr(tarfile, "data_filter"):
        tar.extractall(target, filter="data")
        return
    # Python before 3.11.4 (Debian 12's 3.11.2, the Molecule hosts) has no extraction
    # filters: the same refusals by hand.
    for member in tar:
        parts = Path(member.name).parts
        if (member.name.startswith("/") or ".." in parts
                or not (member.isfile() or member.isdir())):
            raise ImageError(f"image member {member.name!r} is not a plain file or "
                             "directory inside the image")
        tar.extract(member, target)


class Feed:
    """Chunks handed from the event loop (an image arriving over HTTP) to the thread that
    unpacks them (``extract_image``). Bounded: a slow unpacker slows the transfer rather
    than filling memory."""

    _END = object()

    def __init__(self, depth: int = 8) -> None:
        self._q: queue.Queue[Any] = queue.Queue(depth)

    def __iter__(self) -> Iterator[bytes]:
        while (item := self._q.get()) is not Feed._END:
            if isinstance(item, BaseException):
                raise ImageError(f"the image's transfer failed: {item}")
            yield item

    async def put(self, chunk: bytes, consumer: asyncio.Future[Any]) -> None:
        """Hand on ``chunk``; returns early if the consumer ended (its error is the one
        to report: the caller awaits it)."""
        while not consumer.done():
            try:
                self._q.put_nowait(chunk)
                return
            except queue.Full:
                await asyncio.sleep(0.002)

    async def end(self, consumer: asyncio.Future[Any]) -> None:
        await self.put(Feed._END, consumer)  # type: ignore[arg-type]

    def fail(self, exc: BaseException) -> None:
        """The transfer broke: the consumer raises ImageError at its next chunk."""
        while True:  # room for it: what it displaces was never going to be installed
            try:
                self._q.put_nowait(exc)
                return
            except queue.Full:
                with contextlib.suppress(queue.Empty):
                    self._q.get_nowait()
