"""Storage images: a consistent copy of a worker's storage folder, streamed to another.

An image is ``tar`` of {store checkpoint, state.json}, compressed with the snappy framing
format (cramjam), the documented format (docs/design/smart-replication.md#full-replication),
unless its master switched replication compression off (``replication.compression``): then
it is the plain tar. A reader tells the two apart by the framing's stream identifier, so
images of either form are read everywhere.
docs/design/dependencies.md#compression-replication-images:
RocksDB files are already compressed, so the gain is small on a store, but the format is
the documented one and decompression is cheap. The image is written to a file first so
that its SHA-256 and length are known before it is sent; a receiver verifies the checksum
before it touches anything.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import cramjam

CHUNK = 4 << 20
_STREAM_ID = b"\xff\x06\x00\x00sNaPpY"


class ImageError(ValueError):
    """An image is corrupt, truncated or does not match its checksum."""


class _ImageWriter(io.RawIOBase):
    """File-like sink that snappy-frames everything written to it into ``out`` (or, with
    ``compress`` False, copies it), with the SHA-256 and length of what it wrote."""

    def __init__(self, out: io.BufferedWriter, compress: bool = True) -> None:
        self._out = out
        self._compress = compress
        self._buf = bytearray()
        self.digest = hashlib.sha256()
        self.compressed_bytes = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        self._buf += data
        if len(self._buf) >= CHUNK:
            self._emit()
        return len(data)

    def _emit(self) -> None:
        if not self._buf:
            return
        # Each chunk is a complete framed stream; concatenations of framed streams are
        # valid framed streams (the stream identifier may repeat).
        frame = bytes(cramjam.snappy.compress(bytes(self._buf)) if self._compress
                      else self._buf)
        self._buf.clear()
        self._out.write(frame)
        self.digest.update(frame)
        self.compressed_bytes += len(frame)

    def close(self) -> None:
        self._emit()
        super().close()


def write_image(sources: dict[str, Path], target: Path,
                compress: bool = True) -> tuple[str, int]:
    """Tar ``{name in archive: path}`` into a snappy-framed file (a plain tar without
    ``compress``); return (sha256, bytes)."""
    with open(target, "wb") as out:
        sink = _ImageWriter(out, compress)
        with tarfile.open(fileobj=sink, mode="w|") as tar:
            for name, path in sources.items():
                tar.add(path, arcname=name)
        sink.close()
    return sink.digest.hexdigest(), sink.compressed_bytes


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _frames(path: Path) -> Iterator[bytes]:
    """Decompressed data of a snappy-framed file, decoded a few frames at a time
    (cramjam's stream decompressor needs whole frames, so we split at frame headers)."""
    with open(path, "rb") as fh:
        pending = bytearray()
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
            pending += header + body
            if len(pending) >= CHUNK:
                yield _decompress(pending)
                pending.clear()
        if pending:
            yield _decompress(pending)


def _decompress(frames: bytearray) -> bytes:
    try:
        return bytes(cramjam.snappy.decompress(_STREAM_ID + bytes(frames)))
    except Exception as exc:  # cramjam raises its own DecompressionError
        raise ImageError(f"image does not decompress: {exc}") from None


class _FrameReader(io.RawIOBase):
    def __init__(self, path: Path) -> None:
        self._it = _frames(path)
        self._buf = b""

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


def _tar_stream(path: Path) -> io.BufferedIOBase:
    """The tar inside an image: decompressed if it is snappy-framed (it starts with the
    framing's stream identifier), else the file itself (compression was off)."""
    with open(path, "rb") as fh:
        framed = fh.read(len(_STREAM_ID)) == _STREAM_ID
    return io.BufferedReader(_FrameReader(path), CHUNK) if framed else open(path, "rb")


def extract_image(path: Path, expected_sha256: str, target: Path) -> None:
    """Verify the checksum, then unpack into ``target`` (which must not exist)."""
    actual = sha256_of(path)
    if actual != expected_sha256:
        raise ImageError(
            f"image checksum mismatch: expected {expected_sha256}, got {actual}"
        )
    target.mkdir(parents=True)
    try:
        with _tar_stream(path) as source, tarfile.open(fileobj=source, mode="r|") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(target, filter="data")
            else:
                # Python before 3.11.4 (Debian 12's 3.11.2, the Molecule hosts) has no
                # extraction filters: the same refusals by hand.
                for member in tar:
                    parts = Path(member.name).parts
                    if (member.name.startswith("/") or ".." in parts
                            or not (member.isfile() or member.isdir())):
                        raise ImageError(f"image member {member.name!r} is not a plain "
                                         "file or directory inside the image")
                    tar.extract(member, target)
    except (tarfile.TarError, OSError) as exc:
        raise ImageError(f"image is not a valid archive: {exc}") from None
