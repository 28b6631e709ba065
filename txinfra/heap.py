"""The garbage collector of a long-running node process (worker or master).

A node builds many objects per request that hold no reference cycles: pyoxigraph
quads and terms (GC-tracked), tuples, dicts of JSON. CPython's collector runs a young
collection every 700 tracked allocations and, as survivors pile up, full collections
that walk every tracked object of the process: its modules, FastAPI's and pydantic's
schemas, the app. Parsing 100,000 quads into a tuple and a frozenset, as a worker does
for an add, took 465-485 ms in a process holding a worker's and a master's modules
against 204-237 ms with the settings below (905 young and 8 full collections against
13 and none; the collector's own C function was 13% of the probe worker's samples in a
load by transactions; bench/README, "2026-12-01").

So, once the process has imported and built everything it keeps (just before it
serves):

- ``gc.freeze()`` moves what exists into the permanent generation: no collection walks
  it again (``collect`` below, for the few places that need a store closed, does);
- a young collection every ``YOUNG`` tracked allocations instead of 700. Cyclic garbage
  (an exception's traceback, an abandoned coroutine) then waits longer for its
  collection: at most YOUNG allocations, a few MB.
"""

from __future__ import annotations

import gc

YOUNG = 50_000


def settle() -> None:
    """Freeze what the process holds now and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG, older, oldest)


def collect() -> None:
    """A full collection that walks the frozen objects too, then freezes the survivors
    again: for the places that drop a pyoxigraph store and need it closed now (RocksDB
    releases its directory's LOCK only when the handle is freed), whether or not the
    handle was made before ``settle`` or sits in a reference cycle. Rare: a store swap,
    a bulk load's end, a closed transaction's view."""
    frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    gc.collect()
    if frozen:
        gc.freeze()
