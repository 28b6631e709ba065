"""Real worker processes for tests: started with the CLI, stopped by PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from txcluster.auth import HmacAuth, write_secret


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class WorkerProc:
    directory: Path
    secret_file: Path
    repository_id: str = "repo"
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    extra: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config(self) -> Path:
        return self.directory / "worker.properties"

    def write_config(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        lines = {
            "repository-id": self.repository_id,
            "data-dir": str(self.directory / "data"),
            "listen-address": f"127.0.0.1:{self.port}",
            "cluster-secret-file": str(self.secret_file),
            **self.extra,
        }
        self.config.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))

    def start(self, timeout: float = 30) -> WorkerProc:
        self.write_config()
        log = open(self.directory / "worker.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "txcluster.cli", "worker", "--config", str(self.config)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}: {self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"worker did not start: {self.log()}")

    def log(self) -> str:
        path = self.directory / "worker.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill9()

    def client(self, secret: bytes) -> httpx.Client:
        return httpx.Client(base_url=self.url, auth=HmacAuth(secret), timeout=120)


def make_secret(directory: Path) -> tuple[Path, bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "cluster.secret"
    return path, write_secret(path)
