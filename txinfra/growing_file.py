"""A file read while another task is still writing it: an image streamed as a worker
writes it (worker_service/backups.py) or as a master downloads it
(master_service/sync/seeding.py), so that the next stage starts before the last ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 20
POLL_S = 0.005


async def follow(open_file: Callable[[], BinaryIO | None], written: Callable[[], int],
                 finished: Callable[[], bool], failure: Callable[[], str | None],
                 start: int = 0) -> AsyncIterator[bytes]:
    """The file's bytes from ``start`` on, as its writer makes them readable, to its end.

    ``written()``: bytes written and flushed so far (the file's length once
    ``finished()``); ``failure()``: why the writer failed, or None — raised as OSError,
    so an HTTP body made of this ends cut and its reader sees a broken transfer, not a
    short file; ``open_file()``: the file, or None while there is none to open yet."""
    sent, fh = start, None
    try:
        while True:
            done = finished()  # before written(): once done, what it says is all there is
            if (why := failure()) is not None:
                raise OSError(why)
            if fh is None and (fh := open_file()) is None:
                await asyncio.sleep(POLL_S)
                continue
            ready = written()
            if ready > sent:
                fh.seek(sent)
                chunk = fh.read(min(CHUNK, ready - sent))
                sent += len(chunk)
                yield chunk
            elif done:
                return
            else:
                await asyncio.sleep(POLL_S)
    finally:
        if fh is not None:
            fh.close()


def opener(*paths: Callable[[], Path]) -> Callable[[], BinaryIO | None]:
    """``open_file`` for ``follow``: the first of the files ``paths()`` name that exists
    (a file renamed when done: its new name after the old one)."""

    def open_file() -> BinaryIO | None:
        for path in paths:
            try:
                return open(path(), "rb")
            except FileNotFoundError:
                continue
        return None

    return open_file
