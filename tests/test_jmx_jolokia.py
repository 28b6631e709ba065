"""The MBean's table and the Jolokia protocol (no JVM needed).

Pure parts first (the attribute table, value coercion, Jolokia's path escaping, ObjectName
patterns, the preflight checks of the JVM agent, the SplitRecovery rule during a split),
then Jolokia read / write / exec / list / search and bulk POST against a running master,
then Jolokia's authentication (the admin API's client-auth-file) in-process.
"""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from master_service.app import MasterService, create_app
from master_service.config import SCHEMA, MasterConfig
from master_service.jmx import attributes as table
from master_service.jmx.attributes import (
    ATTRIBUTES,
    OPERATIONS,
    InvalidAttributeValue,
    OperationFailed,
    ReadOnlyAttribute,
    coerce,
    object_name,
)
from master_service.jmx.bridge import preflight
from master_service.jmx.jolokia import object_name_matches, parse_path, split_path
from tests.procs import free_port, make_secret
from txinfra.properties import read_properties

NAME = object_name("master1")
run = asyncio.run
ESCAPED = NAME.replace("/", "!/")

# The documented attributes and operations
# (docs/design/cluster-basics.md#the-clusterinfo-mbean-jolokia-and-the-admin-api), in the issue's
# order.
DOCUMENTED_ATTRIBUTES = [
    "NodeStatus", "ClusterStatusSummary", "Status", "IsWritable", "NetSpeedBitsPerSec",
    "FullReplicationTimeFactor", "MinTimeToConsiderFullReplicationS", "NodeID", "MasterURL",
    "SyncPeers", "ReadOnly", "Mode", "ProtectSingleWorker", "LogMaxSize", "LogMaxDepth",
    "MaxPeerLag", "SplitRecovery", "CompletedReads", "CompletedWrites", "FailedReads",
    "FailedWrites",
    "RunningReads", "RunningWrites", "PendingWrites", "AverageReadTime", "AverageTaskTimes",
    "CompletedTasks", "NumberOfTriples", "NumberOfExplicitTriples",
]


# ---- the table ----


def test_the_table_has_every_documented_attribute_and_operation():
    assert [a.name for a in ATTRIBUTES] == DOCUMENTED_ATTRIBUTES
    assert {a.name: a.java_type for a in ATTRIBUTES if a.java_type.startswith("[")} == {
        "NodeStatus": "[Ljava.lang.String;", "SyncPeers": "[Ljava.lang.String;",
        "AverageTaskTimes": "[Ljava.lang.String;", "CompletedTasks": "[Ljava.lang.String;"}
    assert {o.name: [p.name for p in o.params] for o in OPERATIONS} == {
        "addClusterNode": ["url", "port", "readable"], "removeClusterNode": ["url"],
        "addSyncPeer": ["id", "url"], "removeSyncPeer": ["id"], "backup": ["name"],
        "restoreFromImage": ["name"]}
    for a in ATTRIBUTES:
        assert a.description
        # A writable attribute persists to its documented key (camel case -> hyphens).
        assert (a.config_key is not None) == a.writable
        if a.writable:
            assert SCHEMA.key(a.config_key) is not None
    assert all(o.description and all(p.description for p in o.params) for o in OPERATIONS)


@pytest.mark.parametrize(("java_type", "value", "expected"), [
    ("long", "42", 42), ("long", 42, 42), ("long", 42.0, 42), ("int", " 7 ", 7),
    ("double", "1.5", 1.5), ("double", 2, 2.0), ("boolean", "TRUE", True),
    ("boolean", False, False), ("java.lang.String", "x", "x"),
    ("[Ljava.lang.String;", ["a"], ["a"]),
])
def test_coerce_accepts(java_type, value, expected):
    assert coerce(java_type, value) == expected


@pytest.mark.parametrize(("java_type", "value", "message"), [
    ("long", "ten", "expected a whole number (long), got 'ten'"),
    ("long", True, "expected a whole number (long), got True"),
    ("long", 2 ** 63, "out of range for a Java long"),
    ("int", 2 ** 31, "out of range for a Java int"),
    ("double", "nan", "expected a finite number (double)"),
    ("boolean", "yes", "expected true or false (boolean), got 'yes'"),
    ("java.lang.String", None, "expected a string, got None"),
])
def test_coerce_refuses_with_the_reason(java_type, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        coerce(java_type, value)


@pytest.mark.parametrize(("url", "port", "expected"), [
    ("http://10.0.0.5:7300", 0, "http://10.0.0.5:7300"),
    ("http://10.0.0.5/", 7300, "http://10.0.0.5:7300"),
    ("http://10.0.0.5:7300", 7300, "http://10.0.0.5:7300"),
])
def test_add_cluster_node_url_and_port(url, port, expected):
    assert table._worker_url(url, port) == expected


@pytest.mark.parametrize(("url", "port", "message"), [
    ("http://10.0.0.5:7300", 7301, "has port 7300 but the port argument is 7301"),
    ("10.0.0.5", 7300, "url: expected an http(s) URL, got '10.0.0.5'"),
    ("http://10.0.0.5", 70000, "port must be 0 (the URL's own) or 1-65535, got 70000"),
])
def test_add_cluster_node_refuses_bad_url_or_port(url, port, message):
    with pytest.raises(table.InvalidArgument, match=re.escape(message)):
        table._worker_url(url, port)


# ---- Jolokia's GET path and ObjectName patterns ----


def test_split_path_unescapes_jolokia_path_elements():
    assert split_path("read/A:name=B!/c/Attr") == ["read", "A:name=B/c", "Attr"]
    assert split_path("exec/M/op/a!!b/") == ["exec", "M", "op", "a!b"]
    assert split_path("") == []


@pytest.mark.parametrize("path", [
    f"read/{ESCAPED}/Status",  # Jolokia's escaping
    f"read/{NAME}/Status",  # the unescaped spelling operators type
])
def test_parse_path_finds_the_mbean_with_or_without_escaping(path):
    assert parse_path(path, [NAME]) == {"type": "read", "mbean": NAME, "attribute": "Status"}


def test_parse_path_requests():
    known = [NAME]
    assert parse_path(f"write/{NAME}/NetSpeedBitsPerSec/10", known) == {
        "type": "write", "mbean": NAME, "attribute": "NetSpeedBitsPerSec", "value": "10"}
    assert parse_path(f"exec/{ESCAPED}/addClusterNode/http:!/!/h:1/0/true", known) == {
        "type": "exec", "mbean": NAME, "operation": "addClusterNode",
        "arguments": ["http://h:1", "0", "true"]}
    assert parse_path(f"read/{NAME}/NodeStatus/0", known)["path"] == "0"
    assert parse_path("search/ReplicationCluster:*", known) == {
        "type": "search", "mbean": "ReplicationCluster:*"}
    assert parse_path("", known) == {"type": "version"}


@pytest.mark.parametrize(("pattern", "matches"), [
    ("ReplicationCluster:*", True), ("*:*", True), ("*:name=ClusterInfo/*", True),
    (NAME, True), ("Replication*:name=ClusterInfo/master?", True),
    ("ReplicationCluster:name=ClusterInfo/master2", False), ("java.lang:*", False),
    ("ReplicationCluster:type=x,*", False),
])
def test_object_name_patterns(pattern, matches):
    assert object_name_matches(pattern, NAME) is matches


# ---- a master's service without its cluster running: config-only rules ----


def master_config(tmp_path: Path, **extra: str) -> Path:
    secret_file, _ = make_secret(tmp_path / "secrets")
    path = tmp_path / "cluster.properties"
    props = {"node-id": "master1", "master-url": "http://127.0.0.1:7200",
             "repository-id": "repo", "listen-address": "127.0.0.1:7200",
             "data-dir": str(tmp_path / "data"), "cluster-secret-file": str(secret_file),
             "worker.1.url": "http://127.0.0.1:7301", **extra}
    path.write_text("# the operator's comment\n"
                    + "".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def peered_master(tmp_path, sync_state: str) -> tuple[MasterService, Path]:
    """A master with one peer whose sync status says ``sync_state``; its config file."""
    path = master_config(tmp_path, **{"peer.1.id": "master2",
                                       "peer.1.url": "http://127.0.0.1:7210"})
    service = MasterService(MasterConfig.load(path))
    service.peering.status = lambda: {"state": sync_state}  # type: ignore[method-assign]
    return service, path


def test_split_recovery_cannot_change_during_a_split(tmp_path):
    service, path = peered_master(tmp_path, "split")
    before = path.read_bytes()
    with pytest.raises(OperationFailed, match="SplitRecovery cannot be changed during a "
                       "cluster split: the strategy 'None' stays"):
        run(service.cluster_info.write("SplitRecovery", "Smart"))
    assert path.read_bytes() == before
    service.peering.status = lambda: {"state": "connected"}  # type: ignore[method-assign]
    assert run(service.cluster_info.write("SplitRecovery", "smart")) == "None"
    assert run(service.cluster_info.read("SplitRecovery")) == "Smart"
    text = path.read_text()
    assert text.startswith("# the operator's comment\n") and "split-recovery=Smart\n" in text


def test_split_recovery_cannot_change_while_a_split_is_recovered(tmp_path):
    # The driver refuses the change during a rollback to the split backup too; the control
    # plane must refuse it before persisting, not accept it and fail in the background.
    service, path = peered_master(tmp_path, "recovering")
    before = path.read_bytes()
    with pytest.raises(OperationFailed, match=r"SplitRecovery cannot be changed while a "
                       r"cluster split is being recovered .* the strategy 'None' stays until "
                       r"the recovery is done; nothing changed"):
        run(service.cluster_info.write("SplitRecovery", "Simple"))
    assert path.read_bytes() == before
    assert run(service.cluster_info.read("SplitRecovery")) == "None"
    # the same value is no change: accepted
    assert run(service.cluster_info.write("SplitRecovery", "none")) == "None"


def test_refused_writes_change_nothing(tmp_path):
    path = master_config(tmp_path)
    service = MasterService(MasterConfig.load(path))
    before = path.read_bytes()
    info = service.cluster_info
    with pytest.raises(InvalidAttributeValue, match="SplitRecovery: expected one of None, "
                       "Simple, Smart, got 'bogus'; nothing changed"):
        run(info.write("SplitRecovery", "bogus"))
    with pytest.raises(InvalidAttributeValue, match="MasterURL: expected an http"):
        run(info.write("MasterURL", "ftp://x"))
    with pytest.raises(ReadOnlyAttribute, match="NodeID is read-only: set node-id"):
        run(info.write("NodeID", "other"))
    # The cluster is not up: an attribute it holds is refused before anything persists.
    with pytest.raises(OperationFailed, match="still starting"):
        run(info.write("NetSpeedBitsPerSec", 5))
    assert path.read_bytes() == before


def test_preflight_names_every_agent_problem(tmp_path):
    pw, access = tmp_path / "jmx.password", tmp_path / "jmx.access"
    pw.write_text("admin secret\n")
    pw.chmod(0o640)
    access.write_text("admin readwrite\nghost readonly\nbad level\n")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = MasterConfig.load(master_config(tmp_path, **{
            "jmx.port": str(port), "jmx.password-file": str(pw),
            "jmx.access-file": str(access)}))
        problems = preflight(config)
    assert problems == [
        f"jmx.port {port} on 127.0.0.1 cannot be used: Address already in use",
        f"jmx.password-file {pw} is accessible by group or others (mode 640); the JVM "
        f"refuses it: chmod 600 {pw}",
        f"jmx.access-file {access} line 3: expected 'user readonly' or 'user readwrite'"]
    pw.chmod(0o600)
    problems = preflight(MasterConfig.load(master_config(tmp_path, **{
        "jmx.port": str(free_port()), "jmx.password-file": str(pw),
        "jmx.access-file": str(access)})))
    assert problems == [
        f"jmx.access-file {access} line 3: expected 'user readonly' or 'user readwrite'",
        "jmx.access-file: user 'ghost' has no password in jmx.password-file"]


def test_jmx_keys_that_need_each_other(tmp_path):
    from txinfra.properties import ConfigError

    with pytest.raises(ConfigError, match=re.escape("'jmx.access-file' needs 'jmx.password-file'")):
        MasterConfig.load(master_config(tmp_path, **{"jmx.access-file": "/x"}))
    with pytest.raises(ConfigError, match=re.escape("'jmx.ssl' is true but 'jmx.ssl.keystore'")):
        MasterConfig.load(master_config(tmp_path, **{"jmx.ssl": "true"}))


# ---- Jolokia against a running master (no JVM: jmx.port is not set) ----


@pytest.fixture(scope="module")
def master(module_cluster_factory):
    return module_cluster_factory(workers=2, name="jolokia")


def jget(master, path: str) -> dict:
    r = httpx.get(f"{master.master.url}/jolokia/{path}", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_jolokia_version_and_read(master):
    version = httpx.get(f"{master.master.url}/jolokia", timeout=10).json()
    assert version["status"] == 200 and version["value"]["agent"] == "txcluster"
    body = jget(master, f"read/{ESCAPED}/Status")
    assert body["value"] == 0 and body["status"] == 200
    assert body["request"] == {"type": "read", "mbean": NAME, "attribute": "Status"}
    assert isinstance(body["timestamp"], int)
    assert jget(master, f"read/{NAME}/NodeID")["value"] == "master1"
    assert jget(master, f"read/{NAME}/NodeStatus/0")["value"].startswith("[ON] http://")
    everything = jget(master, f"read/{ESCAPED}")["value"]
    assert list(everything) == DOCUMENTED_ATTRIBUTES
    missing = jget(master, f"read/{NAME}/NoSuchThing")
    assert (missing["status"], missing["error_type"]) == (
        404, "javax.management.AttributeNotFoundException")
    assert "no attribute 'NoSuchThing'" in missing["error"] and "value" not in missing
    unknown = jget(master, "read/Other:name=x/Status")
    assert (unknown["status"], unknown["error_type"]) == (
        404, "javax.management.InstanceNotFoundException")
    assert f"no MBean 'Other:name=x' here; this master is {NAME}" in unknown["error"]
    bare = jget(master, "read/:/Status")  # the name must still show after "Exception : "
    assert bare["status"] == 404 and bare["error"].split(" : ", 1)[1].startswith("no MBean ':' ")


def test_jolokia_write_takes_effect_and_persists(master):
    body = jget(master, f"write/{ESCAPED}/NetSpeedBitsPerSec/5000")
    assert body["status"] == 200 and body["value"] == 104_857_600  # the previous value
    assert jget(master, f"read/{NAME}/NetSpeedBitsPerSec")["value"] == 5000
    assert master.status()["parameters"]["net_speed_bits_per_sec"] == 5000
    assert read_properties(master.master.config)["net-speed-bits-per-sec"] == "5000"
    before = master.master.config.read_bytes()
    bad = jget(master, f"write/{NAME}/NetSpeedBitsPerSec/-1")
    assert (bad["status"], bad["error_type"]) == (
        400, "javax.management.InvalidAttributeValueException")
    assert bad["error"].endswith("NetSpeedBitsPerSec: must be >= 1, got -1; nothing changed")
    assert master.master.config.read_bytes() == before


def test_max_peer_lag_is_read_and_written_over_jolokia_and_persisted(master):
    """MaxPeerLag is set from the management console
    (docs/design/sync-protocol.md#maxpeerlag-and-the-split); its default is not "wait for
    ever" (20 s: below the 30 s request timeout, so a write under way when a peer dies is still
    answered in time)."""
    assert jget(master, f"read/{NAME}/MaxPeerLag")["value"] == 20.0
    body = jget(master, f"write/{ESCAPED}/MaxPeerLag/7.5")
    assert body["status"] == 200 and body["value"] == 20.0  # the previous value
    assert jget(master, f"read/{NAME}/MaxPeerLag")["value"] == 7.5
    assert read_properties(master.master.config)["max-peer-lag-s"] == "7.5"
    before = master.master.config.read_bytes()
    for bad in ("-1", "soon", "inf"):
        refused = jget(master, f"write/{NAME}/MaxPeerLag/{bad}")
        assert (refused["status"], refused["error_type"]) == (
            400, "javax.management.InvalidAttributeValueException"), refused
        assert "nothing changed" in refused["error"]
    assert master.master.config.read_bytes() == before
    assert jget(master, f"write/{NAME}/MaxPeerLag/0")["status"] == 200  # wait indefinitely
    assert jget(master, f"read/{NAME}/MaxPeerLag")["value"] == 0.0
    assert jget(master, f"write/{NAME}/MaxPeerLag/20")["status"] == 200


def test_jolokia_exec(master):
    backup = jget(master, f"exec/{ESCAPED}/backup/jolokia1")
    assert backup["status"] == 200 and backup["value"].startswith("backup 'jolokia1' written")
    refused = jget(master, f"exec/{ESCAPED}/removeClusterNode/http:!/!/127.0.0.1:1")
    assert (refused["status"], refused["error_type"]) == (
        400, "java.lang.IllegalArgumentException")
    assert "unknown worker 'http://127.0.0.1:1'" in refused["error"]
    wrong = jget(master, f"exec/{NAME}/backup")
    assert wrong["status"] == 400 and "backup takes 1 arguments (name), got 0" in wrong["error"]
    restored = jget(master, f"exec/{NAME}/restoreFromImage/jolokia1")
    assert restored["status"] == 200, restored
    assert restored["value"].startswith("restoring from image 'jolokia1' (seq ")
    master.wait_in_sync()
    unknown = jget(master, f"exec/{NAME}/restoreFromImage/nothing")
    assert (unknown["status"], unknown["error"]) == (
        400, "java.lang.IllegalArgumentException : no backup named 'nothing'")


def test_jolokia_list_and_search(master):
    tree = jget(master, "list")["value"]
    mbean = tree["ReplicationCluster"]["name=ClusterInfo/master1"]
    assert mbean["attr"]["NetSpeedBitsPerSec"] == {
        "type": "long", "rw": True, "desc": table.ATTRIBUTES_BY_NAME[
            "NetSpeedBitsPerSec"].description}
    assert mbean["op"]["addClusterNode"]["args"][1] == {
        "name": "port", "type": "int",
        "desc": "the worker's port when the URL has none; 0: the URL's own"}
    inner = jget(master, "list/ReplicationCluster/name=ClusterInfo!/master1/attr/Status")
    assert inner["value"]["type"] == "int"
    assert jget(master, "search/ReplicationCluster:*")["value"] == [NAME]
    assert jget(master, "search/*:name=ClusterInfo!/*")["value"] == [NAME]
    assert jget(master, "search/java.lang:*")["value"] == []


def test_jolokia_post_single_and_bulk(master):
    url = f"{master.master.url}/jolokia"
    one = httpx.post(url, json={"type": "read", "mbean": NAME, "attribute": "IsWritable"},
                     timeout=10).json()
    assert one["value"] is True
    bulk = httpx.post(url, timeout=60, json=[
        {"type": "read", "mbean": NAME, "attribute": ["Status", "NodeID"]},
        {"type": "write", "mbean": NAME, "attribute": "LogMaxSize", "value": 777},
        {"type": "exec", "mbean": NAME, "operation": "backup(java.lang.String)",
         "arguments": ["jolokia2"]},
        {"type": "exec", "mbean": NAME, "operation": "backup(int)", "arguments": [1]},
        {"type": "read", "mbean": "ReplicationCluster:name=ClusterInfo/nobody",
         "attribute": "Status"},
        {"type": "frobnicate"},
    ]).json()
    assert [b["status"] for b in bulk] == [200, 200, 200, 404, 404, 400]
    assert bulk[0]["value"] == {"Status": 0, "NodeID": "master1"}
    assert bulk[1]["value"] == 100_000
    assert read_properties(master.master.config)["log-max-size"] == "777"
    assert bulk[3]["error_type"] == "javax.management.ReflectionException"
    assert bulk[5]["error_type"] == "java.lang.IllegalArgumentException"
    assert all(b["request"] == r for b, r in zip(bulk[:1], [
        {"type": "read", "mbean": NAME, "attribute": ["Status", "NodeID"]}], strict=True))


# ---- authentication: the admin API's users (in-process, the cluster is not started) ----


def test_jolokia_uses_the_admin_api_authentication(tmp_path):
    users = tmp_path / "users"
    users.write_text("admin:pw:write\nreader:pw:read\n")
    service = MasterService(MasterConfig.load(master_config(
        tmp_path, **{"client-auth-file": str(users)})))
    client = TestClient(create_app(service))  # no lifespan: only config-held attributes
    path = f"/jolokia/read/{ESCAPED}/NodeID"
    assert client.get(path).status_code == 401
    assert client.get(path, auth=("reader", "wrong")).status_code == 401
    assert client.get(path, auth=("reader", "pw")).json()["value"] == "master1"
    denied = client.get(f"/jolokia/write/{ESCAPED}/SplitRecovery/Simple",
                        auth=("reader", "pw")).json()
    assert (denied["status"], denied["error_type"]) == (403, "java.lang.SecurityException")
    assert service.control.config.split_recovery == "None"
    ok = client.post("/jolokia", auth=("admin", "pw"), json={
        "type": "write", "mbean": NAME, "attribute": "SplitRecovery", "value": "Simple"})
    assert ok.json()["status"] == 200 and service.control.config.split_recovery == "Simple"
