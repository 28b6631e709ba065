"""What the pipeline needs from workers and masters, without Spark:

* a worker's initial bulk load (worker_service/bulk_load.py, /cluster/bulk-load): only
  into an empty repository, only with the cluster credential, only when the staged data
  is exactly what the loader computed, atomically, surviving a restart;
* RDF4J's ``preserveNodeId`` on adds (the loader's transactions keep its labels);
* a worker's export (what a load into a non-empty repository reads) is never built whole
  in the worker's memory: past a threshold it is spooled to a file and streamed.
"""

from __future__ import annotations

import threading
import time
import warnings

import pyoxigraph as ox
import pytest

with warnings.catch_warnings():  # Starlette asks for httpx2; httpx is what we have
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from rdf4j_protocol import parameters, writes
from rdfcore import fingerprint
from txinfra.auth import HmacAuth, NodeAuthorities
from worker_service.api import queries
from worker_service.app import create_app
from worker_service.bulk_load import PARTS_AT_ONCE, BulkLoader
from worker_service.repository import Repository
from worker_service.wire_parsing import parse_operations

SECRET = b"0123456789abcdef0123456789abcdef"
XSD = "http://www.w3.org/2001/XMLSchema#"
NQ = {"content-type": "application/n-quads"}
DATA = (
    '<http://e/a> <http://e/p> "01"^^<http://www.w3.org/2001/XMLSchema#integer> .\n'
    "_:b1 <http://e/p> _:b2 <http://e/g> .\n"
    '<http://e/a> <http://e/name> "A"@en .\n'
)
MORE = "<http://e/c> <http://e/p> <http://e/d> .\n"


def canonical(text: str) -> set[ox.Quad]:
    """The quads as a store holds them (an in-memory store: another path than the
    canonical_term of rdfcore/canonical.py)."""
    store = ox.Store()
    store.extend(ox.parse(text, format=ox.RdfFormat.N_QUADS))
    return set(store)


@pytest.fixture
def repo(tmp_path):
    r = Repository("repo", tmp_path / "data", verify_on_start=False)
    yield r
    r.close()


@pytest.fixture
def client(repo):
    node = NodeAuthorities("testserver", 80)  # the Host of TestClient's requests
    with TestClient(create_app(repo, SECRET, node), base_url="http://testserver") as c:
        c.auth = HmacAuth(SECRET)
        yield c


def put(client, load_id, part, text):
    return client.put(f"/cluster/bulk-load/{load_id}/parts/{part}", content=text.encode(),
                      headers=NQ)


def commit(client, load_id, quads):
    return client.post(f"/cluster/bulk-load/{load_id}", json={
        "fingerprint": fingerprint.to_hex(fingerprint.sum_hashes(quads)),
        "quads": len(quads)})


def test_bulk_load_into_an_empty_worker(client, repo, tmp_path):
    assert put(client, "L1", 0, DATA).json() == {"load": "L1", "parts": 1, "quads": 3}
    assert put(client, "L1", 1, MORE).status_code == 200
    # Nothing is visible before the commit.
    assert len(repo.store) == 0 and repo.state().seq == 0
    expected = canonical(DATA + MORE)
    r = commit(client, "L1", expected)
    assert r.status_code == 200, r.text
    st = repo.state()
    assert (st.seq, st.txid, st.quads) == (0, "L1", 4)
    assert st.fingerprint == fingerprint.sum_hashes(expected)
    assert set(repo.store) == expected  # labels as sent: _:b1, _:b2
    assert ox.BlankNode("b1") in {q.subject for q in repo.store}
    assert repo.verify()["matches"]
    # The state and the store survive a restart together.
    repo.close()
    again = Repository("repo", tmp_path / "data")
    try:
        assert again.state() == st and set(again.store) == expected
        assert again.verify()["matches"]
    finally:
        again.close()


def test_canonical_and_other_text_stage_the_same_content(client, repo, tmp_path):
    """A part in the canonical form (as the loader sends it) is bulk-loaded as text; any
    other form (a typed literal the store rewrites, an escape pyoxigraph writes another
    way, no final newline) takes the quad-by-quad path. Both stage what the store
    holds, with its fingerprint."""
    from worker_service import bulk_load
    other = ('<http://e/a> <http://e/p> "caf\\u00e9" .\n'
             '<http://e/a> <http://e/p> "2.50"^^<http://www.w3.org/2001/XMLSchema#decimal> .\n'
             '<http://e/a> <http://e/p> "x"@EN .')
    quads = canonical(other + "\n" + DATA)
    text = "".join(sorted(f"{q} .\n" for q in quads)).encode()
    assert bulk_load._canonical_text(text) is not None
    for part in (other, DATA):
        assert bulk_load._canonical_text(part.encode()) is None
    # The quads of `other` come twice, in two forms: one quad each in the store, in the
    # count and in the fingerprint.
    assert put(client, "L1", 0, other).status_code == 200
    assert put(client, "L1", 1, text.decode()).status_code == 200
    assert put(client, "L1", 2, DATA).json()["quads"] == 3 + len(quads) + 3
    assert commit(client, "L1", quads).status_code == 200
    assert set(repo.store) == quads and repo.verify()["matches"]
    assert repo.state().quads == len(quads)


def test_lines_after_the_first_blank_node_label_are_parsed_whatever_they_hold(client, repo):
    """The loader sends a part's lines that may hold a blank node last; the worker
    bulk-loads the text before the first "_:" as it is and parses the rest, so a part in
    another order (plain lines after a labelled one, "_:" inside an IRI or a literal)
    stages the same quads, with the labels as sent."""
    from worker_service import bulk_load
    lines = ['<http://e/a> <http://e/p> <http://e/b> .',
             '<http://e/_:c> <http://e/p> "1" .',
             '_:x1 <http://e/p> _:x2 .',
             '<http://e/c> <http://e/p> "_:lit" .',
             '<http://e/d> <http://e/p> _:x1 <http://e/g> .',
             '<http://e/e> <http://e/p> <http://e/f> .']
    text = "".join(line + "\n" for line in lines)
    staged = bulk_load._canonical_text(text.encode())
    assert staged is not None and staged.count == 6
    assert staged.text == (lines[0] + "\n").encode()
    assert staged.labelled == "".join(line + "\n" for line in lines[1:]).encode()
    assert put(client, "L1", 0, text).status_code == 200
    expected = canonical(text)
    assert commit(client, "L1", expected).status_code == 200
    assert set(repo.store) == expected and repo.verify()["matches"]
    assert {ox.BlankNode("x1"), ox.BlankNode("x2")} <= {t for q in repo.store for t in q}


@pytest.mark.parametrize("lexical,datatype", [
    ("0", "integer"), ("-0", "integer"), ("01", "integer"), ("+5", "integer"),
    ("5", "integer"), ("-12", "integer"), ("123456789012345678", "integer"),
    ("1234567890123456789", "integer"), ("x", "integer"), ("true", "boolean"),
    ("false", "boolean"), ("1", "boolean"), ("True", "boolean"), ("1.5", "decimal"),
    ("1.50", "decimal"), ("5", "int")])
@pytest.mark.parametrize("graph", ["", " <http://e/g>", " _:g"])
def test_a_typed_literal_passes_as_text_exactly_when_the_store_keeps_it(
        lexical, datatype, graph):
    """A part goes in as text only when every typed literal is what the store gives back
    (integers and booleans recognised by their form, the others through a store)."""
    from worker_service import bulk_load
    line = f'<http://e/a> <http://e/p> "{lexical}"^^<{XSD}{datatype}>{graph} .\n'
    kept = {f"{q} .\n" for q in canonical(line)} == {line}
    assert (bulk_load._canonical_text(line.encode()) is not None) is kept
    # Among lines whose typed literals the store keeps (the whole text is looked at
    # first), anywhere in the part.
    others = [f'<http://e/b> <http://e/p> "{i}"^^<{XSD}integer> <http://e/g{i}> .\n'
              for i in range(3)] + [f'<http://e/c> <http://e/p> "true"^^<{XSD}boolean> .\n']
    for at in range(len(others) + 1):
        part = "".join([*others[:at], line, *others[at:]])
        assert (bulk_load._canonical_text(part.encode()) is not None) is kept, part


def test_a_worker_holding_data_refuses_a_bulk_load(client, repo):
    assert put(client, "L1", 0, MORE).status_code == 200
    assert commit(client, "L1", canonical(MORE)).status_code == 200
    r = put(client, "L2", 0, DATA)
    assert r.status_code == 409
    assert "needs an empty repository" in r.json()["detail"]
    assert repo.state().txid == "L1" and len(repo.store) == 1


def test_parts_come_in_any_order_once_each_and_valid(client, repo):
    """A part sent again with the same quads (a Spark task run twice) is taken once; with
    other quads it is refused."""
    assert put(client, "L1", 1, MORE).status_code == 200
    assert put(client, "L1", 0, DATA).status_code == 200
    r = put(client, "L1", 1, MORE)
    assert r.status_code == 200 and (r.json()["parts"], r.json()["quads"]) == (2, 4)
    r = put(client, "L1", 1, DATA)
    assert r.status_code == 409 and "staged already, with other quads" in r.json()["detail"]
    r = put(client, "L1", 2, "<http://e/a> <http://e/p> .\n")
    assert r.status_code == 400 and "not valid N-Quads" in r.json()["detail"]
    # Neither changed the staging.
    assert commit(client, "L1", canonical(DATA + MORE)).status_code == 200
    assert repo.state().quads == 4


def test_a_part_of_another_load_replaces_an_abandoned_one(client, repo):
    assert put(client, "L1", 0, DATA).status_code == 200
    assert put(client, "L2", 0, MORE).status_code == 200
    assert commit(client, "L1", canonical(DATA)).status_code == 404
    assert commit(client, "L2", canonical(MORE)).status_code == 200


def test_a_commit_that_does_not_match_the_loaders_fingerprint_is_refused(client, repo):
    assert put(client, "L1", 0, DATA).status_code == 200
    assert put(client, "L1", 2, DATA).status_code == 200  # part 1 is missing
    r = commit(client, "L1", canonical(DATA + MORE))
    assert r.status_code == 409 and "discarded" in r.json()["detail"]
    assert "staged 3 quads" in r.json()["detail"]
    assert repo.state().seq == 0 and repo.state().quads == 0 and len(repo.store) == 0
    assert commit(client, "L1", canonical(DATA)).status_code == 404
    assert not list((repo.data_dir / "tmp").iterdir())  # the staging store is gone


def test_duplicates_in_a_part_and_across_parts_count_once(client, repo, monkeypatch):
    """The loader sends a quad as often as its inputs hold it (it deduplicates hashes
    only): the staged count and fingerprint are those of the distinct quads, as the
    store holds them; a commit naming the count with duplicates is refused."""
    from worker_service.bulk_load import Digests
    monkeypatch.setattr(Digests, "CHUNK", 16 * 7)  # the digests read back in many chunks
    lines = [f"<http://e/s{i}> <http://e/p> \"{i}\" ." for i in range(300)]
    first = "\n".join(lines[:200] + lines[:50]) + "\n"  # 50 twice in the part
    second = "\n".join(lines[100:]) + "\n"  # 100 of the first part again
    assert put(client, "L1", 0, first).json()["quads"] == 250
    assert put(client, "L1", 1, second).json()["quads"] == 450
    distinct = canonical(first + second)
    assert len(distinct) == 300
    r = client.post("/cluster/bulk-load/L1", json={
        "fingerprint": fingerprint.to_hex(fingerprint.sum_hashes(distinct)), "quads": 450})
    assert r.status_code == 409 and "staged 300 quads" in r.json()["detail"]
    assert put(client, "L2", 0, first).status_code == 200
    assert put(client, "L2", 1, second).status_code == 200
    assert commit(client, "L2", distinct).status_code == 200
    st = repo.state()
    assert st.quads == 300 and st.fingerprint == fingerprint.sum_hashes(distinct)
    assert set(repo.store) == distinct and repo.verify()["matches"]


def test_canonical_parts_load_together_and_a_failed_load_discards_the_staging(
        repo, monkeypatch):
    """Parts in the loader's form wait until LOAD_EVERY of their quads load in one call
    (in the background; the rest at the commit); a load that fails drops the whole
    staging at the next part or the commit: what it loaded is not counted, so nothing of
    it may be committed."""
    from worker_service import bulk_load
    monkeypatch.setattr(bulk_load, "LOAD_EVERY", 4)
    extra = "<http://e/x> <http://e/p> <http://e/y> .\n<http://e/x> <http://e/p> \"z\" .\n"
    quads = canonical(DATA + MORE + extra)
    lines = sorted((f"{q} .\n" for q in quads), key=lambda line: "_:" not in line)
    assert len(lines) == 6 and any("_:" in line for line in lines[:3])
    parts = ["".join(lines[:3]).encode(), "".join(lines[3:5]).encode(), lines[5].encode()]
    loader = bulk_load.BulkLoader()

    loader.add_part(repo, "L0", 0, parts[0])
    def broken(self, parts):
        raise OSError("disk full")
    with monkeypatch.context() as m:
        m.setattr(bulk_load._Staging, "load", broken)
        loader.add_part(repo, "L0", 1, parts[1])  # its batch loads in the background
        assert isinstance(loader._staging.pending[0].exception(timeout=30), OSError)
    with pytest.raises(bulk_load.BulkLoadError, match="discarded: part 2 or a part staged "
                       "before it could not be loaded into the staging store: disk full"
                       ) as failed:
        loader.add_part(repo, "L0", 2, parts[2])
    assert failed.value.status == 500
    assert loader._staging is None and not list((repo.data_dir / "tmp").iterdir())

    loader.add_part(repo, "L2", 0, parts[0])
    with monkeypatch.context() as m:
        m.setattr(bulk_load._Staging, "load", broken)
        loader.add_part(repo, "L2", 1, parts[1])
        with pytest.raises(bulk_load.BulkLoadError, match="discarded: parts staged before "
                           "the commit could not be loaded into the staging store"):
            loader.commit(repo, "L2", fingerprint.sum_hashes(
                canonical((parts[0] + parts[1]).decode())), 5)
    assert loader._staging is None and not list((repo.data_dir / "tmp").iterdir())

    loader.add_part(repo, "L1", 0, parts[0])
    staging = loader._staging
    assert len(staging.store) == 0 and len(staging.waiting) == 1  # 3 < 4: waits
    loader.add_part(repo, "L1", 1, parts[1])
    assert not staging.waiting  # 5 >= 4: loading together
    staging.settle()
    assert len(staging.store) == 5
    loader.add_part(repo, "L1", 2, parts[2])
    assert len(staging.store) == 5 and len(staging.waiting) == 1
    state = loader.commit(repo, "L1", fingerprint.sum_hashes(quads), 6)  # the rest loads
    assert state.quads == 6 and set(repo.store) == quads and repo.verify()["matches"]


def test_sent_loads_the_waiting_parts_and_later_parts_are_still_taken(client, repo):
    """``sent`` (the loader has sent every part) loads what waits for a batch in the
    background, so that the commit does not; a part after it is staged as before."""
    from worker_service import bulk_load
    quads = canonical(DATA + MORE)
    lines = sorted((f"{q} .\n" for q in quads), key=lambda line: "_:" in line)
    loader = bulk_load.BulkLoader()
    loader.add_part(repo, "L1", 0, "".join(lines[:2]).encode())
    staging = loader._staging
    assert len(staging.waiting) == 1 and len(staging.store) == 0  # 2 < LOAD_EVERY
    assert loader.sent("L1") == {"load": "L1", "parts": 1, "quads": 2}
    assert not staging.waiting
    staging.settle()
    assert len(staging.store) == 2  # loaded before any commit
    loader.add_part(repo, "L1", 1, "".join(lines[2:]).encode())
    state = loader.commit(repo, "L1", fingerprint.sum_hashes(quads), 4)
    assert state.quads == 4 and set(repo.store) == quads and repo.verify()["matches"]

    # Over HTTP, as the master forwards it: a load the worker does not stage is a 404.
    r = client.post("/cluster/bulk-load/L2/sent")
    assert r.status_code == 404 and "no bulk load 'L2'" in r.json()["detail"]


def test_abort_drops_the_staging(client, repo):
    assert put(client, "L1", 0, DATA).status_code == 200
    assert client.delete("/cluster/bulk-load/L1").status_code == 200
    assert not list((repo.data_dir / "tmp").iterdir())
    assert commit(client, "L1", canonical(DATA)).status_code == 404


def test_a_part_of_a_load_that_ended_is_refused(client, repo):
    """Each Spark task sends its own parts: one still running when its job failed (and
    the loader aborted) sends more. They are refused, and a late part of an older load
    never replaces the staging of a newer one."""
    assert put(client, "L1", 0, DATA).status_code == 200
    assert client.delete("/cluster/bulk-load/L1").status_code == 200
    r = put(client, "L1", 1, MORE)
    assert r.status_code == 409 and "'L1' was aborted or failed here" in r.json()["detail"]
    assert not list((repo.data_dir / "tmp").iterdir())
    # Aborted before any part came: its parts are refused all the same.
    assert client.delete("/cluster/bulk-load/L2").status_code == 404
    assert put(client, "L2", 0, DATA).status_code == 409
    # L3 replaces an abandoned L4 staging; L4's late part does not replace L3's.
    assert put(client, "L4", 0, MORE).status_code == 200
    assert put(client, "L3", 0, DATA).status_code == 200
    assert put(client, "L4", 1, MORE).status_code == 409
    assert commit(client, "L3", canonical(DATA)).status_code == 200
    assert repo.state().txid == "L3" and repo.state().quads == 3


def test_at_most_two_parts_are_taken_in_at_once(client, repo, monkeypatch):
    """Each Spark task sends its own parts: the worker takes PARTS_AT_ONCE of them in at
    a time (body read, checked, staged) and the others wait, not all in memory."""
    real = BulkLoader.add_part
    inside, peak = [0], [0]
    lock, release = threading.Lock(), threading.Event()

    def add_part(self, *args):
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        try:
            release.wait(10)
            return real(self, *args)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(BulkLoader, "add_part", add_part)
    texts = [f"<http://e/s{n}> <http://e/p> <http://e/o> .\n" for n in range(5)]
    answers: list[int] = []
    senders = [threading.Thread(target=lambda n=n: answers.append(
        put(client, "L1", n, texts[n]).status_code)) for n in range(5)]
    for t in senders:
        t.start()
    try:
        deadline = time.monotonic() + 10
        while inside[0] < PARTS_AT_ONCE and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # time for a third to come in, if it could
        taken_in = inside[0]
    finally:  # every request ends before the client closes, whatever was seen
        release.set()
        for t in senders:
            t.join(20)
    assert taken_in == PARTS_AT_ONCE == 2
    assert answers == [200] * 5 and peak[0] == 2
    assert commit(client, "L1", canonical("".join(texts))).status_code == 200
    assert repo.state().quads == 5


def test_bulk_load_needs_the_cluster_credential(client, repo):
    client.auth = None
    r = put(client, "L1", 0, DATA)
    assert r.status_code == 403
    assert client.post("/cluster/bulk-load/L1", json={}).status_code == 403
    assert repo.state().quads == 0


def test_a_bad_load_id_is_refused(client):
    assert put(client, "..%2Fx", 0, DATA).status_code in (400, 404)
    assert put(client, "-x", 0, DATA).status_code == 400


# ---- preserveNodeId ----


def _added(repo: Repository, params: str,
           data: bytes = b"_:b1 <http://e/p> _:b2 .\n") -> set[str]:
    ops = writes.statements_write("POST", parameters.parse_params(params.encode()),
                                 data, "application/n-quads")
    result = repo.execute_local(parse_operations(ops))
    return {f"{q} ." for q in result.changeset.added}


def test_preserve_node_id_adds_typed_literals_as_the_store_holds_them(repo):
    """The add's quads kept as written (labels, graphs) still have their typed literals
    in canonical form, so the changeset (and the fingerprint) is what the store holds."""
    added = _added(repo, "preserveNodeId=true", (
        b'_:b1 <http://e/p> "01"^^<http://www.w3.org/2001/XMLSchema#integer> <http://e/g> .\n'
        b'<http://e/s> <http://e/p> "1.50"^^<http://www.w3.org/2001/XMLSchema#decimal> .\n'
        b'<http://e/s> <http://e/p> "x"@EN .\n'))
    assert added == {
        '_:b1 <http://e/p> "1"^^<http://www.w3.org/2001/XMLSchema#integer> <http://e/g> .',
        '<http://e/s> <http://e/p> "1.5"^^<http://www.w3.org/2001/XMLSchema#decimal> .',
        '<http://e/s> <http://e/p> "x"@en .'}
    assert {f"{q} ." for q in repo.store} == added
    assert repo.verify()["matches"]


def test_preserve_node_id_keeps_the_labels_of_an_add(repo):
    assert _added(repo, "preserveNodeId=true") == {"_:b1 <http://e/p> _:b2 ."}
    # Sent again: the same nodes, nothing new (a re-run of a load is harmless).
    assert _added(repo, "preserveNodeId=true") == set()
    # Without it each document's blank nodes are fresh nodes (RDF4J's default).
    [minted] = _added(repo, "")
    assert "_:b1" not in minted and minted.startswith("_:t")


def test_preserve_node_id_must_be_a_boolean():
    with pytest.raises(parameters.ProtocolError):
        writes.statements_write("POST", parameters.parse_params(b"preserveNodeId=maybe"),
                               b"<http://e/a> <http://e/p> <http://e/o> .",
                               "application/n-quads")
    with pytest.raises(Exception, match="preserve_node_ids"):
        parse_operations([{"type": "add", "data": "", "format": "application/n-quads",
                           "preserve_node_ids": "yes"}])


# ---- the export a load into a non-empty repository reads ----


def test_a_large_export_streams_from_a_spooled_file(client, repo, monkeypatch):
    lines = [f'<http://e/s{i}> <http://e/p> "value {i}" <http://e/g{i % 3}> .'
             for i in range(2000)]
    repo.execute_local(parse_operations(writes.statements_write(
        "POST", parameters.parse_params(b""), "\n".join(lines).encode(),
        "application/n-quads")))
    # The answer's chunks, as the worker streams them (the real generator, watched).
    streamed: list[int] = []
    chunks = queries._chunks

    def watched(spool):
        for chunk in chunks(spool):
            streamed.append(len(chunk))
            yield chunk

    monkeypatch.setattr(queries, "_chunks", watched)
    monkeypatch.setattr(queries, "_CHUNK", 4096)
    monkeypatch.setattr(queries, "SPOOL_BYTES", 10_000)  # ~150 KB of N-Quads: spooled
    r = client.get("/repositories/repo/statements", headers={"accept": "application/n-quads"})
    assert r.status_code == 200
    assert "content-length" not in r.headers  # streamed, not one body
    assert len(streamed) > 10 and max(streamed) <= 4096 and sum(streamed) == len(r.content)
    assert canonical(r.text) == canonical("\n".join(lines))
    # Below the threshold: one plain answer, as before.
    streamed.clear()
    monkeypatch.setattr(queries, "SPOOL_BYTES", 1 << 30)
    small = client.get("/repositories/repo/statements",
                       headers={"accept": "application/n-quads"})
    assert streamed == [] and small.headers["content-length"] == str(len(small.content))
    assert small.content == r.content
