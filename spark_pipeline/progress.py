"""The progress line on the terminal: files, lines, quads parsed and rejected, rate, ETA
while parsing; quads loaded; the verification of every worker; the outcome.

Tasks report what they read through one Spark accumulator (a dict: ``lines``, ``quads``,
``rejects``, bytes per file, and ``loaded``: the quads an initial load's tasks have sent
to its worker), merged on the driver as each task finishes — Spark sends
it back with the task's result, so it works alike on local and cluster masters (nothing
goes through the driver's filesystem). Accumulators count a task again when Spark runs it
again (a lost executor, an evicted cache), so they only draw the line; the last line
(``jobs.LoadReport.progress_line``) is drawn from the job's results. The driver redraws
one line on stderr when it is a terminal, and stays silent otherwise (logs, tests).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from pyspark.accumulators import AccumulatorParam


class CountsParam(AccumulatorParam):
    """Sums of dicts: {"lines": n, "quads": n, "rejects": n, path: bytes read, ...}."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, a: dict, b: dict) -> dict:
        for k, v in b.items():
            a[k] = a.get(k, 0) + v
        return a


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._last = 0.0
        self._width = 0

    def line(self, text: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        self.stream.write("\r" + text.ljust(self._width))
        self._width = len(text)
        self.stream.flush()

    def done(self) -> None:
        """End the current line, leaving its last state on the terminal."""
        if self.enabled and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0

    def note(self, text: str) -> None:
        """A line of its own (phases, the Spark UI's address)."""
        if self.enabled:
            self.done()
            self.stream.write(text + "\n")
            self.stream.flush()

    def counter(self, what: str, unit: str, total: int, started: float
                ) -> Callable[[int], None]:
        """A callback for ``done`` units out of ``total``: bar, rate, ETA."""

        def update(done: int) -> None:
            elapsed = max(time.monotonic() - started, 1e-9)
            rate = done / elapsed
            eta = (total - done) / rate if rate > 0 else 0
            frac = done / total if total else 1.0
            bar = "#" * int(frac * 20)
            self.line(f"{what} [{bar:<20}] {done:,}/{total:,} {unit}  {rate:,.0f} {unit}/s  "
                      f"ETA {_duration(eta)}", force=done >= total)

        return update

    def watch_parse(self, accumulator, files: dict[str, int], into: str | None = None
                    ) -> _Watcher:
        """Redraw from the parse accumulator until stopped: files done, lines, rate, ETA
        (from bytes read over the inputs' size); with ``into`` (an initial load's worker),
        the quads the tasks have sent it (``loaded`` in the accumulator)."""
        return _Watcher(self, accumulator, files, into)


class _Watcher:
    def __init__(self, progress: Progress, accumulator, files: dict[str, int],
                 into: str | None = None) -> None:
        self.progress, self.acc, self.files, self.into = progress, accumulator, files, into
        self.total = max(1, sum(files.values()))
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="progress")

    def __enter__(self) -> _Watcher:
        if self.progress.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.draw()

    def draw(self) -> None:
        counts = dict(self.acc.value)
        lines = counts.pop("lines", 0)
        quads, rejects = counts.pop("quads", 0), counts.pop("rejects", 0)
        loaded = counts.pop("loaded", 0)
        done = sum(1 for f, size in self.files.items() if counts.get(f, 0) >= size)
        read = sum(min(counts.get(f, 0), size) for f, size in self.files.items())
        elapsed = max(time.monotonic() - self.started, 1e-9)
        frac = read / self.total
        eta = elapsed * (1 - frac) / frac if frac > 0 else 0
        self.progress.line(
            f"parse [{'#' * int(frac * 20):<20}] files {done}/{len(self.files)}  "
            f"lines {lines:,}  parsed {quads:,} quads  rejected {rejects:,}  "
            f"{lines / elapsed:,.0f} lines/s  ETA {_duration(eta)}"
            + (f"  loaded {loaded:,} quads into {self.into}" if self.into else ""),
            force=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.draw()
