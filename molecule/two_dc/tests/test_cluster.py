"""Verify of the two-data-centre scenario, after converge and side_effect
(dc2-b added at runtime; the dc1-dc2 link cut and healed). Every API over https, the
masters' with the admin account (conftest.py)."""

from __future__ import annotations

import time
import uuid

import pytest

# Which data centres' workers a write through each data centre's master reaches: the
# masters peer (TxLog sync protocol), so every write reaches both. side_effect.yml cut the
# link with SplitRecovery=Smart and max-peer-lag 3 s: each side went on alone, and after
# the heal the tie-break kept dc1-master's log (smallest node id of two equal halves),
# dc2 restored its split backup and its write of the cut was negotiated again.
ALL = {"dc1", "dc2"}
REACHES = {"dc1": ALL, "dc2": ALL}

MARKER = '<urn:txcluster:verify> <urn:txcluster:marker> "{}"'  # one triple per write
SETTLE_S = 60


def _get(scenario, url: str) -> dict:
    r = scenario.admin.get(url)
    r.raise_for_status()
    return r.json()


def _worker_url(scenario, name: str) -> str:
    return scenario.worker_url(name)


def _master_url(scenario, name: str) -> str:
    return scenario.master_url(name)


def test_units_active_and_enabled(scenario):
    for name in scenario.hostnames:
        host = scenario.host(name)
        for unit in scenario.units(name):
            service = host.service(unit)
            assert service.is_running, f"{unit} is not running on {name}"
            assert service.is_enabled, f"{unit} is not enabled on {name}"


def test_units_are_hardened(scenario):
    for name in scenario.hostnames:
        for unit in scenario.units(name):
            props = dict(line.split("=", 1) for line in scenario.host(name).check_output(
                f"systemctl show {unit} -p User -p NoNewPrivileges -p ProtectSystem "
                "-p ProtectHome -p PrivateTmp -p Restart -p LimitNOFILE -p ReadWritePaths"
            ).splitlines())
            assert props["User"] == "txcluster"
            assert props["NoNewPrivileges"] == "yes"
            assert props["ProtectSystem"] == "strict"
            assert props["ProtectHome"] == "yes"
            assert props["PrivateTmp"] == "yes"
            assert props["Restart"] == "on-failure"
            assert int(props["LimitNOFILE"]) >= 65536
            kind = "worker" if "worker" in unit else "master"
            assert f"/var/lib/txcluster/{kind}" in props["ReadWritePaths"].split()


def test_ports_listening(scenario):
    for name in scenario.hostnames:
        host = scenario.host(name)
        if name in scenario.workers:
            assert host.socket("tcp://0.0.0.0:7300").is_listening
        if name in scenario.masters:
            assert host.socket("tcp://0.0.0.0:7200").is_listening
            assert host.socket("tcp://0.0.0.0:7299").is_listening  # JMX


# (path, owner, group, mode). Secrets are the service user's alone; configuration is
# root's, readable by the service's group; state directories are the service user's.
SECRET = ("txcluster", "txcluster", 0o600)
STATE_DIR = ("txcluster", "txcluster", 0o750)
COMMON_FILES = [
    ("/etc/txcluster", "root", "txcluster", 0o750),
    ("/opt/txcluster/venv", "root", "root", 0o755),
]
WORKER_FILES = [
    ("/etc/txcluster/worker", "root", "txcluster", 0o750),
    ("/etc/txcluster/worker/worker.properties", "root", "txcluster", 0o640),
    ("/var/lib/txcluster/worker", *STATE_DIR),
] + [(f"/etc/txcluster/worker/{name}", *SECRET) for name in ("cluster.secret", "tls.key")]
MASTER_FILES = [
    # The master persists admin API changes here (new file + rename): its directory.
    ("/etc/txcluster/master", *STATE_DIR),
    ("/etc/txcluster/master/cluster.properties", "txcluster", "txcluster", 0o640),
    ("/var/lib/txcluster/master", *STATE_DIR),
] + [(f"/etc/txcluster/master/{name}", *SECRET)
     for name in ("cluster.secret", "client-auth", "tls.key", "jmx.password")]


def test_file_owners_and_modes(scenario):
    for name in scenario.hostnames:
        files = COMMON_FILES + (WORKER_FILES if name in scenario.workers else []) + (
            MASTER_FILES if name in scenario.masters else [])
        found = scenario.stat(name, [path for path, *_ in files])
        for path, owner, group, mode in files:
            assert path in found, f"{name}:{path} is missing"
            assert found[path] == (owner, group, mode), f"{name}:{path}"


def _properties(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith(("#", "!")):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip().replace("\\:", ":").replace("\\=", "=")
    return out


def test_cluster_properties_as_templated(scenario):
    for master in scenario.masters:
        dc = scenario.dc_of(master)
        host = scenario.host(master)
        text = host.file("/etc/txcluster/master/cluster.properties").content_string
        assert text.startswith("# Ansible managed"), "templated by Ansible"
        props = _properties(text)
        assert props["node-id"] == f"{dc}-master"
        assert props["master-url"] == _master_url(scenario, master)
        assert props["split-recovery"] == "Smart"
        assert props["cluster-secret-file"] == "/etc/txcluster/master/cluster.secret"
        # Secure by default: accounts, TLS on every API, JMX.
        assert props["client-auth-file"] == "/etc/txcluster/master/client-auth"
        assert props["tls-cert-file"] == "/etc/txcluster/master/tls.crt"
        assert props["tls-ca-file"] == "/etc/txcluster/master/tls-ca.crt"
        assert props["jmx.port"] == "7299"
        # Workers: this DC's, including the one add_worker.yml added at runtime.
        workers = {v for k, v in props.items() if k.startswith("worker.")}
        assert workers == {_worker_url(scenario, w) for w in scenario.workers_of(dc)}
        # Peers: the other DC's master, id and URL under the same <n>.
        others = [m for m in scenario.masters if m != master]
        peer_ids = {k.split(".")[1]: v for k, v in props.items()
                    if k.startswith("peer.") and k.endswith(".id")}
        assert sorted(peer_ids.values()) == sorted(f"{scenario.dc_of(m)}-master" for m in others)
        for n, peer_id in peer_ids.items():
            other = next(m for m in others if f"{scenario.dc_of(m)}-master" == peer_id)
            assert props[f"peer.{n}.url"] == _master_url(scenario, other)
        # The master's own check accepts it.
        check = host.run("/opt/txcluster/venv/bin/txcluster check-config "
                         "/etc/txcluster/master/cluster.properties")
        assert check.rc == 0, check.stderr


def test_added_worker_is_part_of_its_master(scenario):
    """dc2-b was added (and removed and added again) at runtime by side_effect.yml; the
    master was not restarted by add_worker.yml (side_effect.yml checks that at once)."""
    master = scenario.master_of("dc2")
    status = _get(scenario, f"{_master_url(scenario, master)}/admin/status")
    urls = {w["url"] for w in status["workers"]}
    assert urls == {_worker_url(scenario, w) for w in scenario.workers_of("dc2")}


def _settled(scenario, dc_master: str, dcs: set[str], marker: str) -> dict[str, dict]:
    """Each worker of ``dcs`` once it holds ``marker`` at the master's head state."""
    deadline = time.monotonic() + SETTLE_S
    workers = [w for dc in sorted(dcs) for w in scenario.workers_of(dc)]
    while True:
        head = _get(scenario, f"{_master_url(scenario, dc_master)}/admin/status")["head"]
        states = {w: scenario.http.get(f"{_worker_url(scenario, w)}/health").json()
                  for w in workers}
        has_marker = {w: _ask(scenario, w, marker) for w in workers}
        if all(has_marker.values()) and all(
                s["fingerprint"] == head["fingerprint"] for s in states.values()):
            return states
        if time.monotonic() > deadline:
            pytest.fail(f"workers not in sync with {dc_master} after {SETTLE_S} s: head "
                        f"{head}, workers {states}, marker present {has_marker}")
        time.sleep(0.5)


def _ask(scenario, worker: str, marker: str) -> bool:
    r = scenario.http.get(f"{_worker_url(scenario, worker)}/repositories/repo",
                  params={"query": f"ASK {{ {MARKER.format(marker)} }}"},
                  headers={"Accept": "application/sparql-results+json"})
    r.raise_for_status()
    return r.json()["boolean"]


@pytest.mark.parametrize("dc", sorted(REACHES))
def test_write_through_master_reaches_every_worker(scenario, dc):
    master = scenario.master_of(dc)
    marker = f"{dc}-{uuid.uuid4()}"
    r = scenario.admin.post(f"{_master_url(scenario, master)}/repositories/repo/statements",
                            content=f"INSERT DATA {{ {MARKER.format(marker)} }}",
                            headers={"Content-Type": "application/sparql-update"})
    assert r.status_code in (200, 204), r.text
    states = _settled(scenario, master, REACHES[dc], marker)
    assert len({s["fingerprint"] for s in states.values()}) == 1, states
    # The writes of side_effect.yml during the cut are there too.
    for w in states:
        assert states[w]["quads"] >= 2


def test_cluster_healthy(scenario):
    for master in scenario.masters:
        status = _get(scenario, f"{_master_url(scenario, master)}/admin/status")
        assert status["status"] == 0, status
        assert status["writable"], status["not_writable_because"]


def test_admin_api_without_credentials_is_refused(scenario):
    """Secure by default: the admin API of a deployed master wants the admin account; a
    read account may look but not change."""
    master = scenario.master_of("dc1")
    url = f"{_master_url(scenario, master)}/admin/status"
    r = scenario.http.get(url)
    print(f"\nadmin without credentials: {r.status_code}")
    assert r.status_code == 401
    assert scenario.http.get(url, auth=scenario.read_auth).status_code == 200
    refused = scenario.http.put(f"{_master_url(scenario, master)}/admin/mode",
                                json={"read_only": False}, auth=scenario.read_auth)
    assert refused.status_code == 403
    # Plain http is not served at all.
    assert scenario.host(master).run(
        "python3 -c \"import urllib.request; urllib.request.urlopen("
        "'http://127.0.0.1:7200/health', timeout=5)\"").rc != 0
