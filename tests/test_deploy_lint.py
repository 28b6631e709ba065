"""The collection txcluster.cluster: its roles, playbooks, inventories and the Molecule
scenario pass ansible-lint's production profile, with no rule skipped (offline: Galaxy is
not reachable and nothing outside ansible.builtin and the collection itself is used);
every role default is declared; the collection builds and installs from its tarball."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.mark.processes
def test_ansible_lint_production_profile():
    if not (BIN / "ansible-lint").exists():
        pytest.skip("ansible-lint is not installed (pip install -e '.[deploy]')")
    # playbooks/collections/ansible_collections/txcluster/cluster links back to the
    # repository root: ansible-lint's directory expansion follows it until the path is
    # too deep (13,000 paths, each resolved against every argument: a minute of the run).
    # The files behind it are the repository's own, linted through their real paths
    # (the same 73 files are examined without it). --exclude takes several values, so
    # an option follows it, not the paths.
    result = subprocess.run(
        [str(BIN / "ansible-lint"), "--exclude", "playbooks/collections", "--offline",
         "--nocolor", "--profile", "production", "roles", "playbooks", "inventory",
         "molecule"],
        cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
        env={**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
             # The collection is the repository (galaxy.yml), linked there.
             "ANSIBLE_COLLECTIONS_PATH": str(REPO / "playbooks" / "collections")})
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("inventory", ["two-dc-example", "local"])
@pytest.mark.processes
def test_shipped_inventories_describe_consistent_clusters(inventory):
    """What the roles' preflight checks first: one master per data centre, a worker for
    every master, unique node ids and URLs (inventories are parsed by Ansible itself)."""
    if not (BIN / "ansible-inventory").exists():
        pytest.skip("ansible-core is not installed (pip install -e '.[deploy]')")
    from tests.ansible_plugins import problems, topology

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


VAULT = {"vault_txcluster_cluster_secret": "cluster-secret-0123456789",
         "vault_txcluster_admin_password": "admin-password-0123",
         "vault_txcluster_read_password": "read-password-0123",
         "vault_txcluster_jmx_password": "jmx-password-0123"}


@pytest.mark.processes
def test_vault_layout_of_the_example_inventory_works_as_documented(tmp_path):
    """group_vars/all/ is a directory: the encrypted vault.yml made as its main.yml says
    (ansible-vault) is read together with main.yml, whose variables refer to it."""
    if not (BIN / "ansible-vault").exists():
        pytest.skip("ansible-core is not installed (pip install -e '.[deploy]')")
    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "two-dc-example", inventory)
    assert not (inventory / "group_vars" / "all.yml").exists()
    vault = inventory / "group_vars" / "all" / "vault.yml"
    vault.write_text(yaml.safe_dump(VAULT))
    password = tmp_path / "vault-password"
    password.write_text("vault-password-0123\n")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1"}
    subprocess.run([str(BIN / "ansible-vault"), "encrypt", "--vault-password-file",
                    str(password), str(vault)], check=True, capture_output=True, env=env,
                   timeout=120)
    assert vault.read_text().startswith("$ANSIBLE_VAULT;")
    names = ["txcluster_common_cluster_secret", "txcluster_common_api_password",
             "txcluster_master_read_password", "txcluster_master_jmx_password",
             "txcluster_common_tls", "ansible_become", "txcluster_common_datacenter"]
    # debug runs on the controller: the example's hosts are never contacted.
    result = subprocess.run(
        [str(BIN / "ansible"), "-i", str(inventory), "uk-master-1.example.com", "-m",
         "ansible.builtin.debug", "-a", "msg={{ [" + ", ".join(names) + "] | to_json }}",
         "--vault-password-file", str(password)],
        capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    shown = json.loads(json.loads(result.stdout.split("=>", 1)[1])["msg"])
    assert shown == [*VAULT.values(), True, True, "uk"]


def _hosts(data: dict, group: str) -> list[str]:
    """Hosts of a group of `ansible-inventory --list`, children included."""
    g = data.get(group, {})
    return g.get("hosts", []) + [h for child in g.get("children", []) for h in _hosts(data, child)]


ROLES = REPO / "roles"


@pytest.mark.parametrize("role", ["txcluster_common", "txcluster_worker", "txcluster_master"])
def test_every_role_default_is_declared_in_argument_specs(role):
    """Every public input (defaults/main.yml) is typed, described and has the same default
    in meta/argument_specs.yml (what ansible-doc shows and ansible-playbook validates)."""
    defaults = yaml.safe_load((ROLES / role / "defaults/main.yml").read_text())
    options = yaml.safe_load((ROLES / role / "meta/argument_specs.yml").read_text())[
        "argument_specs"]["main"]["options"]
    assert sorted(set(defaults) - set(options)) == []
    for name, value in defaults.items():
        spec = options[name]
        assert spec.get("description"), name
        assert "type" in spec, name
        if spec.get("required"):
            assert value in ("", None), f"{name}: required but defaults to {value!r}"
        else:
            assert spec.get("default") == value, name


def test_master_configuration_covers_auth_tls_and_jmx():
    """The keys a secure production master needs are written by the role."""
    text = "\n".join(p.read_text() for p in (ROLES / "txcluster_master").rglob("*.yml")) + \
        "\n".join(p.read_text() for p in (ROLES / "txcluster_master").rglob("*.j2"))
    for key in ("client-auth-file", "tls-cert-file", "tls-key-file", "tls-ca-file",
                "jmx.port", "jmx.password-file", "jmx.access-file"):
        assert f"{key}:" in text or f"{key}=" in text, key
    worker = (ROLES / "txcluster_worker/templates/worker.properties.j2").read_text()
    assert all(k in worker for k in ("tls-cert-file=", "tls-key-file=", "tls-ca-file="))


@pytest.mark.processes
def test_collection_builds_and_installs_from_its_tarball(tmp_path):
    """galaxy.yml: `ansible-galaxy collection build` then `install` from the tarball; the
    roles, playbooks and plugins are there and the playbooks use fully qualified names."""
    if not (BIN / "ansible-galaxy").exists():
        pytest.skip("ansible-core is not installed (pip install -e '.[deploy]')")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path",
                    str(tmp_path), str(REPO)], check=True, capture_output=True, env=env,
                   timeout=300)
    tarball = next(tmp_path.glob("txcluster-cluster-*.tar.gz"))
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "-p",
                    str(tmp_path / "collections"), str(tarball)], check=True,
                   capture_output=True, env=env, timeout=300)
    root = tmp_path / "collections/ansible_collections/txcluster/cluster"
    for path in ("roles/txcluster_master/tasks/main.yml", "roles/txcluster_worker/tasks/main.yml",
                 "playbooks/site.yml", "playbooks/upgrade.yml", "deploy/wheelhouse.py",
                 "plugins/modules/txcluster_properties.py", "plugins/filter/txcluster_topology.py"):
        assert (root / path).is_file(), path
    for leaked in ("master_service", "tests", "molecule", ".venv", "playbooks/collections"):
        assert not (root / leaked).exists(), leaked
    doc = subprocess.run(
        [str(BIN / "ansible-doc"), "-t", "role", "txcluster.cluster.txcluster_master"],
        capture_output=True, text=True, timeout=120,
        env={**env, "ANSIBLE_COLLECTIONS_PATH": str(tmp_path / "collections")})
    assert doc.returncode == 0 and "txcluster_master_max_peer_lag_s" in doc.stdout, doc.stderr
    for playbook in (REPO / "playbooks").glob("*.yml"):
        plays = yaml.safe_load(playbook.read_text())
        for play in plays:
            for role in play.get("roles", []):
                assert str(role).startswith("txcluster.cluster."), (playbook.name, role)
