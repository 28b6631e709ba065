"""Shared helpers of the benchmarks: real processes on loopback, printed numbers."""

from __future__ import annotations

import os
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


def tree_cpu_seconds() -> float:
    """CPU (user + system) so far of this process, of its children it has waited for
    (nodes a bench started and stopped) and of its live descendants with theirs (Spark's
    JVM, its Python daemon and the workers it forked): a run's cost in CPU is the
    difference of two readings taken while the same descendants live."""
    own = os.times()
    total = own.user + own.system + own.children_user + own.children_system
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry)] = int(stat[1])
            cpu[int(entry)] = sum(map(int, stat[11:15])) / os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    for pid, seconds in cpu.items():
        up = parents.get(pid, 0)
        while up > 1 and up != me:
            up = parents.get(up, 0)
        if up == me and pid != me:
            total += seconds
    return total
