"""The pipeline on a real Spark standalone cluster (docs/design/pipeline-on-spark.md).

A Spark master and one worker (1 core) from the PySpark distribution, on loopback. The
worker runs in a mount namespace of its own where the driver's virtualenv, its base
Python and this checkout are empty tmpfs — as on another host: its executors can only run
the Python and code that the job ships (spark_pipeline/shipping.py). Java and the Spark
installation (bind-mounted elsewhere) stay visible, and so does the temporary directory
of the inputs and the work directory, as shared storage.

``txcluster load --initial``, ``txcluster load`` (the repository's export read by the
executors from the shared work directory), ``spark-submit txcluster/spark_submit.py
load`` and ``txcluster audit`` run there against a 2-worker txcluster cluster; the rejects
name exactly the bad lines, the cluster holds exactly the good statements, the audit
finds the replicas identical, and the Spark master lists the four applications.

Every process started here is stopped by its process group's id (its PID), also on
failure. Needs root (unshare --mount) and Java; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("pyspark")

from pyspark.find_spark_home import _find_spark_home

ROOT = Path(__file__).resolve().parents[1]
# One small executor; few shuffle partitions (Spark's 200 are one task each, ~0.1 s apiece).
# Every JVM here (the daemons, each application's driver and executor) lives for a minute
# or two on a busy 2-core machine: C1 only (no C2 compiler threads competing with the job)
# and the serial collector start and run such short JVMs faster. Nothing Spark does
# depends on either.
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SPARK_CONF = ["spark.executor.cores=1", "spark.cores.max=1", "spark.executor.memory=512m",
              "spark.sql.shuffle.partitions=2", f"spark.driver.extraJavaOptions={JVM_OPTS}",
              f"spark.executor.extraJavaOptions={JVM_OPTS}"]
RUN_TIMEOUT = 420  # one Spark application, on a busy 2-core machine


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: the Spark worker runs in a mount namespace (unshare --mount)"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    if shutil.which("java") is None:
        return "no java on PATH for the Spark master and worker"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True)
    if probe.returncode:
        return f"unshare --mount is not permitted here: {probe.stderr.decode().strip()}"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _under(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents


def _hidden_paths() -> list[Path]:
    """What the worker must not see: this checkout, the virtualenv, its base Python
    (unless that is the system's own /usr, which Java and sh live in too)."""
    candidates = [ROOT, Path(sys.prefix), Path(sys.prefix).resolve(),
                  Path(os.path.realpath(sys.executable)).parents[1]]
    system = [Path(p).resolve() for p in ("/", "/usr", "/usr/local", "/bin")]
    java = Path(os.path.realpath(shutil.which("java") or "/"))
    out: list[Path] = []
    for p in sorted({c.resolve() for c in candidates}, key=lambda p: len(p.parts)):
        if p in system or _under(java, p) or any(_under(p, q) for q in out):
            continue
        out.append(p)
    return out


def _clean_env(**extra: str) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                        "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "SPARK_HOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p != venv_bin)
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1",
               SPARK_DAEMON_JAVA_OPTS=JVM_OPTS, **extra)
    return env


class Started:
    """Processes started here, each in a process group of its own (its PID): stopping
    it stops what it started too (a Spark worker's executors and their Pythons)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
        with open(log, "wb") as out:
            proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(wait)
                except subprocess.TimeoutExpired:
                    continue
                # The group may outlive its leader for a moment (executors).
                time.sleep(0.5)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class SparkCluster:
    def __init__(self, root: Path, spark_home: Path) -> None:
        self.root, self.spark_home = root, spark_home
        self.port, self.web = _free_port(), _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.started = Started()

    def state(self) -> dict:
        return httpx.get(f"http://127.0.0.1:{self.web}/json/", timeout=5).json()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}"
                         for p in sorted(self.root.glob("*.log")))

    def wait(self, condition, what: str, timeout: float = 180) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                state = self.state()
                if condition(state):
                    return state
            except (httpx.HTTPError, ValueError):
                pass
            for proc in self.started.procs:
                assert proc.poll() is None, f"exited {proc.returncode}:\n{self.logs()}"
            assert time.monotonic() < deadline, f"not {what} in {timeout}s:\n{self.logs()}"
            time.sleep(0.5)

    def start(self, hidden: list[Path]) -> None:
        spark_class = self.spark_home / "bin" / "spark-class"
        self.started.start(
            [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(self.port), "--webui-port", str(self.web)],
            self.root / "master.log", _clean_env(
                SPARK_HOME=str(self.spark_home),
                # Its REST submission server would listen on the fixed port 6066.
                SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false"))
        self.wait(lambda s: s.get("status") == "ALIVE", "master ALIVE")
        # The worker's node: Spark installed elsewhere (a bind mount), no checkout, no
        # virtualenv, no base Python; the ok file says the namespace was as meant.
        home = self.root / "spark-home"
        home.mkdir()
        (self.root / "work").mkdir()
        ok = self.root / "namespace-ok"
        lines = ["set -e", f"mount --bind '{self.spark_home}' '{home}'"]
        lines += [f"mount -t tmpfs -o size=1m tmpfs '{p}'" for p in hidden]
        lines += [f"[ -z \"$(ls -A '{p}')\" ]" for p in hidden]
        lines += [f"touch '{ok}'",
                  f"exec '{home}/bin/spark-class' org.apache.spark.deploy.worker.Worker "
                  f"'{self.url}' --host 127.0.0.1 --cores 1 --memory 1g "
                  f"--webui-port {_free_port()} --work-dir '{self.root / 'work'}'"]
        self.started.start(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(lines)],
            self.root / "worker.log", _clean_env(SPARK_HOME=str(home)))
        self.wait(lambda s: s.get("aliveworkers", 0) >= 1, "a worker registered")
        assert ok.exists(), self.logs()


@pytest.fixture
def spark_cluster(tmp_path_factory) -> Iterator[SparkCluster]:
    root = tmp_path_factory.mktemp("spark-standalone")
    hidden = _hidden_paths()
    assert not any(_under(root.resolve(), p) for p in hidden), (root, hidden)
    cluster = SparkCluster(root, Path(_find_spark_home()).resolve())
    try:
        cluster.start(hidden)
        yield cluster
    finally:
        cluster.started.stop_all()


# ---- the data: good statements and bad lines at known places ----


def _write(path: Path, good: range, bad: dict[int, str], repeat: range = range(0)) -> Path:
    """Lines: the statements <s{i}> <p> "v{i}" for ``good`` (then ``repeat``, already
    loaded), with ``bad[n]`` inserted as line n (1-based)."""
    lines = [f'<http://e/s{i}> <http://e/p> "v{i}" .' for i in (*good, *repeat)]
    for n in sorted(bad):
        lines.insert(n - 1, bad[n])
    path.write_text("\n".join(lines) + "\n")
    return path


BAD = ['<http://e/x> <http://e/p> .', 'not a triple at all',
       '<http://e/x> <http://e/p> "unterminated .', '<http://e/x> <http://e/p> <rel> .']


def _rejects(directory: Path) -> set[tuple[str, int]]:
    return {(Path(r["file"]).name, r["line"])
            for p in directory.glob("part-*.json")
            for r in map(json.loads, p.read_text().splitlines())}


def _run(args: list[str], env: dict[str, str], spark: SparkCluster,
         stderr: list[str] | None = None) -> str:
    """The command's stdout (its stderr appended to ``stderr`` when given)."""
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT,
                          stdin=subprocess.DEVNULL, cwd=spark.root)
    assert done.returncode == 0, (f"{args[:3]} exited {done.returncode}\nstdout:\n"
                                  f"{done.stdout}\nstderr:\n{done.stderr[-6000:]}\n"
                                  f"{spark.logs()}")
    if stderr is not None:
        stderr.append(done.stderr)
    return done.stdout


def test_load_and_audit_on_a_standalone_cluster(spark_cluster, cluster_factory,
                                               tmp_path_factory):
    spark = spark_cluster
    c = cluster_factory(2)
    shared = tmp_path_factory.mktemp("shared")  # inputs and the work directory
    (shared / "work").mkdir()
    first = _write(shared / "first.nt", range(0, 40), {4: BAD[0], 11: BAD[1], 30: BAD[2]})
    second = _write(shared / "second.nt", range(40, 60), {2: BAD[3], 7: BAD[1]},
                    repeat=range(0, 10))
    third = _write(shared / "third.nt", range(60, 70), {3: BAD[0]}, repeat=range(35, 45))
    env = _clean_env(PYTHONPATH=str(ROOT))
    cli = [sys.executable, "-m", "txcluster.cli"]
    cluster_args = ["--spark-master", spark.url,
                    *(a for kv in SPARK_CONF for a in ("--spark-conf", kv))]

    out = _run([*cli, "load", "--master", c.master.url, "--initial", *cluster_args,
                "--rejects", str(shared / "rejects-1"), str(first)], env, spark)
    assert "OK: every worker holds the expected fingerprint" in out, out
    assert _rejects(shared / "rejects-1") == {("first.nt", 4), ("first.nt", 11),
                                              ("first.nt", 30)}

    # Into a repository that holds data: the executors read its export (--work-dir).
    # The progress line (forced: stderr is not a terminal here) counts what the
    # executors parsed and rejected through Spark, as on local Spark.
    err: list[str] = []
    out = _run([*cli, "load", "--master", c.master.url, *cluster_args, "--progress",
                "--work-dir", str(shared / "work"), "--rejects", str(shared / "rejects-2"),
                str(second)], env, spark, err)
    assert "(10 were present already)" in out and "OK: every worker" in out, out
    assert _rejects(shared / "rejects-2") == {("second.nt", 2), ("second.nt", 7)}
    drawn = [line.strip() for part in err[0].split("\r") for line in part.splitlines()]
    head = c.status()["head"]["fingerprint"]
    assert f"parsed 30 quads, rejected 2, loaded 20, verification OK: 2/2 workers hold " \
        f"{head}" in drawn, err[0][-3000:]
    assert any("lines 32  parsed 30 quads  rejected 2" in line for line in drawn), drawn

    # spark-submit as the entry point, shipping what `txcluster spark-env` prints.
    ship = _run([*cli, "spark-env"], env, spark).split()
    assert ship[0] == "--archives" and ship[1].endswith("#environment"), ship
    assert f"spark.pyspark.driver.python={sys.executable}" in ship, ship
    out = _run([str(spark.spark_home / "bin" / "spark-submit"), "--master", spark.url,
                *(a for kv in SPARK_CONF for a in ("--conf", kv)), *ship,
                str(ROOT / "txcluster" / "spark_submit.py"), "load", "--master", c.master.url,
                "--work-dir", str(shared / "work"), "--rejects", str(shared / "rejects-3"),
                str(third)], env, spark)
    assert "(10 were present already)" in out and "OK: every worker" in out, out
    assert _rejects(shared / "rejects-3") == {("third.nt", 3)}

    rows = c.select("SELECT ?s ?p ?o WHERE { ?s ?p ?o }")
    assert sorted((r["s"], r["p"], r["o"]) for r in rows) == sorted(
        (f"http://e/s{i}", "http://e/p", f"v{i}") for i in range(70))

    a, b = (w.url for w in c.workers)
    out = _run([*cli, "audit", "--worker", a, "--worker", b, *cluster_args,
                "--work-dir", str(shared / "work")], env, spark)
    assert "identical: the two replicas hold the same quads" in out, out
    assert "70 quads" in out, out

    # The applications ran on the standalone master, with its worker's executor.
    apps = spark.state()["completedapps"]
    assert sorted(app["name"] for app in apps) == [
        "txcluster audit", "txcluster load", "txcluster load", "txcluster load"], apps
    assert all(app["state"] == "FINISHED" for app in apps), apps
    assert not list((shared / "work").iterdir())  # the exports were removed
