"""Read routing by a priority queue on running queries
(docs/design/rdf4j-protocol.md#consistency-levels)."""

from master_service.cluster.routing import Router


def test_fewest_running_queries_wins_and_ties_rotate():
    r = Router()
    ws = ["a", "b", "c"]
    first = [r.choose(ws) for _ in range(3)]
    assert sorted(first) == ws  # each got one running query
    r.done("b", 0.01, ok=True)
    assert r.choose(ws) == "b"  # only b has no running query


def test_retry_excludes_failed_worker_and_runs_out():
    r = Router()
    w = r.choose(["a", "b"])
    r.done(w, 0, ok=False)
    other = r.choose(["a", "b"], exclude=[w])
    assert other != w
    assert r.choose(["a", "b"], exclude=["a", "b"]) is None
    assert r.stats[w].failed == 1


def test_average_time_counts_completed_reads_only():
    r = Router()
    r.choose(["a"])
    r.done("a", 0.2, ok=True)
    r.choose(["a"])
    r.done("a", 0.4, ok=True)
    r.choose(["a"])
    r.done("a", 5.0, ok=False)
    assert abs(r.stats["a"].average_s - 0.3) < 1e-9 and r.stats["a"].running == 0
