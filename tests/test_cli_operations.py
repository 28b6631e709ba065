"""`txcluster backup`, `restore`, `wait-sync` and `status --watch` against a real
cluster (txcluster/progress.py), through click's runner."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from txcluster.cli import main
from txcluster.progress import sync_progress


@pytest.fixture(scope="module")
def cluster(module_cluster_factory):
    return module_cluster_factory(workers=2)


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_backup_then_restore_replays_the_log_after_the_image(cluster):
    m = cluster.master.url
    assert cluster.update("INSERT DATA { <urn:cli> <urn:n> 1 }").status_code == 204
    backed = run("backup", "cli-test", "--master", m)
    assert backed.exit_code == 0, backed.output
    status = cluster.status()
    assert f"backup 'cli-test': seq {status['head']['seq']}" in backed.stdout
    # The bar's label went to stderr (not a terminal here: drawn once, no escapes).
    assert "backup 'cli-test'" in backed.stderr

    assert cluster.update("INSERT DATA { <urn:cli> <urn:n> 2 }").status_code == 204
    restored = run("restore", "cli-test", "--master", m, "--yes")
    assert restored.exit_code == 0, restored.output
    assert "every worker is in sync" in restored.stdout
    assert "replaying the log" in restored.stderr
    status = cluster.wait_in_sync()
    # The write after the backup came back by replay of the log.
    rows = cluster.select("SELECT ?n WHERE { <urn:cli> <urn:n> ?n }",
                          **{"x-graphdb-local-consistency": "updating"})
    assert sorted(r["n"] for r in rows) == ["1", "2"]


def test_restore_asks_first(cluster):
    refused = run("restore", "cli-test", "--master", cluster.master.url, input="n\n")
    assert refused.exit_code == 1 and "Aborted" in refused.output


@pytest.mark.parametrize("args, message", [
    (["backup", "../etc", "--master", "M"], "is not a backup name"),
    (["restore", "no-such-backup", "--master", "M", "--yes"], "no backup named"),
    (["backup", "x", "--master", "M", "--user", "nopassword"], "expected user:password"),
    (["status", "--master", "http://127.0.0.1:1"], "cannot reach"),
    (["status", "--master", "M", "--watch", "--interval", "0"], "--interval"),
])
def test_bad_input_is_a_clear_error(cluster, args, message):
    result = run(*[cluster.master.url if a == "M" else a for a in args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_wait_sync_and_status_watch(cluster):
    m = cluster.master.url
    waited = run("wait-sync", "--master", m, "--timeout", "30")
    assert waited.exit_code == 0 and "2 workers in sync" in waited.stdout
    watched = run("status", "--master", m, "--watch", "--interval", "0.1", "--count", "2")
    assert watched.exit_code == 0
    assert watched.stdout.count("master master1: available") == 2
    assert watched.stdout.count("in progress: nothing") == 2
    # A master that is not there is said on each redraw; the watch goes on.
    gone = run("status", "--master", "http://127.0.0.1:1", "--watch", "--interval", "0.1",
               "--count", "2")
    assert gone.exit_code == 0 and gone.stdout.count("error: cannot reach") == 2


def test_sync_progress_counts_operations():
    data = {"status": {"head": {"seq": 10}, "workers": [
        {"url": "a", "status": "ON", "seq": 10},
        {"url": "b", "status": "OUT_OF_SYNC", "seq": 5},
        {"url": "c", "status": "REPLICATION_CLIENT", "seq": -1},
        {"url": "d", "status": "OFF", "seq": 3}]},
        "operations": [
            {"kind": "catch-up", "worker": "b", "progress": 0.5, "text": "b catching up"},
            {"kind": "replication", "worker": "c", "progress": None, "text": "into c"}]}
    snap = sync_progress(data)
    assert snap.fraction == pytest.approx(1.5 / 4)
    assert snap.detail == "b catching up; into c; d OFF"
