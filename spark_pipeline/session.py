"""The SparkSession: local Spark by default, any Spark cluster by its master URL.

Under ``spark-submit`` the session spark-submit configured is used as it is. Executors
run the Python of this process in local mode (``PYSPARK_PYTHON``); on a cluster they need
the same packages (txcluster, pyoxigraph, xxhash: e.g. the same virtualenv on every node
or one shipped with ``--archives``) and the input files at the same paths.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"


def is_local(master: str) -> bool:
    return master.startswith("local")


def local_cores(master: str) -> int:
    """The cores of ``local``, ``local[N]``, ``local[*]``, ``local[N,F]``."""
    inside = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
    first = inside.split(",")[0]
    return (os.cpu_count() or 1) if first == "*" else max(1, int(first))


def spark_session(master: str | None = None, app_name: str = "txcluster",
                  ui: bool = True, extra: dict[str, str] | None = None) -> SparkSession:
    """Start (or join) the SparkSession. ``master`` None: spark-submit's, else local[*]."""
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started our JVM
    builder = SparkSession.builder.appName(app_name)
    if master or not submitted:
        master = master or DEFAULT_MASTER
        builder = builder.master(master)
        if is_local(master):
            # Executors are Python processes of this interpreter (and its venv), and
            # nothing listens beyond loopback: Spark then runs fully offline
            # (docs/design/dependencies.md#pyspark-43-in-local-mode-the-pipeline).
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            builder = (builder.config("spark.driver.host", "127.0.0.1")
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
    conf = {
        "spark.sql.ansi.enabled": "true",  # sums that overflow fail (see fingerprint_sums)
        "spark.ui.enabled": str(ui).lower(),
        "spark.ui.showConsoleProgress": "false",  # our own progress line instead
        "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",  # lines per parse chunk
        "spark.sql.adaptive.enabled": "true",
        **(extra or {}),
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class LazySession:
    """A session for one command, started when the job first needs it (after its cheap
    checks): an already active session is joined and left running, one started here is
    stopped at the end (``with LazySession(master) as start: job(start)``)."""

    def __init__(self, master: str | None = None) -> None:
        self.master = master
        self._spark: SparkSession | None = None
        self._owned = False

    def __call__(self) -> SparkSession:
        if self._spark is None:
            active = SparkSession.getActiveSession()
            self._owned = active is None
            self._spark = active or spark_session(self.master)
        return self._spark

    def __enter__(self) -> LazySession:
        return self

    def __exit__(self, *exc) -> None:
        if self._spark is not None and self._owned:
            self._spark.stop()
        self._spark = None
