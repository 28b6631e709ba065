"""The write-epoch fence's own pieces, without a process: which requests are changes, the
header, epochs.fence, the promise on disk and its grants (worker_service/promise.py,
worker_service/api/epoch.py). The real worker behind them: test_worker_epoch_fence.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from txinfra.auth import NodeAuthorities, Verifier, sign
from worker_service import epochs, promise
from worker_service.api.epoch import changes, write_epoch
from worker_service.promise import EpochFileError, Promise, refusal


@pytest.mark.parametrize(("method", "path", "changing"), [
    ("POST", "/cluster/apply", True),
    ("POST", "/cluster/execute", True),
    ("POST", "/cluster/image/pull", True),
    ("POST", "/cluster/restore", True),
    ("POST", "/cluster/backups/b1", True),
    ("PUT", "/cluster/bulk-load/l/parts/0", True),
    ("POST", "/cluster/bulk-load/l", True),
    ("POST", "/cluster/bulk-load/l/sent", True),
    ("DELETE", "/cluster/bulk-load/l", True),
    ("POST", "/cluster/some-call-added-later", True),
    ("POST", "/repositories/repo/statements", True),
    ("PUT", "/repositories/repo/namespaces/ex", True),
    ("DELETE", "/repositories/repo/rdf-graphs/g", True),
    ("POST", "/repositories/repo/transactions", True),
    ("PUT", "/repositories/repo/transactions/t1", True),
    ("DELETE", "/repositories/repo", True),
    ("GET", "/cluster/state", False),
    ("GET", "/cluster/image", False),
    ("GET", "/cluster/backups/b1", False),
    ("HEAD", "/repositories/repo/statements", False),
    ("POST", "/cluster/verify", False),
    ("POST", "/cluster/transaction-read", False),
    ("POST", "/cluster/epoch", False),
    ("POST", "/repositories/repo", False),
    ("POST", "/repositories/repo/", False),
    ("GET", "/health", False),
])
def test_which_requests_are_changes(method, path, changing):
    assert changes(method, path) is changing


def test_the_epoch_header():
    assert write_epoch([]) == (0, "")
    assert write_epoch([(b"x-write-epoch", b"7"), (b"x-write-master", b" m2 ")]) == (7, "m2")
    for bad in (b"-1", b"", b"1.0", b"\xd9\xa3", b"9" * 19):
        assert write_epoch([(b"x-write-epoch", bad)]) is None, bad


def test_fence_refuses_older_takes_newer_and_hears_the_holder():
    ledger = epochs.EpochLedger(promised=5, holder="m2")
    same, refused = epochs.fence(ledger, 4, "m1", 10)
    assert same == ledger and refused is not None and refused.kind == epochs.REFUSED
    assert (refused.promised, refused.holder) == (5, "m2")
    assert refusal(4, refused) == ("write epoch 4 is older than epoch 5 granted to master m2: "
                                   "this master was replaced")
    heard, ok = epochs.fence(ledger, 5, "m2", 10)
    assert ok is None and heard.heard_at == 10
    newer, ok = epochs.fence(ledger, 6, "m3", 20)
    assert ok is None and (newer.promised, newer.holder, newer.heard_at) == (6, "m3", 20)


def test_the_promise_on_disk(tmp_path):
    assert promise.load(tmp_path) == epochs.EpochLedger()
    promise.save(tmp_path, epochs.EpochLedger(promised=3, holder="m1", heard_at=5))
    assert json.loads((tmp_path / promise.EPOCH_FILE).read_text()) == {"promised": 3,
                                                                       "holder": "m1"}
    assert promise.load(tmp_path) == epochs.EpochLedger(promised=3, holder="m1")
    assert not list(tmp_path.glob("*.tmp"))
    # A temporary file left by a crash mid-write is not the promise.
    (tmp_path / (promise.EPOCH_FILE + ".tmp")).write_text('{"promised": 9')
    assert promise.load(tmp_path).promised == 3
    for broken in ('{"promised": 9', '{"promised": "9", "holder": "m"}', '[]'):
        (tmp_path / promise.EPOCH_FILE).write_text(broken)
        with pytest.raises(EpochFileError):
            promise.load(tmp_path)


def test_a_grant_is_on_disk_before_the_answer_and_outlives_the_process(tmp_path):
    async def run() -> None:
        p = Promise(tmp_path)
        verdict = await p.ask_grant(2, "m1", manual=False)
        assert verdict.kind == epochs.GRANTED and p.promised == 2
        assert promise.load(tmp_path) == epochs.EpochLedger(promised=2, holder="m1")
        assert (await p.ask_grant(2, "m1", manual=False)).kind == epochs.GRANTED  # a resend
        again = Promise(tmp_path)  # restarted
        assert again.promised == 2
        assert (await again.ask_grant(2, "m2", manual=True)).kind == epochs.REFUSED
        assert (await again.seen(1, "m0")).holder == "m1"
        assert await again.seen(4, "m3") is None
        assert promise.load(tmp_path) == epochs.EpochLedger(promised=4, holder="m3")
    asyncio.run(run())


def test_a_restarted_worker_holds_the_lease_for_its_holder(tmp_path):
    async def run() -> None:
        p = Promise(tmp_path, lease_ms=60_000)
        await p.ask_grant(1, "m1", manual=False)
        assert (await p.ask_grant(2, "m2", manual=False)).kind == epochs.GRANTED  # not heard
        restarted = Promise(tmp_path, lease_ms=60_000)
        assert (await restarted.ask_grant(3, "m3", manual=False)).kind == epochs.REFUSED
        assert (await restarted.ask_grant(3, "m3", manual=True)).kind == epochs.GRANTED
    asyncio.run(run())


def test_a_grant_waits_for_the_older_changes_still_running(tmp_path):
    """What a master hears granted is never followed by a change of an older epoch."""
    async def run() -> None:
        p = Promise(tmp_path)
        p.enter(0)  # a change of today's single master, running
        asking = asyncio.ensure_future(p.ask_grant(2, "m1", manual=True))
        await asyncio.sleep(0.05)
        assert not asking.done()
        assert p.promised == 2  # in force already: a newer change of epoch 0 is refused
        assert (await p.seen(0, "")).kind == epochs.REFUSED
        p.leave(0)
        assert (await asyncio.wait_for(asking, 5)).kind == epochs.GRANTED
        p.enter(2)  # the granted epoch's own changes hold back only a newer grant
        assert (await asyncio.wait_for(p.seen(2, "m1"), 5)) is None
        p.leave(2)
    asyncio.run(run())


def test_a_credential_looked_at_first_is_still_checked_once():
    node = NodeAuthorities("127.0.0.1", 8080)
    verifier = Verifier(b"k" * 32, node)
    url = "http://127.0.0.1:8080/cluster/apply"
    header = sign(b"k" * 32, "POST", url, b"{}")
    args = ("POST", "127.0.0.1:8080", "/cluster/apply", b"{}")
    assert verifier.check(header, *args, remember=False) is None
    assert verifier.check(header, *args) is None
    assert verifier.check(header, *args, remember=False) == "replayed cluster credential"
    assert verifier.check(header, *args) == "replayed cluster credential"
