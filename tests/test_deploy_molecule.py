"""The Ansible roles and playbooks on real systemd hosts: Molecule's two-data-centre
scenario (molecule/two_dc) on systemd-nspawn instances, step by step as its
test_sequence lists them, each step timed; destroy always runs last.

It needs root, systemd-nspawn, debootstrap, nftables, ssh, openssl (the lab CA) and a JDK
(the JMX client), all in the Makefile's DEBIAN_PACKAGES, and the deploy extra (molecule,
ansible-core, pytest-testinfra). Without them it is
skipped with the reason; `make test-deploy` sets TXCLUSTER_DEPLOY_TESTS=required, which
turns the skip into a failure. One scenario at a time per machine (a lock): the bridge,
subnet and instance names are fixed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SCENARIO = "two_dc"
BIN = Path(sys.executable).parent
LOG = REPO / "build" / f"molecule-{SCENARIO}.log"
LOCK = Path("/run/txcluster-molecule.lock")
STATE = Path("/run/txcluster-molecule") / SCENARIO  # create.yml's nspawn-hosts.sh state
STEP_TIMEOUT_S = 1800  # per step; verify holds the idempotence runs and the upgrade
# Lines the scenario prints from what it measured (molecule/two_dc/tests/): shown in this
# test's output and required, one each.
MEASURED = ("check mode: site.yml changed=", "rolling upgrade: ", "admin without credentials: ",
            "jmx: connected to ")


def _measured(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(MEASURED)]


def _cannot_run() -> str | None:
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn instances, a bridge, overlay mounts)"
    missing = [t for t in ("systemd-nspawn", "debootstrap", "nft", "ssh", "ssh-keygen", "ip",
                           "openssl", "javac", "java") if shutil.which(t) is None]
    if missing:
        return (f"missing {', '.join(missing)} (Debian systemd-container debootstrap nftables "
                "openssh-client iproute2 openssl openjdk-17-jdk-headless: make deps-debian)")
    if not (BIN / "molecule").exists():
        return "molecule is not installed (pip install -e '.[deploy]')"
    if not Path("/sys/fs/cgroup").is_dir():
        return "no cgroup filesystem for systemd inside the instances"
    return None


def _sequence() -> list[str]:
    """The scenario's own test_sequence (CLI spelling: side_effect -> side-effect)."""
    config = yaml.safe_load((REPO / "molecule" / SCENARIO / "molecule.yml").read_text())
    return [s.replace("_", "-") for s in config["scenario"]["test_sequence"]]


def _failures(lines: list[str], limit: int = 3000) -> str:
    """The failed tasks of the log, each with its TASK header, first in the report: CI
    shows only the start of a long failure message, and a 200-line tail can end before
    the failure (a wait that retried for minutes)."""
    out, task = [], ""
    for line in lines:
        if line.startswith("TASK ["):
            task = line.rstrip("* ")
        elif line.startswith(("fatal:", "failed:")) or "FAILED!" in line:
            out.append(f"{task}\n  {line[:limit]}")
    return "failed tasks:\n" + ("\n".join(out[-5:]) if out else "  (none in the log)")


def _journals(lines: int = 30) -> str:
    """The txcluster units' journals of every instance, read before destroy removes them:
    why a master did not become healthy is there, not in Ansible's output. Each instance's
    init is recorded by deploy/nspawn-hosts.sh (PID and PID namespace)."""
    out = []
    for leader in sorted(STATE.glob("instances/*/leader")):
        try:
            pid = leader.read_text().split()[0]
            res = subprocess.run(
                ["nsenter", "-t", pid, "-m", "-p", "journalctl", "--no-pager", "-o",
                 "short-precise", "-n", str(lines), "-u", "txcluster-master.service",
                 "-u", "txcluster-worker.service"],
                capture_output=True, text=True, timeout=30)
            text = (res.stdout + res.stderr).strip()
        except (OSError, IndexError, subprocess.SubprocessError) as exc:
            text = f"(not read: {exc})"
        out.append(f"--- {leader.parent.name}\n{text}")
    return "journals:\n" + ("\n".join(out) if out else "  (no instances)")


def _molecule(step: str, log, env: dict) -> int:
    log.write(f"\n===== molecule {step} -s {SCENARIO}\n")
    log.flush()
    return subprocess.run([str(BIN / "molecule"), step, "-s", SCENARIO], cwd=REPO, env=env,
                          stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                          timeout=STEP_TIMEOUT_S).returncode


@pytest.mark.slow
@pytest.mark.processes
def test_molecule_two_datacentres(capsys):
    reason = _cannot_run()
    if reason:
        if os.environ.get("TXCLUSTER_DEPLOY_TESTS") == "required":
            pytest.fail(f"make test-deploy cannot run here: {reason}")
        pytest.skip(f"Molecule scenario {SCENARIO}: {reason}")
    steps = _sequence()
    assert steps[-1] == "destroy", "the sequence must end with destroy"
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
           "ANSIBLE_PIPELINING": "1", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
           "NO_COLOR": "1", "PY_COLORS": "0"}
    LOG.parent.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    failed = None
    journals = ""
    with open(LOCK, "w") as lock, open(LOG, "w") as log:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run's instances use the same bridge
        # A run killed before its destroy leaves Molecule's state saying "created".
        _molecule("destroy", log, env)
        try:
            for step in steps[:-1]:
                start = time.monotonic()
                rc = _molecule(step, log, env)
                timings[step] = time.monotonic() - start
                if rc != 0:
                    failed = step
                    journals = _journals()
                    log.write(f"\n===== journals of the instances\n{journals}\n")
                    break
        finally:
            start = time.monotonic()
            destroyed = _molecule("destroy", log, env)
            timings["destroy"] = time.monotonic() - start
    summary = ", ".join(f"{s} {t:.0f} s" for s, t in timings.items())
    lines = LOG.read_text(errors="replace").splitlines()
    measured = _measured(lines)
    with capsys.disabled():
        print(f"\nMolecule {SCENARIO}: {summary} (total {sum(timings.values()):.0f} s; "
              f"log {LOG.relative_to(REPO)})")
        for line in measured:
            print(f"  {line}")
    if failed or destroyed:
        tail = "\n".join(lines[-120:])
        pytest.fail(f"molecule {failed or 'destroy'} failed ({summary})\n"
                    f"{_failures(lines)}\n{journals}\nend of {LOG}:\n{tail}")
    missing = [p for p in MEASURED if not any(line.startswith(p) for line in measured)]
    assert not missing, f"the scenario did not print {missing} (see {LOG})"
