"""The Ansible roles' filter plugins: the cluster layout read from the inventory
(txcluster_common) and the stable worker/peer numbers of cluster.properties
(txcluster_master). Plain Python, no Ansible needed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from master_service.config import MasterConfig, check_config, update_properties

ROLES = Path(__file__).resolve().parent.parent / "roles"


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


topology_plugin = _load(ROLES / "txcluster_common/filter_plugins/txcluster_topology.py")
numbering_plugin = _load(ROLES / "txcluster_master/filter_plugins/txcluster_numbering.py")
topology = topology_plugin.txcluster_topology
problems = topology_plugin.txcluster_topology_problems
numbered = numbering_plugin.txcluster_numbered


def _inventory(**hosts: dict) -> tuple[dict, dict]:
    """groups and hostvars from {host: {"groups": [...], **vars}}."""
    groups: dict[str, list[str]] = {}
    hostvars = {}
    for host, spec in hosts.items():
        spec = dict(spec)
        for g in spec.pop("groups"):
            groups.setdefault(g, []).append(host)
        hostvars[host] = spec
    return groups, hostvars


TWO_DC = _inventory(
    uk_m={"groups": ["txcluster_masters", "txcluster_workers"],
          "txcluster_common_datacenter": "uk", "ansible_host": "10.0.1.1"},
    uk_w={"groups": ["txcluster_workers"], "txcluster_common_datacenter": "uk"},
    us_m={"groups": ["txcluster_masters"], "txcluster_common_datacenter": "us",
          "txcluster_common_master_node_id": "us-master", "txcluster_common_master_port": 8200},
    us_w={"groups": ["txcluster_workers"], "txcluster_common_datacenter": "us",
          "txcluster_common_address": "w.us.example", "txcluster_common_worker_port": 8300},
)


def test_topology_derives_urls_and_ids_from_the_inventory():
    t = topology(*TWO_DC, 7300, 7200)
    assert [(w["host"], w["datacenter"], w["url"]) for w in t["workers"]] == [
        ("uk_m", "uk", "http://10.0.1.1:7300"),  # ansible_host
        ("uk_w", "uk", "http://uk_w:7300"),  # the inventory name
        ("us_w", "us", "http://w.us.example:8300"),  # its own address and port
    ]
    assert [(m["host"], m["node_id"], m["url"]) for m in t["masters"]] == [
        ("uk_m", "uk_m", "http://10.0.1.1:7200"),
        ("us_m", "us-master", "http://us_m:8200"),
    ]
    assert problems(t) == []


DC = "txcluster_common_datacenter"


@pytest.mark.parametrize(("change", "expected"), [
    ({"us_m": {"txcluster_common_master_node_id": "uk_m"}},
     "master node id 'uk_m' is used 2 times"),
    ({"us_w": {"txcluster_common_address": "uk_w", "txcluster_common_worker_port": 7300}},
     "node URL 'http://uk_w:7300' is used 2 times"),
    ({"us_w": {DC: "fr"}}, "worker us_w has no master in data centre 'fr'"),
    ({"us_w": {DC: "uk"}}, "master us_m has no worker in data centre 'us'"),
    ({"us_m": {DC: "uk"}}, "data centre 'uk' has 2 masters"),
    ({"uk_w": {DC: ""}}, "uk_w: txcluster_common_datacenter is not set"),
])
def test_topology_problems_are_named(change, expected):
    groups, hostvars = TWO_DC
    hostvars = {h: {**v, **change.get(h, {})} for h, v in hostvars.items()}
    found = problems(topology(groups, hostvars, 7300, 7200))
    assert any(expected in p for p in found), found


def test_new_numbers_follow_the_file():
    text = "worker.1.url=http://a:7300\nworker.3.url=http://c:7300\n"
    assert numbered(["http://c:7300", "http://new:7300", "http://a:7300"], text,
                    "worker", "url") == [[1, "http://a:7300"], [3, "http://c:7300"],
                                         [4, "http://new:7300"]]
    assert numbered(["http://a:7300", "http://b:7300"], "", "worker", "url") == [
        [1, "http://a:7300"], [2, "http://b:7300"]]


def test_peers_keep_their_number_by_id():
    text = "peer.2.id=us\npeer.2.url=http://us:7200\npeer.5.id=fr\npeer.5.url=http://fr:7200\n"
    assert numbered(["fr", "us", "jp"], text, "peer", "id") == [[2, "us"], [5, "fr"], [6, "jp"]]


def _master_file(tmp_path: Path, workers: list[str]) -> Path:
    secret = tmp_path / "cluster.secret"
    secret.write_text("0123456789abcdef0123\n")
    secret.chmod(0o600)
    path = tmp_path / "cluster.properties"
    path.write_text("# Ansible managed\n" + "".join(
        f"{k}={v}\n" for k, v in {
            "node-id": "m1", "master-url": "http://m1:7200", "repository-id": "repo",
            "listen-address": "0.0.0.0:7200", "data-dir": str(tmp_path / "data"),
            "cluster-secret-file": str(secret)}.items())
        + "".join(f"worker.{n}.url={u}\n" for n, u in enumerate(workers, 1)))
    return path


def test_numbers_match_what_the_master_persisted(tmp_path):
    """The admin API writes worker.<max + 1>.url (escaped by javaproperties) and removes
    lines; templating the file again must give every worker the number the running
    master holds in memory, or its next change would hit the wrong line."""
    path = _master_file(tmp_path, ["http://10.0.0.1:7300", "http://10.0.0.2:7300"])
    config = MasterConfig.load(path)
    config = update_properties(path, config.add_worker_changes("http://10.0.0.3:7300"))
    config = update_properties(path, config.remove_worker_changes("http://10.0.0.1:7300"))
    text = path.read_text()
    assert "worker.3.url=http\\://10.0.0.3\\:7300" in text  # as the master writes it
    in_memory = dict(zip(config.workers, config.worker_numbers, strict=True))
    # The inventory lists the new worker first: numbers still follow the file.
    rendered = numbered(["http://10.0.0.3:7300", "http://10.0.0.2:7300"], text, "worker", "url")
    assert {url: n for n, url in rendered} == in_memory
    assert check_config(path) == []
