"""The master as a drop-in endpoint for Ontotext's own JavaScript client, graphdb.js (npm
``graphdb`` 3.0.4, pinned in tests/js/package.json and package-lock.json; `make test`
installs it into .venv/node with ``npm ci``).

tests/js/graphdb_client.js uses ServerClient, RDFRepositoryClient and the transactional
client as graphdb.js's README shows, one step after another, printing one JSON line per
call. What a call wrote is read back from Python (a SPARQL SELECT through the master once
every worker has it); what a call read is compared with what is stored. Every test
asserts the behaviour an RDF4J server gives; none is marked as expected to fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pyoxigraph as ox
import pytest

from tests.clientlab import namespaces, nq, stored

SCRIPT = Path(__file__).parent / "js" / "graphdb_client.js"
# `make test` installs graphdb.js here (the venv's own folder: .venv/node/node_modules).
NODE_MODULES = Path(os.environ.get("TXC_NODE_MODULES", Path(sys.prefix) / "node" / "node_modules"))

pytestmark = pytest.mark.skipif(
    not (shutil.which("node") and (NODE_MODULES / "graphdb" / "package.json").exists()),
    reason=f"the graphdb.js tests need Node.js and the npm package graphdb in {NODE_MODULES}; "
    "`make test` installs both (Debian nodejs/npm, then npm ci of tests/js)")

EX = "http://example.org/"
XSD_INT = "http://www.w3.org/2001/XMLSchema#integer"

# What the write steps store (see graphdb_client.js).
WRITTEN = {
    "add": f'<{EX}alice> <{EX}name> "Alice"@en .\n',
    "add-iri-in-graph": f"<{EX}alice> <{EX}knows> <{EX}bob> <{EX}g1> .\n",
    "add-quads": f'<{EX}bob> <{EX}name> "Bob" .\n<{EX}bob> <{EX}age> "42"^^<{XSD_INT}> .\n'
                 f'<{EX}bob> <{EX}name> "Robert" <{EX}g1> .\n',
    "upload-turtle": f'<{EX}carol> <{EX}name> "Carol" .\n',
    "update": f'<{EX}dave> <{EX}name> "Dave" .\n',
}
ALL_WRITTEN = "".join(WRITTEN.values())


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory(workers=3)


def graphdbjs(cluster, *steps: str) -> dict[str, list[dict]]:
    """Run the steps in one Node process; each step's results (a list: a step may run
    more than once), keyed by step name."""
    env = {**os.environ, "NODE_PATH": str(NODE_MODULES)}
    r = subprocess.run(["node", str(SCRIPT), cluster.master.url, cluster.repository_id,
                        *steps], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, f"node failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    out: dict[str, list[dict]] = {}
    lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith('{"step"')]
    assert [x["step"] for x in lines] == list(steps), r.stdout + r.stderr
    for x in lines:
        out.setdefault(x["step"], []).append(x)
    return out


def ok(results: dict[str, list[dict]], step: str, i: int = 0):
    """The value of a step that must have succeeded; its failure, precisely, if not."""
    x = results[step][i]
    assert x["ok"], f"graphdb.js {step}: HTTP {x['status']} {x['body']!r} ({x['error']})"
    return x["value"]


def reset(cluster, quads: str = "") -> set[ox.Quad]:
    assert httpx.delete(f"{cluster.repo_url}/statements", timeout=60).status_code == 204
    assert httpx.delete(f"{cluster.repo_url}/namespaces", timeout=60).status_code == 204
    if quads:
        r = httpx.post(f"{cluster.repo_url}/statements", content=quads.encode(),
                       headers={"content-type": "application/n-quads"}, timeout=60)
        assert r.status_code == 204, r.text
    assert stored(cluster) == nq(quads)
    return nq(quads)


# ---- ServerClient ----


def test_server_client(cluster):
    reset(cluster, WRITTEN["upload-turtle"])
    res = graphdbjs(cluster, "server-repository-ids", "server-has-repository",
                    "server-get-repository-size")
    assert ok(res, "server-repository-ids") == [cluster.repository_id]
    assert ok(res, "server-has-repository") is True
    assert ok(res, "server-get-repository-size") == 1


# ---- writes, each checked by a SPARQL read from Python ----


@pytest.mark.parametrize("step", list(WRITTEN))
def test_write(cluster, step):
    reset(cluster)
    ok(graphdbjs(cluster, step), step)
    assert stored(cluster) == nq(WRITTEN[step])


def test_update_form_and_deletes(cluster):
    reset(cluster, ALL_WRITTEN)
    res = graphdbjs(cluster, "update-form")
    ok(res, "update-form")
    expected = nq(ALL_WRITTEN.replace(WRITTEN["update"], "") + f'<{EX}erin> <{EX}name> "Erin" .\n')
    assert stored(cluster) == expected
    ok(graphdbjs(cluster, "delete-statements-subject"), "delete-statements-subject")
    assert stored(cluster) == expected - nq(WRITTEN["upload-turtle"])
    ok(graphdbjs(cluster, "delete-all"), "delete-all")
    assert stored(cluster) == set()


# ---- reads of a known state ----

NAMES = sorted([f'name="Alice"@en s=<{EX}alice>', f'name="Bob" s=<{EX}bob>',
                f'name="Carol" s=<{EX}carol>', f'name="Dave" s=<{EX}dave>'])


@pytest.mark.parametrize("step", ["query-select", "query-select-form",
                                  "query-select-sparql-query"])
def test_query_select(cluster, step):
    reset(cluster, ALL_WRITTEN)
    assert ok(graphdbjs(cluster, step), step) == NAMES


def test_query_ask(cluster):
    reset(cluster, ALL_WRITTEN)
    res = graphdbjs(cluster, "query-ask", "query-ask-json")
    assert ok(res, "query-ask") == "true"  # text/boolean
    assert ok(res, "query-ask-json") is False


def test_query_construct(cluster):
    reset(cluster, ALL_WRITTEN)
    assert ok(graphdbjs(cluster, "query-construct"), "query-construct") == sorted([
        f'<{EX}alice> <{EX}called> "Alice"@en .', f'<{EX}bob> <{EX}called> "Bob" .',
        f'<{EX}carol> <{EX}called> "Carol" .', f'<{EX}dave> <{EX}called> "Dave" .'])


def test_get_statements_and_size(cluster):
    reset(cluster, ALL_WRITTEN)
    res = graphdbjs(cluster, "get-statements", "get-statements-subject", "size",
                    "size-context")
    assert ok(res, "get-statements") == sorted(
        line.strip() for line in ALL_WRITTEN.splitlines())
    assert ok(res, "get-statements-subject") == sorted([
        f'<{EX}bob> <{EX}name> "Bob" .', f'<{EX}bob> <{EX}age> "42"^^<{XSD_INT}> .',
        f'<{EX}bob> <{EX}name> "Robert" .'])
    assert ok(res, "size") == 7
    assert ok(res, "size-context") == 2


# ---- namespaces ----


def test_namespaces(cluster):
    reset(cluster)
    res = graphdbjs(cluster, "save-namespace", "save-namespace-2")
    ok(res, "save-namespace")
    ok(res, "save-namespace-2")
    both = {"ex": EX, "foaf": "http://xmlns.com/foaf/0.1/"}
    assert namespaces(cluster) == both
    res = graphdbjs(cluster, "get-namespaces", "get-namespace")
    assert ok(res, "get-namespaces") == sorted(f"{p}={n}" for p, n in both.items())
    assert ok(res, "get-namespace") == EX
    ok(graphdbjs(cluster, "delete-namespace"), "delete-namespace")
    assert namespaces(cluster) == {"ex": EX}
    ok(graphdbjs(cluster, "delete-namespaces"), "delete-namespaces")
    assert namespaces(cluster) == {}


# ---- transactions ----


def test_transaction_writes_and_commit(cluster):
    reset(cluster, WRITTEN["add"])
    res = graphdbjs(cluster, "tx-begin", "tx-add", "tx-add-quads", "tx-update",
                    "tx-delete-data", "tx-commit")
    assert ok(res, "tx-begin") is True
    for step in ("tx-add", "tx-add-quads", "tx-update", "tx-delete-data"):
        ok(res, step)
    assert ok(res, "tx-commit") is False  # no longer active
    assert stored(cluster) == nq(
        f"<{EX}tx> <{EX}name> <{EX}added> .\n"
        f'<{EX}tx> <{EX}name> "quad in tx" <{EX}g2> .\n'
        f'<{EX}tx> <{EX}name> "updated in tx" .\n')


def test_transaction_rollback(cluster):
    reset(cluster, WRITTEN["add"])
    res = graphdbjs(cluster, "tx-begin", "tx-add", "tx-rollback")
    ok(res, "tx-add")
    assert ok(res, "tx-rollback") is False
    assert stored(cluster) == nq(WRITTEN["add"])


def test_transaction_reads_see_its_pending_changes(cluster):
    """size / query / get inside a transaction (graphdb.js: PUT ?action=SIZE|QUERY|GET)
    see the repository with the transaction's own changes."""
    reset(cluster, WRITTEN["add"])
    res = graphdbjs(cluster, "tx-begin", "tx-add", "tx-update", "tx-size", "tx-query",
                    "tx-get", "tx-rollback")
    ok(res, "tx-add")
    ok(res, "tx-update")
    problems = []
    for step, expected in (
            ("tx-size", 3),
            ("tx-query", sorted([f"name=<{EX}added>", 'name="updated in tx"'])),
            ("tx-get", sorted([f"<{EX}tx> <{EX}name> <{EX}added> .",
                               f'<{EX}tx> <{EX}name> "updated in tx" .']))):
        x = res[step][0]
        if not x["ok"]:
            problems.append(f"{step}: HTTP {x['status']} {x['body']!r}")
        elif x["value"] != expected:
            problems.append(f"{step}: {x['value']!r} != {expected!r}")
    assert ok(res, "tx-rollback") is False
    assert stored(cluster) == nq(WRITTEN["add"])
    assert not problems, "; ".join(problems)


def test_transaction_ping_answers_the_timeout(cluster):
    """RDF4J's PING keeps a transaction alive and answers its timeout in milliseconds as
    text (RDF4J's own client reads that number)."""
    r = httpx.post(f"{cluster.repo_url}/transactions", timeout=30)
    assert r.status_code == 201, r.text
    location = r.headers["location"]
    try:
        ping = httpx.put(location, params={"action": "PING"}, timeout=30)
        assert ping.status_code == 200, ping.text
        assert ping.text.strip().isdigit() and int(ping.text) > 0, \
            f"PING answered {ping.text!r}"
    finally:
        httpx.delete(location, timeout=30)


# ---- a client's writes then reads, in one program, no pause ----


def test_reads_right_after_writes(cluster):
    reset(cluster)
    res = graphdbjs(cluster, "add", "size", "add-quads", "size", "update",
                    "get-statements-subject", "save-namespace", "get-namespace",
                    "delete-all", "size")
    assert [ok(res, "size", i) for i in range(3)] == [1, 4, 0]
    assert ok(res, "get-statements-subject") == sorted([
        f'<{EX}bob> <{EX}name> "Bob" .', f'<{EX}bob> <{EX}age> "42"^^<{XSD_INT}> .',
        f'<{EX}bob> <{EX}name> "Robert" .'])
    assert ok(res, "get-namespace") == EX
