"""The chaos harness in CI: a short version of ``make chaos`` (tests/chaos).

Two seeded rounds whose fault lists cover every fault kind of the single-DC registry, and
a check that the checker itself fails on a lost, an invented and a divergent state (a
checker that cannot fail proves nothing).
"""

from __future__ import annotations

import copy

import pytest

from tests.chaos.checker import check
from tests.chaos.faults import available
from tests.chaos.runner import run_round, table
from tests.chaos.workload import History, statement

ROUNDS = {
    101: ["kill-worker", "kill-master-during-replication"],
    102: ["kill-master", "pause-worker", "kill-master-during-backup"],
}


def test_ci_rounds_cover_every_fault_kind():
    assert sorted({f for faults in ROUNDS.values() for f in faults}) == available()


@pytest.mark.parametrize("seed", sorted(ROUNDS))
def test_chaos_round(seed, tmp_path):
    result = run_round(seed, ROUNDS[seed], root=tmp_path)
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
