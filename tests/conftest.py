from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.procs import make_secret, worker_node
from txcluster.local import master_node


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for the whole run (a session starts in 8-20 s): the
    pipeline's tests share it."""
    pytest.importorskip("pyspark")
    from spark_pipeline import session

    # The test run's JVM (local mode: the driver is the executors too) does small jobs
    # between Python work on a busy 2-core machine: C1 only (no C2 compiler threads
    # competing with the job) and the serial collector are faster there; Spark's results
    # do not depend on either.
    s = session.spark_session("local[2]", app_name="txcluster-tests", ui=False, extra={
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    yield s
    s.stop()


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


# ---- real clusters: one master and its workers, each a process started by its CLI ----


class LocalCluster:
    """A master and its workers on loopback, started as users start them (txcluster.local).

    Helpers poll with deadlines; every process made here is stopped by ``stop_all``.
    """

    def __init__(self, root, secret: tuple, workers: int, repository_id: str = "repo",
                 master_port: int | None = None, node_id: str = "master1",
                 **master_extra: str) -> None:
        self.root = root
        self.secret_file, self.secret = secret
        self.repository_id = repository_id
        self.nodes: list = []  # every process this cluster made, for teardown
        self.workers = [self.new_worker(f"worker{i + 1}") for i in range(workers)]
        props = {"health-interval-s": "0.2", "request-timeout-s": "10", **master_extra}
        self.master = master_node(root / "master", self.secret_file, node_id,
                                  [w.url for w in self.workers], repository_id,
                                  port=master_port, **props)
        self.nodes.append(self.master)

    def start(self) -> LocalCluster:
        for w in self.workers:
            w.start(wait=False)
        for w in self.workers:
            w.wait_ready()
        self.master.start()
        self.wait_in_sync()
        return self

    # ---- processes ----

    def new_worker(self, name: str):
        node = worker_node(self.root / name, self.secret_file, self.repository_id)
        self.nodes.append(node)
        return node

    def stop_all(self) -> None:
        for node in reversed(self.nodes):  # the master first
            node.stop()

    # ---- client calls through the master ----

    @property
    def repo_url(self) -> str:
        return f"{self.master.url}/repositories/{self.repository_id}"

    def update(self, text: str, timeout: float = 30, **headers: str) -> httpx.Response:
        return httpx.post(f"{self.repo_url}/statements", content=text.encode(),
                          headers={"content-type": "application/sparql-update", **headers},
                          timeout=timeout)

    def select(self, query: str, base: str | None = None, **headers: str) -> list[dict]:
        """Rows of a SELECT (through the master unless ``base`` is a worker URL), each
        {variable: value as text}."""
        url = f"{base or self.master.url}/repositories/{self.repository_id}"
        r = httpx.get(url, params={"query": query}, timeout=30,
                      headers={"accept": "application/sparql-results+json", **headers})
        assert r.status_code == 200, f"{url}: {r.status_code} {r.text}"
        return [{k: v["value"] for k, v in b.items()} for b in r.json()["results"]["bindings"]]

    # ---- status ----

    def status(self) -> dict:
        r = httpx.get(f"{self.master.url}/admin/status", timeout=10)
        r.raise_for_status()
        return r.json()

    def worker_status(self, status: dict, node) -> dict:
        [w] = [w for w in status["workers"] if w["url"] == node.url]
        return w

    def wait_for(self, condition, what: str, timeout: float = 60.0) -> dict:
        """Poll /admin/status until ``condition(status)`` holds; returns that status."""
        deadline = time.monotonic() + timeout
        last: dict | None = None
        while True:
            try:
                last = self.status()
                if condition(last):
                    return last
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"not {what} after {timeout}s; last status:\n"
                    f"{json.dumps(last, indent=1)}\nmaster log:\n{self.master.log_tail()}")
            time.sleep(0.05)

    @staticmethod
    def in_sync(status: dict) -> bool:
        head = status["head"]
        return status["writable"] and all(
            w["status"] == "ON" and w["seq"] == head["seq"]
            and w["fingerprint"] == head["fingerprint"] and w["pending_forwards"] == 0
            for w in status["workers"])

    def wait_in_sync(self, timeout: float = 60.0) -> dict:
        """Every worker ON at the head of the log, and the cluster writable."""
        return self.wait_for(self.in_sync, "in sync", timeout)

    def worker_states(self) -> dict[str, dict]:
        """Each worker's own state ({seq, fingerprint, quads, ...}) from its /health."""
        return {w.url: httpx.get(f"{w.url}/health", timeout=10).json() for w in self.workers}

    def fingerprints(self) -> dict[str, str]:
        return {url: st["fingerprint"] for url, st in self.worker_states().items()}


@pytest.fixture
def cluster_factory(tmp_path, secret):
    """Start a LocalCluster: ``make(workers=3, **master_properties)``; every process it
    started (workers added later included) is stopped at teardown."""
    made: list[LocalCluster] = []

    def make(workers: int = 3, name: str = "cluster", **master_extra: str) -> LocalCluster:
        cluster = LocalCluster(tmp_path / name, secret, workers, **master_extra)
        made.append(cluster)  # before starting: teardown stops what did start
        return cluster.start()

    yield make
    for cluster in made:
        cluster.stop_all()


@pytest.fixture(scope="module")
def module_cluster_factory(tmp_path_factory):
    """As ``cluster_factory``, for clusters shared by the tests of one module (tests that
    leave the cluster as they found it)."""
    root = tmp_path_factory.mktemp("module-clusters")
    secret = make_secret(root / "secrets")
    made: list[LocalCluster] = []

    def make(workers: int = 3, name: str = "cluster", **master_extra: str) -> LocalCluster:
        cluster = LocalCluster(root / name, secret, workers, **master_extra)
        made.append(cluster)
        return cluster.start()

    yield make
    for cluster in made:
        cluster.stop_all()
