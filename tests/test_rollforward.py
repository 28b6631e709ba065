"""Roll-forward (master_service/cluster/rollforward.py): decisions on a worker's executed
journal against what the log expects next, with small inline changesets; and a peered
Cluster in this process with a real worker process, rolling forward while it runs."""

from __future__ import annotations

import asyncio
import time

import pyoxigraph as ox
import pytest

from master_service.cluster import replication
from master_service.cluster.core import Cluster
from master_service.cluster.rollforward import Expected, NoRollForward, plan
from master_service.cluster.statuses import WorkerStatus
from master_service.sync.messages import TxMeta
from master_service.sync.ordering import AgreedOrdering
from master_service.sync.sqlite_storage import SqliteStorage
from master_service.sync.wire import canonical_payload, payload_digest
from master_service.txlog.log import State, TxLog
from rdfcore import fingerprint
from rdfcore.changeset import Changeset
from tests.procs import signed_client

HEAD = State(7, fingerprint.to_hex(12345), 3)


def quad(n: int) -> ox.Quad:
    return ox.Quad(ox.NamedNode(f"urn:s:{n}"), ox.NamedNode("urn:p"), ox.Literal(str(n)))


def worker_journal(txids: list[str], refused: list[tuple[str, int]] = (),
                   start: State = HEAD) -> dict:
    """What a worker at ``start`` answers after executing ``txids`` (one added quad each)
    and refusing ``refused`` ((txid, at seq))."""
    fp, quads, entries = fingerprint.from_hex(start.fingerprint), start.quads, []
    for i, txid in enumerate(txids):
        cs = Changeset(added=frozenset({quad(start.seq + i + 1)}))
        fp, quads = cs.moved_fingerprint(fp), quads + 1
        entries.append({"seq": start.seq + i + 1, "txid": txid, "changeset": cs.to_wire(),
                        "fingerprint": fingerprint.to_hex(fp), "quads": quads,
                        "duration_s": 0.01})
    return {"seq": start.seq + len(txids), "fingerprint": fingerprint.to_hex(fp),
            "quads": quads, "entries": entries,
            "refused": [{"txid": t, "after": at, "status": 409, "error": f"{t} refused"}
                        for t, at in refused]}


def test_the_group_the_log_expects_next_is_recorded_as_the_write_path_would():
    j = worker_journal(["a", "b"])
    p = plan(HEAD, [Expected("a", 4), Expected("b", 5), Expected("c", 6)], j)
    assert [(e[0], e[1], e[3], e[4]) for e in p.entries] == \
        [(e["seq"], e["txid"], e["fingerprint"], e["quads"]) for e in j["entries"]]
    assert p.entries[0][2] == j["entries"][0]["changeset"]
    assert [d[:2] for d in p.done] == [(4, "a"), (5, "b")]
    assert p.state == (9, j["fingerprint"], 5)
    assert p.answers["b"] == {"txid": "b", "seq": 9, "fingerprint": j["fingerprint"],
                              "position": 5}


def test_refusals_of_expected_transactions_are_their_failures_in_order():
    """The probe refused b between a and c, and d after c: b and d are recorded failed
    with the state they were refused at; an older refusal (x) is passed over."""
    j = worker_journal(["a", "c"], refused=[("x", 7), ("b", 8), ("d", 9)])
    expected = [Expected(t, pos) for pos, t in enumerate("abcde", 1)]
    p = plan(HEAD, expected, j)
    assert [d[1] for d in p.done] == ["a", "b", "c", "d"]
    assert p.failures == [("b", "b refused"), ("d", "d refused")]
    a_fp = j["entries"][0]["fingerprint"]
    assert p.done[1] == (2, "b", a_fp, 4)  # refused: the fingerprint stays
    assert p.answers["d"] == (409, "d refused")


@pytest.mark.parametrize(("expected", "why"), [
    ([], "is not the one the log expects next \\(none\\)"),
    ([Expected("other")], "transaction a at seq 8 is not the one the log expects next"),
    ([Expected("b"), Expected("a")], "not the one the log expects next \\(b\\)"),
    ([Expected("a")], "transaction b at seq 9 is not the one"),
])
def test_a_transaction_the_log_does_not_expect_next_is_no_roll_forward(expected, why):
    with pytest.raises(NoRollForward, match=why):
        plan(HEAD, expected, worker_journal(["a", "b"]))


def test_a_journal_that_does_not_start_at_the_logs_state_is_no_roll_forward():
    # The worker executed a from another state at the head's seq (it diverged before).
    j = worker_journal(["a"], start=State(7, fingerprint.to_hex(999), 3))
    with pytest.raises(NoRollForward, match="does not lead from the log's state"):
        plan(HEAD, [Expected("a")], j)


def test_a_journal_that_does_not_reach_the_workers_state_is_no_roll_forward():
    j = worker_journal(["a", "b"])
    with pytest.raises(NoRollForward, match=r"does not hold seqs 8\.\.9"):
        plan(HEAD, [Expected("a"), Expected("b")], {**j, "entries": j["entries"][:1]})
    # The worker's state moved after its last entry (e.g. changed behind its back).
    with pytest.raises(NoRollForward, match="the worker is at"):
        plan(HEAD, [Expected("a"), Expected("b")], {**j, "quads": 99})


def test_a_worker_not_ahead_or_far_ahead_is_no_roll_forward():
    with pytest.raises(NoRollForward, match="not ahead"):
        plan(HEAD, [Expected("a")], worker_journal([]))
    with pytest.raises(NoRollForward, match="more than one group"):
        plan(HEAD, [], {**worker_journal([]), "seq": HEAD.seq + 5000})
    with pytest.raises(NoRollForward, match="lacks"):
        plan(HEAD, [], {"seq": 9})


# ---- a peered master finding its probe ahead while it runs (a lost execute answer) ----


def test_agreed_transaction_executed_by_a_probe_whose_answer_was_lost_is_not_run_twice(
        worker_factory, secret, tmp_path):
    """The master runs on (no crash) but lost the probe's answer: the probe left rotation
    and the sync driver keeps the agreed transaction to retry. The next health check finds
    the worker one agreed transaction ahead and rolls forward; the driver's retry then
    gets that answer instead of executing the transaction a second time."""
    worker = worker_factory("w1")
    ops = [{"type": "update", "update": "INSERT DATA { <urn:lost:a> <urn:lost:p> 1 }"}]
    payload = canonical_payload(ops)
    meta = TxMeta("a1", 1000, "m2", len(payload), payload_digest(payload))

    async def until(condition, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, "condition not reached"
            await asyncio.sleep(0.02)

    async def scenario() -> None:
        with TxLog.open(tmp_path / "txlog.db") as txlog:
            agreement = SqliteStorage(txlog)
            agreement.enable()
            agreement.persist(counter=None, incoming=[], synchronised=[meta],
                              payloads=[(meta, ops)])
            cluster = Cluster(node_id="m1", txlog=txlog, secret=secret[1],
                              worker_urls=[worker.url], params=replication.Parameters(),
                              control_queries=[])
            ordering = AgreedOrdering(cluster, agreement)
            await cluster.order_by(ordering)
            await cluster.start()
            try:
                [w] = cluster.workers.values()
                await until(lambda: w.status == WorkerStatus.ON)  # its recovery task
                assert cluster.head_seq == 0
                batch = agreement.to_execute(0, 10)
                # The probe's execute is done, its answer lost (the worker was gone
                # for the master meanwhile): the worker is out of rotation, the
                # transaction still to execute for the driver.
                worker.stop()
                await cluster.poll(w)
                assert w.status == WorkerStatus.OFF
                worker.start()
                with signed_client(worker, secret[1]) as client:
                    r = client.post("/cluster/execute", json={
                        "start_seq": 1, "control_queries": [],
                        "transactions": [{"txid": "a1", "operations": ops}]})
                [result] = r.json()["results"]
                await cluster.poll(w)
                assert (cluster.head_seq, cluster.head_fingerprint) == \
                    (1, result["fingerprint"])
                await until(lambda: w.status == WorkerStatus.ON)
                assert agreement.executed() == (1, result["fingerprint"])
                answers = await ordering.execute(batch)
                assert answers == {"a1": {"txid": "a1", "seq": 1, "position": 1,
                                          "fingerprint": result["fingerprint"]}}
                with signed_client(worker, secret[1]) as client:
                    assert client.get("/cluster/state").json()["seq"] == 1  # not run again
                assert any("had executed 1 transactions the log had not recorded" in m
                           for _, m in cluster.events)
            finally:
                await cluster.stop()

    asyncio.run(scenario())
