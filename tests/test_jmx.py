"""The ClusterInfo MBean over remote JMX, driven by a plain Java client (tests/java/
JmxClient.java, compiled here by javac) against a real master process.

The issue's scenario: connect, list attributes and operations, read every attribute, set
NetSpeedBitsPerSec and SplitRecovery, invoke addClusterNode and backup, see the effect in
the running master and in cluster.properties, get clear errors for invalid writes and
wrong credentials, keep every written value over a restart; the JVM does not hold the
master at shutdown; agent errors are refused before the JVM starts.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from master_service.jmx.attributes import ATTRIBUTES, OPERATIONS, object_name
from tests.procs import free_port
from txcluster.local import jmx_service_url, master_node
from txinfra.properties import read_properties

JAVA_SOURCE = Path(__file__).parent / "java" / "JmxClient.java"

pytestmark = pytest.mark.skipif(
    not (shutil.which("javac") and shutil.which("java")
         and importlib.util.find_spec("jpype")),
    reason="remote JMX tests need a JDK (javac; Debian openjdk-17-jdk-headless) and JPype1 "
    "(extra `jmx`); `make test` installs both")

NAME = object_name("master1")


@pytest.fixture(scope="module")
def java_client(tmp_path_factory) -> Path:
    """The compiled client's class directory."""
    out = tmp_path_factory.mktemp("java")
    subprocess.run(["javac", "-d", str(out), str(JAVA_SOURCE)], check=True, timeout=120)
    return out


class Jmx:
    """Runs the Java client: one JVM per call, any number of commands in it."""

    def __init__(self, classes: Path, url: str, user: str = "-", password: str = "-",
                 java_options: tuple[str, ...] = ()) -> None:
        self.classes, self.url, self.user, self.password = classes, url, user, password
        self.java_options = java_options

    def run(self, *commands: str, user: str | None = None, password: str | None = None,
            timeout: float = 120) -> list[list[str]]:
        r = subprocess.run(
            ["java", *self.java_options, "-cp", str(self.classes), "JmxClient", self.url, NAME,
             user or self.user, password or self.password, *commands],
            capture_output=True, text=True, timeout=timeout)
        assert r.returncode in (0, 3), f"client failed ({r.returncode}):\n{r.stdout}{r.stderr}"
        return [line.split("\t") for line in r.stdout.splitlines()]

    def one(self, command: str, **kw: str) -> list[str]:
        [line] = self.run(command, **kw)
        return line

    def get(self, attribute: str) -> object:
        status, _, value = self.one(f"get\t{attribute}")
        assert status == "OK", (attribute, value)
        return json.loads(value)


def jmx_files(directory: Path) -> dict[str, str]:
    """A password file (mode 600) and an access file: admin readwrite, monitor readonly."""
    directory.mkdir(parents=True, exist_ok=True)
    passwords, access = directory / "jmx.password", directory / "jmx.access"
    passwords.write_text("admin s3cret\nmonitor look\n")
    passwords.chmod(0o600)
    access.write_text("admin readwrite\nmonitor readonly\n")
    return {"jmx.password-file": str(passwords), "jmx.access-file": str(access)}


@pytest.fixture
def jmx_cluster(cluster_factory, tmp_path):
    port = free_port()
    cluster = cluster_factory(workers=2, **{"jmx.port": str(port)},
                              **jmx_files(tmp_path / "jmx"))
    return cluster, jmx_service_url("127.0.0.1", port)


def test_java_client_administers_the_master(jmx_cluster, java_client, tmp_path):
    cluster, url = jmx_cluster
    jmx = Jmx(java_client, url, "admin", "s3cret")

    # MBeanInfo: every documented attribute and operation, with types and descriptions.
    lines = jmx.run("info")
    attrs = {f[1]: f[2:] for f in lines if f[0] == "ATTR"}
    ops = {f[1]: f[2:] for f in lines if f[0] == "OP"}
    assert {a.name: [a.java_type, "rw" if a.writable else "r", a.description]
            for a in ATTRIBUTES} == attrs
    assert ops["addClusterNode"][:2] == ["void", "url:java.lang.String,port:int,readable:boolean"]
    assert set(ops) == {o.name for o in OPERATIONS}
    assert all(f[-1] for f in lines), "every attribute and operation has a description"

    # Every attribute reads.
    values = {f[1].removeprefix("get "): json.loads(f[2]) for f in jmx.run("getall")}
    assert set(values) == set(attrs)
    assert values["NodeID"] == "master1"
    assert values["MasterURL"] == cluster.master.url
    assert sorted(values["NodeStatus"]) == sorted(f"[ON] {w.url}" for w in cluster.workers)
    assert (values["Status"], values["IsWritable"]) == (0, True)
    assert values["NetSpeedBitsPerSec"] == 104_857_600
    assert values["FullReplicationTimeFactor"] == 1.3
    assert values["SplitRecovery"] == "None" and values["Mode"] == "NORMAL"
    assert values["SyncPeers"] == []
    assert values["ClusterStatusSummary"].startswith("available: 2 of 2 workers in sync")

    # Writes take effect at once and persist; bad values are refused with the reason.
    extra = cluster.new_worker("worker3").start()
    out = jmx.run("set\tNetSpeedBitsPerSec\t1000", "set\tSplitRecovery\tsmart",
                  "set\tNetSpeedBitsPerSec\t-5", "set\tSplitRecovery\tbogus",
                  "set\tNodeID\tother", "get\tSplitRecovery",
                  f"invoke\taddClusterNode\t{extra.url}\t0\ttrue",
                  "invoke\tremoveClusterNode\thttp://127.0.0.1:1",
                  "invoke\tbackup\tbad name", "invoke\tbackup\tnightly")
    results = {line[1]: line for line in out}
    assert results["set NetSpeedBitsPerSec 1000"][0] == "OK"
    assert results["set SplitRecovery smart"][0] == "OK"
    assert results["get SplitRecovery"][2] == '"Smart"'  # canonical case (validated)
    assert results["set NetSpeedBitsPerSec -5"][2:4] == [
        "javax.management.InvalidAttributeValueException",
        "NetSpeedBitsPerSec: must be >= 1, got -5; nothing changed"]
    assert results["set SplitRecovery bogus"][2:4] == [
        "javax.management.InvalidAttributeValueException",
        "SplitRecovery: expected one of None, Simple, Smart, got 'bogus'; nothing changed"]
    assert results["set NodeID other"][2] == "javax.management.AttributeNotFoundException"
    assert "read-only" in results["set NodeID other"][3]
    assert results[f"invoke addClusterNode {extra.url} 0 true"][0] == "OK"
    err = results["invoke removeClusterNode http://127.0.0.1:1"]
    assert err[2:] == ["javax.management.MBeanException",
                       f"unknown worker 'http://127.0.0.1:1'; the workers are: "
                       f"{', '.join([*(w.url for w in cluster.workers), extra.url])}",
                       "java.lang.IllegalArgumentException"]
    assert "not valid" in results["invoke backup bad name"][3]
    backup = results["invoke backup nightly"]
    assert backup[0] == "OK" and json.loads(backup[2]).startswith("backup 'nightly' written by")

    status = cluster.wait_for(lambda s: len(s["workers"]) == 3 and cluster.in_sync(s),
                              "the added worker in sync")
    assert status["parameters"]["net_speed_bits_per_sec"] == 1000
    props = read_properties(cluster.master.config)
    assert props["net-speed-bits-per-sec"] == "1000"
    assert props["split-recovery"] == "Smart"
    assert extra.url in props.values()
    backups = httpx.get(f"{cluster.master.url}/admin/backups", timeout=10).json()
    assert [b["name"] for b in backups] == ["nightly"]

    # A readonly user reads but may not write; a wrong password does not connect.
    [ok, denied] = jmx.run("get\tNetSpeedBitsPerSec", "set\tNetSpeedBitsPerSec\t5",
                           user="monitor", password="look")
    assert ok[2] == "1000"
    assert denied[2] == "java.lang.SecurityException" and "Access denied" in denied[3]
    [refused] = jmx.run("get\tStatus", user="admin", password="wrong")
    assert refused[0].startswith("CONNECT-ERROR java.lang.SecurityException: "
                                 "Authentication failed")
    assert read_properties(cluster.master.config)["net-speed-bits-per-sec"] == "1000"

    # Jolokia serves the same object next to the JVM.
    r = httpx.get(f"{cluster.master.url}/jolokia/read/{NAME}/NetSpeedBitsPerSec", timeout=10)
    assert r.json()["value"] == 1000


def test_restart_keeps_every_value_written_through_jmx(jmx_cluster, java_client):
    cluster, url = jmx_cluster
    jmx = Jmx(java_client, url, "admin", "s3cret")
    written = {"NetSpeedBitsPerSec": 2000, "FullReplicationTimeFactor": 2.5,
               "MinTimeToConsiderFullReplicationS": 30, "LogMaxSize": 500, "LogMaxDepth": 24,
               "ProtectSingleWorker": False, "ReadOnly": True, "Mode": "MUTE",
               "SplitRecovery": "Simple", "MasterURL": "http://master1.example:7200"}
    out = jmx.run(*(f"set\t{k}\t{str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in written.items()))
    assert all(line[0] == "OK" for line in out), out
    [added] = jmx.run("invoke\taddSyncPeer\tmaster2\thttp://127.0.0.1:1")
    assert added[0] == "OK", added
    cluster.master.stop()
    assert not cluster.master.alive()
    cluster.master.start()
    after = {k: jmx.get(k) for k in written}
    assert after == written
    assert jmx.get("SyncPeers") == ["master2 http://127.0.0.1:1"]
    status = cluster.status()
    assert (status["mode"], status["read_only"], status["writable"]) == ("MUTE", True, False)


def test_shutdown_is_not_held_by_the_jvm_or_a_connected_client(cluster_factory, java_client):
    port = free_port()
    cluster = cluster_factory(workers=1, **{"jmx.port": str(port)})
    # A client that stays connected (no authentication configured here).
    client = subprocess.Popen(
        ["java", "-cp", str(java_client), "JmxClient", jmx_service_url("127.0.0.1", port),
         NAME, "-", "-", "get\tStatus", "sleep\t60"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None
        assert client.stdout.readline().startswith("OK\tget Status\t")
        started = time.monotonic()
        cluster.master.stop(timeout=20)
        assert not cluster.master.alive()
        assert time.monotonic() - started < 15
        # uvicorn re-raises SIGTERM after its orderly shutdown (-15), as without JMX; the
        # JVM's own handler would have exited at once with 143 (hence -Xrs, bridge.py).
        assert cluster.master.proc is not None
        assert cluster.master.proc.returncode in (0, -signal.SIGTERM), cluster.master.log_tail()
    finally:
        client.kill()
        client.wait(10)


def test_tls(cluster_factory, java_client, tmp_path, secret):
    """jmx.ssl: registry and connector speak TLS with the configured keystore; a client
    that trusts it connects, a plaintext client does not."""
    keystore, password = tmp_path / "jmx.p12", "changeit"
    subprocess.run(["keytool", "-genkeypair", "-alias", "jmx", "-keyalg", "RSA",
                    "-keysize", "2048", "-validity", "2", "-dname", "CN=127.0.0.1",
                    "-ext", "san=ip:127.0.0.1", "-storetype", "PKCS12",
                    "-keystore", str(keystore), "-storepass", password, "-keypass", password],
                   check=True, capture_output=True, timeout=120)
    password_file = tmp_path / "keystore.password"
    password_file.write_text(password + "\n")
    password_file.chmod(0o600)
    port = free_port()
    cluster_factory(workers=1, **{
        "jmx.port": str(port), "jmx.ssl": "true", "jmx.ssl.keystore": str(keystore),
        "jmx.ssl.keystore-password-file": str(password_file)},
        **jmx_files(tmp_path / "jmx"))
    url = jmx_service_url("127.0.0.1", port)
    trusted = Jmx(java_client, url, "admin", "s3cret", (
        "-Dtxcluster.ssl=true", f"-Djavax.net.ssl.trustStore={keystore}",
        f"-Djavax.net.ssl.trustStorePassword={password}",
        "-Djavax.net.ssl.trustStoreType=PKCS12"))
    assert trusted.get("NodeID") == "master1"
    [plain] = Jmx(java_client, url, "admin", "s3cret").run("get\tNodeID")
    assert plain[0].startswith("CONNECT-ERROR"), plain

    # The JDK's agent would start with a keystore it cannot open; the master does not.
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-it\n")
    wrong.chmod(0o600)
    code, log = _start_refused(tmp_path / "wrong-password", secret[0], **{
        "jmx.port": str(free_port()), "jmx.ssl": "true", "jmx.ssl.keystore": str(keystore),
        "jmx.ssl.keystore-password-file": str(wrong)})
    assert code != 0
    assert f"jmx.ssl.keystore {keystore} cannot be opened with the password of " \
        "jmx.ssl.keystore-password-file" in log


def _start_refused(directory: Path, secret_file: Path, **props: str) -> tuple[int, str]:
    node = master_node(directory, secret_file, "master1",
                       ["http://127.0.0.1:1"], **props)
    node.start(wait=False)
    assert node.proc is not None
    try:
        code = node.proc.wait(30)
    finally:
        node.stop()
    return code, node.log_tail()


@pytest.mark.processes
def test_agent_problems_are_refused_before_the_jvm_starts(tmp_path, secret):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        port = busy.getsockname()[1]
        code, log = _start_refused(tmp_path / "busy", secret[0], **{"jmx.port": str(port)})
    finally:
        busy.close()
    assert code == 2
    assert f"jmx.port {port} on 127.0.0.1 cannot be used: Address already in use" in log

    files = jmx_files(tmp_path / "jmx")
    Path(files["jmx.password-file"]).chmod(0o644)
    code, log = _start_refused(tmp_path / "unsafe", secret[0],
                               **{"jmx.port": str(free_port())}, **files)
    assert code == 2
    assert "is accessible by group or others (mode 644); the JVM refuses it: chmod 600" in log


@pytest.mark.processes
def test_txcluster_up_jmx(tmp_path, java_client):
    run = tmp_path / "run"
    cli = [sys.executable, "-m", "txcluster.cli"]
    r = subprocess.run([*cli, "up", "--dir", str(run), "--workers", "1", "--jmx"],
                       capture_output=True, text=True, timeout=180)
    try:
        assert r.returncode == 0, r.stderr
        [master] = json.loads((run / "cluster.json").read_text())["masters"]
        assert master["jmx_service_url"].startswith("service:jmx:rmi:///jndi/rmi://127.0.0.1:")
        assert master["jolokia_url"] == f"{master['url']}/jolokia"
        assert "JMX: jconsole service:jmx:rmi" in r.stdout
        assert Jmx(java_client, master["jmx_service_url"]).get("NodeID") == "master1"
        body = httpx.post(master["jolokia_url"], json={
            "type": "read", "mbean": NAME, "attribute": "IsWritable"}, timeout=10).json()
        assert body["value"] is True
    finally:
        subprocess.run([*cli, "down", "--dir", str(run)], capture_output=True, timeout=120)
