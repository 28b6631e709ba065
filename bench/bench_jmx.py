"""JMX bridge benchmark (issue: JMX management bridge). Real processes on loopback.

1. JVM start time inside the master (its log line "JVM started in X s") and the master's
   time to ready, with and without the bridge;
2. the master's RSS with the bridge and without it, after start and after JMX traffic
   (a Java JMX client reading every attribute, when javac is there; Jolokia reads)
   (targets: <= 250 MB with, <= 120 MB without);
3. latency of a Jolokia read and of a remote JMX read.

Run: .venv/bin/python -m bench.bench_jmx
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench._common import Timer, pct, show, workdir
from master_service.jmx.attributes import object_name
from txcluster import local

JAVA_CLIENT = Path(__file__).parent.parent / "tests" / "java" / "JmxClient.java"
NAME = object_name("m1")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        kb = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    return kb / 1024


# sqlite_utils imports pandas and numpy whenever they are installed (the `pipeline` extra
# installs them), ~80 MB of the master's RSS; a master-only install does not have them.
WITHOUT_PANDAS = ("import sys; sys.modules['pandas'] = sys.modules['numpy'] = None; "
                  "from txcluster.cli import main; main()")


def start(master: local.NodeProcess, without_pandas: bool) -> None:
    if not without_pandas:
        master.start()
        return
    master.write_config()
    with open(master.log_path, "ab") as log:
        master.proc = subprocess.Popen(
            [sys.executable, "-c", WITHOUT_PANDAS, "master", "--config", str(master.config)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    master.pid = master.proc.pid
    master.wait_ready()


def run_master(root: Path, jmx: bool, classes: Path | None,
               without_pandas: bool = False) -> dict[str, float]:
    secret = local.new_secret(root)
    worker = local.worker_node(root / "w", secret)
    worker.start()
    nodes = [worker]
    try:
        jmx_port = local.free_port()
        master = local.master_node(root / "m", secret, "m1", [worker.url],
                                   **({"jmx.port": str(jmx_port)} if jmx else {}))
        nodes.append(master)
        with Timer() as ready:
            start(master, without_pandas)
        assert master.pid is not None
        time.sleep(2)
        result = {"ready_s": ready.seconds, "rss_start_mb": rss_mb(master.pid)}
        if jmx:
            found = re.search(r"JVM started in ([0-9.]+) s", master.log_tail(100_000))
            result["jvm_start_s"] = float(found.group(1)) if found else float("nan")
        url = f"{master.url}/jolokia/read/{NAME.replace('/', '!/')}/Status"
        with httpx.Client(timeout=10) as client:
            client.get(url)
            times = []
            for _ in range(200):
                with Timer() as t:
                    assert client.get(url).json()["status"] == 200
                times.append(t.seconds)
        result["jolokia_p50_ms"] = 1000 * pct(times, 50)
        if jmx and classes is not None:
            service_url = local.jmx_service_url("127.0.0.1", jmx_port)
            cmd = ["java", "-cp", str(classes), "JmxClient", service_url, NAME, "-", "-",
                   *(["getall"] * 5), *(["get\tStatus"] * 200)]
            with Timer() as t:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
            assert out.count("OK\t") >= 200, out[-2000:]
            result["jmx_client_run_s"] = t.seconds
        result["rss_after_traffic_mb"] = rss_mb(master.pid)
        return result
    finally:
        for node in reversed(nodes):
            node.stop()


def main() -> None:
    with workdir("jmx") as root:
        classes: Path | None = None
        if shutil.which("javac"):
            classes = root / "classes"
            subprocess.run(["javac", "-d", str(classes), str(JAVA_CLIENT)], check=True)
        without = run_master(root / "without", jmx=False, classes=None)
        with_jmx = run_master(root / "with", jmx=True, classes=classes)
        lean = run_master(root / "lean", jmx=False, classes=None, without_pandas=True)
        lean_jmx = run_master(root / "lean-jmx", jmx=True, classes=classes,
                              without_pandas=True)
    rows = [
        ("JVM start inside the master", f"{with_jmx['jvm_start_s']:.2f} s"),
        ("master ready, without / with bridge",
         f"{without['ready_s']:.2f} s / {with_jmx['ready_s']:.2f} s"),
        ("master RSS after start, without / with",
         f"{without['rss_start_mb']:.0f} MB / {with_jmx['rss_start_mb']:.0f} MB"),
        ("master RSS after traffic, without / with (targets <= 120 / <= 250 MB)",
         f"{without['rss_after_traffic_mb']:.0f} MB / "
         f"{with_jmx['rss_after_traffic_mb']:.0f} MB"),
        ("  the same without pandas/numpy (master-only install), without / with",
         f"{lean['rss_after_traffic_mb']:.0f} MB / {lean_jmx['rss_after_traffic_mb']:.0f} MB"),
        ("bridge cost (RSS with - without)",
         f"{with_jmx['rss_after_traffic_mb'] - without['rss_after_traffic_mb']:.0f} MB"),
        ("Jolokia read p50, without / with",
         f"{without['jolokia_p50_ms']:.2f} ms / {with_jmx['jolokia_p50_ms']:.2f} ms"),
    ]
    if "jmx_client_run_s" in with_jmx:
        rows.append(("Java JMX client: connect + 5 x getall + 200 reads",
                     f"{with_jmx['jmx_client_run_s']:.2f} s"))
    show("JMX bridge", rows)


if __name__ == "__main__":
    main()
