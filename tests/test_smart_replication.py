"""The smart-replication formula and recovery decisions
(docs/design/smart-replication.md#the-decision)."""

from __future__ import annotations

import pytest

from master_service.cluster.replication import (
    Decision,
    Estimate,
    LogView,
    Parameters,
    Reason,
    WorkerView,
    decide,
    replication_seconds,
)

P = Parameters(net_speed_bits_per_sec=8_000_000, full_replication_time_factor=1.5,
               min_time_to_consider_full_replication_s=10)
# 10 MB at 8 Mbit/s = 10 s to replicate; x1.5 = 15 s is the bar to beat.
SIZE = 10_000_000


def test_replication_estimate_is_size_over_network_speed():
    assert replication_seconds(SIZE, P) == pytest.approx(10.0)
    assert replication_seconds(None, P) is None


@pytest.mark.parametrize(
    ("incremental", "expected"),
    [
        (15.0, False),  # equal to replication x factor: not strictly greater
        (15.01, True),
        (14.99, False),
    ],
)
def test_speed_up_condition_edge(incremental, expected):
    assert Estimate(incremental, 10.0).prefers_replication(P) is expected


def test_minimum_time_condition_edge():
    fast_net = Parameters(net_speed_bits_per_sec=8_000_000_000, full_replication_time_factor=1.3,
                          min_time_to_consider_full_replication_s=600)
    # replication takes 0.01 s, incremental 600 s: big relative gain but not over the floor
    assert not Estimate(600.0, 0.01).prefers_replication(fast_net)
    assert Estimate(600.01, 0.01).prefers_replication(fast_net)


def test_unknown_storage_size_never_prefers_replication():
    assert not Estimate(1e9, None).prefers_replication(P)


def known(head=100, base=0, replay=1.0) -> LogView:
    return LogView(head_seq=head, base_seq=base, known=True, replay_seconds=replay)


def test_decisions():
    w = WorkerView(seq=90, fingerprint="f", quads=5)
    assert decide(WorkerView(100, "f", 5), known(), SIZE, P, True) == Decision("in_sync")
    assert decide(w, known(replay=1.0), SIZE, P, True) == Decision("replay")
    d = decide(w, known(replay=20.0), SIZE, P, True)
    assert (d.action, d.reason) == ("replicate", Reason.CATCH_UP)
    assert "full replication is faster" in d.explanation
    unknown = LogView(100, 0, known=False, replay_seconds=0)
    assert decide(w, unknown, SIZE, P, True).reason is Reason.OUT_OF_SYNC
    assert decide(WorkerView(0, "0" * 32, 0), unknown, SIZE, P, True).reason is Reason.EMPTY
    forced = WorkerView(100, "f", 5, forced=True)
    assert decide(forced, known(), SIZE, P, True).reason is Reason.OUT_OF_SYNC_FORCED
    # an empty worker the log can replay from the start, but replication is faster
    empty = WorkerView(0, "0" * 32, 0)
    assert decide(empty, known(replay=20.0), SIZE, P, True).reason is Reason.EMPTY
    assert decide(empty, known(replay=1.0), SIZE, P, True).action == "replay"


def test_reason_messages_are_the_documented_ones():
    assert [r.value for r in Reason] == [
        "Replicating (out of sync)",
        "Replicating (out of sync), forced",
        "Replicating (empty)",
        "Replicating (catch up)",
    ]


EMPTY_WORKER = WorkerView(0, "0" * 32, 0)
UNKNOWN = LogView(100, 0, known=False, replay_seconds=0)


def test_empty_is_said_only_when_another_attached_worker_has_data():
    # The spec: "The worker was empty upon initialization, and there was at least one
    # non-empty worker attached to the cluster." Whether the log has a head does not count.
    assert decide(EMPTY_WORKER, UNKNOWN, SIZE, P, True).reason is Reason.EMPTY
    assert decide(EMPTY_WORKER, UNKNOWN, SIZE, P, False).reason is Reason.OUT_OF_SYNC
    pruned = LogView(100, base_seq=50, known=True, replay_seconds=1.0)
    assert decide(EMPTY_WORKER, pruned, SIZE, P, True).reason is Reason.EMPTY
    assert decide(EMPTY_WORKER, pruned, SIZE, P, False).reason is Reason.OUT_OF_SYNC
    # A worker that executed transactions and holds no quads was not empty at its start.
    emptied = WorkerView(40, "0" * 32, 0)
    assert decide(emptied, pruned, SIZE, P, True).reason is Reason.OUT_OF_SYNC
    assert decide(EMPTY_WORKER, known(replay=20.0), SIZE, P, False).reason is Reason.CATCH_UP


def test_a_missing_storage_size_is_said_only_when_the_decision_weighs_it():
    behind = WorkerView(90, "f", 5)
    assert decide(behind, known(replay=20.0), None, P, True) == \
        Decision("replay", no_storage_size=True)
    # Decisions that never compare the two estimates do not need the size.
    assert not decide(WorkerView(100, "f", 5), known(), None, P, True).no_storage_size
    assert not decide(behind, UNKNOWN, None, P, True).no_storage_size
    assert not decide(WorkerView(100, "f", 5, forced=True), known(), None, P, True) \
        .no_storage_size
    assert not decide(behind, known(replay=20.0), SIZE, P, True).no_storage_size
