"""Local clusters on loopback: `txcluster up` / `txcluster down`, and the same process
handling for tests and benchmarks (one way to start a node: its CLI, in the background).

Every node is a real process started as users start it (`txcluster worker --config ...`,
`txcluster master --config ...`) in its own session, so it outlives `make run`; its PID is
written to DIR/cluster.json and `down` stops exactly those PIDs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from master_service.jmx import jmx_service_url
from txinfra.auth import write_secret

_handed_out: set[int] = set()


def free_port() -> int:
    """A port nothing listens on now and that this process has not handed out before.

    The kernel may give a just-released port again, so two nodes configured before
    either starts could get the same one; remembering what we handed out closes that."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port that was not handed out already")


@dataclass
class NodeProcess:
    """One node: a properties file, a data dir, a log file, a process."""

    kind: str  # "worker" | "master"
    directory: Path
    properties: dict[str, str]
    port: int
    pid: int | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)
    host: str = "127.0.0.1"  # the address it listens on and is reached at
    netns: str | None = None  # run in this network namespace (`ip netns exec`, root only)

    @property
    def url(self) -> str:
        # A node with a certificate serves HTTPS only (txinfra/tls.py).
        scheme = "https" if self.properties.get("tls-cert-file") else "http"
        return f"{scheme}://{self.host}:{self.port}"

    @property
    def config(self) -> Path:
        return self.directory / ("worker.properties" if self.kind == "worker"
                                 else "cluster.properties")

    @property
    def log_path(self) -> Path:
        return self.directory / f"{self.kind}.log"

    def write_config(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))

    def start(self, wait: bool = True, timeout: float = 60, detach: bool = False) -> NodeProcess:
        if not self.config.exists():
            self.write_config()
        with open(self.log_path, "ab") as log:
            # `ip netns exec` execs the node: the PID is still the node's own.
            prefix = ["ip", "netns", "exec", self.netns] if self.netns else []
            self.proc = subprocess.Popen(
                [*prefix, sys.executable, "-m", "txcluster.cli", self.kind,
                 "--config", str(self.config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=detach,
            )
        self.pid = self.proc.pid
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2,
                             verify=self.tls_verify()).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.kind} at {self.url} not ready after {timeout}s:\n"
                           f"{self.log_tail()}")

    def tls_verify(self) -> ssl.SSLContext | bool:
        """How a client of this node verifies it: its own tls-ca-file (local clusters sign
        every node with one CA), else the system's CAs."""
        ca = self.properties.get("tls-ca-file")
        return ssl.create_default_context(cafile=ca) if ca else True

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() \
            else ""

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid is not None and _pid_alive(self.pid)

    def kill9(self) -> None:
        if self.pid and self.alive():
            os.kill(self.pid, signal.SIGKILL)
            if self.proc is not None:
                self.proc.wait(10)

    def stop(self, timeout: float = 15) -> None:
        if not self.pid or not self.alive():
            return
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None:
                if self.proc.poll() is not None:
                    return
            elif not _pid_alive(self.pid):
                return
            time.sleep(0.05)
        self.kill9()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


def worker_node(directory: Path, secret_file: Path, repository_id: str = "repo",
                port: int | None = None, host: str = "127.0.0.1", netns: str | None = None,
                **extra: str) -> NodeProcess:
    port = port or free_port()
    props = {
        "repository-id": repository_id,
        "data-dir": str(directory / "data"),
        "listen-address": f"{host}:{port}",
        "cluster-secret-file": str(secret_file),
        **extra,
    }
    return NodeProcess("worker", directory, props, port, host=host, netns=netns)


def new_secret(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "cluster.secret"
    if not path.exists():
        write_secret(path)
    return path


def read_cluster(directory: Path) -> dict:
    path = directory / "cluster.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: no cluster was started there")
    return json.loads(path.read_text())


def down(directory: Path) -> list[int]:
    """Stop every process listed in DIR/cluster.json, by PID. A data centre that joined
    another cluster (``join``) leaves the peers of its masters first, so that they do not
    wait for it."""
    info = read_cluster(directory)
    if info.get("joined"):
        for m in info["masters"]:
            for peer in m.get("peers", []):
                with contextlib.suppress(httpx.HTTPError):
                    httpx.delete(f"{peer['url']}/admin/sync/peers/{m['id']}", timeout=10)
    stopped = []
    nodes = [*info.get("masters", []), *info.get("workers", [])]
    for node in nodes:
        proc = NodeProcess(node["kind"], Path(node["dir"]), {}, 0, pid=node["pid"])
        if proc.alive():
            proc.stop()
            stopped.append(node["pid"])
    return stopped


def master_node(directory: Path, secret_file: Path, node_id: str, workers: list[str],
                repository_id: str = "repo", port: int | None = None,
                host: str = "127.0.0.1", netns: str | None = None,
                **extra: str) -> NodeProcess:
    port = port or free_port()
    props = {
        "node-id": node_id,
        "master-url": f"http://{host}:{port}",
        "repository-id": repository_id,
        "listen-address": f"{host}:{port}",
        "data-dir": str(directory / "data"),
        "cluster-secret-file": str(secret_file),
        **{f"worker.{i}.url": url for i, url in enumerate(workers, 1)},
        **extra,
    }
    return NodeProcess("master", directory, props, port, host=host, netns=netns)


def up(directory: Path, masters: int = 1, workers: int = 3, base_port: int | None = None,
       repository_id: str = "repo", jmx: bool = False) -> dict:
    """Start ``masters`` masters, each with ``workers`` workers, as background processes
    on loopback; wait until every node answers; write DIR/cluster.json.

    ``jmx``: each master also serves its MBean over remote JMX on a port of its own
    (cluster.json: ``jmx_service_url``); every master serves Jolokia (``jolokia_url``)."""
    directory = directory.resolve()
    if (directory / "cluster.json").exists():
        info = read_cluster(directory)
        if any(NodeProcess(n["kind"], Path(n["dir"]), {}, 0, pid=n["pid"]).alive()
               for n in [*info["masters"], *info["workers"]]):
            raise FileExistsError(f"a cluster is already running in {directory}: "
                                  f"`txcluster down --dir {directory}` first")
    directory.mkdir(parents=True, exist_ok=True)
    secret_file = new_secret(directory)
    ports = iter(range(base_port, base_port + 1000)) if base_port else None

    def port() -> int:
        return next(ports) if ports else free_port()

    # Masters peer with each other (one per data centre, all read-write): their ports
    # are chosen first so that each one's peer.<n>.url is known when it is configured.
    master_ports = [port() for _ in range(masters)]

    started: list[NodeProcess] = []
    info: dict = {"repository": repository_id, "secret_file": str(secret_file),
                  "masters": [], "workers": []}
    try:
        for m in range(max(masters, 1)):
            dc = f"dc{m + 1}"
            ws = _start_workers(directory / dc, workers, secret_file, repository_id, port,
                                started, info, f"master{m + 1}" if masters else None, dc)
            if not masters:
                continue
            jmx_port = port() if jmx else None
            node = master_node(directory / dc / "master", secret_file, f"master{m + 1}",
                               [w.url for w in ws], repository_id, master_ports[m],
                               **_peering(m, master_ports),
                               **({"jmx.port": str(jmx_port)} if jmx_port else {}))
            node.write_config()
            node.start(detach=True)
            started.append(node)
            info["masters"].append({"kind": "master", "id": f"master{m + 1}", "url": node.url,
                                    "pid": node.pid, "dir": str(node.directory),
                                    "config": str(node.config),
                                    "data_dir": node.properties["data-dir"],
                                    "data_centre": dc,
                                    "peers": [{"id": f"master{k + 1}",
                                               "url": f"http://127.0.0.1:{p}",
                                               "data_centre": f"dc{k + 1}"}
                                              for k, p in enumerate(master_ports) if k != m],
                                    "jmx_service_url": jmx_service_url("127.0.0.1", jmx_port)
                                    if jmx_port else None,
                                    "jolokia_url": f"{node.url}/jolokia"})
    except BaseException:
        for node in started:
            node.stop()
        raise
    if masters:
        _wait_writable([m["url"] for m in info["masters"]])
    (directory / "cluster.json").write_text(json.dumps(info, indent=2))
    return info


def join(directory: Path, existing: Path, workers: int = 3, timeout: float = 3600) -> dict:
    """One more data centre on this machine for the cluster running in ``existing``: a
    master and ``workers`` workers, started in ``directory``. Its master peers with every
    master of that cluster (those in EXISTING/cluster.json and the peers they report),
    seeds its data centre from the first one's worker image (sync-seed-from), and once
    seeded is added as a sync peer to each of them at runtime (persisted; no restart).
    Writes DIR/cluster.json with ``joined``: ``down`` removes it from their peers again."""
    directory, existing = directory.resolve(), existing.resolve()
    old = read_cluster(existing)
    if not old["masters"]:
        raise RuntimeError(f"the cluster in {existing} has no master to join")
    if (directory / "cluster.json").exists() and any(
            NodeProcess(n["kind"], Path(n["dir"]), {}, 0, pid=n["pid"]).alive()
            for n in [*read_cluster(directory)["masters"], *read_cluster(directory)["workers"]]):
        raise FileExistsError(f"a cluster is already running in {directory}")
    peers: dict[str, str] = {}  # node id -> url: the masters and the peers they know
    for m in old["masters"]:
        peers[m["id"]] = m["url"]
        r = httpx.get(f"{m['url']}/admin/sync", timeout=10)
        if r.status_code == 200:
            peers.update({p["id"]: p["url"] for p in r.json()["peers"]})
    n = 1 + max((int(i[6:]) for i in peers if i.startswith("master") and i[6:].isdigit()),
                default=0)
    node_id, dc = f"master{n}", f"dc{n}"
    secret_file = Path(old["secret_file"])
    started: list[NodeProcess] = []
    added: list[str] = []  # the old masters that took the new one as a peer
    info: dict = {"repository": old["repository"], "secret_file": str(secret_file),
                  "joined": str(existing), "masters": [], "workers": []}
    try:
        ws = _start_workers(directory / dc, workers, secret_file, old["repository"], free_port,
                            started, info, node_id, dc)
        props = {"data-centre": dc, "sync-seed-from": old["masters"][0]["id"]}
        for k, (peer, url) in enumerate(sorted(peers.items()), 1):
            props[f"peer.{k}.id"], props[f"peer.{k}.url"] = peer, url
        master = master_node(directory / dc / "master", secret_file, node_id,
                             [w.url for w in ws], old["repository"], free_port(), **props)
        master.write_config()
        master.start(detach=True)
        started.append(master)
        _wait_seeded(master.url, timeout)
        for url in peers.values():
            r = httpx.post(f"{url}/admin/sync/peers", json={"id": node_id, "url": master.url},
                           timeout=30)
            if r.status_code != 200:
                raise RuntimeError(f"{url} did not add {node_id} as a peer: "
                                   f"{r.status_code} {r.text}")
            added.append(url)
        info["masters"].append({"kind": "master", "id": node_id, "url": master.url,
                                "pid": master.pid, "dir": str(master.directory),
                                "config": str(master.config),
                                "data_dir": master.properties["data-dir"],
                                "data_centre": dc,
                                "peers": [{"id": p, "url": u} for p, u in peers.items()],
                                "jolokia_url": f"{master.url}/jolokia"})
        _wait_writable([master.url])
    except BaseException:
        # A join that failed leaves nothing behind: no process (there is no cluster.json
        # for `down` to find them by) and no old master waiting for a peer that is gone.
        for url in added:
            with contextlib.suppress(httpx.HTTPError):
                httpx.delete(f"{url}/admin/sync/peers/{node_id}", timeout=10)
        for node in started:
            node.stop()
        raise
    (directory / "cluster.json").write_text(json.dumps(info, indent=2))
    return info


def _start_workers(dc_dir: Path, n: int, secret_file: Path, repository_id: str,
                   port: Callable[[], int], started: list[NodeProcess], info: dict,
                   master: str | None, dc: str) -> list[NodeProcess]:
    """A data centre's ``n`` workers, started in the background and waited for; each is
    added to ``started`` (stopped on a failure) and to ``info["workers"]``."""
    ws = []
    for i in range(n):
        node = worker_node(dc_dir / f"worker{i + 1}", secret_file, repository_id, port())
        node.write_config()
        node.start(wait=False, detach=True)
        started.append(node)
        ws.append(node)
    for node in ws:
        node.wait_ready()
    for node in ws:
        info["workers"].append({"kind": "worker", "url": node.url, "pid": node.pid,
                                "dir": str(node.directory),
                                "data_dir": node.properties["data-dir"],
                                "config": str(node.config), "master": master,
                                "data_centre": dc})
    return ws


def _wait_seeded(url: str, timeout: float) -> None:
    """Until the master at ``url`` reports its seeding done (GET /admin/sync)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = httpx.get(f"{url}/admin/sync", timeout=5).json().get("seeding")
            if last and last.get("phase") == "done":
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"master {url} was not seeded after {timeout}s (last: {last})")


def _peering(m: int, master_ports: list[int]) -> dict[str, str]:
    """cluster.properties of master m+1: its data centre and every other master as peer."""
    props = {"data-centre": f"dc{m + 1}"}
    others = [(k, p) for k, p in enumerate(master_ports) if k != m]
    for n, (k, p) in enumerate(others, 1):
        props[f"peer.{n}.id"] = f"master{k + 1}"
        props[f"peer.{n}.url"] = f"http://127.0.0.1:{p}"
    return props


def _wait_writable(urls: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    for url in urls:
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).json().get("writable"):
                    break
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"master {url} did not become writable in {timeout}s")
            time.sleep(0.1)


def describe(info: dict) -> str:
    rid = info["repository"]
    lines = [f"txcluster is running (repository '{rid}'):"]
    for m in info["masters"]:
        lines.append(f"  master {m['id']} ({m['data_centre']}): {m['url']}  "
                     f"SPARQL endpoint {m['url']}/repositories/{rid}  admin {m['url']}/docs")
        if m.get("jmx_service_url"):
            lines.append(f"    JMX: jconsole {m['jmx_service_url']}  Jolokia: {m['jolokia_url']}")
    for w in info["workers"]:
        lines.append(f"  worker {w['url']}/repositories/{rid}  (read-only endpoint, "
                     f"{w['data_centre']})")
    first = info["masters"][0]["url"] if info["masters"] else info["workers"][0]["url"]
    lines += [
        "",
        "Try:",
        f"  curl -H 'Accept: text/csv' '{first}/repositories/{rid}"
        "?query=SELECT%20*%20WHERE%20%7B%3Fs%20%3Fp%20%3Fo%7D%20LIMIT%205'",
    ]
    if info["masters"]:
        lines += [
            f"  curl -X POST -H 'Content-Type: application/sparql-update' "
            f"--data 'INSERT DATA {{ <urn:a> <urn:b> \"hello\" }}' "
            f"{first}/repositories/{rid}/statements",
            f"  txcluster status --master {first}",
        ]
    lines.append("Stop it with: make stop   (or: txcluster down --dir DIR)")
    return "\n".join(lines)


SAMPLE = Path(__file__).parent / "sample" / "sample.ttl"
SAMPLE_QUERY = """PREFIX ex: <http://example.org/txcluster/>
PREFIX rdfs: <http://www.w3.org/2000/01/rdf-schema#>
SELECT ?dc ?label ?racks WHERE { ?dc a ex:DataCentre ; rdfs:label ?label ; ex:racks ?racks }
ORDER BY DESC(?racks)"""


def load_sample(info: dict) -> str:
    """Load the bundled sample data through the first master and run a sample query."""
    if not info["masters"]:
        raise RuntimeError("sample data is loaded through a master")
    url = f"{info['masters'][0]['url']}/repositories/{info['repository']}"
    r = httpx.post(f"{url}/statements", content=SAMPLE.read_bytes(),
                   headers={"content-type": "text/turtle"}, timeout=60)
    if r.status_code >= 300:
        raise RuntimeError(f"loading the sample data failed: {r.status_code} {r.text}")
    q = httpx.get(url, params={"query": SAMPLE_QUERY}, headers={"accept": "text/csv"},
                  timeout=60)
    size = httpx.get(f"{url}/size", timeout=60).text
    return (f"\nLoaded {SAMPLE.name} through the master ({size} statements). "
            f"Sample query:\n{SAMPLE_QUERY}\n\n{q.text}")
