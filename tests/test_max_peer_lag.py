"""MaxPeerLag (issue 16, item 4): a management attribute with a default that is not "wait
for ever", written at runtime over Jolokia on peered masters, taking effect at once."""

from __future__ import annotations

import time

import httpx
import pytest

from master_service.config import DEFAULT_MAX_PEER_LAG_S
from master_service.sync import Mode, Status, SyncNode, Timing
from tests.clusters import DataCentres, insert


def test_the_core_takes_a_new_max_peer_lag_at_once():
    node = SyncNode("n1", now=1_000, peers=["n2"], timing=Timing(max_peer_lag=None))
    node.receive(Status("n2", Mode.READ_WRITE, None, 0, 1_000, ()), 1_000)
    node.submit("A", size=1, digest="d", now=1_001)
    node.tick(10_000)
    assert node.split_suspected == frozenset()  # waits for n2 indefinitely
    node.set_max_peer_lag(500, now=10_001)
    assert node.timing.max_peer_lag == 500
    for t in (20_000, 21_000, 22_000):
        node.tick(t)
    assert node.split_suspected == {"n2"}


@pytest.mark.processes
def test_max_peer_lag_written_over_jolokia_lets_writes_go_on_without_a_dead_peer(tmp_path):
    dcs = DataCentres(tmp_path, n=3, workers=1)
    try:
        dcs.start()
        m1, m2, m3 = dcs.dcs
        for dc in (m1, m2):
            url = f"{dc.master.url}/jolokia"
            mbean = f"ReplicationCluster:name=ClusterInfo/{dc.master.properties['node-id']}"
            read = httpx.post(url, json={"type": "read", "mbean": mbean,
                                         "attribute": "MaxPeerLag"}, timeout=10).json()
            assert read["value"] == DEFAULT_MAX_PEER_LAG_S == 20.0
            wrote = httpx.post(url, json={"type": "write", "mbean": mbean,
                                          "attribute": "MaxPeerLag", "value": 2},
                               timeout=10).json()
            assert wrote["status"] == 200, wrote
        assert insert(m1, "urn:txc:before").status_code == 204
        m3.master.kill9()
        t0 = time.monotonic()
        r = insert(m1, "urn:txc:without-m3", timeout=60)
        waited = time.monotonic() - t0
        assert r.status_code == 204, r.text
        assert 1.5 < waited < 10, waited  # MaxPeerLag 2 s, not the default 20 s
        st = dcs.sync(m1)
        assert st["split_suspected"] == ["m3"], st
    finally:
        dcs.stop_all()
