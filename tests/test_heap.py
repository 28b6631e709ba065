"""txinfra.heap in a process of its own (it changes the collector of the whole process):
a node's settings, and a store in a reference cycle made before them still closed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.processes

CHILD = textwrap.dedent("""
    import gc, sys
    import pyoxigraph as ox
    from txinfra import heap

    class Holder:  # a store inside a reference cycle, as an app's objects can be
        pass

    path = sys.argv[1]
    holder = Holder()
    holder.me = holder
    holder.store = ox.Store(path)
    heap.settle()
    print("frozen", gc.get_freeze_count() > 0, "young", gc.get_threshold()[0] == heap.YOUNG)
    del holder
    gc.collect()  # walks the young generations only: the cycle is frozen
    try:
        ox.Store(path)
        print("plain collect closed it")
    except OSError:
        print("plain collect left it open")
    heap.collect()
    ox.Store(path)  # raises if RocksDB's LOCK is still held
    print("heap.collect closed it; frozen again", gc.get_freeze_count() > 0)
""")


def test_settle_freezes_and_collect_still_closes_a_frozen_store(tmp_path):
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "store")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "frozen True young True",
        "plain collect left it open",
        "heap.collect closed it; frozen again True",
    ]
