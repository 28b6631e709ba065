"""The roles, playbooks, inventories and the Molecule scenario pass ansible-lint's
production profile, with no rule skipped. Offline: Galaxy is not reachable and nothing
outside ansible.builtin is used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def test_ansible_lint_production_profile():
    if not (BIN / "ansible-lint").exists():
        pytest.skip("ansible-lint is not installed (pip install -e '.[deploy]')")
    result = subprocess.run(
        [str(BIN / "ansible-lint"), "--offline", "--nocolor", "--profile", "production",
         "roles", "playbooks", "inventory", "molecule"],
        cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
        env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"})
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("inventory", ["two-dc-example", "local"])
def test_shipped_inventories_describe_consistent_clusters(inventory):
    """What the roles' preflight checks first: one master per data centre, a worker for
    every master, unique node ids and URLs (inventories are parsed by Ansible itself)."""
    if not (BIN / "ansible-inventory").exists():
        pytest.skip("ansible-core is not installed (pip install -e '.[deploy]')")
    from tests.test_deploy_plugins import problems, topology

    result = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", f"inventory/{inventory}", "--list"],
        cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120,
        check=True)
    data = json.loads(result.stdout)
    hostvars = data["_meta"]["hostvars"]
    groups = {g: _hosts(data, g) for g in ("txcluster_workers", "txcluster_masters")}
    t = topology(groups, {h: hostvars.get(h, {}) for h in set().union(*groups.values())},
                 7300, 7200)
    assert t["masters"] and t["workers"]
    assert problems(t) == []


def _hosts(data: dict, group: str) -> list[str]:
    """Hosts of a group of `ansible-inventory --list`, children included."""
    g = data.get(group, {})
    return g.get("hosts", []) + [h for child in g.get("children", []) for h in _hosts(data, child)]
