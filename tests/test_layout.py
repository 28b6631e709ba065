"""The rooms' rules (ARCHITECTURE.md): module sizes, and which package may import which.

Read from the sources with ``ast``, so a rule broken by a new import or a module that grew
fails here, not in a review.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE_PACKAGES = ("master_service", "worker_service", "rdfcore", "rdf4j_protocol",
                   "spark_pipeline", "txcluster", "txinfra")
MAX_LINES = 600
# The pure sync core: one idea (the protocol's state machine), read as one.
MAX_LINES_OF = {"master_service/sync/protocol.py": 900}
# txinfra/ is the shared infrastructure at the bottom (auth, properties, HTTP server,
# TLS, signed sessions); txcluster/ holds the shells on top (the command line, local
# clusters, doc generation, the Spark entry point) and the clients users import.


def sources() -> list[Path]:
    return sorted(p for pkg in SOURCE_PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def imported(path: Path) -> set[str]:
    """Top-level-qualified names of every module ``path`` imports (at any depth)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_rules_see_the_sources():
    found = {rel(p) for p in sources()}
    assert {"master_service/sync/protocol.py", "worker_service/repository.py",
            "txcluster/cli.py", "rdf4j_protocol/routes.py"} <= found


@pytest.mark.parametrize("path", sources(), ids=rel)
def test_no_source_module_is_too_long(path: Path):
    limit = MAX_LINES_OF.get(rel(path), MAX_LINES)
    lines = len(path.read_text().splitlines())
    assert lines <= limit, f"{rel(path)}: {lines} lines (at most {limit})"


def offending(paths: list[Path], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    bad: dict[str, list[str]] = {}
    for path in paths:
        hits = sorted(n for n in imported(path)
                      if any(n == f or n.startswith(f + ".") for f in forbidden))
        if hits:
            bad[rel(path)] = hits
    return bad


def test_the_master_and_the_pipeline_import_nothing_of_the_worker():
    paths = [p for p in sources() if rel(p).startswith(("master_service/", "spark_pipeline/"))]
    assert offending(paths, ("worker_service",)) == {}


def test_the_ground_floor_imports_no_service():
    paths = [p for p in sources()
             if rel(p).startswith(("rdfcore/", "rdf4j_protocol/", "txinfra/"))]
    assert offending(paths, ("master_service", "worker_service", "spark_pipeline")) == {}


def test_the_cluster_knows_nothing_of_peering():
    paths = [p for p in sources() if rel(p).startswith("master_service/cluster/")]
    assert offending(paths, ("master_service.sync",)) == {}


def test_the_log_knows_nothing_of_the_sync_protocol_above_it():
    paths = [p for p in sources() if rel(p).startswith("master_service/txlog/")]
    assert offending(paths, ("master_service.sync",)) == {}


def test_the_sync_core_inherits_nothing():
    """The pure core's parts (split recovery, compaction, acquisition, ...) are objects
    with their own state that ``SyncNode`` calls with what they need, not bases that read
    and write its private attributes."""
    tree = ast.parse((ROOT / "master_service/sync/protocol.py").read_text())
    bases = {node.name: [ast.unparse(b) for b in node.bases]
             for node in tree.body if isinstance(node, ast.ClassDef)}
    assert bases == {"SyncNode": []}


def test_the_rules_catch_a_forbidden_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from worker_service.repository import Repository\n")
    assert imported(module) >= {"worker_service.repository"}


# ---- the import graph: no circles, no upward import (ARCHITECTURE.md, "The rooms") ----
#
# Every import counts: at any depth, under ``if TYPE_CHECKING:`` too (a type-only import
# is still a dependency a reader follows), relative ones resolved. An import names the
# module it reaches: ``from a.b import c`` is a.b.c when that is a module, else a.b.

# The floors, lowest first. A module's floor is that of the longest prefix here naming
# it; it may import from its own floor and the ones below, never from above.
INFRA, GROUND, SERVICES, CLIENTS, PIPELINE, SHELLS = range(6)
FLOORS: dict[str, int] = {
    "txinfra": INFRA,  # the shared infrastructure (auth, HTTP, TLS, properties, ...)
    "rdfcore": GROUND,
    "rdf4j_protocol": GROUND,
    "master_service": SERVICES,
    "worker_service": SERVICES,
    # clients of a running cluster: the admin client, the failover client, progress lines
    "txcluster": CLIENTS,
    # the bulk load and audit jobs, which talk to a cluster through the admin client
    "spark_pipeline": PIPELINE,
    # the shells: they start, drive or describe all of the above
    "txcluster.cli": SHELLS,
    "txcluster.local": SHELLS,
    "txcluster.docs": SHELLS,
    "txcluster.spark_submit": SHELLS,
}
# Within the master, the same rule over its rooms: storage, one data centre, peering,
# the control plane, the shells of HTTP and JMX, the wiring. A module under none of
# these prefixes (the package itself) has no floor here.
MASTER_FLOORS: dict[str, int] = {
    "master_service.errors": 0,
    "master_service.config": 0,
    "master_service.txlog": 1,
    "master_service.cluster": 2,
    "master_service.sync": 3,
    "master_service.control": 4,
    "master_service.api": 5,
    "master_service.jmx": 5,
    "master_service.app": 6,
}
# Imports that break a rule today and are being moved by other work; each (importer,
# imported) names module prefixes. test_each_known_violation_is_still_there fails once
# one is gone: then its entry goes too. Anything not listed here fails the rules.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}


def module_of(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = SOURCE_PACKAGES
                 ) -> dict[str, set[str]]:
    """module -> the modules of ``packages`` it imports (see above)."""
    paths = {module_of(p, root): p for pkg in packages for p in (root / pkg).rglob("*.py")}

    def reached(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        names: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, one level up per extra dot
                    up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                names.extend(f"{base}.{a.name}" for a in node.names)
        graph[module] = {t for n in names if (t := reached(n)) is not None} - {module}
    return graph


def allowed(importer: str, imported: str) -> bool:
    def under(name: str, prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    return any(under(importer, a) and under(imported, b) for a, b in KNOWN_VIOLATIONS)


@functools.cache
def source_graph() -> dict[str, frozenset[str]]:
    return {m: frozenset(ts) for m, ts in import_graph().items()}


def checked_graph() -> dict[str, set[str]]:
    return {m: {t for t in ts if not allowed(m, t)} for m, ts in source_graph().items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle of each circle (strongly connected part) of ``graph``, as the list of
    its nodes with the first repeated at the end; the shortest through its least node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    parts: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                parts.append(part)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    found = []
    for part in parts:
        start = min(part)
        paths = {start: [start]}
        frontier = [start]
        while frontier:  # breadth first, inside the circle, back to start
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & part):
                    if w == start:
                        found.append(paths[v] + [start])
                        nxt = []
                        break
                    if w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
                else:
                    continue
                break
            frontier = nxt
    return sorted(found)


def floor_of(module: str, floors: dict[str, int]) -> int | None:
    keys = [k for k in floors if module == k or module.startswith(k + ".")]
    return floors[max(keys, key=len)] if keys else None


def upward(graph: dict[str, set[str]], floors: dict[str, int]) -> list[str]:
    bad = []
    for module, targets in sorted(graph.items()):
        mine = floor_of(module, floors)
        for t in sorted(targets):
            theirs = floor_of(t, floors)
            if mine is not None and theirs is not None and theirs > mine:
                bad.append(f"{module} (floor {mine}) imports {t} (floor {theirs})")
    return bad


def rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between rooms: each module's room is the longest prefix of FLOORS or
    MASTER_FLOORS naming it (a package, a shell, a room of the master)."""
    prefixes = [*FLOORS, *MASTER_FLOORS]

    def room(m: str) -> str:
        return max((p for p in prefixes if m == p or m.startswith(p + ".")), key=len,
                   default=m)

    between: dict[str, set[str]] = {}
    for module, targets in graph.items():
        between.setdefault(room(module), set()).update(
            room(t) for t in targets if room(t) != room(module))
    return between


def readable(found: list[list[str]]) -> str:
    return "\n".join(" -> ".join(c) for c in found)


def test_no_import_circle_among_modules():
    found = cycles(checked_graph())
    assert not found, "import circles (type-only imports count):\n" + readable(found)


def test_no_import_circle_among_rooms():
    found = cycles(rooms(checked_graph()))
    assert not found, "circles between packages or rooms:\n" + readable(found)


def test_no_import_from_a_higher_floor():
    graph = checked_graph()
    bad = upward(graph, FLOORS) + upward(graph, MASTER_FLOORS)
    assert bad == [], "upward imports:\n" + "\n".join(bad)


@pytest.mark.parametrize("edge", list(KNOWN_VIOLATIONS), ids=" -> ".join)
def test_each_known_violation_is_still_there(edge: tuple[str, str]):
    importer, imported = edge
    hits = [(m, t) for m, ts in source_graph().items() for t in ts
            if (m == importer or m.startswith(importer + "."))
            and (t == imported or t.startswith(imported + "."))]
    assert hits, f"{importer} -> {imported} is gone ({KNOWN_VIOLATIONS[edge]}): " \
                 "remove its entry from KNOWN_VIOLATIONS"


def test_the_graph_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import low\n")
    (pkg / "sub" / "low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.high import H\n")
    (pkg / "high.py").write_text("from .sub.low import x\nimport json\n")
    (pkg / "other.py").write_text("def f():\n    from ..pkg import high\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": set(), "pkg.sub": {"pkg.sub.low"}, "pkg.sub.low": {"pkg.high"},
                     "pkg.high": {"pkg.sub.low"}, "pkg.other": {"pkg.high"}}
    assert cycles(graph) == [["pkg.high", "pkg.sub.low", "pkg.high"]]
    assert upward(graph, {"pkg.sub": 0, "pkg.high": 1}) == [
        "pkg.sub.low (floor 0) imports pkg.high (floor 1)"]
