"""Shared helpers of the benchmarks: real processes on loopback, printed numbers."""

from __future__ import annotations

import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pyoxigraph as ox

EX = "http://example.org/bench/"


def quads(start: int, count: int, graph: str | None = None) -> list[ox.Quad]:
    g = ox.NamedNode(EX + graph) if graph else ox.DefaultGraph()
    p = [ox.NamedNode(f"{EX}p{i}") for i in range(8)]
    return [
        ox.Quad(ox.NamedNode(f"{EX}s{(start + i) // 8}"), p[(start + i) % 8],
                ox.Literal(f"value {start + i}"), g)
        for i in range(count)
    ]


@contextmanager
def workdir(name: str):
    with tempfile.TemporaryDirectory(prefix=f"txc-bench-{name}-") as d:
        yield Path(d)


def rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = max(0, min(len(values) - 1, round(p / 100 * (len(values) - 1))))
    return values[k]


def show(title: str, rows: list[tuple[str, str]]) -> None:
    print(f"\n{title}")
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k.ljust(width)}  {v}")


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start


__all__ = ["EX", "Timer", "pct", "quads", "rate", "show", "statistics", "workdir"]
