"""Named images of a worker (docs/design/cluster-basics.md#backup-and-restore), and named
images read while they are written (seeding a peer data centre:
docs/design/sync-protocol.md#seeding-a-data-centre).

    data-dir/backups/<name>/    image.tar.sz + manifest.json (sha256, bytes, state)
    data-dir/tmp/backup-<uuid>/ a backup being written, moved into place when whole

A backup is made in a work directory and moved into place whole, so a listed backup is
always complete. ``start`` writes one in a thread and returns its ``Writing`` as soon as
its checkpoint is made (milliseconds): a reader follows the file as it grows
(``Writing.written`` bytes are flushed), and the SHA-256 and length are known when it
is done. The image's *state* is fixed by the checkpoint, so a donor can announce the
agreed position an image stands for before the image exists, and the transfer overlaps
its writing instead of following it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from worker_service import state
from worker_service.repository import Repository, WorkerError

log = logging.getLogger("txcluster.worker")


@dataclass
class Writing:
    """A named image being written. ``path`` moves into data-dir/backups/ when done
    (updated before ``done`` is set: a reader that lost the file looks again)."""

    name: str
    path: Path
    state: dict | None = None  # the image's state, once the checkpoint is made
    written: int = 0  # bytes written and flushed so far
    sha256: str | None = None
    bytes: int | None = None
    error: str | None = None
    started: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)

    # Repository.create_image's callbacks: the checkpoint's state, the bytes so far.
    def begun(self, snap: dict) -> None:
        self.state = snap
        self.started.set()

    def wrote(self, n: int) -> None:
        self.written = n


def backups_dir(repo: Repository) -> Path:
    return repo.data_dir / "backups"


def backup(repo: Repository, name: str, compress: bool = True,
           writing: Writing | None = None) -> dict:
    """Write a named image; reusing a name replaces that image. With ``writing``, the
    image is written at ``writing.path`` and its progress recorded there."""
    target = backups_dir(repo) / name
    work = writing.path.parent if writing is not None else \
        repo.data_dir / "tmp" / f"backup-{uuid.uuid4().hex}"
    work.mkdir(parents=True, exist_ok=True)

    manifest = repo.create_image(work / "image.tar.sz", compress,
                                 writing.begun if writing else None,
                                 writing.wrote if writing else None)
    manifest["name"] = name
    manifest["created"] = time.time()
    state.write_atomically(work / "manifest.json", _json(manifest))
    backups_dir(repo).mkdir(exist_ok=True)
    old = repo.data_dir / "tmp" / f"old-{uuid.uuid4().hex}"
    if target.exists():
        os.replace(target, old)
    os.replace(work, target)
    if writing is not None:
        writing.path = target / "image.tar.sz"
    shutil.rmtree(old, ignore_errors=True)
    return manifest


def start(repo: Repository, name: str, compress: bool = True) -> Writing:
    """Begin writing the named image in a thread; return once its checkpoint is made
    (its state is then ``Writing.state``). WorkerError if it could not begin."""
    work = repo.data_dir / "tmp" / f"backup-{uuid.uuid4().hex}"
    writing = Writing(name, work / "image.tar.sz")

    def run() -> None:
        started = time.monotonic()
        try:
            manifest = backup(repo, name, compress, writing)
            writing.sha256, writing.bytes = manifest["sha256"], manifest["bytes"]
            log.info("image '%s' written while read: %d bytes in %.2f s", name,
                     manifest["bytes"], time.monotonic() - started)
        except Exception as exc:  # reported to readers, who then see a cut image
            writing.error = f"{type(exc).__name__}: {exc}"
            log.error("backup '%s' failed: %s", name, writing.error)
            shutil.rmtree(work, ignore_errors=True)
        finally:
            writing.started.set()
            writing.done.set()

    threading.Thread(target=run, name=f"backup-{name}", daemon=True).start()
    writing.started.wait()
    if writing.state is None:
        raise WorkerError(f"backup '{name}' could not begin: {writing.error}")
    return writing


def _json(data: dict) -> bytes:
    return json.dumps(data, indent=2).encode()
