"""Fixtures every test module may use, and the two tiers of the suite.

``make check`` runs the tests not marked ``processes``; ``make test`` runs them all. A test
is marked ``processes`` when it starts a program: a node (a worker or a master, by the CLI),
javac or java, Spark's JVM, Chromium, nspawn, ``ip netns``, ansible... A fork of the test
process itself (the worker's query processes) does not count: it is cheap and runs no
other program. Tests using the fixtures of ``PROCESS_FIXTURES`` are marked here; the others
carry the mark themselves (``pytestmark`` of the module, or a decorator). While a test
without the mark runs, starting a program fails it (``_refuse_programs``): a test that
starts one cannot slip into the fast tier.
"""

from __future__ import annotations

import sys

import pytest

from tests.clusters import LocalCluster
from tests.procs import make_secret, worker_node

# Fixtures (this file's) whose every use starts processes.
PROCESS_FIXTURES = frozenset({"worker_factory", "cluster_factory", "module_cluster_factory",
                              "two_data_centres", "spark"})
# The audit events (sys.addaudithook) of starting a program: subprocess (asyncio's too),
# os.posix_spawn, the os.exec* family, os.system.
_PROGRAM_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.exec", "os.system"})


class _Unmarked:
    """The test without the ``processes`` mark running now (None between such tests), the
    programs it tried to start, and whether a JVM ran in this process before it."""

    test: str | None = None
    programs: list[str] = []
    jvm_before = False


def _jvm_started() -> bool:
    """A JVM in this process (JPype's, as the master's JMX bridge starts): no subprocess."""
    jpype = sys.modules.get("jpype")
    return bool(jpype and jpype.isJVMStarted())


def _refuse_programs(event: str, args: tuple) -> None:
    if _Unmarked.test is not None and event in _PROGRAM_EVENTS:
        program = f"{event} {args[1] if event == 'subprocess.Popen' else args[0]!r}"
        _Unmarked.programs.append(program)
        pytest.fail(f"{_Unmarked.test} starts a program ({program}): mark it "
                    "`processes` (tests/conftest.py)", pytrace=False)


sys.addaudithook(_refuse_programs)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.processes)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    marked = item.get_closest_marker("processes") is not None
    _Unmarked.test, _Unmarked.programs = (None if marked else item.nodeid), []
    _Unmarked.jvm_before = _jvm_started()
    try:
        return (yield)
    finally:
        _Unmarked.test = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A test without the mark that started a program fails even when the refusal was
    caught on the way (a fallback taken instead), or that started a JVM in-process."""
    report = yield
    programs, _Unmarked.programs = _Unmarked.programs, []  # each refusal reported once
    if _Unmarked.test is None or not report.passed:
        return report
    why = (f"tried to start a program ({programs[0]})" if programs
           else "started a JVM in this process"
           if call.when == "teardown" and _jvm_started() and not _Unmarked.jvm_before
           else None)
    if why:
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} {why}: mark it `processes` (tests/conftest.py)"
    return report


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
