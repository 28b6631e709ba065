from __future__ import annotations

import pytest

from tests.procs import WorkerProc, make_secret


@pytest.fixture
def secret(tmp_path):
    return make_secret(tmp_path / "secrets")


@pytest.fixture
def worker_factory(tmp_path, secret):
    """Start real worker processes; every one is stopped (by PID) at teardown."""
    started: list[WorkerProc] = []

    def make(name: str = "w1", **extra) -> WorkerProc:
        w = WorkerProc(tmp_path / name, secret[0], extra=extra)
        started.append(w)
        return w

    yield make
    for w in started:
        w.stop()
