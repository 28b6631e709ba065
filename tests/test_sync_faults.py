"""Storage faults of a peered master (issue 9): a group commit of the sync state that
fails does not stop peering for good. Real processes, real SQLite: the fault is a trigger
that another connection puts into the master's txlog while it runs."""

from __future__ import annotations

import sqlite3
import time

import pytest

from tests.clusters import DataCentres

pytestmark = pytest.mark.processes

TRIGGER = """create trigger txc_test_fail before insert on sync_incoming
             begin select raise(abort, 'disk says no (test)'); end"""


def _txlog(dcs: DataCentres, i: int) -> sqlite3.Connection:
    return sqlite3.connect(dcs.dcs[i].master.directory / "data" / "txlog.db", timeout=10)


@pytest.fixture
def pair(tmp_path):
    dcs = DataCentres(tmp_path, n=2, workers=1).start()
    try:
        yield dcs
    finally:
        dcs.stop_all()


def test_a_failed_group_commit_refuses_the_write_and_peering_goes_on(pair: DataCentres):
    m1, m2 = pair.dcs
    assert m1.update('INSERT DATA { <urn:a> <urn:p> "before" }').status_code == 204
    pair.wait_converged(timeout=60)
    before = pair.agreed(m1)
    with _txlog(pair, 0) as db:
        db.execute(TRIGGER)
    r = m1.update('INSERT DATA { <urn:b> <urn:p> "refused" }', timeout=30)
    assert r.status_code == 503 and "not logged" in r.text, r.text
    assert pair.agreed(m1) == before  # nothing of it was agreed
    with _txlog(pair, 0) as db:
        db.execute("drop trigger txc_test_fail")
    # the core was rebuilt from what is persisted: m1 takes writes again, and agrees
    # them with m2, which kept peering with it all along
    deadline = time.monotonic() + 30
    while (r := m1.update('INSERT DATA { <urn:c> <urn:p> "after" }')).status_code != 204:
        assert time.monotonic() < deadline, r.text
        time.sleep(0.5)
    assert m2.update('INSERT DATA { <urn:d> <urn:p> "m2" }').status_code == 204
    pair.wait_converged(timeout=60)
    assert pair.agreed(m1) == pair.agreed(m2)
    assert len(pair.agreed(m1)) == len(before) + 2
    for dc in pair.dcs:
        values = {row["o"] for row in dc.select("SELECT ?o { ?s <urn:p> ?o }")}
        assert values == {"before", "after", "m2"}, values
    assert pair.sync(m1)["failed"] is None
    log = m1.master.log_path.read_text()
    assert "the protocol core restarts from what is persisted" in log
