"""The chaos harness in CI: a short version of ``make chaos`` (tests/chaos).

Two seeded rounds whose fault lists cover every fault kind of the single-DC registry;
two multi-DC rounds (root only: network namespaces) with kills, a lost master-to-master
link, a lossy link and a DC partition (slow-link needs tc netem, and the process faults
of rounds 101/102 run in ``make chaos TOPOLOGY=multi-dc``); and checks that the checkers
themselves fail on a lost, an invented and a divergent state (a checker that cannot
fail proves nothing).
"""

from __future__ import annotations

import copy

import pytest

from tests.chaos.checker import check, check_peered
from tests.chaos.faults import available
from tests.chaos.runner import run_round, table
from tests.chaos.topology import unavailable
from tests.chaos.workload import History, statement

ROUNDS = {
    101: ["kill-worker", "kill-master-during-replication"],
    102: ["kill-master", "pause-worker", "kill-master-during-backup"],
}
# About 30 s each on two cores. (A master killed between its probe's commit and its own
# record used to leave a DC's only worker "out of sync" for good; it is rolled forward
# now, master_service/cluster/rollforward.py, chaos seed 12.)
MULTI_DC_ROUNDS = {
    201: ["kill-master", "lose-link"],
    202: ["partition-dc", "lossy-link", "kill-worker"],
    # a data centre wiped while the others write re-seeds itself (issue 16)
    203: ["wipe-dc"],
}


def test_ci_rounds_cover_every_fault_kind():
    assert sorted({f for faults in ROUNDS.values() for f in faults}) == available()


@pytest.mark.parametrize("seed", sorted(ROUNDS))
@pytest.mark.processes
def test_chaos_round(seed, tmp_path):
    result = run_round(seed, ROUNDS[seed], root=tmp_path)
    print(table([result]))
    assert result.ok, result.report()
    assert result.acked > 0 and result.verdict.lost == 0


@pytest.mark.skipif(unavailable("multi-dc") is not None,
                    reason=f"multi-DC chaos rounds: {unavailable('multi-dc')}")
@pytest.mark.parametrize("seed", sorted(MULTI_DC_ROUNDS))
@pytest.mark.processes
def test_multi_dc_chaos_round(seed, tmp_path):
    result = run_round(seed, MULTI_DC_ROUNDS[seed], root=tmp_path, topology="multi-dc")
    print(table([result]))
    assert result.ok, result.report()
    assert result.acked > 0 and result.verdict.lost == 0


def test_checker_detects_lost_invented_and_divergent(cluster_factory):
    c = cluster_factory(2)
    for i in (1, 2, 3):
        assert c.update(f"INSERT DATA {{ {statement(i)} }}").status_code == 204
    status = c.wait_in_sync()
    good = History(attempted={1, 2, 3}, acked={1: 0.1, 2: 0.2, 3: 0.3})
    assert check(status, c.workers, c.repository_id, good).ok
    # 4 was acknowledged but is nowhere; 3 is everywhere but no client attempted it.
    bad = History(attempted={1, 2, 4}, acked={1: 0.1, 4: 0.4})
    verdict = check(status, c.workers, c.repository_id, bad)
    assert verdict.lost == 1 and verdict.invented == 1 and not verdict.divergent
    # A log head that no worker matches is divergence.
    moved = copy.deepcopy(status)
    moved["head"]["fingerprint"] = "0" * 32
    verdict = check(moved, c.workers, c.repository_id, good)
    assert verdict.divergent and not verdict.ok


def test_peered_checker_detects_divergent_data_centres(cluster_factory):
    """Two clusters stand in for two data centres: with the same data and the same agreed
    queue they pass; a statement only one has is lost elsewhere, its fingerprints differ,
    and agreed queues that differ are divergence."""
    a, b = cluster_factory(1, name="a"), cluster_factory(1, name="b")
    for c in (a, b):
        assert c.update(f"INSERT DATA {{ {statement(1)} }}").status_code == 204
    history = History(attempted={1, 2}, acked={1: 0.1})
    workers = {"a": a.workers, "b": b.workers}
    same = {"a": ["t1"], "b": ["t1"]}
    assert check_peered({"a": a.wait_in_sync(), "b": b.wait_in_sync()}, workers, "repo",
                        history, same).ok
    assert a.update(f"INSERT DATA {{ {statement(2)} }}").status_code == 204
    history.acked[2] = 0.2
    statuses = {"a": a.wait_in_sync(), "b": b.wait_in_sync()}
    verdict = check_peered(statuses, workers, "repo", history, same)
    assert verdict.lost == 1 and verdict.divergent
    assert any("2 worker fingerprints" in v for v in verdict.violations), verdict.violations
    verdict = check_peered(statuses, workers, "repo", history, {"a": ["t1", "t2"],
                                                                 "b": ["t1", "t3"]})
    assert any("agreed queues differ from position 2" in v for v in verdict.violations)
