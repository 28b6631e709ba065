"""A readers-writer lock (the stdlib has none).

Readers take it only while *starting* a query: pyoxigraph evaluates a query over a
snapshot taken when it starts, so a reader never sees a half-applied changeset as long as
no query starts while a writer holds the lock (docs/design/write-path.md#crash-safety-on-the-worker:
a reader never sees half a changeset).
Writers are preferred so a steady read load cannot starve the write path.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class RWLock:
    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._waiting_writers = 0
        # Times a writer took the lock: unchanged means the store is as it was (a query
        # process forked before answers as one forked now would: query_process.py).
        self.writes = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._waiting_writers:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def read_now(self) -> Iterator[bool]:
        """The read lock if it is free now (no writer holds it or waits for it): yields
        whether it was taken. Never waits for a writer, so the event loop may call it."""
        with self._cond:
            taken = not self._writer and not self._waiting_writers
            if taken:
                self._readers += 1
        try:
            yield taken
        finally:
            if taken:
                with self._cond:
                    self._readers -= 1
                    if not self._readers:
                        self._cond.notify_all()

    @contextmanager
    def write_now(self) -> Iterator[bool]:
        """The write lock if it is free now (no reader, no writer, none waiting): yields
        whether it was taken. Never waits, so the event loop may call it."""
        with self._cond:
            taken = not self._writer and not self._readers and not self._waiting_writers
            if taken:
                self._writer = True
                self.writes += 1
        try:
            yield taken
        finally:
            if taken:
                with self._cond:
                    self._writer = False
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._waiting_writers += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting_writers -= 1
            self._writer = True
            self.writes += 1
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
