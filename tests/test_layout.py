"""The rooms' rules (ARCHITECTURE.md): module sizes, and which package may import which.

Read from the sources with ``ast``, so a rule broken by a new import or a module that grew
fails here, not in a review.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCE_PACKAGES = ("master_service", "worker_service", "rdfcore", "rdf4j_protocol",
                   "spark_pipeline", "txcluster")
MAX_LINES = 600
# The pure sync core: one idea (the protocol's state machine), read as one.
MAX_LINES_OF = {"master_service/sync/protocol.py": 900}
# txcluster/ is the ground floor (auth, properties, HTTP server, clients) and three shells
# on top of it that start or describe the services.
SHELLS = {"txcluster/cli.py", "txcluster/local.py", "txcluster/docs.py"}


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
             if rel(p).startswith(("rdfcore/", "rdf4j_protocol/", "txcluster/"))
             and rel(p) not in SHELLS]
    assert offending(paths, ("master_service", "worker_service", "spark_pipeline")) == {}


def test_the_cluster_knows_nothing_of_peering():
    paths = [p for p in sources() if rel(p).startswith("master_service/cluster/")]
    assert offending(paths, ("master_service.sync",)) == {}


def test_the_log_knows_nothing_of_the_sync_protocol_above_it():
    paths = [p for p in sources() if rel(p).startswith("master_service/txlog/")]
    assert offending(paths, ("master_service.sync",)) == {}


def test_the_rules_catch_a_forbidden_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from worker_service.repository import Repository\n")
    assert imported(module) >= {"worker_service.repository"}
