"""Seeding a data centre from a peer (issue 16): its time against the transfer of the image.

    .venv/bin/python -m bench.bench_seeding [--quads 1000000] [--workers 2]
        [--part-quads 200000]

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
new master's log (asking = the donor writes its image; downloading = the download, while
the first worker already receives it from the new master; installing = that worker
finishes receiving, checks and unpacks it, and the log is rebased; replicating and then
until the other workers are ON = the usual recovery).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import time
from datetime import datetime
from pathlib import Path

import httpx
import xxhash

from bench._common import EX, rate, show, workdir
from rdfcore import fingerprint
from txcluster import local
from txcluster.auth import load_secret
from txcluster.signed_session import SignedSession

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
    args = ap.parse_args()
    with workdir("seeding") as root:
        old, new = root / "old", root / "new"
        try:
            info = local.up(old, masters=1, workers=args.workers)
            donor = info["masters"][0]["url"]
            if args.no_compression:
                r = httpx.put(f"{donor}/admin/parameters",
                              json={"replication_compression": False}, timeout=30)
                r.raise_for_status()
            load_s = bulk_load(donor, info["workers"][0]["url"], args.quads, args.part_quads)
            wait_all_on(donor)

            t_join = time.time()
            joined = local.join(new, old, workers=args.workers)
            t_joined = time.time()
            master = joined["masters"][0]
            t_on = wait_all_on(master["url"])
            seeding = httpx.get(f"{master['url']}/admin/sync", timeout=30).json()["seeding"]
            first_line, phase = phases(Path(master["dir"]) / "master.log")
            phase.setdefault("asking", seeding["started"])  # set before any phase line
            assert seeding["phase"] == "done", seeding
            # The same image, the same link: the donor master streams it from its worker.
            secret = load_secret(info["secret_file"])
            name = f"seed-{master['id']}"
            transfers = [asyncio.run(fetch(
                secret, f"{donor}/peer/seed/{name}?peer={master['id']}", root / "copy.image"))
                for _ in range(args.transfers)]
            (root / "copy.image").unlink()
            # Context: the worker that wrote the image, read directly (no master between).
            donor_log = (Path(info["masters"][0]["dir"]) / "master.log").read_text()
            holder = re.search(rf"image '{name}' of (\S+) for", donor_log)
            direct = asyncio.run(fetch(secret, f"{holder.group(1)}/cluster/backups/{name}",
                                       root / "copy.image")) if holder else None
            # The workers' own account: the donor's writing the image while it was read,
            # the new worker's pull (receive + unpack as it arrives + checksum + swap).
            written = worker_line(info["workers"], rf"image '{name}' written while read: "
                                                   r"\d+ bytes in ([\d.]+) s")
            pulled = worker_line(joined["workers"], r"pulled and installed the image of "
                                                    rf"\S+/cluster/seed-image/{name} in "
                                                    r"([\d.]+) s")
        finally:
            if (new / "cluster.json").exists():
                local.down(new)
            local.down(old)
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
            "downloading": "donor writes + download; first worker unpacks meanwhile",
            "installing": "that worker finishes, checks, swaps; log rebased",
            "replicating": "poll of the workers",
            "done": "other workers replicated until ON"}
    for (p, t), (_, t2) in itertools.pairwise(marks):
        rows.append((f"  {p} ({what.get(p, p)})", f"{t2 - t:.2f} s"))
    show("Seeding a data centre from a peer (1 master + workers each, loopback)", rows)


if __name__ == "__main__":
    main()
