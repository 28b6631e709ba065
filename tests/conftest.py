from __future__ import annotations

import pytest

from tests.clusters import LocalCluster
from tests.procs import make_secret, worker_node


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


@pytest.fixture
def two_data_centres(tmp_path, secret):
    """Two clusters (uk: 3 workers, us: 2), their masters peered to each other."""
    uk = LocalCluster(tmp_path / "uk", secret, 3, **{"data-centre": "uk"})
    us = LocalCluster(tmp_path / "us", secret, 2, **{"data-centre": "us"})
    uk.master.properties["node-id"] = "master-uk"
    us.master.properties["node-id"] = "master-us"
    for a, b in ((uk, us), (us, uk)):
        a.master.properties.update({"peer.1.id": b.master.properties["node-id"],
                                    "peer.1.url": b.master.url})
    try:
        uk.start()
        us.start()
        yield uk, us
    finally:
        uk.stop_all()
        us.stop_all()
