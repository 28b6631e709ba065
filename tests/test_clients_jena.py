"""The master as a drop-in SPARQL 1.1 / Graph Store endpoint for Apache Jena 4 (Debian's
libapache-jena-java), a client nobody here wrote.

Jena 4's RDFConnection, UpdateExecutionHTTP and QueryExecutionHTTP use java.net.http with
its defaults, so every request on a cleartext connection offers ``Upgrade: h2c`` (the
offer that used to lose request bodies). tests/java/JenaClient.java is compiled here by
javac against the installed jars (the package's and its dependencies', found with dpkg)
and run with commands; what it wrote is read back from Python (a SPARQL SELECT through
the master, httpx) and what it read is compared with what is stored.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pyoxigraph as ox
import pytest

from tests.clientlab import Relay, nq, stored

JAVA_SOURCE = Path(__file__).parent / "java" / "JenaClient.java"
JENA_PACKAGE = "libapache-jena-java"
# SLF4J bindings and bridges that must not share a classpath (slf4j-jcl with
# jcl-over-slf4j loops); slf4j-simple stays: warnings go to stderr.
_EXCLUDED_JARS = re.compile(r"/slf4j-(jcl|jdk14|log4j12|nop|migrator)(-[0-9][^/]*)?\.jar$")
EX = "http://example.org/"


def _installed(package: str) -> bool:
    r = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status}", package],
                       capture_output=True, text=True)
    return r.returncode == 0 and r.stdout == "installed"


pytestmark = pytest.mark.skipif(
    not (shutil.which("javac") and shutil.which("java") and shutil.which("dpkg-query")
         and _installed(JENA_PACKAGE)),
    reason=f"the Jena client tests need a JDK and Debian's {JENA_PACKAGE} (Apache Jena 4); "
    "`make test` installs both (DEBIAN_PACKAGES)")


def jena_classpath() -> list[str]:
    """The jars of the Jena package and of the Java packages it depends on, transitively
    (dpkg's own lists), one path per jar."""
    jars: dict[str, str] = {}
    seen: set[str] = set()
    queue = [JENA_PACKAGE]
    while queue:
        pkg = queue.pop()
        if pkg in seen or not _installed(pkg):
            continue
        seen.add(pkg)
        depends = subprocess.run(["dpkg-query", "-W", "-f=${Depends}", pkg],
                                 capture_output=True, text=True).stdout
        for alternatives in filter(None, (d.strip() for d in depends.split(","))):
            names = [re.sub(r"[:(].*", "", a).strip() for a in alternatives.split("|")]
            queue += [n for n in names if n.endswith("-java")]
        listed = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True).stdout
        for path in listed.splitlines():
            if path.startswith("/usr/share/java/") and path.endswith(".jar") \
                    and not _EXCLUDED_JARS.search(path) \
                    and not _EXCLUDED_JARS.search(os.path.realpath(path)):
                jars.setdefault(os.path.realpath(path), path)
    return sorted(jars.values())


def xerces_messages(jena_core: Path, out: Path) -> Path:
    """Debian's jena-core 4.5.0 moves Jena's bundled Xerces classes to the package
    ``xerces`` but leaves their message bundles under ``org/apache/jena/ext/xerces``, so
    the first xsd datatype fails ("ExceptionInInitializerError ... internal error" in
    XSSimpleTypeDecl.applyFacets1). Put the bundles where the classes look for them."""
    with zipfile.ZipFile(jena_core) as jar:
        names = set(jar.namelist())
        if "xerces/impl/dv/xs/XSSimpleTypeDecl.class" not in names \
                or "xerces/impl/msg/XMLSchemaMessages.properties" in names:
            return out  # not the relocated packaging: nothing to add
        prefix = "org/apache/jena/ext/xerces/"
        for name in names:
            if name.startswith(prefix) and name.endswith(".properties"):
                target = out / "xerces" / name[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(jar.read(name))
    return out


@pytest.fixture(scope="module")
def jena(tmp_path_factory) -> list[str]:
    """The classpath to run the compiled client with."""
    jars = jena_classpath()
    core = [j for j in jars if Path(j).name in ("jena-core.jar",)]
    assert core and any(Path(j).name == "jena-rdfconnection.jar" for j in jars), jars
    classes = tmp_path_factory.mktemp("jena-client")
    subprocess.run(["javac", "-cp", ":".join(jars), "-d", str(classes), str(JAVA_SOURCE)],
                   check=True, timeout=180)
    fix = xerces_messages(Path(core[0]), tmp_path_factory.mktemp("jena-xerces-messages"))
    return [*jars, str(classes), str(fix)]


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory(workers=3)


def run_jena(classpath: list[str], repo_url: str, *commands: str) -> list[tuple[str, list]]:
    """Run the client; for each command, (OK|ERR ..., its result lines)."""
    r = subprocess.run(["java", "-cp", ":".join(classpath), "JenaClient", repo_url, *commands],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"JenaClient failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    results: list[tuple[str, list]] = []
    lines: list[str] = []
    for line in r.stdout.splitlines():
        if line.startswith("CMD\t"):
            lines = []
        elif line == "OK" or line.startswith("ERR\t"):
            results.append((line, lines))
        else:
            lines.append(line)
    assert len(results) == len(commands), r.stdout + r.stderr
    return results


def cmd(*fields: str) -> str:
    return "\t".join(fields)


def assert_all_ok(commands: tuple[str, ...], results) -> None:
    failed = [f"{c.split(chr(9))[0]}: {status}" for c, (status, _) in
              zip(commands, results, strict=True) if status != "OK"]
    assert not failed, "Jena calls failed: " + "; ".join(failed)


def reset(cluster, quads: str = "") -> None:
    import httpx
    r = httpx.delete(f"{cluster.repo_url}/statements", timeout=60)
    assert r.status_code == 204, r.text
    if quads:
        r = httpx.post(f"{cluster.repo_url}/statements", content=quads.encode(),
                       headers={"content-type": "application/n-quads"}, timeout=60)
        assert r.status_code == 204, r.text
    assert stored(cluster) == nq(quads)


TWO_TTL = f'@prefix ex: <{EX}> .\nex:a ex:p "x" , "y" .\n'


def two(graph: str | None = None) -> set[ox.Quad]:
    g = f" <{EX}{graph}>" if graph else ""
    return nq(f'<{EX}a> <{EX}p> "x"{g} .\n<{EX}a> <{EX}p> "y"{g} .\n')


def test_jena_writes(cluster, jena, tmp_path):
    reset(cluster, f'<{EX}old> <{EX}p> "old" .\n<{EX}old> <{EX}p> "old" <{EX}g1> .\n')
    ttl = tmp_path / "two.ttl"
    ttl.write_text(TWO_TTL)
    commands = (
        cmd("put", "default", str(ttl)),  # Graph Store PUT of the default graph
        cmd("put", f"{EX}g1", str(ttl)),  # PUT of a named graph: replaces "old"
        cmd("load", f"{EX}g2", str(ttl)),  # Graph Store POST
        cmd("put-model", f"{EX}g3", f'<{EX}m> <{EX}p> 1 .'),
        cmd("update", f'INSERT DATA {{ <{EX}s> <{EX}p> "conn" }}'),  # RDFConnection.update
        cmd("update-exec", "post", f'INSERT DATA {{ <{EX}s> <{EX}p> "post" }}'),
        cmd("update-exec", "form",
            f'INSERT DATA {{ GRAPH <{EX}g4> {{ <{EX}s> <{EX}p> "form" }} }}'),
    )
    results = run_jena(jena, cluster.repo_url, *commands)
    assert_all_ok(commands, results)
    assert stored(cluster) == two() | two("g1") | two("g2") | nq(
        f'<{EX}m> <{EX}p> "1"^^<http://www.w3.org/2001/XMLSchema#integer> <{EX}g3> .\n'
        f'<{EX}s> <{EX}p> "conn" .\n<{EX}s> <{EX}p> "post" .\n'
        f'<{EX}s> <{EX}p> "form" <{EX}g4> .\n')

    commands = (cmd("delete", f"{EX}g2"), cmd("delete", "default"))
    results = run_jena(jena, cluster.repo_url, *commands)
    assert_all_ok(commands, results)
    assert stored(cluster) == two("g1") | nq(
        f'<{EX}m> <{EX}p> "1"^^<http://www.w3.org/2001/XMLSchema#integer> <{EX}g3> .\n'
        f'<{EX}s> <{EX}p> "form" <{EX}g4> .\n')


def test_jena_dataset_writes(cluster, jena, tmp_path):
    reset(cluster, f'<{EX}old> <{EX}p> "old" .\n<{EX}old> <{EX}p> "old" <{EX}g1> .\n')
    quads = tmp_path / "data.nq"
    quads.write_text(f'<{EX}a> <{EX}p> "d" .\n<{EX}a> <{EX}p> "q" <{EX}g9> .\n')
    trig = tmp_path / "more.trig"
    trig.write_text(f'<{EX}g8> {{ <{EX}b> <{EX}p> "t" }}\n')
    commands = (cmd("put-dataset", str(quads)), cmd("load-dataset", str(trig)))
    results = run_jena(jena, cluster.repo_url, *commands)
    assert_all_ok(commands, results)
    assert stored(cluster) == nq(f'<{EX}a> <{EX}p> "d" .\n<{EX}a> <{EX}p> "q" <{EX}g9> .\n'
                                 f'<{EX}b> <{EX}p> "t" <{EX}g8> .\n')


def test_jena_reads(cluster, jena):
    reset(cluster, f'<{EX}a> <{EX}p> "x" .\n<{EX}a> <{EX}p> "y" .\n'
                   f'<{EX}a> <{EX}p> "g" <{EX}g1> .\n<{EX}b> <{EX}q> <{EX}a> <{EX}g1> .\n')
    query = f"SELECT ?s ?o {{ ?s <{EX}p> ?o }}"
    rows = [f'ROW\to="x"\ts=<{EX}a>', f'ROW\to="y"\ts=<{EX}a>']
    commands = (
        cmd("select", query),
        cmd("select-exec", "get", query),
        cmd("select-exec", "post", query),  # application/sparql-query body
        cmd("select-exec", "form", query),  # query= form body
        cmd("select", f"SELECT ?g ?s {{ GRAPH ?g {{ ?s <{EX}q> ?o }} }}"),
        cmd("ask", f"ASK {{ <{EX}a> <{EX}p> \"y\" }}"),
        cmd("ask", f"ASK {{ <{EX}a> <{EX}p> \"nope\" }}"),
        cmd("construct", f"CONSTRUCT {{ ?s <{EX}val> ?o }} WHERE {{ ?s <{EX}p> ?o }}"),
        cmd("fetch", f"{EX}g1"),
        cmd("fetch", "default"),
        cmd("fetch-dataset"),
    )
    results = run_jena(jena, cluster.repo_url, *commands)
    assert_all_ok(commands, results)
    out = [lines for _, lines in results]
    assert out[0] == out[1] == out[2] == out[3] == rows
    assert out[4] == [f"ROW\tg=<{EX}g1>\ts=<{EX}b>"]
    assert out[5:7] == [["ASK\ttrue"], ["ASK\tfalse"]]
    assert out[7] == [f'TRIPLE\t<{EX}a> <{EX}val> "x" .', f'TRIPLE\t<{EX}a> <{EX}val> "y" .']
    assert out[8] == [f'TRIPLE\t<{EX}a> <{EX}p> "g" .', f"TRIPLE\t<{EX}b> <{EX}q> <{EX}a> ."]
    assert out[9] == [f'TRIPLE\t<{EX}a> <{EX}p> "x" .', f'TRIPLE\t<{EX}a> <{EX}p> "y" .']
    assert out[10] == sorted([f'QUAD\t<{EX}a> <{EX}p> "x" .', f'QUAD\t<{EX}a> <{EX}p> "y" .',
                              f'QUAD\t<{EX}a> <{EX}p> "g" <{EX}g1> .',
                              f"QUAD\t<{EX}b> <{EX}q> <{EX}a> <{EX}g1> ."])


def test_jena_reads_its_own_writes(cluster, jena, tmp_path):
    """A client's update then query in one program, with no header and no pause: the
    query sees the update (read-your-writes through the master)."""
    reset(cluster)
    ttl = tmp_path / "two.ttl"
    ttl.write_text(TWO_TTL)
    commands = []
    for i in range(5):
        commands += [cmd("update", f'INSERT DATA {{ <{EX}s> <{EX}n> {i} }}'),
                     cmd("select", f"SELECT ?n {{ <{EX}s> <{EX}n> ?n }}")]
    commands += [cmd("put", f"{EX}g1", str(ttl)), cmd("fetch", f"{EX}g1"),
                 cmd("update", f"DROP GRAPH <{EX}g1>"),
                 cmd("ask", f"ASK {{ GRAPH <{EX}g1> {{ ?s ?p ?o }} }}")]
    results = run_jena(jena, cluster.repo_url, *commands)
    assert_all_ok(tuple(commands), results)
    for i in range(5):
        rows = results[2 * i + 1][1]
        assert rows == [f"ROW\tn={j}" for j in range(i + 1)], f"after update {i}: {rows}"
    assert results[11][1] == [f'TRIPLE\t<{EX}a> <{EX}p> "x" .', f'TRIPLE\t<{EX}a> <{EX}p> "y" .']
    assert results[13][1] == ["ASK\tfalse"]


def test_jena_offers_h2c_and_its_bodies_arrive(cluster, jena, tmp_path):
    """Jena's default client does offer h2c (what makes these tests worth having), on
    the requests with a body too, and those bodies are applied."""
    reset(cluster)
    ttl = tmp_path / "two.ttl"
    ttl.write_text(TWO_TTL)
    relay = Relay(cluster.master.port)
    try:
        via = f"http://127.0.0.1:{relay.port}/repositories/{cluster.repository_id}"
        commands = (cmd("put", f"{EX}g1", str(ttl)),
                    cmd("update-exec", "post", f'INSERT DATA {{ <{EX}s> <{EX}p> "post" }}'))
        assert_all_ok(commands, run_jena(jena, via, *commands))
    finally:
        relay.close()
    sent = b"".join(relay.sent)
    heads = [part.split(b"\r\n\r\n", 1)[0].lower()
             for part in sent.split(b"HTTP/1.1\r\n")[1:]]
    assert heads and all(b"upgrade: h2c" in h for h in heads), sent[:2000]
    assert b"PUT " in sent and b"content-length" in sent.lower()
    assert stored(cluster) == two("g1") | nq(f'<{EX}s> <{EX}p> "post" .\n')
