"""One storage image for every replication that asks for one at the same time
(``GET /cluster/image``; docs/design/smart-replication.md#full-replication).

Why: a master that brings several workers back at once (after an initial bulk load, the
restore of a data centre, a wiped rack) has them all pull from one source. When each
request packed an image of its own, the packing was serialised (``Repository.create_image``
holds the repository's maintenance lock), so the second worker waited for the first one's
image to be written before its own was begun, and the source packed the same store twice.

Now the image is streamed while it is written (``growing_file.follow``): the receivers
unpack as the source packs, and a request that comes while an image is being written or
read joins it, reading the same file from its first byte. Its state is that of the
checkpoint the image was begun from; a receiver is caught up from there by replay, as
after any replication. Its SHA-256 is known only at its end, so the answer names where to ask for it
(``X-Image-Sha256-Location: image/<id>/sha256``, relative to the image's URL), as a seed
image does; the pull takes either form.

A request once the image is written and no longer read starts a new one (a fresher
state); the file goes when it is written and its last reader has ended. The finished
images' checksums are kept for a while (``KEPT_SUMS``): a reader asks after its body.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from worker_service.backups import Writing
from worker_service.repository import Repository, WorkerError

log = logging.getLogger("txcluster.worker")

# Checksums of finished images, by id: enough for every receiver of any recent image.
KEPT_SUMS = 64


@dataclass
class SharedImage:
    id: str
    compress: bool
    writing: Writing  # the file, its state once the checkpoint is made, bytes so far
    readers: int = 0


class SharedImages:
    """The images of a worker's ``GET /cluster/image``: one being written per kind
    (snappy-framed or plain tar) at a time."""

    def __init__(self, repo_provider: Callable[[], Repository]) -> None:
        self.repo_provider = repo_provider
        self._lock = threading.Lock()
        self._latest: dict[bool, SharedImage] = {}  # written or read, by compression
        self._by_id: dict[str, SharedImage] = {}  # being written or read
        self._sums: OrderedDict[str, tuple[str | None, int | None, str | None]] = \
            OrderedDict()  # finished: (sha256, bytes, error)

    def join(self, compress: bool) -> SharedImage:
        """The image being written or read, or a new one; returns once its checkpoint is made
        (blocking: call it off the event loop). The caller reads it, then ``leave``s.
        WorkerError if a new image could not begin."""
        with self._lock:
            shared = self._latest.get(compress)
            if shared is None or shared.id not in self._by_id or shared.writing.error:
                shared = self._begin(compress)
            shared.readers += 1
        shared.writing.started.wait()
        if shared.writing.state is None:
            self.leave(shared)
            raise WorkerError(f"a storage image could not begin: {shared.writing.error}")
        return shared

    def leave(self, shared: SharedImage) -> None:
        with self._lock:
            shared.readers -= 1
            self._drop_if_unread(shared)

    def checksum(self, image_id: str, timeout_s: float = 3600
                 ) -> tuple[str | None, int | None, str | None] | None:
        """(sha256, bytes, error) of an image once it is written (waits for it); None
        for an id this worker does not know (any more)."""
        with self._lock:
            shared = self._by_id.get(image_id)
            kept = self._sums.get(image_id)
        if shared is not None:
            shared.writing.done.wait(timeout_s)
            w = shared.writing
            return (w.sha256, w.bytes,
                    w.error if w.done.is_set() else "not written in time")
        return kept

    # ---- inside the lock ----

    def _begin(self, compress: bool) -> SharedImage:
        image_id = uuid.uuid4().hex
        path = self.repo_provider().data_dir / "tmp" / f"image-{image_id}.tar.sz"
        shared = SharedImage(image_id, compress, Writing(image_id, path))
        self._latest[compress] = shared
        self._by_id[image_id] = shared
        threading.Thread(target=self._write, args=(shared,), name=f"image-{image_id[:8]}",
                         daemon=True).start()
        return shared

    def _drop_if_unread(self, shared: SharedImage) -> None:
        if shared.readers == 0 and shared.writing.done.is_set() \
                and self._by_id.pop(shared.id, None) is not None:
            shared.writing.path.unlink(missing_ok=True)

    # ---- the writer's thread ----

    def _write(self, shared: SharedImage) -> None:
        w = shared.writing
        began = time.monotonic()

        try:
            manifest = self.repo_provider().create_image(w.path, shared.compress, w.begun,
                                                         w.wrote)
            w.sha256, w.bytes = manifest["sha256"], manifest["bytes"]
            log.info("storage image %s written while read: %d bytes in %.2f s", shared.id,
                     w.bytes, time.monotonic() - began)
        except Exception as exc:  # its readers see a cut image, the checksum says why
            w.error = f"{type(exc).__name__}: {exc}"
            log.error("storage image %s failed: %s", shared.id, w.error)
        finally:
            with self._lock:
                w.started.set()
                w.done.set()
                self._sums[shared.id] = (w.sha256, w.bytes, w.error)
                while len(self._sums) > KEPT_SUMS:
                    self._sums.popitem(last=False)
                self._drop_if_unread(shared)
