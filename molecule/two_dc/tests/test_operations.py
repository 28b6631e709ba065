"""Operations on the deployed two-data-centre cluster, measured and printed (one line
each, read by tests/test_deploy_molecule.py):

    check mode: site.yml changed=N failed=F
    tags install|configure|run: site.yml changed=N failed=F (three lines)
    jmx: connected to ReplicationCluster:name=ClusterInfo/<id> on <host>
    rolling upgrade: R client requests during the upgrade, F failed

Runs after test_cluster.py (file order); the rolling upgrade is last. The playbooks run
with Molecule's inventory plus dc2-b in txcluster_workers (side_effect.yml added it at
runtime with add_host; an operator would have put it in the inventory file).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from txcluster.client import ClusterClient

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).parents[3]))
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
BIN = Path(sys.executable).parent
JAVA_CLIENT = PROJECT / "tests" / "java" / "JmxClient.java"
UPGRADE_PREDICATE = "urn:txcluster:upgradeWrite"
_RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)")


@pytest.fixture(scope="module")
def inventory(request, scenario) -> list[str]:
    extra = EPHEMERAL / "inventory-runtime.yml"
    extra.write_text("all:\n  children:\n    txcluster_workers:\n      hosts:\n"
                     + "".join(f"        {w}:\n" for w in scenario.workers))
    return ["-i", request.config.option.ansible_inventory, "-i", str(extra)]


def _playbook(inventory: list[str], playbook: str, *args: str,
              env: dict | None = None, timeout: int = 900) -> tuple[int, str, dict]:
    """ansible-playbook with the scenario's configuration (Molecule's environment):
    (rc, output, {"changed": n, "failed": n} summed over the PLAY RECAP)."""
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), *inventory, str(PROJECT / "playbooks" / playbook),
         *args],
        cwd=PROJECT, capture_output=True, text=True, stdin=subprocess.DEVNULL,
        timeout=timeout, env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}",
                              "ANSIBLE_NOCOLOR": "1", **(env or {})})
    out = result.stdout + result.stderr
    totals = {"changed": 0, "failed": 0, "unreachable": 0}
    for line in out.splitlines():
        if m := _RECAP.match(line):
            totals["changed"] += int(m[3])
            totals["unreachable"] += int(m[4])
            totals["failed"] += int(m[5])
    return result.returncode, out, totals


def _changed_tasks(out: str) -> str:
    task, found = "", []
    for line in out.splitlines():
        if line.startswith("TASK ["):
            task = line.rstrip("* ")
        elif line.startswith("changed:"):
            found.append(f"{task}: {line}")
    return "\n".join(found[-20:])


def _main_pids(scenario) -> dict[tuple[str, str], str]:
    return {(h, u): scenario.host(h).check_output(f"systemctl show -p MainPID --value {u}")
            for h in scenario.hostnames for u in scenario.units(h)}


def _properties_value(scenario, master: str, key: str) -> str | None:
    text = scenario.host(master).file("/etc/txcluster/master/cluster.properties").content_string
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and k.strip() == key:
            return v.strip()
    return None


def test_runtime_state_survives_site_yml(scenario, inventory):
    """A runtime change (admin API, persisted by the master) is not reverted by site.yml,
    which restarts nothing: check mode reports no change; then site.yml runs for real as
    --tags install, --tags configure and --tags run in turn: each tag works alone, and
    together they are every task of site.yml, so this is also the scenario's idempotence
    check (no task may report a change on a deployed cluster)."""
    master = scenario.master_of("dc1")
    r = scenario.admin.put(f"{scenario.master_url(master)}/admin/parameters",
                           json={"log_max_size": 54321})
    assert r.status_code == 200, r.text
    assert _properties_value(scenario, master, "log-max-size") == "54321"
    pids = _main_pids(scenario)

    rc, out, totals = _playbook(inventory, "site.yml", "--check", "--diff")
    print(f"\ncheck mode: site.yml changed={totals['changed']} failed={totals['failed']}")
    assert rc == 0 and totals["failed"] == 0 and totals["unreachable"] == 0, out[-6000:]
    assert totals["changed"] == 0, _changed_tasks(out)

    for tag in ("install", "configure", "run"):
        rc, out, totals = _playbook(inventory, "site.yml", "--tags", tag)
        print(f"tags {tag}: site.yml changed={totals['changed']} failed={totals['failed']}")
        assert rc == 0 and totals["failed"] == 0, out[-6000:]
        assert totals["changed"] == 0, _changed_tasks(out)
    assert _properties_value(scenario, master, "log-max-size") == "54321"
    assert _main_pids(scenario) == pids, "site.yml restarted a service"
    status = scenario.admin.get(f"{scenario.master_url(master)}/admin/status").json()
    assert status["parameters"]["log_max_size"] == 54321


def test_jmx_client_reaches_a_deployed_master(scenario):
    """jconsole's protocol (RMI, the JDK's JMX client) from the operators' network, with
    the JMX user of the vault."""
    if not (shutil.which("javac") and shutil.which("java")):
        pytest.fail("a JDK (javac, java) is needed on the controller for the JMX check")
    master = scenario.master_of("dc1")
    node_id = scenario.node_id(master)
    name = f"ReplicationCluster:name=ClusterInfo/{node_id}"
    url = f"service:jmx:rmi:///jndi/rmi://{scenario.address(master)}:7299/jmxrmi"
    with tempfile.TemporaryDirectory() as classes:
        subprocess.run(["javac", "-d", classes, str(JAVA_CLIENT)], check=True, timeout=120)
        user, password = scenario.jmx_auth
        r = subprocess.run(["java", "-cp", classes, "JmxClient", url, name, user, password,
                            "get\tNodeID", "get\tStatus"],
                           capture_output=True, text=True, timeout=120)
        lines = r.stdout.splitlines()
        assert r.returncode == 0, r.stdout + r.stderr
        assert f'OK\tget NodeID\t"{node_id}"' in lines, r.stdout
        print(f"\njmx: connected to {name} on {master}")
        # Without the password: refused.
        r = subprocess.run(["java", "-cp", classes, "JmxClient", url, name, "-", "-",
                            "get\tNodeID"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and "CONNECT-ERROR" in r.stdout, r.stdout


def test_scheduled_backup_runs(scenario):
    master = scenario.master_of("dc1")
    host = scenario.host(master)
    assert host.service("txcluster-backup.timer").is_enabled
    run = host.run("systemctl start txcluster-backup.service")
    journal = host.run("journalctl -u txcluster-backup.service --no-pager -n 5").stdout
    assert run.rc == 0, journal
    assert "backup scheduled-" in journal, journal


def test_host_firewall_tables(scenario):
    for name in scenario.hostnames:
        host = scenario.host(name)
        if name in scenario.workers:
            table = host.check_output("nft list table inet txcluster_worker")
            assert "tcp dport 7300 drop" in table
        if name in scenario.masters:
            table = host.check_output("nft list table inet txcluster_master")
            assert "tcp dport 7299 drop" in table  # JMX: the operators only
        assert host.service("txcluster-firewall.service").is_enabled


class Load:
    """Client threads writing and reading through the masters with the failover client
    (txcluster.client), as applications behind a list of masters do: one thread starts
    at each data centre's master."""

    def __init__(self, scenario, threads_per_master: int = 1) -> None:
        self.scenario = scenario
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.requests = 0
        self.failures: list[str] = []
        self.stale_reads = 0
        self.acknowledged: set[str] = set()
        masters = [scenario.master_url(m) for m in scenario.masters]
        self.threads = [
            threading.Thread(target=self._run, args=(masters[i:] + masters[:i],), daemon=True)
            for i in range(len(masters)) for _ in range(threads_per_master)]

    def _run(self, masters: list[str]) -> None:
        client = ClusterClient(masters, repository="repo", auth=self.scenario.admin_auth,
                               timeout=30, recheck_after_s=2, wait_for_master_s=30,
                               read_your_writes=True,
                               transport=httpx.HTTPTransport(verify=self.scenario.tls))
        try:
            while not self.stop.is_set():
                marker = f"urn:txcluster:upgrade:{uuid.uuid4()}"
                triple = f"<{marker}> <{UPGRADE_PREDICATE}> 1"
                if self._one(lambda t=triple: client.update(f"INSERT DATA {{ {t} }}"), "write"):
                    with self.lock:
                        self.acknowledged.add(marker)
                    seen = self._one(lambda t=triple: client.ask(f"ASK {{ {t} }}"), "read")
                    if seen is False:
                        with self.lock:
                            self.stale_reads += 1
                time.sleep(0.05)
        finally:
            client.close()

    def _one(self, call, what: str):
        try:
            result = call()
            return True if result is None else result
        except Exception as exc:  # every failure counts, whatever its kind
            with self.lock:
                self.failures.append(f"{what}: {exc!r}"[:300])
            return None
        finally:
            with self.lock:
                self.requests += 1

    def wait_for_requests(self, n: int, timeout_s: float = 60) -> None:
        """Until ``n`` more requests have completed (or the timeout)."""
        with self.lock:
            target = self.requests + n
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if self.requests >= target:
                    return
            time.sleep(0.05)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


def _versions(scenario) -> dict[str, str]:
    cmd = ("/opt/txcluster/venv/bin/python -c "
           "\"import importlib.metadata as m; print(m.version('txcluster'))\"")
    return {h: scenario.host(h).check_output(cmd) for h in scenario.hostnames
            if scenario.units(h)}


def _workers_hold(scenario, markers: set[str]) -> dict[str, int]:
    """Workers missing acknowledged writes, once every worker is at its master's head."""
    query = f"SELECT ?s WHERE {{ ?s <{UPGRADE_PREDICATE}> ?o }}"
    deadline = time.monotonic() + 60
    while True:
        missing = {}
        for w in scenario.workers:
            r = scenario.http.get(f"{scenario.worker_url(w)}/repositories/repo",
                                  params={"query": query},
                                  headers={"Accept": "application/sparql-results+json"})
            r.raise_for_status()
            have = {b["s"]["value"] for b in r.json()["results"]["bindings"]}
            if markers - have:
                missing[w] = len(markers - have)
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(1)


def test_rolling_upgrade_under_load(scenario, inventory):
    """upgrade.yml to a new version (same dependencies, txcluster rebuilt as
    <version>.upgrade1) while clients write and read through both masters: every
    worker then every master restarts on the new version, no client request fails, and
    every acknowledged write is on every worker."""
    base = sorted((EPHEMERAL / "wheelhouse").glob("txcluster-wheelhouse-*.tar"))[-1]
    upgrade_dir = EPHEMERAL / "wheelhouse-upgrade"
    subprocess.run([sys.executable, str(PROJECT / "deploy" / "wheelhouse.py"), "--out",
                    str(upgrade_dir), "--from", str(base), "--local-suffix", "upgrade1"],
                   check=True, capture_output=True, timeout=300)
    before_versions = _versions(scenario)
    pids = _main_pids(scenario)
    started = time.monotonic()
    with Load(scenario) as load:
        load.wait_for_requests(4)  # the load is running before the first node is touched
        rc, out, totals = _playbook(inventory, "upgrade.yml",
                                    env={"TXCLUSTER_WHEELHOUSE_DIR": str(upgrade_dir),
                                         "TXCLUSTER_WHEELHOUSE_FROZEN": "1"})
        load.wait_for_requests(4)  # and goes on against the upgraded cluster
    elapsed = time.monotonic() - started
    print(f"\nrolling upgrade: {load.requests} client requests during the upgrade, "
          f"{len(load.failures)} failed")
    print(f"rolling upgrade: {elapsed:.0f} s, {len(load.acknowledged)} writes acknowledged, "
          f"{load.stale_reads} reads did not see the write just acknowledged")
    assert rc == 0 and totals["failed"] == 0, out[-8000:]
    assert load.failures == [], load.failures[:10]
    assert load.requests > 0
    after = _versions(scenario)
    assert all(v.endswith(".upgrade1") for v in after.values()), (before_versions, after)
    restarted = _main_pids(scenario)
    assert all(restarted[k] != pids[k] for k in pids), "a service kept running the old code"
    assert _workers_hold(scenario, load.acknowledged) == {}
    for master in scenario.masters:
        status = scenario.admin.get(f"{scenario.master_url(master)}/admin/status").json()
        assert status["status"] == 0, status
        assert all(w["readable"] for w in status["workers"]), status["workers"]
