"""Time to compute exact changesets (parse + validate + compute, no apply).

    .venv/bin/python bench/bench_changeset.py [--quads N] [--disk]

Prints microseconds per transaction for a 10-triple INSERT DATA, a small DELETE/INSERT
WHERE, a DELETE DATA and an RDF add, against a store of N quads (in memory by default,
on disk in a temporary directory with --disk), and rdflib's parse of the same INSERT DATA
for comparison when rdflib is installed. Every run sends a different text (a counter in
the literals / the WHERE constant), so no cache sees the same request twice; "templates
vary" also changes the DELETE/INSERT templates, which defeats the template cache.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable

import pyoxigraph as ox

from worker_service.transaction import BlankNodeMinter
from worker_service.wire_parsing import parse_operations

PROLOGUE = "PREFIX ex: <http://example.org/>\nPREFIX xsd: <http://www.w3.org/2001/XMLSchema#>\n"
INSERT_DATA = PROLOGUE + "INSERT DATA {\n" + "".join(
    f'ex:s{i} ex:p "value {i} #" ; ex:n {i} .\n' if i % 2 else f"ex:s{i} ex:q ex:o{i} .\n"
    for i in range(10)) + "}"
MODIFY = PROLOGUE + ("DELETE { ?s ex:p ?o } INSERT { ?s ex:p2 ?o ; ex:seen true } "
                     "WHERE { ex:s5 ex:p ?o BIND(ex:s5 AS ?s) }")
DELETE_DATA = PROLOGUE + "DELETE DATA { ex:s1 ex:p \"value 1\" . ex:s2 ex:q ex:o2 }"
TTL = "@prefix ex: <http://example.org/> .\n" + "".join(
    f'ex:a{i} ex:p "v{i}" .\n' for i in range(10))
_counter = iter(range(10**9))


def vary(text: str, old: str) -> Callable[[], str]:
    """A new text on every call: ``old`` replaced by a counter-bearing variant."""
    def make() -> str:
        k = next(_counter)
        return text.replace(old, old.replace("5", f"5{k}").replace("#", f"#{k}"))
    return make


def measure(fn: Callable[[], object], n: int) -> tuple[float, float]:
    for _ in range(min(200, n)):
        fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return statistics.median(times) * 1e6, times[int(len(times) * 0.99)] * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quads", type=int, default=100_000)
    parser.add_argument("--disk", action="store_true")
    parser.add_argument("-n", type=int, default=3000)
    parser.add_argument("--load-quads", type=int, default=100_000,
                        help="quads of the load transaction (txcluster load's default)")
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory() if args.disk else None
    store = ox.Store(tmp.name) if tmp else ox.Store()
    store.bulk_extend(
        ox.Quad(ox.NamedNode(f"http://example.org/s{i}"), ox.NamedNode("http://example.org/p"),
                ox.Literal(f"value {i}")) for i in range(args.quads))
    minter = BlankNodeMinter("bench")

    def compute(make: Callable[[], dict]) -> Callable[[], object]:
        def run() -> object:
            return [step.changeset(store, minter, {})
                    for op in parse_operations([make()]) for step in op.steps()]
        return run

    def update(make_text: Callable[[], str]) -> Callable[[], dict]:
        return lambda: {"type": "update", "update": make_text()}

    where = "disk" if args.disk else "memory"
    print(f"store: {args.quads} quads in {where}; median / p99 over {args.n} runs")
    for name, make in [
        ("INSERT DATA, 10 triples", update(vary(INSERT_DATA, "#"))),
        ("DELETE/INSERT WHERE, 1 solution", update(vary(MODIFY, "ex:s5 ex:p"))),
        ("  (templates vary)", update(vary(MODIFY, "?s ex:p2 ?o ; ex:seen true"))),
        ("DELETE DATA, 2 triples", update(vary(DELETE_DATA, '"value 1"'))),
        ("add text/turtle, 10 triples", lambda: {"type": "add", "data": TTL + f"# {next(_counter)}",
                                                 "format": "text/turtle"}),
    ]:
        med, p99 = measure(compute(make), args.n)
        print(f"  {name:34s} {med:8.1f} us  {p99:8.1f} us")
    make = update(vary(INSERT_DATA, "#"))
    med, _ = measure(lambda: parse_operations([make()]), args.n)
    print(f"  {'(of which parse_operations)':34s} {med:8.1f} us")
    load_transaction(store, args.load_quads)
    try:
        from rdflib.plugins.sparql.parser import parseUpdate
    except ImportError:
        return
    med, _ = measure(lambda: parseUpdate(INSERT_DATA), 50)
    print(f"  {'rdflib parseUpdate, same text':34s} {med:8.1f} us")


def load_transaction(store: ox.Store, n: int) -> None:
    """The probe's changeset of one ``txcluster load`` transaction (issue 20): ``n`` new
    quads, 10 per subject, labels kept (AddOperation with preserve_node_ids), parsed
    beforehand as the worker's wire parsing does; compute only."""
    from worker_service.operations import AddOperation
    xsd = "http://www.w3.org/2001/XMLSchema#string"
    data = "\n".join(f'<urn:load:s{i // 10}> <urn:load:p{i % 10}> "v{i}"^^<{xsd}> '
                     f"<urn:load:g{i % 3}> ." for i in range(n))
    quads = tuple(ox.parse(data, format=ox.RdfFormat.N_QUADS))
    op = AddOperation(data, "application/n-quads", quads=quads, preserve_node_ids=True)
    minter = BlankNodeMinter("bench")
    times = []
    for _ in range(7):
        t = time.perf_counter()
        op.changeset(store, minter, {})
        times.append(time.perf_counter() - t)
    med = statistics.median(times)
    print(f"  {f'load transaction, {n} new quads':34s} {med * 1e3:8.1f} ms  "
          f"{med * 1e6 / n:8.2f} us a quad")


if __name__ == "__main__":
    main()
