"""Fixtures of the two-data-centre scenario's verify step (pytest-testinfra).

The cluster layout comes from Molecule's inventory (groups txcluster_workers,
txcluster_masters, dc1, dc2, spare_workers). HTTP checks go from the controller to the
instances' addresses on the scenario's own bridge, and only while that bridge exists:
with it gone, those addresses would be routed elsewhere. Every API is https (the lab CA
the playbook made in the ephemeral directory) and the masters' need the admin account.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
import testinfra
import testinfra.utils.ansible_runner

WORKER_PORT, MASTER_PORT = 7300, 7200

UNITS = {"txcluster_workers": "txcluster-worker.service",
         "txcluster_masters": "txcluster-master.service"}


class Scenario:
    """The inventory as the tests need it."""

    def __init__(self, inventory: str) -> None:
        self.runner = testinfra.utils.ansible_runner.AnsibleRunner(inventory)
        self.hostnames = self.runner.get_hosts("all")
        self.vars = {h: self.runner.get_variables(h) for h in self.hostnames}
        groups = self.vars[self.hostnames[0]]["groups"]
        # side_effect.yml added the spare instances as workers (add_worker.yml); Molecule's
        # inventory, being static, still lists them apart.
        self.workers = sorted(set(groups["txcluster_workers"]) | set(groups["spare_workers"]))
        self.masters = sorted(groups["txcluster_masters"])
        self.datacenters = {dc: sorted(groups[dc]) for dc in ("dc1", "dc2")}
        self._hosts: dict[str, testinfra.host.Host] = {}
        v = self.vars[self.hostnames[0]]
        self.ca_file = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "tls" / "ca.crt"
        self.admin_auth = ("admin", v["txcluster_common_api_password"])
        self.read_auth = ("reader", v["txcluster_master_read_password"])
        self.jmx_auth = ("monitor", v["txcluster_master_jmx_password"])
        self.tls = ssl.create_default_context(cafile=str(self.ca_file))
        # Workers and /health need no account; the masters' APIs do.
        self.http = httpx.Client(verify=self.tls, timeout=10)
        self.admin = httpx.Client(verify=self.tls, timeout=30, auth=self.admin_auth)

    def worker_url(self, name: str) -> str:
        return f"https://{self.address(name)}:{WORKER_PORT}"

    def master_url(self, name: str) -> str:
        return f"https://{self.address(name)}:{MASTER_PORT}"

    def node_id(self, master: str) -> str:
        return self.vars[master]["txcluster_common_master_node_id"]

    def host(self, name: str) -> testinfra.host.Host:
        """SSH to the instance as Ansible does, over one multiplexed connection whose
        socket lives in the scenario's state directory (destroy ends it): a fresh
        connection per command made the checks take minutes."""
        if name not in self._hosts:
            v = self.vars[name]
            cp_dir = os.environ.get("ANSIBLE_SSH_CONTROL_PATH_DIR")
            self._hosts[name] = testinfra.get_host(
                f"ssh://{v['ansible_user']}@{v['ansible_host']}:{v['ansible_port']}",
                ssh_identity_file=v["ansible_private_key_file"],
                ssh_extra_args=v.get("ansible_ssh_common_args", ""),
                controlpath=f"{cp_dir}/testinfra-{name}" if cp_dir else None)
        return self._hosts[name]

    def stat(self, name: str, paths: list[str]) -> dict[str, tuple[str, str, int]]:
        """{path: (owner, group, mode)} of existing paths, in one command."""
        out = self.host(name).run("stat -c '%n %U %G %a' " + " ".join(paths)).stdout
        return {p: (u, g, int(m, 8)) for p, u, g, m in (line.split() for line in
                                                        out.splitlines())}

    def address(self, name: str) -> str:
        return self.vars[name]["ansible_host"]

    def dc_of(self, name: str) -> str:
        return next(dc for dc, hosts in self.datacenters.items() if name in hosts)

    def master_of(self, dc: str) -> str:
        return next(m for m in self.masters if m in self.datacenters[dc])

    def workers_of(self, dc: str) -> list[str]:
        return [w for w in self.workers if w in self.datacenters[dc]]

    def units(self, name: str) -> list[str]:
        return ([UNITS["txcluster_workers"]] if name in self.workers else []) + (
            [UNITS["txcluster_masters"]] if name in self.masters else [])


@pytest.fixture(scope="session")
def scenario(request) -> Scenario:
    s = Scenario(request.config.option.ansible_inventory)
    _require_own_bridge([s.address(h) for h in s.hostnames])
    request.config._txcluster_scenario = s  # for the journal on failure
    return s


def _require_own_bridge(addresses: list[str]) -> None:
    """Every instance address must be on a local bridge's subnet (the scenario's)."""
    out = subprocess.run(["ip", "-o", "-4", "addr", "show", "type", "bridge"],
                         capture_output=True, text=True, check=True).stdout
    nets = [ipaddress.ip_interface(line.split()[3]).network for line in out.splitlines()]
    for a in addresses:
        if not any(ipaddress.ip_address(a) in n for n in nets):
            pytest.exit(f"{a} is on no local bridge: the scenario's instances are not up "
                        "(run create first)", returncode=3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failure, print the txcluster journal of every instance."""
    outcome = yield
    report = outcome.get_result()
    s = getattr(item.config, "_txcluster_scenario", None)
    if report.when != "call" or not report.failed or s is None:
        return
    for name in s.hostnames:
        units = " ".join(f"-u {u}" for u in s.units(name))
        if not units:
            continue
        try:
            text = s.host(name).run(f"journalctl --no-pager -n 80 {units}").stdout
        except Exception as exc:  # the instance may be the very thing that failed
            text = f"(journal unavailable: {exc})"
        report.sections.append((f"journal of {name}", text))
