"""The SparkSession: local Spark by default, any Spark cluster by its master URL.

Under ``spark-submit`` the session spark-submit configured is used as it is (its
``--archives``/``--py-files``: ``txcluster spark-env`` prints them). Executors run the
Python of this process in local mode (``PYSPARK_PYTHON``); on a cluster the code and a
packed Python environment are shipped with the job (``shipping``), and local input files
must be at the same paths on every node (shared storage; URLs such as ``hdfs://`` are
read through Hadoop, see ``extract``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from spark_pipeline import extract, shipping

DEFAULT_MASTER = "local[*]"


def is_local(master: str) -> bool:
    return master.startswith("local")


def local_driver_memory() -> str:
    """The JVM heap of a local-mode Spark (driver and executors in one JVM): a quarter of
    the machine's memory, between 1 and 8 GiB. Spark's own default, 1 GiB, is a
    cluster driver's, which holds no data: here the persisted records and the parts on
    their way to the driver live in it, and 4,000,000 quads (385 MB of N-Quads) ran it
    out of heap (bench/README, "a 4,000,000-quad initial load")."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return f"{min(8, max(1, total // 4 // 2**30))}g"


# The local JVM compiles hot code with C2 at ten times HotSpot's thresholds (tier 4:
# invocations 5,000 -> 50,000, ...). A load runs the JVM for tens of seconds, and
# Spark generates new classes for every query: with the defaults the C2 compiler
# threads took half of the JVM's CPU in a 1,000,000-quad initial load (11.5 of 23
# CPU-s); at these thresholds 6.1-6.4, while the tasks' own CPU stayed the same
# (6.1-6.2 against 5.9-6.7 CPU-s: the code that runs per row still reaches C2), and the
# load took 33.4-35.5 s instead of 37.6-39.2 (bench/README, "2026-12-01"). C1 alone did
# worse: its tasks took 9.5-10.1 CPU-s. At 4,000,000 quads: 7.2 against 14.7 CPU-s of
# C2, the tasks 16.9 against 16.5. (Spark's launcher passes -XX:+IgnoreUnrecognizedVMOptions
# itself: a JVM without these flags starts anyway.)
LOCAL_JVM_OPTIONS = ("-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
                     "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000")


def local_cores(master: str) -> int:
    """The cores of ``local``, ``local[N]``, ``local[*]``, ``local[N,F]``."""
    inside = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
    first = inside.split(",")[0]
    return (os.cpu_count() or 1) if first == "*" else max(1, int(first))


@contextmanager
def _executor_python(python: str | None) -> Iterator[None]:
    """PYSPARK_PYTHON while the context starts: PySpark reads the executors' Python from
    it then (spark-submit sets it from ``spark.pyspark.python``)."""
    if python is None:
        yield
        return
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = python
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = before


def spark_session(master: str | None = None, app_name: str = "txcluster",
                  ui: bool = True, extra: dict[str, str] | None = None,
                  python_env: str | None = None) -> SparkSession:
    """Start (or join) the SparkSession. ``master`` None: spark-submit's, else local[*].
    On a cluster master the code and a Python environment are shipped (``python_env``:
    see ``shipping.shipment``)."""
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started our JVM
    builder = SparkSession.builder.appName(app_name)
    shipment: shipping.Shipment | None = None
    if master or not submitted:
        master = master or DEFAULT_MASTER
        builder = builder.master(master)
        if is_local(master):
            # Executors are Python processes of this interpreter (and its venv), and
            # nothing listens beyond loopback: Spark then runs fully offline
            # (docs/design/dependencies.md#pyspark-43-in-local-mode-the-pipeline).
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = (builder.config("spark.driver.memory", local_driver_memory())
                       # Ours come first; a user's spark.driver.extraJavaOptions follow
                       # and win where they set the same flag.
                       .config("spark.driver.defaultJavaOptions", LOCAL_JVM_OPTIONS)
                       .config("spark.driver.host", "127.0.0.1")
                       .config("spark.driver.bindAddress", "127.0.0.1")
                       # Spark's 200 shuffle partitions are for clusters: on one machine
                       # each costs a task in every shuffle and a job when streamed out.
                       .config("spark.sql.shuffle.partitions", str(4 * local_cores(master)))
                       # A few splits per core, so one large file keeps every core busy.
                       .config("spark.sql.files.minPartitionNum",
                               str(3 * local_cores(master)))
                       # Persisted results stay in this machine's memory: compressing
                       # them cost more CPU than the rest of the job's shuffle (measured).
                       .config("spark.sql.inMemoryColumnarStorage.compressed", "false"))
        elif not submitted:
            shipment = shipping.shipment(python_env)
    conf = {
        "spark.sql.ansi.enabled": "true",  # sums that overflow fail (see fingerprint_sums)
        "spark.ui.enabled": str(ui).lower(),
        "spark.ui.showConsoleProgress": "false",  # our own progress line instead
        "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",  # lines per parse chunk
        # No byte limit per Arrow batch to the parse: Spark checks one (64 MiB by default)
        # by measuring the whole batch after every row it writes, ~12% of the JVM's
        # samples in an initial load (JFR; bench/README, "The Spark pipeline"). Exactly
        # Int.MaxValue turns the check off. A batch stays bounded without it: 10,000 lines,
        # or the documents Spark packs into one task (spark.sql.files.maxPartitionBytes).
        "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.files.maxPartitionBytes": str(extract.SPLIT_BYTES),  # (extract.py)
        **(shipment.conf if shipment else {}),
        **(extra or {}),
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    with _executor_python(shipment.python if shipment else None):
        spark = builder.getOrCreate()
    for path in shipment.py_files if shipment else ():
        spark.sparkContext.addPyFile(path)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class LazySession:
    """A session for one command, started when the job first needs it (after its cheap
    checks): an already active session is joined and left running, one started here is
    stopped at the end (``with LazySession(master) as start: job(start)``)."""

    def __init__(self, master: str | None = None, app_name: str = "txcluster",
                 python_env: str | None = None, conf: dict[str, str] | None = None) -> None:
        self.master, self.app_name = master, app_name
        self.python_env, self.conf = python_env, conf
        self._spark: SparkSession | None = None
        self._owned = False

    def __call__(self) -> SparkSession:
        if self._spark is None:
            active = SparkSession.getActiveSession()
            self._owned = active is None
            self._spark = active or spark_session(self.master, self.app_name,
                                                  extra=self.conf,
                                                  python_env=self.python_env)
        return self._spark

    def __enter__(self) -> LazySession:
        return self

    def __exit__(self, *exc) -> None:
        if self._spark is not None and self._owned:
            self._spark.stop()
        self._spark = None
