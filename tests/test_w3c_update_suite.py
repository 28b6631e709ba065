"""The W3C SPARQL 1.1 Update evaluation tests, run THROUGH A MASTER of a three-worker
cluster, as a client would: for each test, empty the repository (DELETE /statements), load
the pre-state (its default graph and named graph files, POST /statements as N-Quads), run
the update (POST /statements, application/sparql-update), then read the whole repository
straight back (GET /statements, N-Quads, no consistency header, no pause) and compare it
with the expected post-state as RDF datasets (canonicalised: blank nodes are matched by
isomorphism). Negative syntax tests must be refused (400) with the repository unchanged.

The suite's files come from rdflib's sdist on PyPI (rdflib-7.1.4/test/data/suites/w3c/
sparql11); `make test` unpacks the update folders once into .venv/w3c-sparql11 (or set
TXC_W3C_SPARQL11). Tests that LOAD from the network are skipped: the cluster refuses LOAD,
and the tests' URLs are not reachable from here anyway.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pyoxigraph as ox
import pytest

SUITE = Path(os.environ.get("TXC_W3C_SPARQL11", Path(sys.prefix) / "w3c-sparql11"))
FOLDERS = ("add", "basic-update", "clear", "copy", "delete", "delete-data", "delete-insert",
           "delete-where", "drop", "move", "update-silent", "syntax-update-1",
           "syntax-update-2")

MF = "http://www.w3.org/2001/sw/DataAccess/tests/test-manifest#"
UT = "http://www.w3.org/2009/sparql/tests/test-update#"
QT = "http://www.w3.org/2001/sw/DataAccess/tests/test-query#"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
EVALUATION = {MF + "UpdateEvaluationTest"}
NEGATIVE = {MF + "NegativeUpdateSyntaxTest11", MF + "NegativeSyntaxTest11"}
LOAD = re.compile(r"\bLOAD\b", re.IGNORECASE)


@dataclass
class Case:
    name: str  # folder/local name
    kind: str  # "evaluation" | "negative"
    request: Path
    pre: list[tuple[Path, str | None]] = field(default_factory=list)  # (file, graph)
    post: list[tuple[Path, str | None]] = field(default_factory=list)
    title: str = ""


def _graph_files(g: ox.Dataset, node) -> list[tuple[Path, str | None]]:
    """ut:data (default graph) and ut:graphData [ut:graph; rdfs:label] of a node."""
    if node is None:
        return []
    files: list[tuple[Path, str | None]] = []
    for q in g.quads_for_subject(node):
        if q.predicate.value == UT + "data":
            files.append((Path(q.object.value.removeprefix("file://")), None))
        elif q.predicate.value == UT + "graphData":
            graph = label = None
            for gq in g.quads_for_subject(q.object):
                if gq.predicate.value in (UT + "graph", UT + "data"):
                    graph = Path(gq.object.value.removeprefix("file://"))
                elif gq.predicate.value == RDFS_LABEL:
                    label = gq.object.value
            assert graph is not None and label is not None, node
            files.append((graph, label))
    return files


def _one(g: ox.Dataset, subject, predicate: str):
    for q in g.quads_for_subject(subject):
        if q.predicate.value == predicate:
            return q.object
    return None


def _entries(g: ox.Dataset) -> list:
    """The members of the manifest's mf:entries list, in order."""
    [manifest] = [q.subject for q in g.quads_for_predicate(ox.NamedNode(RDF_TYPE))
                  if q.object.value == MF + "Manifest"]
    node = _one(g, manifest, MF + "entries")
    out = []
    while node is not None and node.value != RDF_TYPE.replace("type", "nil"):
        out.append(_one(g, node, RDF_TYPE.replace("type", "first")))
        node = _one(g, node, RDF_TYPE.replace("type", "rest"))
    return out


def load_cases() -> list[Case]:
    cases: list[Case] = []
    for folder in FOLDERS:
        manifest = SUITE / folder / "manifest.ttl"
        if not manifest.exists():
            continue
        g = ox.Dataset(ox.parse(path=str(manifest), format=ox.RdfFormat.TURTLE,
                                base_iri=manifest.resolve().as_uri()))
        for entry in _entries(g):
            kind = _one(g, entry, RDF_TYPE).value
            local = entry.value.rsplit("#", 1)[-1]
            name = f"{folder}/{local}"
            title = getattr(_one(g, entry, MF + "name"), "value", "")
            action = _one(g, entry, MF + "action")
            if kind in EVALUATION:
                request = Path(_one(g, action, UT + "request").value.removeprefix("file://"))
                cases.append(Case(name, "evaluation", request, _graph_files(g, action),
                                  _graph_files(g, _one(g, entry, MF + "result")), title))
            elif kind in NEGATIVE:
                cases.append(Case(name, "negative",
                                  Path(action.value.removeprefix("file://")), title=title))
    return cases


CASES = load_cases()
PARAMS = [pytest.param(c, id=c.name) for c in CASES] or [pytest.param(
    None, id="suite-missing", marks=pytest.mark.skip(
        reason=f"the W3C SPARQL 1.1 Update tests are not in {SUITE}: `make test` unpacks "
        "them there from rdflib's sdist (PyPI rdflib==7.1.4)"))]


# ---- datasets ----


def _format(path: Path) -> ox.RdfFormat:
    return {".ttl": ox.RdfFormat.TURTLE, ".nt": ox.RdfFormat.N_TRIPLES,
            ".nq": ox.RdfFormat.N_QUADS, ".trig": ox.RdfFormat.TRIG,
            ".rdf": ox.RdfFormat.RDF_XML}[path.suffix]


def dataset_of(files: list[tuple[Path, str | None]]) -> ox.Dataset:
    """The files' triples, each file in its graph; blank nodes apart per file."""
    ds = ox.Dataset()
    for i, (path, graph) in enumerate(files):
        target = ox.NamedNode(graph) if graph else ox.DefaultGraph()

        def fresh(t, i=i):
            return ox.BlankNode(f"f{i}x{t.value}") if isinstance(t, ox.BlankNode) else t

        for q in ox.parse(path=str(path), format=_format(path),
                          base_iri=path.resolve().as_uri()):
            ds.add(ox.Quad(fresh(q.subject), q.predicate, fresh(q.object), target))
    return ds


def canonical(ds: ox.Dataset) -> set[ox.Quad]:
    ds.canonicalize(ox.CanonicalizationAlgorithm.UNSTABLE)
    return set(ds)


def nquads(ds: ox.Dataset) -> bytes:
    return ox.serialize(ds, format=ox.RdfFormat.N_QUADS) or b""


# ---- the cluster ----


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    # TXC_W3C_CONSISTENCY=eventual|strict runs the suite under another read consistency
    # than the master's default (read-your-writes), to compare.
    extra = {"consistency": os.environ["TXC_W3C_CONSISTENCY"]} \
        if os.environ.get("TXC_W3C_CONSISTENCY") else {}
    return module_cluster_factory(workers=3, **extra)


@pytest.fixture(scope="module")
def http():
    with httpx.Client(timeout=60) as client:
        yield client


def read_back(http: httpx.Client, cluster) -> ox.Dataset:
    """The whole repository, read straight away (no header, no waiting)."""
    r = http.get(f"{cluster.repo_url}/statements", headers={"accept": "application/n-quads"})
    assert r.status_code == 200, f"GET /statements: {r.status_code} {r.text}"
    return ox.Dataset(ox.parse(r.content, format=ox.RdfFormat.N_QUADS))


def set_state(http: httpx.Client, cluster, ds: ox.Dataset) -> None:
    r = http.delete(f"{cluster.repo_url}/statements")
    assert r.status_code == 204, f"DELETE /statements: {r.status_code} {r.text}"
    if len(ds):
        r = http.post(f"{cluster.repo_url}/statements", content=nquads(ds),
                      headers={"content-type": "application/n-quads"})
        assert r.status_code == 204, f"loading the pre-state: {r.status_code} {r.text}"


def describe(actual: set[ox.Quad], expected: set[ox.Quad]) -> str:
    missing = "\n".join(sorted(f"  - {q}" for q in expected - actual))
    extra = "\n".join(sorted(f"  + {q}" for q in actual - expected))
    return f"missing:\n{missing or '  (none)'}\nunexpected:\n{extra or '  (none)'}"


@pytest.mark.parametrize("case", PARAMS)
def test_w3c_update(cluster, http, case: Case):
    update = case.request.read_text(encoding="utf-8")
    if case.kind == "evaluation" and LOAD.search(update):
        pytest.skip("LOAD reads from the network: the cluster refuses LOAD")
    pre = dataset_of(case.pre)
    set_state(http, cluster, pre)
    r = http.post(f"{cluster.repo_url}/statements", content=update.encode(),
                  params={"baseURI": case.request.resolve().as_uri()},
                  headers={"content-type": "application/sparql-update"})
    actual = canonical(read_back(http, cluster))
    if case.kind == "negative":
        assert r.status_code == 400 and r.text, \
            f"{case.name} ({case.title}): a syntax error must be refused, got " \
            f"{r.status_code} {r.text!r}"
        assert actual == canonical(dataset_of(case.pre)), "a refused update changed data"
        return
    assert r.status_code == 204, f"{case.name} ({case.title}): {r.status_code} {r.text}"
    expected = canonical(dataset_of(case.post))
    assert actual == expected, f"{case.name} ({case.title}), read straight after the " \
        f"update:\n{describe(actual, expected)}"
