from __future__ import annotations

import pytest

from tests.procs import make_secret, worker_node


@pytest.fixture
def secret(tmp_path):
    """(path of a mode-600 cluster secret file, its bytes)."""
    return make_secret(tmp_path / "secrets")


@pytest.fixture
def worker_factory(tmp_path, secret):
    """Real worker processes; every one is stopped (by PID) at teardown."""
    started = []

    def make(name: str = "w1", start: bool = True, **extra):
        node = worker_node(tmp_path / name, secret[0], **extra)
        started.append(node)
        return node.start() if start else node

    yield make
    for node in started:
        node.stop()
