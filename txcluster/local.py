"""Local clusters on loopback: `txcluster up` / `txcluster down`, and the same process
handling for tests and benchmarks (one way to start a node: its CLI, in the background).

Every node is a real process started as users start it (`txcluster worker --config ...`,
`txcluster master --config ...`) in its own session, so it outlives `make run`; its PID is
written to DIR/cluster.json and `down` stops exactly those PIDs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from txcluster.auth import write_secret


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class NodeProcess:
    """One node: a properties file, a data dir, a log file, a process."""

    kind: str  # "worker" | "master"
    directory: Path
    properties: dict[str, str]
    port: int
    pid: int | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config(self) -> Path:
        return self.directory / ("worker.properties" if self.kind == "worker"
                                 else "cluster.properties")

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.kind}.log"

    def write_config(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))

    def start(self, wait: bool = True, timeout: float = 60, detach: bool = False) -> NodeProcess:
        if not self.config.exists():
            self.write_config()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "txcluster.cli", self.kind, "--config", str(self.config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=detach,
            )
        self.pid = self.proc.pid
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.kind} at {self.url} not ready after {timeout}s:\n"
                           f"{self.log_tail()}")

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() \
            else ""

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid is not None and _pid_alive(self.pid)

    def kill9(self) -> None:
        if self.pid and self.alive():
            os.kill(self.pid, signal.SIGKILL)
            if self.proc is not None:
                self.proc.wait(10)

    def stop(self, timeout: float = 15) -> None:
        if not self.pid or not self.alive():
            return
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None:
                if self.proc.poll() is not None:
                    return
            elif not _pid_alive(self.pid):
                return
            time.sleep(0.05)
        self.kill9()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def worker_node(directory: Path, secret_file: Path, repository_id: str = "repo",
                port: int | None = None, **extra: str) -> NodeProcess:
    port = port or free_port()
    props = {
        "repository-id": repository_id,
        "data-dir": str(directory / "data"),
        "listen-address": f"127.0.0.1:{port}",
        "cluster-secret-file": str(secret_file),
        **extra,
    }
    return NodeProcess("worker", directory, props, port)


def new_secret(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "cluster.secret"
    if not path.exists():
        write_secret(path)
    return path


def read_cluster(directory: Path) -> dict:
    path = directory / "cluster.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: no cluster was started there")
    return json.loads(path.read_text())


def down(directory: Path) -> list[int]:
    """Stop every process listed in DIR/cluster.json, by PID."""
    info = read_cluster(directory)
    stopped = []
    nodes = [*info.get("masters", []), *info.get("workers", [])]
    for node in nodes:
        proc = NodeProcess(node["kind"], Path(node["dir"]), {}, 0, pid=node["pid"])
        if proc.alive():
            proc.stop()
            stopped.append(node["pid"])
    return stopped
