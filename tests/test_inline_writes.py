"""Small writes on a worker's event loop (worker_service/api/control.py, ``apply`` and
``execute``): the same outcome as through the thread pool, never a wait for the
repository's lock, and only for work bounded by the request's own text. A real store on
disk; the last test drives a real worker process over HTTP through both paths."""

from __future__ import annotations

import json
import threading
import time

import pyoxigraph as ox
import pytest

from rdfcore import fingerprint
from rdfcore.changeset import Changeset
from tests.procs import signed_client
from worker_service.api.control import INLINE_WRITE_BYTES, _apply_entries
from worker_service.operations import bounded_by_text
from worker_service.repository import ApplyEntry, Repository
from worker_service.rwlock import RWLock
from worker_service.wire_parsing import parse_operations

EX = "http://example.org/"


def quad(i: int, graph: str | None = None) -> ox.Quad:
    g = ox.NamedNode(EX + graph) if graph else ox.DefaultGraph()
    return ox.Quad(ox.NamedNode(f"{EX}s{i}"), ox.NamedNode(f"{EX}p"), ox.Literal(f"v{i}"), g)


def adds(start: int, n: int, graph: str | None = None) -> Changeset:
    return Changeset(added=frozenset(quad(i, graph) for i in range(start, start + n)))


def group_items(changesets: list[Changeset], seq: int, fp: int) -> tuple[list[dict], int, int]:
    """The entries of a POST /cluster/apply as a master sends them (expected fingerprints)."""
    items = []
    for cs in changesets:
        wire = cs.to_wire()
        seq, fp = seq + 1, cs.moved_fingerprint(fp, wire)
        items.append({"seq": seq, "txid": f"t{seq}", "changeset": wire,
                      "expected_fingerprint": fingerprint.to_hex(fp)})
    return items, seq, fp


@pytest.fixture
def repo(tmp_path):
    r = Repository("r", tmp_path / "data")
    yield r
    r.close()


def holding(lock_cm):
    """A thread holding ``lock_cm`` until the returned ``release`` is called."""
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock_cm:
            held.set()
            done.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    assert held.wait(10)

    def release() -> None:
        done.set()
        t.join(10)
    return release


def test_write_now_is_taken_only_when_nobody_holds_or_waits_for_the_lock():
    lock = RWLock()
    with lock.write_now() as taken:
        assert taken
        with lock.read_now() as reader:  # a writer holds it: no reader either
            assert not reader
    for busy in (lock.read(), lock.write()):
        release = holding(busy)
        try:
            started = time.monotonic()
            with lock.write_now() as taken:
                assert not taken
            assert time.monotonic() - started < 0.5
        finally:
            release()
    with lock.write_now() as taken:  # free again
        assert taken


def test_apply_now_changes_nothing_while_the_lock_is_busy_then_applies_as_apply_batch(
        repo, tmp_path):
    items, _, _ = group_items([adds(0, 10), adds(10, 10, "g"), adds(20, 10)], 0, 0)
    entries = _apply_entries(items)
    before = repo.state()
    release = holding(repo._lock.read())
    try:
        assert repo.apply_batch(entries, wait=False) is None
        assert repo.state() == before and len(repo.store) == 0
    finally:
        release()
    done = repo.apply_batch(entries, wait=False)
    assert done is not None and [r.state.seq for r in done] == [1, 2, 3]
    other = Repository("r", tmp_path / "other")
    try:
        other.apply_batch(_apply_entries(items))
        assert repo.state() == other.state()
        assert set(repo.store) == set(other.store) and len(repo.store) == 30
    finally:
        other.close()
    assert repo.verify()["matches"]


def test_a_group_of_texts_is_one_load_of_the_same_quads(repo, tmp_path):
    """Several additions kept as text (no blank node) go into the store as one load
    (forwarded.Group.write); the store and state are those of the entries parsed and
    applied one by one."""
    changesets = [adds(0, 3), adds(3, 1, "g"), Changeset(added=frozenset({quad(4)}),
                                                         namespaces={"ex": EX}), adds(5, 40)]
    items, seq, fp = group_items(changesets, 0, 0)
    entries = _apply_entries(items)
    assert all(e.added_text is not None for e in entries)
    repo.apply_batch(entries)
    parsed = Repository("r", tmp_path / "parsed")
    try:
        fp2 = 0
        for i, cs in enumerate(changesets, 1):
            fp2 = cs.moved_fingerprint(fp2)
            parsed.apply_batch([ApplyEntry(i, f"t{i}", cs, fp2)])
        assert repo.state() == parsed.state() and repo.state().fingerprint == fp
        assert set(repo.store) == set(parsed.store) and repo.state().quads == 45
        assert repo.state().namespaces == {"ex": EX} and repo.state().seq == seq
    finally:
        parsed.close()
    assert repo.verify()["matches"]


def test_execute_now_waits_for_nobody_and_executes_as_execute_batch(repo):
    ops = parse_operations([{"type": "update",
                             "update": f"INSERT DATA {{ <{EX}a> <{EX}p> 'x' }}"}])
    release = holding(repo._lock.write())
    try:
        assert repo.execute_batch(1, [("t1", ops)], wait=False) is None
        assert repo.state().seq == 0
    finally:
        release()
    [done] = repo.execute_batch(1, [("t1", ops)], wait=False)  # type: ignore[misc]
    assert not isinstance(done, Exception) and done.state.seq == 1 and len(repo.store) == 1


@pytest.mark.parametrize("wire,bounded", [
    ([{"type": "update", "update": f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }}"}], True),
    ([{"type": "update", "update": f"DELETE DATA {{ <{EX}a> <{EX}p> 1 }} ; "
                                   f"INSERT DATA {{ <{EX}a> <{EX}p> 2 }}"}], True),
    ([{"type": "add", "data": f'<{EX}a> <{EX}p> "x" .', "format": "application/n-triples"},
      {"type": "namespace", "prefix": "ex", "namespace": EX},
      {"type": "clear_namespaces"}], True),
    ([{"type": "update", "update": "DELETE WHERE { ?s ?p ?o }"}], False),
    ([{"type": "update", "update": f"INSERT {{ ?s <{EX}q> 1 }} WHERE {{ ?s ?p ?o }}"}], False),
    ([{"type": "update", "update": "CLEAR ALL"}], False),
    ([{"type": "update", "update": f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }} ; "
                                   f"COPY <{EX}g> TO <{EX}h>"}], False),
    ([{"type": "remove", "subject": f"<{EX}a>"}], False),
])
def test_only_data_and_namespaces_are_bounded_by_their_text(wire, bounded):
    assert bounded_by_text(parse_operations(wire)) is bounded


def test_a_worker_answers_small_and_large_writes_alike(worker_factory, secret):
    """Through a real worker: small groups (on its event loop) and large ones (over
    INLINE_WRITE_BYTES, in its thread pool) applied in turn, then probe executions that
    may (INSERT DATA) and may not (DELETE WHERE, a control query) run on the loop: every
    answer is the state the master expects, and the store's recomputed fingerprint
    agrees."""
    node = worker_factory()
    with signed_client(node, secret[1]) as c:
        seq, fp, start, sizes = 0, 0, 0, []
        for n in (10, 2000, 10, 3000, 5):
            m = n // 10 or 1  # quads per transaction, ten transactions per group
            changesets = [adds(start + m * k, m) for k in range(10)]
            start += 10 * m
            items, seq, fp = group_items(changesets, seq, fp)
            body = {"entries": items}
            sizes.append(len(json.dumps(body)))
            r = c.post("/cluster/apply", json=body)
            assert r.status_code == 200, r.text
            assert r.json()["seq"] == seq and r.json()["fingerprint"] == fingerprint.to_hex(fp)
        assert seq == 50
        assert min(sizes) < INLINE_WRITE_BYTES < max(sizes)  # both paths were taken

        def execute(update: str, controls: list[str] | None = None) -> dict:
            r = c.post("/cluster/execute", json={
                "start_seq": seq + 1, "control_queries": controls or [],
                "transactions": [{"txid": f"x{seq + 1}",
                                  "operations": [{"type": "update", "update": update}]}]})
            assert r.status_code == 200, r.text
            return r.json()

        out = execute(f"INSERT DATA {{ <{EX}new> <{EX}p> 'n' }}")
        assert out["results"][0]["ok"] and out["state"]["seq"] == seq + 1
        seq += 1
        out = execute(f"INSERT DATA {{ <{EX}new2> <{EX}p> 'n' }}",
                      [f"ASK {{ <{EX}new> <{EX}p> 'n' }}"])
        assert out["results"][0]["ok"] and out["state"]["seq"] == seq + 1
        seq += 1
        out = execute(f"DELETE WHERE {{ ?s <{EX}p> 'n' }}")
        assert out["results"][0]["ok"] and out["state"]["seq"] == seq + 1
        assert out["state"]["quads"] == start
        verified = c.post("/cluster/verify").json()
        assert verified["matches"], verified


def test_an_execute_with_an_empty_txid_is_refused_whole(worker_factory, secret):
    """Found by `make fuzz`: an empty txid (its blank nodes are minted from it) was a 500;
    it is a 400 that says so, and nothing runs."""
    node = worker_factory()
    with signed_client(node, secret[1]) as c:
        r = c.post("/cluster/execute", json={"start_seq": 1, "transactions": [
            {"txid": "a", "operations": []}, {"txid": "", "operations": []}]})
        assert r.status_code == 400, r.text
        assert r.json()["detail"] == "transaction 1 needs a non-empty string 'txid'"
        assert c.get("/cluster/state").json()["seq"] == 0
