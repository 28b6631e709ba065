"""The Ansible roles and playbooks on real systemd hosts: Molecule's two-data-centre
scenario (molecule/two_dc) on systemd-nspawn instances, step by step as its
test_sequence lists them, each step timed; destroy always runs last, and nothing of the
run may be left after it. First, the hosts' script alone (deploy/nspawn-hosts.sh):
what a run killed in the middle of `up` leaves, orphaned container inits included, is
cleared by the next `up` and by `down`.

It needs root, systemd-nspawn, debootstrap, nftables, ssh, openssl (the lab CA) and a JDK
(the JMX client), all in the Makefile's DEBIAN_PACKAGES, and the deploy extra (molecule,
ansible-core, pytest-testinfra). Without them it is
skipped with the reason; `make test-deploy` sets TXCLUSTER_DEPLOY_TESTS=required, which
turns the skip into a failure. One scenario at a time per machine (a lock): the bridge,
subnet and instance names are fixed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
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
NSPAWN_HOSTS = REPO / "deploy" / "nspawn-hosts.sh"
STEP_TIMEOUT_S = 1800  # per step; verify holds the idempotence runs and the upgrade
# Lines the scenario prints from what it measured (molecule/two_dc/tests/): shown in this
# test's output and required, one each.
MEASURED = ("check mode: site.yml changed=", "rolling upgrade: ", "admin without credentials: ",
            "jmx: connected to ")


def _measured(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith(MEASURED)]


def _cannot_run(molecule: bool = True) -> str | None:
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn instances, a bridge, overlay mounts)"
    missing = [t for t in ("systemd-nspawn", "debootstrap", "nft", "ssh", "ssh-keygen", "ip",
                           "openssl", "javac", "java") if shutil.which(t) is None]
    if missing:
        return (f"missing {', '.join(missing)} (Debian systemd-container debootstrap nftables "
                "openssh-client iproute2 openssl openjdk-17-jdk-headless: make deps-debian)")
    if molecule and not (BIN / "molecule").exists():
        return "molecule is not installed (pip install -e '.[deploy]')"
    if not Path("/sys/fs/cgroup").is_dir():
        return "no cgroup filesystem for systemd inside the instances"
    return None


def _config() -> dict:
    return yaml.safe_load((REPO / "molecule" / SCENARIO / "molecule.yml").read_text())


def _sequence() -> list[str]:
    """The scenario's own test_sequence (CLI spelling: side_effect -> side-effect)."""
    return [s.replace("_", "-") for s in _config()["scenario"]["test_sequence"]]


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


def _skip_or_fail(reason: str | None, what: str) -> None:
    if reason:
        if os.environ.get("TXCLUSTER_DEPLOY_TESTS") == "required":
            pytest.fail(f"make test-deploy cannot run here: {reason}")
        pytest.skip(f"{what}: {reason}")


@contextlib.contextmanager
def _one_scenario_at_a_time():
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the instances' names and subnets are fixed
        yield


def _left_behind(state: Path, names: list[str], bridge: str) -> list[str]:
    """What of a scenario's hosts is still on this machine: its state directory, mounts
    under it, its instances' veths, its bridge."""
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                           check=True).stdout
    link_names = {line.split(":")[1].strip().split("@")[0] for line in links.splitlines()}
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if line.split()[4].startswith(f"{state}/")]
    return ([str(state)] if state.exists() else []) + mounts + sorted(
        link_names & ({f"vb-txm-{n}" for n in names} | {bridge}))


def _start_time(pid: int) -> str | None:
    """A process's identity across PID reuse: its start time, or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]


def _container_init(nspawn: int) -> int | None:
    """The init under a systemd-nspawn (its child in a new PID namespace) once it runs
    systemd: before that exec it still needs nspawn and exits without it."""
    children = subprocess.run(["pgrep", "-P", str(nspawn)], capture_output=True, text=True)
    for child in children.stdout.split():
        with contextlib.suppress(OSError):
            if (os.readlink(f"/proc/{child}/ns/pid") != os.readlink("/proc/self/ns/pid")
                    and not Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0]
                    .endswith(b"systemd-nspawn")):
                return int(child)
    return None


@pytest.mark.slow
@pytest.mark.processes
def test_nspawn_hosts_clear_what_a_killed_run_left(tmp_path):
    """The failure that poisoned a machine for good: a run killed in `up` (the script and
    every systemd-nspawn SIGKILLed while the containers boot) leaves container inits
    reparented to PID 1, unrecorded, each holding its veth; the next `up` must clear
    them and boot; an init orphaned after its state directory was deleted (what an older
    `down` did) is found by `down` through its overlay; `down` leaves nothing."""
    _skip_or_fail(_cannot_run(molecule=False), "nspawn hosts")
    state = Path("/run/txcluster-molecule/harness-check")
    bridge, subnet = "txch0", os.environ.get("TXCLUSTER_HARNESS_SUBNET", "10.213.78")
    names = ["h1", "h2"]
    with _one_scenario_at_a_time():
        rootfs = subprocess.run([str(REPO / "deploy" / "rootfs.sh")], capture_output=True,
                                text=True, check=True).stdout.splitlines()[-1]
        key = tmp_path / "id"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True)
        up = [str(NSPAWN_HOSTS), "up", str(state), rootfs, bridge, f"{subnet}.1/24",
              f"{key}.pub"] + [f"{n}={subnet}.{11 + i}" for i, n in enumerate(names)]
        orphans: dict[int, str | None] = {}
        try:
            killed = subprocess.Popen(up, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            nspawns: dict[str, int] = {}
            deadline = time.monotonic() + 120
            while len(orphans) < len(names):
                assert time.monotonic() < deadline, f"containers not started: {nspawns}"
                assert killed.poll() is None, "up ended before it was killed"
                for n in names:
                    pid_file = state / "instances" / n / "pid"
                    if n not in nspawns and pid_file.exists() and pid_file.read_text().strip():
                        nspawns[n] = int(pid_file.read_text())
                    init = _container_init(nspawns[n]) if n in nspawns else None
                    if init and init not in orphans:
                        orphans[init] = _start_time(init)
                time.sleep(0.05)
            for pid in [killed.pid, *nspawns.values()]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            killed.wait()
            for n in names:  # nothing recorded of the inits
                (state / "instances" / n / "leader").unlink(missing_ok=True)
            time.sleep(0.5)
            assert all(_start_time(p) == t for p, t in orphans.items()), "inits died with nspawn"

            subprocess.run(up, check=True, timeout=300)
            assert not any(_start_time(p) == t for p, t in orphans.items()), "orphans left"

            # An init orphaned, then its state forgotten (unmounted and deleted).
            nspawn = int((state / "instances" / "h2" / "pid").read_text())
            init = _container_init(nspawn)
            assert init is not None
            orphans = {init: _start_time(init)}
            os.kill(nspawn, signal.SIGKILL)
            time.sleep(0.5)
            for n in names:
                subprocess.run(["umount", "-l", str(state / "instances" / n / "root")])
            subprocess.run(["rm", "-rf", str(state)], check=True)
            subprocess.run(["ip", "link", "delete", bridge], check=True)
            subprocess.run(["ip", "route", "del", "unreachable", f"{subnet}.0/24", "metric",
                            "4242"], check=True)
            assert _start_time(init) == orphans[init]
        finally:
            down = subprocess.run([str(NSPAWN_HOSTS), "down", str(state)], timeout=300)
        assert down.returncode == 0
        assert not any(_start_time(p) == t for p, t in orphans.items()), "orphans left"
        assert _left_behind(state, names, bridge) == []


def _molecule(step: str, log, env: dict) -> int:
    log.write(f"\n===== molecule {step} -s {SCENARIO}\n")
    log.flush()
    return subprocess.run([str(BIN / "molecule"), step, "-s", SCENARIO], cwd=REPO, env=env,
                          stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                          timeout=STEP_TIMEOUT_S).returncode


@pytest.mark.slow
@pytest.mark.processes
def test_molecule_two_datacentres(capsys):
    _skip_or_fail(_cannot_run(), f"Molecule scenario {SCENARIO}")
    steps = _sequence()
    assert steps[-1] == "destroy", "the sequence must end with destroy"
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
           "ANSIBLE_PIPELINING": "1", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
           "NO_COLOR": "1", "PY_COLORS": "0"}
    LOG.parent.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    failed = None
    journals = ""
    with _one_scenario_at_a_time(), open(LOG, "w") as log:
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
    platforms = [p["name"] for p in _config()["platforms"]]
    bridge = os.environ.get("TXCLUSTER_MOLECULE_BRIDGE") or "txcm0"
    assert _left_behind(STATE, platforms, bridge) == [], "destroy left these"
