"""Repository: state, journal recovery, images and verification on a real store on disk."""

from __future__ import annotations

import gc
import tarfile

import cramjam
import pyoxigraph as ox
import pytest

from rdfcore import fingerprint
from rdfcore.changeset import Changeset, apply_to
from worker_service import backups, image, journal
from worker_service.image import ImageError, sha256_of
from worker_service.repository import (
    ApplyEntry,
    FingerprintMismatch,
    NotExact,
    Repository,
    SequenceError,
)
from worker_service.state import WorkerState

EX = "http://example.org/"


def q(s: str, o: str, g: str | None = None) -> ox.Quad:
    graph = ox.NamedNode(EX + g) if g else ox.DefaultGraph()
    return ox.Quad(ox.NamedNode(EX + s), ox.NamedNode(EX + "p"), ox.Literal(o), graph)


def adds(*quads: ox.Quad) -> Changeset:
    return Changeset(added=frozenset(quads))


def reopen(repo: Repository, **kw) -> Repository:
    path, rid = repo.data_dir, repo.id
    repo.close()
    return Repository(rid, path, **kw)


@pytest.fixture
def repo(tmp_path):
    return Repository("r", tmp_path / "data")


def test_apply_moves_state_and_fingerprint_agrees_with_recomputation(repo):
    r1 = repo.apply(1, "t1", adds(q("a", "1"), q("b", "2", "g"), q("c", "3")))
    assert (r1.state.seq, r1.state.txid, r1.state.quads) == (1, "t1", 3)
    r2 = repo.apply(2, "t2", Changeset(removed=frozenset({q("a", "1")}),
                                       added=frozenset({q("d", "4")})))
    assert r2.state.quads == 3
    actual, count = fingerprint.recompute(repo.store)
    assert actual == r2.state.fingerprint and count == 3
    assert repo.verify()["matches"] is True


def test_apply_refuses_wrong_sequence_number_and_changes_nothing(repo):
    repo.apply(1, "t1", adds(q("a", "1")))
    before = repo.state()
    for seq in (1, 3, 0):
        with pytest.raises(SequenceError, match="does not follow"):
            repo.apply(seq, "tx", adds(q("z", "9")))
    assert repo.state() == before
    assert q("z", "9") not in repo.store


def test_apply_refuses_when_result_would_not_be_the_expected_fingerprint(repo):
    cs = adds(q("a", "1"))
    wrong = (cs.moved_fingerprint(0) + 1) % fingerprint.MOD
    with pytest.raises(FingerprintMismatch, match="not in the state"):
        repo.apply(1, "t1", cs, expected_fingerprint=wrong)
    assert repo.state().seq == 0 and len(repo.store) == 0
    ok = repo.apply(1, "t1", cs, expected_fingerprint=cs.moved_fingerprint(0))
    assert ok.state.seq == 1


def test_state_survives_reopen(repo):
    repo.apply(1, "t1", adds(q("a", "1")))
    st = repo.state()
    repo = reopen(repo)
    assert repo.state() == st and repo.verify()["matches"]


def test_interrupted_apply_is_redone_on_restart(repo):
    base = repo.apply(1, "t0", adds(*(q(f"s{i}", "x") for i in range(5))))
    cs = Changeset(removed=frozenset(q(f"s{i}", "x") for i in range(5)),
                   added=frozenset(q(f"n{i}", "y") for i in range(50)))
    expected = cs.moved_fingerprint(base.state.fingerprint)
    after = base.state.evolve(seq=2, txid="t1", fingerprint=expected, quads=50)
    repo._journal.begin({"seq": 2, "txid": "t1", "mode": journal.REDO, "after": after.to_json()})
    repo._journal.append(cs)
    repo._journal.seal()
    partial = Changeset(removed=frozenset(list(cs.removed)[:2]),
                        added=frozenset(list(cs.added)[:20]))
    apply_to(repo.store, partial)
    repo._journal._fh.close()
    repo = reopen(repo)
    assert repo.state().seq == 2 and repo.state().fingerprint == expected
    assert set(repo.store) == set(cs.added)
    assert repo.verify()["matches"]
    assert not (repo._gen / journal.JOURNAL_FILE).exists()


def test_interrupted_execute_is_undone_on_restart(repo):
    base = repo.apply(1, "t0", adds(*(q(f"s{i}", "x") for i in range(5))))
    before = set(repo.store)
    cs = Changeset(removed=frozenset(list(before)[:3]),
                   added=frozenset(q(f"n{i}", "y") for i in range(30)))
    repo._journal.begin({"seq": 2, "txid": "t1", "mode": journal.UNDO})
    repo._journal.append(cs)
    apply_to(repo.store, Changeset(removed=frozenset(list(cs.removed)[:1]),
                                   added=frozenset(list(cs.added)[:10])))
    repo._journal._fh.close()
    repo = reopen(repo)
    assert repo.state() == base.state
    assert set(repo.store) == before
    assert repo.verify()["matches"]


def test_committed_group_leaves_an_empty_journal_that_recovers_nothing(repo, caplog):
    """A committed group empties the journal and keeps it open (journal.py, committed);
    the next group's journal holds that group alone, and an empty one is no journal."""
    repo.apply(1, "t0", adds(q("a", "1")))
    repo.apply(2, "t1", adds(q("b", "2")))
    path = repo._gen / journal.JOURNAL_FILE
    assert path.read_bytes() == b"" and repo._journal.pending() is None
    st = repo.state()
    repo._journal.begin({"seq": 3, "txid": "t2", "mode": journal.UNDO})
    header = path.read_bytes()
    assert header.count(b"\n") == 1 and b'"t2"' in header  # nothing of t0 or t1 before it
    repo._journal.committed()  # as a group refused whole leaves it
    repo._journal._fh.close()  # kill -9: nothing else closed or removed
    with caplog.at_level("INFO", logger="txcluster"):
        repo = reopen(repo)
    assert repo.state() == st and repo.verify()["matches"]
    assert not [r for r in caplog.records if "journal" in r.getMessage()]


def test_torn_journal_line_is_ignored(repo):
    repo.apply(1, "t0", adds(q("a", "1")))
    st = repo.state()
    path = repo._gen / journal.JOURNAL_FILE
    path.write_bytes(b'{"seq": 2, "txid": "t", "mode": "undo"}\n{"step": {"added": "<http')
    repo = reopen(repo)
    assert repo.state() == st and repo.verify()["matches"]


def test_store_changed_behind_the_workers_back_is_reported(tmp_path):
    repo = Repository("r", tmp_path / "d")
    repo.apply(1, "t1", adds(q("a", "1")))
    path = repo.data_dir
    repo.close()
    tampered = ox.Store(str(path / "current" / "store"))
    tampered.add(q("intruder", "x"))
    del tampered
    gc.collect()
    repo = Repository("r", path)  # verify-on-start
    assert repo.activity == "OUT_OF_SYNC"
    assert repo.state().quads == 2
    assert repo.state().fingerprint == fingerprint.recompute(repo.store)[0]


def test_image_round_trip_gives_identical_state(tmp_path):
    src = Repository("r", tmp_path / "src")
    src.apply(1, "t1", adds(*(q(f"s{i}", str(i), "g" if i % 2 else None) for i in range(200))))
    src.apply(2, "t2", Changeset(namespaces={"ex": EX}))
    manifest = src.create_image(tmp_path / "img.tar.sz")
    dst = Repository("r", tmp_path / "dst")
    dst.apply(1, "other", adds(q("junk", "1")))
    st = dst.install_image(tmp_path / "img.tar.sz", manifest["sha256"])
    assert st == src.state()
    assert set(dst.store) == set(src.store)
    assert dst.namespaces == {"ex": EX}
    assert dst.verify()["matches"]
    # the new generation is what a restart opens
    dst = reopen(dst)
    assert dst.state() == src.state()


def test_state_saved_after_a_refused_install_reaches_the_new_generation(tmp_path):
    """A bulk load refused on a non-empty repository (its generation dropped), then an image
    installed as the same generation number: the states saved afterwards are in that
    generation's slot file, not in the dropped one's (a restart found the image's state)."""
    src = Repository("r", tmp_path / "src")
    src.apply(1, "t1", adds(q("a", "1")))
    manifest = src.create_image(tmp_path / "img.tar.sz")
    dst = Repository("r", tmp_path / "dst")
    dst.apply(1, "other", adds(q("junk", "1")))
    built = tmp_path / "built"
    ox.Store(str(built)).add(q("bulk", "1"))
    with pytest.raises(ValueError, match="no longer empty"):
        dst.install_store(built, WorkerState(seq=1, txid="bulk", quads=1))
    gc.collect()
    dst.install_image(tmp_path / "img.tar.sz", manifest["sha256"])
    dst.apply(2, "t2", adds(q("b", "2")))
    st = dst.state()
    dst = reopen(dst)
    assert dst.state() == st and dst.verify()["matches"]


def test_an_image_without_compression_is_a_plain_tar_and_installs_alike(tmp_path):
    # replication.compression=false (docs/design/smart-replication.md#full-replication)
    src = Repository("r", tmp_path / "src")
    src.apply(1, "t1", adds(*(q(f"s{i}", str(i)) for i in range(100))))
    plain = src.create_image(tmp_path / "plain.img", compress=False)
    framed = src.create_image(tmp_path / "framed.img")
    assert tarfile.is_tarfile(tmp_path / "plain.img")
    assert not tarfile.is_tarfile(tmp_path / "framed.img")
    assert (tmp_path / "framed.img").read_bytes().startswith(b"\xff\x06\x00\x00sNaPpY")
    assert plain["bytes"] == (tmp_path / "plain.img").stat().st_size
    for name, manifest in (("plain.img", plain), ("framed.img", framed)):
        dst = Repository("r", tmp_path / f"dst-{name}")
        assert dst.install_image(tmp_path / name, manifest["sha256"]) == src.state()
        assert set(dst.store) == set(src.store)
    backup = backups.backup(src, "nightly", compress=False)
    assert tarfile.is_tarfile(backups.backups_dir(src) / "nightly" / "image.tar.sz")
    assert backup["sha256"] == sha256_of(backups.backups_dir(src) / "nightly" / "image.tar.sz")


def test_an_image_framed_at_other_places_installs_alike(tmp_path):
    """The snappy framing may cut the tar anywhere (each cut a complete framed stream:
    the stream identifier repeats), as writers of other versions did (tarfile's stream
    mode framed every megabyte of its 10 KB records): such an image installs as the one
    written here, also when its cuts fall inside a tar header or far apart."""
    src = Repository("r", tmp_path / "src")
    src.apply(1, "t1", adds(*(q(f"s{i}", str(i), "g" if i % 3 else None)
                              for i in range(30_000))))
    plain = tmp_path / "plain.img"
    src.create_image(plain, compress=False)
    tar = plain.read_bytes()
    assert len(tar) > 2 * image.EMIT
    for sizes in ((100, 511, 513, 10_240), (image.EMIT - 1, 3 * image.EMIT + 7, 4096)):
        cut, frames, i = 0, [], 0
        while cut < len(tar):
            frames.append(bytes(cramjam.snappy.compress(tar[cut:cut + sizes[i % len(sizes)]])))
            cut += sizes[i % len(sizes)]
            i += 1
        framed = tmp_path / f"framed-{sizes[0]}.img"
        framed.write_bytes(b"".join(frames))
        dst = Repository("r", tmp_path / f"dst-{sizes[0]}")
        assert dst.install_image(framed, sha256_of(framed)) == src.state()
        assert set(dst.store) == set(src.store) and dst.verify()["matches"]


def test_corrupted_image_is_refused_and_changes_nothing(tmp_path):
    src = Repository("r", tmp_path / "src")
    src.apply(1, "t1", adds(q("a", "1")))
    img = tmp_path / "img.tar.sz"
    manifest = src.create_image(img)
    data = bytearray(img.read_bytes())
    data[len(data) // 2] ^= 0xFF
    img.write_bytes(bytes(data))
    dst = Repository("r", tmp_path / "dst")
    dst.apply(1, "mine", adds(q("b", "2")))
    before = dst.state()
    with pytest.raises(ImageError, match="checksum mismatch"):
        dst.install_image(img, manifest["sha256"])
    assert dst.state() == before and set(dst.store) == {q("b", "2")}


def test_named_backup_is_replaced_when_the_name_is_reused(repo):
    repo.apply(1, "t1", adds(q("a", "1")))
    first = backups.backup(repo, "nightly")
    repo.apply(2, "t2", adds(q("b", "2")))
    second = backups.backup(repo, "nightly")
    assert (first["seq"], second["seq"]) == (1, 2)
    folders = list(backups.backups_dir(repo).iterdir())
    assert [f.name for f in folders] == ["nightly"]
    repo.apply(3, "t3", adds(q("c", "3")))
    st = repo.install_image(backups.backups_dir(repo) / "nightly" / "image.tar.sz",
                            second["sha256"])
    assert st.seq == 2 and set(repo.store) == {q("a", "1"), q("b", "2")}


def test_apply_batch_is_all_or_nothing(repo):
    c1, c2 = adds(q("a", "1")), adds(q("b", "2"))
    fp1 = c1.moved_fingerprint(0)
    bad = [ApplyEntry(1, "t1", c1, fp1), ApplyEntry(2, "t2", c2, 12345)]
    with pytest.raises(FingerprintMismatch):
        repo.apply_batch(bad)
    assert repo.state().seq == 0 and len(repo.store) == 0
    with pytest.raises(SequenceError):
        repo.apply_batch([ApplyEntry(1, "t1", c1), ApplyEntry(3, "t3", c2)])
    assert len(repo.store) == 0
    done = repo.apply_batch([ApplyEntry(1, "t1", c1, fp1),
                             ApplyEntry(2, "t2", c2, c2.moved_fingerprint(fp1))])
    assert [r.state.seq for r in done] == [1, 2]
    assert repo.state().seq == 2 and repo.verify()["matches"]


@pytest.mark.parametrize("text", [
    lambda lines: lines + lines[:1],  # a line twice: the same quads, counted twice
    lambda lines: [lines[0].replace("> <", ">  <", 1), *lines[1:]],  # other spacing
    lambda lines: lines[1:],  # a quad missing from the text
], ids=["line-twice", "other-spacing", "line-missing"])
def test_apply_hashes_the_text_received_and_refuses_one_not_written_as_the_probe_does(
        repo, text):
    """A worker applying a changeset hashes its text as received, one quad per line (the
    probe's form): a text of the same quads written otherwise, or of other quads, is not
    the probe's fingerprint, and the batch is refused, changing nothing; the probe's own
    text applies."""
    cs = adds(q("a", "1"), q("b", "2", "g"), q("c", '3"\n'))
    wire = cs.to_wire()
    expected = cs.moved_fingerprint(0)
    lines = wire["added"].splitlines(keepends=True)
    other = {**wire, "added": "".join(text(lines))}
    with pytest.raises(FingerprintMismatch):
        repo.apply_batch([ApplyEntry(1, "t1", Changeset.from_wire(other), expected, other)])
    assert repo.state().seq == 0 and len(repo.store) == 0
    [done] = repo.apply_batch([ApplyEntry(1, "t1", Changeset.from_wire(wire), expected,
                                          wire)])
    assert done.state.fingerprint == expected and repo.verify()["matches"]


@pytest.mark.parametrize("batch", [
    [adds(q("a", "1"))],  # already held
    [Changeset(removed=frozenset({q("zz", "9")}))],  # not held
    [Changeset(dropped_graphs=frozenset({ox.NamedNode(EX + "g")}))],  # quads left in it
    [adds(q("n", "1")), adds(q("n", "1"))],  # the same quad added twice
], ids=["adds-held", "removes-missing", "drops-graph-not-its-quads", "adds-twice"])
def test_apply_without_expected_fingerprint_refuses_inexact_changesets(repo, batch):
    """Found by tests/fuzz (a signed /cluster/apply): an inexact changeset applied without
    an expected fingerprint made the kept fingerprint and quad count lie about the store."""
    repo.apply(1, "t1", adds(q("a", "1"), q("b", "2", "g")))
    before = repo.state()
    entries = [ApplyEntry(2 + i, f"t{2 + i}", cs) for i, cs in enumerate(batch)]
    with pytest.raises(NotExact, match="not exact against this worker's store"):
        repo.apply_batch(entries)
    assert repo.state() == before
    assert repo.verify()["matches"]
    # Exact ones still apply, with or without an expected fingerprint.
    repo.apply(2, "t2", adds(q("c", "3")))
    assert repo.verify()["matches"]


def test_interrupted_batch_apply_is_redone_even_when_later_steps_undo_earlier_ones(repo):
    a, b = q("a", "1"), q("b", "2")
    steps = [adds(a, b), Changeset(removed=frozenset({a})), adds(a)]
    fp = 0
    for cs in steps:
        fp = cs.moved_fingerprint(fp)
    after = repo.state().evolve(seq=3, txid="t3", fingerprint=fp, quads=2)
    repo._journal.begin({"seq": 3, "txid": "t3", "mode": journal.REDO, "after": after.to_json()})
    for cs in steps:
        repo._journal.append(cs)
    repo._journal.seal()
    for cs in steps:  # everything reached the store, the state file did not
        apply_to(repo.store, cs)
    repo._journal._fh.close()
    repo = reopen(repo)
    assert repo.state().seq == 3 and set(repo.store) == {a, b}
    assert repo.verify()["matches"]


def test_interrupted_apply_journaled_as_received_request_is_redone(repo):
    import json

    c1, c2 = adds(q("a", "1")), Changeset(added=frozenset({q("b", "2")}))
    fp = c2.moved_fingerprint(c1.moved_fingerprint(0))
    body = json.dumps({"entries": [
        {"seq": 1, "txid": "t1", "changeset": c1.to_wire()},
        {"seq": 2, "txid": "t2", "changeset": c2.to_wire()}]}).encode()
    after = repo.state().evolve(seq=2, txid="t2", fingerprint=fp, quads=2)
    repo._journal.begin({"seq": 2, "txid": "t2", "mode": journal.REDO, "after": after.to_json()})
    repo._journal.append_entries(body)
    repo._journal.seal()
    apply_to(repo.store, c1)  # killed before the second changeset reached the store
    repo._journal._fh.close()
    repo = reopen(repo)
    assert repo.state().seq == 2 and set(repo.store) == {q("a", "1"), q("b", "2")}
    assert repo.verify()["matches"]


def test_state_slots_survive_a_torn_write(tmp_path):
    """kill -9 in the middle of a state write leaves the previous state readable."""
    import os

    from worker_service import state as state_mod

    st1 = state_mod.WorkerState(seq=1, txid="a", fingerprint=5, quads=1)
    st2 = st1.evolve(seq=2, txid="b", fingerprint=7, quads=2)
    state_mod.save(tmp_path, st1)
    state_mod.save(tmp_path, st2)
    assert state_mod.load(tmp_path) == st2
    # tear the newest record (generation 2 sits in slot 0): its checksum no longer holds
    fd = os.open(tmp_path / state_mod.SLOTS_FILE, os.O_RDWR)
    os.pwrite(fd, b"\xff" * 8, state_mod._HEADER.size + 3)
    os.close(fd)
    assert state_mod.load(tmp_path) == st1


def test_apply_killed_while_its_journal_was_written_never_reached_the_store(repo):
    """A redo journal without its seal (torn while being written) is discarded: the
    store was not touched yet, so the state must not move to the journal's 'after'."""
    base = repo.apply(1, "t0", adds(q("a", "1")))
    cs = adds(*(q(f"n{i}", "y") for i in range(20)))
    after = base.state.evolve(seq=2, txid="t1", fingerprint=cs.moved_fingerprint(
        base.state.fingerprint), quads=21)
    repo._journal.begin({"seq": 2, "txid": "t1", "mode": journal.REDO, "after": after.to_json()})
    repo._journal._write_line(b'{"entries": [{"seq": 2, "txid": "t1", "changeset": {"added": "<')
    repo._journal._fh.close()
    repo = reopen(repo)
    assert repo.state() == base.state and set(repo.store) == {q("a", "1")}
    assert repo.verify()["matches"]


# ---- the executed journal: what a master that crashed after the probe's commit reads ----


def update(text: str) -> list:
    from worker_service.wire_parsing import parse_operations

    return parse_operations([{"type": "update", "update": text}])


def test_executed_journal_keeps_each_outcome_of_a_group_in_order(repo):
    """Committed transactions with their changeset in the form /cluster/apply takes (a
    second repository applying them reaches the same state); refusals at the seq they
    were made at, those refused before anything ran included."""
    from worker_service.transaction import UpdateSyntaxError

    repo.execute_batch(1, [("t1", update(f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }}"))])
    outcomes = repo.execute_batch(2, [
        ("t2", update(f"INSERT DATA {{ <{EX}b> <{EX}p> 2 }}")),
        ("bad", UpdateSyntaxError("operation 1: not SPARQL")),
        ("t3", update(f"DELETE DATA {{ <{EX}a> <{EX}p> 1 }}")),
    ], [f"ASK {{ <{EX}b> ?p ?o }}"])
    assert [type(o).__name__ for o in outcomes] == ["ExecuteResult", "UpdateSyntaxError",
                                                    "ExecuteResult"]
    repo.execute_batch(4, [("t4", update(f"INSERT DATA {{ <{EX}c> <{EX}p> 3 }}"))],
                       [f"ASK {{ <{EX}nothing> ?p ?o }}"])  # refused by the control query
    entries, refused = repo.executed.after(1, 100, repo.state().seq)
    assert [(e["seq"], e["txid"]) for e in entries] == [(2, "t2"), (3, "t3")]
    assert [(r["txid"], r["after"]) for r in refused] == [("bad", 2), ("t4", 3)]
    assert "control query failed" in refused[1]["error"] and refused[1]["status"] == 409
    assert entries[-1]["fingerprint"] == fingerprint.to_hex(repo.state().fingerprint)
    # Every entry is replayable elsewhere, from the state after seq 1.
    other = Repository("o", repo.data_dir.parent / "other")
    [first], _ = repo.executed.after(0, 1, 1)
    for e in [first, *entries]:
        r = other.apply(e["seq"], e["txid"], Changeset.from_wire(e["changeset"]),
                        fingerprint.from_hex(e["fingerprint"]))
        assert r.state.quads == e["quads"]
    assert set(other.store) == set(repo.store)
    # A limit below the worker's seq; nothing after the worker's own seq.
    assert [e["seq"] for e in repo.executed.after(0, 2, 3)[0]] == [1, 2]
    assert repo.executed.after(3, 100, 3) == ([], [refused[1]])  # t4, refused at seq 3


def test_executed_journal_does_not_hold_applied_rotated_or_older_generation_seqs(tmp_path):
    repo = Repository("r", tmp_path / "d")
    repo.executed = journal.Executed(repo._gen, rotate_records=3)
    for seq in range(1, 8):
        repo.execute_batch(seq, [(f"t{seq}", update(f"INSERT DATA {{ <{EX}s{seq}> "
                                                    f"<{EX}p> {seq} }}"))])
    # Rotated at 3 and 6: seqs 4..7 are held, 1..3 are gone.
    assert [e["seq"] for e in repo.executed.after(3, 100, 7)[0]] == [4, 5, 6, 7]
    with pytest.raises(journal.NotHeld, match="does not hold seq 3"):
        repo.executed.after(2, 100, 7)
    # Applied (a forward from the master), not executed: not in the executed journal.
    repo.apply(8, "t8", adds(q("x", "8")))
    with pytest.raises(journal.NotHeld, match="does not hold seq 8"):
        repo.executed.after(7, 100, 8)
    # A new image is a new history.
    src = Repository("r", tmp_path / "src")
    src.apply(1, "i1", adds(q("i", "1")))
    manifest = src.create_image(tmp_path / "img.tar.sz")
    repo.install_image(tmp_path / "img.tar.sz", manifest["sha256"])
    with pytest.raises(journal.NotHeld, match="it is empty"):
        repo.executed.after(0, 100, 1)


def test_executed_journal_line_torn_by_a_crash_is_cut_and_not_held(repo):
    repo.execute_batch(1, [("t1", update(f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }}"))])
    path = repo._gen / journal.EXECUTED_FILE
    with open(path, "ab") as fh:
        fh.write(b'{"seq": 2, "txid": "t2", "changeset": {"added": "<htt')
    repo = reopen(repo)
    repo.execute_batch(2, [("t2", update(f"INSERT DATA {{ <{EX}b> <{EX}p> 2 }}"))])
    assert [e["txid"] for e in repo.executed.after(0, 10, 2)[0]] == ["t1", "t2"]


def test_executed_journal_keeps_text_beyond_ascii_as_it_was(repo, tmp_path):
    # Its lines are written by orjson (UTF-8, not json.dumps's escapes): a literal with
    # accents, an emoji and a control character replays to the same store elsewhere.
    text = 'caf\u00e9 \U0001f600 \\"tab\\t\\n'
    repo.execute_batch(1, [("t1", update(f'INSERT DATA {{ <{EX}a> <{EX}p> "{text}" }}'))])
    [entry], _ = repo.executed.after(0, 10, 1)
    other = Repository("o", tmp_path / "other")
    other.apply(1, "t1", Changeset.from_wire(entry["changeset"]),
                fingerprint.from_hex(entry["fingerprint"]))
    assert set(other.store) == set(repo.store)
    [quad] = list(repo.store)
    assert quad.object.value == 'caf\u00e9 \U0001f600 "tab\t\n'


def test_images_install_on_a_python_without_tar_filters(tmp_path, monkeypatch):
    # Debian 12's Python 3.11.2 (the Molecule hosts) has no tarfile extraction filters:
    # restoring a split backup failed there with a TypeError (500).
    import tarfile

    monkeypatch.delattr(tarfile, "data_filter")
    src = Repository("r", tmp_path / "src")
    src.apply(1, "t1", adds(q("s", "1")))
    manifest = src.create_image(tmp_path / "img.tar.sz")
    dst = Repository("r", tmp_path / "dst")
    assert dst.install_image(tmp_path / "img.tar.sz", manifest["sha256"]) == src.state()


def test_failed_transactions_leave_no_result_iterator_for_another_thread(repo, monkeypatch):
    """pyoxigraph's query results must be dropped by the thread that made them. A
    transaction refused with a SELECT control query, or whose WHERE fails mid-evaluation,
    used to leave its result in a reference cycle (outcome -> traceback -> frame ->
    outcomes) that the garbage collector freed later on another thread: pyoxigraph then
    reports an error on that thread (a worker's log showed it, under fuzzing)."""
    import sys
    import threading

    unraisable: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(repr(u.exc_value)))

    def refused_writes() -> None:
        [o] = repo.execute_batch(2, [("t1", update(f"INSERT DATA {{ <{EX}a> <{EX}p> 1 }}"))],
                                 ["SELECT * { ?s ?p ?o }"])
        assert "must be an ASK query" in str(o)
        [o] = repo.execute_batch(2, [("t2", update(
            "INSERT { ?s ?p 2 } WHERE { ?s ?p ?o "
            "SERVICE <http://127.0.0.1:1/sparql> { ?a ?b ?c } }"))])
        assert "WHERE evaluation failed" in str(o)
        done.append(True)

    done: list[bool] = []
    repo.apply(1, "t0", adds(q("a", "1")))
    gc.disable()  # the cycle, if any, must reach the collection below, on this thread
    try:
        t = threading.Thread(target=refused_writes)
        t.start()
        t.join()
        gc.collect()
    finally:
        gc.enable()
    assert done and unraisable == []
    assert repo.state().seq == 1


def test_additions_received_as_text_reach_the_state_parsed_ones_do(tmp_path):
    """POST /cluster/apply keeps an addition as its text when it comes with an expected
    fingerprint (control._apply_entries) and loads it without building a changeset of it
    (changeset.load_added): the bulk loader for a large one, a store transaction for a
    small one; text with blank nodes (or "_:" in a literal) parsed into quads the store
    keeps the labels of, since its own loaders give blank nodes fresh ones. Applied so,
    and parsed on another worker, the same changesets give the same state and the same
    quads, blank node labels included; a group mixing such text with a removal is parsed
    and composed."""
    from rdfcore.changeset import BULK_ADD
    from worker_service.api.control import _apply_entries

    big = adds(*(q(f"s{i}", f"v{i}", "g" if i % 3 else None) for i in range(BULK_ADD + 10)))
    small = Changeset(added=frozenset({q("x", "1"), q("y", "two words")}),
                      namespaces={"ex": EX})
    tricky = adds(q("z", "a_:b"))
    p = ox.NamedNode(EX + "p")
    labelled = adds(*(ox.Quad(ox.BlankNode(f"b{i}"), p, ox.BlankNode(f"c{i % 7}"),
                              ox.NamedNode(EX + "g") if i % 2 else ox.DefaultGraph())
                      for i in range(BULK_ADD + 3)))
    few_labels = adds(ox.Quad(ox.NamedNode(EX + "u"), p, ox.BlankNode("b1")),
                      ox.Quad(ox.BlankNode("d1"), p, ox.Literal("small")))
    removal = Changeset(removed=frozenset({q("x", "1")}), added=frozenset({q("x", "2")}))
    later = adds(q("w", "after the removal"))
    groups = [[big], [small, tricky], [labelled], [few_labels], [removal, later]]
    text_repo, parsed_repo = (Repository("r", tmp_path / n) for n in ("text", "parsed"))
    seq, fp = 0, 0
    for group in groups:
        items, parsed = [], []
        for cs in group:
            seq, fp, wire = seq + 1, cs.moved_fingerprint(fp), cs.to_wire()
            items.append({"seq": seq, "txid": f"t{seq}", "changeset": wire,
                          "expected_fingerprint": fingerprint.to_hex(fp)})
            parsed.append(ApplyEntry(seq, f"t{seq}", cs, fp))
        entries = _apply_entries(items)
        kept_as_text = [e.added_text is not None for e in entries]
        assert kept_as_text == [cs is not removal for cs in group]
        text_repo.apply_batch(entries)
        parsed_repo.apply_batch(parsed)
    assert text_repo.state() == parsed_repo.state()
    assert text_repo.state().quads == 2 * BULK_ADD + 10 + 3 + 6
    assert text_repo.state().seq == 7
    assert labelled.added <= set(text_repo.store) and few_labels.added <= set(text_repo.store)
    assert set(text_repo.store) == set(parsed_repo.store)
    assert text_repo.state().namespaces == {"ex": EX}
    assert text_repo.verify()["matches"] and parsed_repo.verify()["matches"]
