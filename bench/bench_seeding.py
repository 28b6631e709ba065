"""Seeding a data centre from a peer (issue 16): its time against the transfer of the image.

    .venv/bin/python -m bench.bench_seeding [--quads 1000000] [--workers 2]
        [--part-quads 200000] [--link-mbit N]

A one-master data centre (``txcluster.local.up``, ``--workers`` workers) is filled with
``--quads`` generated quads through the initial bulk load (``PUT
/admin/bulk-load/<id>/parts/<n>`` with N-Quads, then ``POST /admin/bulk-load/<id>``: no
transactions, so a million quads load in seconds), and waits until every worker is ON.
Then ``txcluster.local.join`` starts a second data centre seeded from it (sync-seed-from)
and adds it as a peer; the run waits until all its workers are ON at its head.

Printed: the seeding's own time (``started`` -> ``finished`` of ``GET /admin/sync``
"seeding" on the new master), end to end (from the join call and from the new master's
first log line until its workers are all ON), the image bytes, and the transfer rate of
the same image over the same link measured right after: a signed ``GET
/peer/seed/<name>`` from the donor master (worker -> donor master -> here, as the seeding
downloads it) into a file on the same disk, no hashing. The ratio time / (bytes / rate)
is issue 16's figure (target <= 1.25). The breakdown comes from the phase lines of the
new master's log (asking = the donor's checkpoint of its image's state; downloading =
the download, while the workers already receive it from the new master; installing =
they finish receiving, check and unpack it, and the log is rebased; replicating and then
until every worker is ON = the poll of the workers, and the usual recovery of one that
could not install the image).

The link: loopback by default, where the "transfer" is a memory copy and the seeding's
own CPU work (the donor packing and compressing its store, the new workers unpacking it)
is what the figure compares with it. ``--link-mbit N`` (root: a network lab of
tests/netlab.py) runs each data centre in a network namespace of its own, the two joined
by a link limited to N Mbit/s each way (an htb class, ``NetLab.slow``): the link between
two data centres that the issue's figure is about. The reference download then runs in
the new data centre's namespace, over that same link.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import xxhash

from bench._common import EX, rate, show, workdir
from rdfcore import fingerprint
from tests import netlab
from txcluster import local
from txcluster.local import NodeProcess, master_node, worker_node
from txinfra.auth import load_secret
from txinfra.signed_session import SignedSession

PHASE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*sync: seeding from \S+: (\w+)$")
TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def part(start: int, count: int) -> tuple[bytes, int]:
    """N-Quads of quads start..start+count (bench._common.quads' shape: 8 predicates a
    subject, one plain literal each) and their fingerprint sum. Built as text: these
    terms are already canonical, so the line is what the store holds and hashes."""
    lines = [f'<{EX}s{i // 8}> <{EX}p{i % 8}> "value {i}" .'
             for i in range(start, start + count)]
    h = xxhash.xxh3_128_intdigest
    return ("\n".join(lines) + "\n").encode(), sum(h(line.encode()) for line in lines)


def bulk_load(master: str, worker: str, quads: int, part_quads: int) -> float:
    """The initial bulk load of ``quads`` quads into ``worker``; seconds it took."""
    t0 = time.perf_counter()
    fp = 0
    with httpx.Client(timeout=3600) as c:
        for n, start in enumerate(range(0, quads, part_quads)):
            body, h = part(start, min(part_quads, quads - start))
            fp += h
            r = c.put(f"{master}/admin/bulk-load/bench/parts/{n}", params={"worker": worker},
                      content=body, headers={"content-type": "application/n-quads"})
            r.raise_for_status()
        r = c.post(f"{master}/admin/bulk-load/bench", json={
            "worker": worker, "fingerprint": fingerprint.to_hex(fp % fingerprint.MOD),
            "quads": quads})
        r.raise_for_status()
    return time.perf_counter() - t0


def wait_all_on(master: str, timeout: float = 3600) -> float:
    """Until every worker of ``master`` is ON at its head; the wall time then."""
    deadline = time.monotonic() + timeout
    last = None
    with httpx.Client(timeout=30) as c:
        while time.monotonic() < deadline:
            last = c.get(f"{master}/admin/status").json()
            head = last["head"]["seq"]
            if all(w["status"] == "ON" and w["seq"] == head for w in last["workers"]):
                return time.time()
            time.sleep(0.05)
    raise TimeoutError(f"workers of {master} not all ON after {timeout}s: {last}")


def log_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def phases(log: Path) -> tuple[float | None, dict[str, float]]:
    """The master's first log line's time, and when each seeding phase began."""
    first, out = None, {}
    for line in log.read_text(errors="replace").splitlines():
        if first is None and (m := TIMESTAMP.match(line)):
            first = log_time(m.group(1))
        if m := PHASE.match(line):
            out.setdefault(m.group(2), log_time(m.group(1)))
    return first, out


def worker_line(workers: list[dict], pattern: str) -> float | None:
    """The number a worker's log line matching ``pattern`` gives (its first group)."""
    for w in workers:
        text = (Path(w["dir"]) / "worker.log").read_text(errors="replace")
        if m := re.search(pattern, text):
            return float(m.group(1))
    return None


async def fetch(secret: bytes, url: str, target: Path) -> tuple[int, float]:
    """A signed GET of ``url`` into ``target``: (bytes, seconds)."""
    http = SignedSession(secret, timeout=3600)
    try:
        t0 = time.perf_counter()
        n = 0
        async with http.stream(url, {}, 600) as resp:
            if resp.status != 200:
                raise RuntimeError(f"{url}: {resp.status} {(await resp.read())[:300]!r}")
            with open(target, "wb") as fh:
                async for chunk in resp.content.iter_chunked(1 << 20):
                    fh.write(chunk)
                    n += len(chunk)
        return n, time.perf_counter() - t0
    finally:
        await http.close()


class Loopback:
    """Both data centres on this machine's loopback (``txcluster.local``)."""

    def __init__(self, root: Path) -> None:
        self.old, self.new = root / "old", root / "new"

    def donor(self, workers: int) -> dict:
        return local.up(self.old, masters=1, workers=workers)

    def join(self, workers: int) -> dict:
        return local.join(self.new, self.old, workers=workers)

    def fetch(self, secret_file: str, url: str, target: Path) -> tuple[int, float]:
        return asyncio.run(fetch(load_secret(secret_file), url, target))

    def close(self) -> None:
        if (self.new / "cluster.json").exists():
            local.down(self.new)
        if (self.old / "cluster.json").exists():
            local.down(self.old)


class Lab:
    """Each data centre in a network namespace of its own (hosts "dc1", "dc2" of a
    tests/netlab.py lab), the link between them limited to ``mbit`` each way. The bench
    reaches every node over the lab's management path, which the limit does not touch."""

    def __init__(self, root: Path, mbit: float) -> None:
        self.root = root
        self.nodes: list[NodeProcess] = []
        self.secret = local.new_secret(root / "secret")
        self.lab = netlab.NetLab(["dc1", "dc2"]).start()
        try:
            self.lab.slow("dc1", "dc2", delay_ms=0, rate_mbit=mbit)
        except BaseException:
            self.lab.close()
            raise

    def _dc(self, host: str, workers: int, props: dict[str, str]) -> dict:
        ip, ns = self.lab.service_ip(host), self.lab.netns(host)
        ws = [worker_node(self.root / host / f"worker{i}", self.secret, host=ip, netns=ns)
              for i in range(1, workers + 1)]
        for w in ws:
            w.write_config()
            w.start(wait=False)
            self.nodes.append(w)
        for w in ws:
            w.wait_ready()
        m = master_node(self.root / host / "master", self.secret, f"master{host[2:]}",
                        [w.url for w in ws], host=ip, netns=ns, **{"data-centre": host, **props})
        m.write_config()
        m.start(wait=False)
        self.nodes.insert(0, m)  # masters are stopped first
        return {"secret_file": str(self.secret),
                "masters": [{"id": m.properties["node-id"], "url": m.url,
                             "dir": str(m.directory)}],
                "workers": [{"url": w.url, "dir": str(w.directory)} for w in ws],
                "node": m}

    def donor(self, workers: int) -> dict:
        self.old = self._dc("dc1", workers, {})
        self.old["node"].wait_ready()
        local._wait_writable([self.old["masters"][0]["url"]])
        return self.old

    def join(self, workers: int) -> dict:
        """What ``txcluster.local.join`` does, in the lab: the new master seeds from the
        donor (sync-seed-from), then the donor takes it as a peer at runtime."""
        donor = self.old["masters"][0]
        new = self._dc("dc2", workers, {"sync-seed-from": donor["id"],
                                        "peer.1.id": donor["id"], "peer.1.url": donor["url"]})
        url = new["masters"][0]["url"]
        new["node"].wait_ready()
        local._wait_seeded(url, 3600)
        r = httpx.post(f"{donor['url']}/admin/sync/peers",
                       json={"id": new["masters"][0]["id"], "url": url}, timeout=30)
        r.raise_for_status()
        return new

    def fetch(self, secret_file: str, url: str, target: Path) -> tuple[int, float]:
        """The signed download, run in the new data centre's namespace: over the link."""
        out = subprocess.run(
            [*self.lab.exec_prefix("dc2"), sys.executable, "-m", "bench.bench_seeding",
             "--fetch", secret_file, url, str(target)],
            capture_output=True, text=True, timeout=3600, check=True)
        n, seconds = out.stdout.split()
        return int(n), float(seconds)

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        self.lab.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quads", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2, help="workers per data centre")
    ap.add_argument("--part-quads", type=int, default=200_000,
                    help="quads per bulk-load part")
    ap.add_argument("--transfers", type=int, default=2,
                    help="reference downloads of the image (the best counts)")
    ap.add_argument("--no-compression", action="store_true",
                    help="replication.compression=false on the donor (PUT /admin/parameters, "
                         "as an operator on a fast link would): a plain tar image")
    ap.add_argument("--link-mbit", type=float, default=0,
                    help="run each data centre in a network namespace, the link between "
                         "them limited to this many Mbit/s each way (root; default: both "
                         "on loopback, no limit)")
    ap.add_argument("--fetch", nargs=3, metavar=("SECRET_FILE", "URL", "TARGET"),
                    help=argparse.SUPPRESS)  # the lab's reference download, in a namespace
    args = ap.parse_args()
    if args.fetch:
        secret_file, url, target = args.fetch
        n, seconds = asyncio.run(fetch(load_secret(secret_file), url, Path(target)))
        print(n, seconds)
        return
    with workdir("seeding") as root:
        where = Lab(root, args.link_mbit) if args.link_mbit else Loopback(root)
        try:
            info = where.donor(args.workers)
            donor = info["masters"][0]["url"]
            if args.no_compression:
                r = httpx.put(f"{donor}/admin/parameters",
                              json={"replication_compression": False}, timeout=30)
                r.raise_for_status()
            load_s = bulk_load(donor, info["workers"][0]["url"], args.quads, args.part_quads)
            wait_all_on(donor)

            t_join = time.time()
            joined = where.join(args.workers)
            t_joined = time.time()
            master = joined["masters"][0]
            t_on = wait_all_on(master["url"])
            seeding = httpx.get(f"{master['url']}/admin/sync", timeout=30).json()["seeding"]
            first_line, phase = phases(Path(master["dir"]) / "master.log")
            phase.setdefault("asking", seeding["started"])  # set before any phase line
            assert seeding["phase"] == "done", seeding
            # The same image, the same link: the donor master streams it from its worker.
            name = f"seed-{master['id']}"
            transfers = [where.fetch(info["secret_file"],
                                     f"{donor}/peer/seed/{name}?peer={master['id']}",
                                     root / "copy.image")
                         for _ in range(args.transfers)]
            (root / "copy.image").unlink()
            # Context: the worker that wrote the image, read directly (no master between).
            donor_log = (Path(info["masters"][0]["dir"]) / "master.log").read_text()
            holder = re.search(rf"image '{name}' of (\S+) for", donor_log)
            direct = asyncio.run(fetch(load_secret(info["secret_file"]),
                                       f"{holder.group(1)}/cluster/backups/{name}",
                                       root / "copy.image")) if holder else None
            # The workers' own account: the donor's writing the image while it was read,
            # the new worker's pull (receive + unpack as it arrives + checksum + swap).
            written = worker_line(info["workers"], rf"image '{name}' written while read: "
                                                   r"\d+ bytes in ([\d.]+) s")
            pulled = worker_line(joined["workers"], r"pulled and installed the image of "
                                                    rf"\S+/cluster/seed-image/{name} in "
                                                    r"([\d.]+) s")
        finally:
            where.close()
    total = seeding["total"]
    for n, _ in transfers:
        assert n == total, f"reference download got {n} bytes, the image has {total}"
    ref_s = min(s for _, s in transfers)
    ref_rate = rate(total, ref_s)
    seed_s = seeding["finished"] - seeding["started"]
    e2e_s = t_on - seeding["started"]
    rows = [
        ("quads", f"{args.quads:,} ({args.workers} workers per data centre)"),
        ("bulk load of the donor", f"{load_s:.1f} s = {rate(args.quads, load_s):,.0f} quads/s"),
        ("image", f"{total:,} bytes ({total / 2**20:.1f} MiB, "
                  f"{'plain tar' if args.no_compression else 'snappy-framed'})"),
        ("reference transfer", "  ".join(f"{s:.2f} s" for _, s in transfers)
         + f" -> best {ref_rate / 2**20:.1f} MiB/s (signed GET /peer/seed/{name} via the "
           f"donor master into a file)"),
        ("worker direct (context)", f"{direct[1]:.2f} s = "
                                    f"{rate(direct[0], direct[1]) / 2**20:.1f} MiB/s"
         if direct else "(the holder was not in the donor's log)"),
        ("seeding started -> finished", f"{seed_s:.2f} s"),
        ("ratio time / (bytes / rate)", f"{seed_s / ref_s:.2f} (target <= 1.25)"),
        ("started -> all workers ON", f"{e2e_s:.2f} s (ratio {e2e_s / ref_s:.2f})"),
        ("join call -> all workers ON", f"{t_on - t_join:.2f} s (join returned after "
                                        f"{t_joined - t_join:.2f} s)"),
    ]
    rows.append(("donor worker writes the image (while read)",
                 f"{written:.2f} s" if written is not None else "(not in its log)"))
    rows.append(("new worker pulls and installs it (while downloaded)",
                 f"{pulled:.2f} s" if pulled is not None else "(not in its log)"))
    if first_line is not None:
        rows.append(("master's first log line -> ON", f"{t_on - first_line:.2f} s"))
    order = ["asking", "downloading", "installing", "replicating", "done"]
    marks = [(p, phase[p]) for p in order if p in phase] + [("ON", t_on)]
    what = {"asking": "donor's checkpoint: the image's state",
            "downloading": "donor writes + download; the workers unpack meanwhile",
            "installing": "the workers finish, check, swap; log rebased",
            "replicating": "poll of the workers",
            "done": "until every worker is ON"}
    for (p, t), (_, t2) in itertools.pairwise(marks):
        rows.append((f"  {p} ({what.get(p, p)})", f"{t2 - t:.2f} s"))
    link = f"a {args.link_mbit:g} Mbit/s link" if args.link_mbit else "loopback"
    show(f"Seeding a data centre from a peer (1 master + workers each, {link})", rows)


if __name__ == "__main__":
    main()
