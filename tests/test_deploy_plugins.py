"""The Ansible collection's Python: the cluster layout read from the inventory
(txcluster_common's filter plugin) and the merge of cluster.properties that keeps the
master's runtime changes (module txcluster_properties). Plain Python, no Ansible needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from master_service.config import MasterConfig, check_config, update_properties
from tests.ansible_plugins import merge, problems, properties_module, topology


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


def test_topology_urls_follow_the_tls_switch():
    t = topology(*TWO_DC, 7300, 7200, "https")
    assert {n["url"].split(":")[0] for n in t["workers"] + t["masters"]} == {"https"}


OWNED = {"node-id": "m1", "master-url": "http://m1:7200", "repository-id": "repo",
         "listen-address": "0.0.0.0:7200", "max-peer-lag-s": None}
INITIAL = {"mode": "NORMAL", "log-max-size": "100000"}


def _merge(text, workers=(), peers=(), removed=(), owned=None):
    return merge(text, owned or OWNED, INITIAL, list(workers), list(removed), list(peers),
                 ["Ansible managed"])


def test_new_file_has_the_header_owned_and_initial_keys():
    text = _merge(None, ["http://a:7300"], [{"node_id": "m2", "url": "http://m2:7200"}])
    assert text.startswith("# Ansible managed\n")
    values = properties_module.values_of(properties_module.parse(text))
    assert values == {"node-id": "m1", "master-url": "http://m1:7200", "repository-id": "repo",
                      "listen-address": "0.0.0.0:7200", "mode": "NORMAL",
                      "log-max-size": "100000", "worker.1.url": "http://a:7300",
                      "peer.1.id": "m2", "peer.1.url": "http://m2:7200"}
    assert _merge(text, ["http://a:7300"], [{"id": "m2", "url": "http://m2:7200"}]) == text


def test_runtime_changes_survive_and_owned_keys_are_enforced():
    """What the master persisted (javaproperties escapes, new keys appended, a runtime
    key changed, a worker and a peer added) stays byte for byte; an owned key the
    inventory changed is set in place; an owned key set to null is removed."""
    first = _merge(None, ["http://a:7300"])
    runtime = (first.replace("mode=NORMAL", "mode=MUTE")
               + "worker.2.url=http\\://b\\:7300\npeer.4.id=fr\npeer.4.url=http\\://fr\\:7200\n"
               + "max-peer-lag-s=5\n")
    assert _merge(runtime, ["http://a:7300"]).replace("max-peer-lag-s=5\n", "") == \
        runtime.replace("max-peer-lag-s=5\n", "")
    changed = _merge(runtime, ["http://a:7300"], owned={**OWNED, "master-url": "http://x:7200"})
    assert "master-url=http\\://x\\:7200\n" in changed and "mode=MUTE" in changed
    assert changed.index("master-url") == runtime.index("master-url")  # in place


def test_workers_keep_their_numbers_and_follow_the_scheme():
    text = "worker.1.url=http://a:7300\nworker.3.url=http://c:7300\n"
    out = _merge(text, ["http://c:7300", "http://new:7300", "http://a:7300"])
    assert [line for line in out.splitlines() if line.startswith("worker.")] == [
        "worker.1.url=http://a:7300", "worker.3.url=http://c:7300",
        "worker.4.url=http\\://new\\:7300"]
    tls = _merge(out, ["https://a:7300", "https://c:7300", "https://new:7300"])
    assert "worker.1.url=https\\://a\\:7300" in tls and "worker.4.url=https\\://new" in tls
    assert "worker.3" not in _merge(out, ["http://a:7300"], removed=["http://c:7300"])


def test_peers_keep_their_number_by_id():
    text = "peer.2.id=us\npeer.2.url=http://us:7200\npeer.5.id=fr\npeer.5.url=http://fr:7200\n"
    out = _merge(text, peers=[{"id": "fr", "url": "http://fr:7200"},
                              {"id": "us", "url": "https://us:7200"},
                              {"id": "jp", "url": "http://jp:7200"}])
    values = properties_module.values_of(properties_module.parse(out))
    assert values["peer.2.url"] == "https://us:7200" and values["peer.5.id"] == "fr"
    assert values["peer.6.id"] == "jp" and values["peer.6.url"] == "http://jp:7200"


def test_escapes_are_javaproperties_own():
    import javaproperties

    for value in ["http://a:7300", " lead", "a b=c:d#e!f", "é€😀", "x\\y\tz"]:
        assert f"k={properties_module.escape(value)}" == javaproperties.join_key_value("k", value)
        assert properties_module.values_of(properties_module.parse(
            f"k={properties_module.escape(value)}\n"))["k"] == value


def _master_file(tmp_path: Path, workers: list[str]) -> Path:
    secret = tmp_path / "cluster.secret"
    secret.write_text("0123456789abcdef0123\n")
    secret.chmod(0o600)
    path = tmp_path / "cluster.properties"
    path.write_text(_merge(None, workers, owned={
        "node-id": "m1", "master-url": "http://m1:7200", "repository-id": "repo",
        "listen-address": "0.0.0.0:7200", "data-dir": str(tmp_path / "data"),
        "cluster-secret-file": str(secret)}))
    return path


def test_merge_agrees_with_what_the_master_persisted(tmp_path):
    """The admin API writes worker.<max + 1>.url (escaped by javaproperties) and removes
    lines; merging again keeps every worker's number as the running master holds it in
    memory (or its next change would hit the wrong line), and changes nothing."""
    path = _master_file(tmp_path, ["http://10.0.0.1:7300", "http://10.0.0.2:7300"])
    config = MasterConfig.load(path)
    config = update_properties(path, config.add_worker_changes("http://10.0.0.3:7300"))
    config = update_properties(path, config.remove_worker_changes("http://10.0.0.1:7300"))
    config = update_properties(path, {"mode": "MUTE", "log-max-size": "777"})
    text = path.read_text()
    owned = {"node-id": "m1", "master-url": "http://m1:7200", "repository-id": "repo",
             "listen-address": "0.0.0.0:7200", "data-dir": str(tmp_path / "data"),
             "cluster-secret-file": str(tmp_path / "cluster.secret")}
    again = merge(text, owned, INITIAL, ["http://10.0.0.2:7300"], ["http://10.0.0.1:7300"],
                  [], ["x"])
    assert again == text
    assert check_config(path) == []
    assert MasterConfig.load(path).mode == "MUTE"
