"""Peering that runs for months (issue 16): bounded memory and txlog under many writes.

    .venv/bin/python -m bench.bench_peering_soak [--writes 200000] [--warmup 20000]
        [--log-max-size 1000] [--writers 4] [--samples 10]

Three peered masters on loopback (``txcluster up --masters 3 --workers 1``), LogMaxSize
written over Jolokia on every master, then small writes (one-statement INSERT DATA) by
``--writers`` client threads per master until ``--writes`` are acknowledged. After
``--warmup`` writes and then ``--samples`` times until the end, each master's RSS
(/proc/<pid>/status VmRSS), its txlog file size (txlog.db + its WAL) and its agreed queue
(floor, entries held: GET /admin/sync) and its replay cache (txcluster_credential_nonces
of /metrics) are read. Prints each master's growth from the
warm-up sample to the end (target: RSS and txlog size grow <= 5 %) and the write rate.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench._common import EX, show, workdir
from bench.bench_master import Conn
from txcluster import local

PATH = "/repositories/repo/statements"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def txlog_bytes(data_dir: str) -> int:
    return sum(p.stat().st_size for p in Path(data_dir).glob("txlog.db*"))


def nonces(url: str) -> int:
    """txcluster_credential_nonces of /metrics: the replay cache's size."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        if family.name == "txcluster_credential_nonces":
            return int(family.samples[0].value)
    raise RuntimeError(f"no txcluster_credential_nonces in {url}/metrics")


def sample(masters: list[dict]) -> list[dict]:
    out = []
    for m in masters:
        st = httpx.get(f"{m['url']}/admin/sync", timeout=30).json()
        out.append({"rss": rss_kib(m["pid"]), "txlog": txlog_bytes(m["data_dir"]),
                    "seq": st["seq"], "floor": st["floor"], "held": st["agreed_held"],
                    "nonces": nonces(m["url"])})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=200_000)
    ap.add_argument("--warmup", type=int, default=20_000)
    ap.add_argument("--log-max-size", type=int, default=1000)
    ap.add_argument("--writers", type=int, default=4, help="client threads per master")
    ap.add_argument("--samples", type=int, default=10)
    args = ap.parse_args()
    with workdir("peering-soak") as root:
        info = local.up(root / "c", masters=3, workers=1)
        try:
            masters = info["masters"]
            for m in masters:
                r = httpx.post(m["jolokia_url"], json={
                    "type": "write", "mbean": f"ReplicationCluster:name=ClusterInfo/{m['id']}",
                    "attribute": "LogMaxSize", "value": args.log_max_size}, timeout=30)
                assert r.json()["status"] == 200, r.text
            done = [0]
            lock = threading.Lock()
            errors: list[str] = []
            marks = [args.warmup] + [args.warmup + (args.writes - args.warmup) * k
                                     // args.samples for k in range(1, args.samples + 1)]
            samples: list[tuple[int, float, list[dict]]] = []

            def run(k: int, url: str) -> None:
                c = Conn(url)
                i = 0
                while True:
                    with lock:
                        if done[0] >= args.writes:
                            break
                    try:
                        c.update(PATH, f'INSERT DATA {{ <{EX}w{k}-{i}> <{EX}p> "{i}" }}')
                    except Exception as exc:  # counted, reported; the soak goes on
                        errors.append(f"{type(exc).__name__}: {exc}"[:200])
                        c.close()
                        c = Conn(url)
                        continue
                    i += 1
                    with lock:
                        done[0] += 1
                c.close()

            t0 = time.monotonic()
            threads = [threading.Thread(target=run, args=(k, m["url"]), daemon=True)
                       for k, m in enumerate(m for m in masters for _ in range(args.writers))]
            for t in threads:
                t.start()
            for mark in marks:
                while done[0] < mark and any(t.is_alive() for t in threads):
                    time.sleep(0.5)
                samples.append((done[0], time.monotonic() - t0, sample(masters)))
                print(f"{done[0]:>8} writes {samples[-1][1]:7.0f} s  " + "  ".join(
                    f"{m['id']}: rss {s['rss'] / 1024:.1f} MiB txlog "
                    f"{s['txlog'] / 2**20:.2f} MiB held {s['held']} nonces {s['nonces']}"
                    for m, s in zip(masters, samples[-1][2], strict=True)), flush=True)
            for t in threads:
                t.join()
            elapsed = time.monotonic() - t0
            time.sleep(3)  # the last statuses carry everybody's executed position
            samples.append((done[0], time.monotonic() - t0, sample(masters)))
        finally:
            local.down(root / "c")
    first, last = samples[0][2], samples[-1][2]
    rows = [("writes", f"{done[0]} in {elapsed:.0f} s = {done[0] / elapsed:.0f} writes/s "
                       f"({len(errors)} client errors{': ' + errors[0] if errors else ''})"),
            ("LogMaxSize", str(args.log_max_size))]
    worst = 0.0
    for m, a, b in zip(masters, first, last, strict=True):
        g_rss = (b["rss"] - a["rss"]) / a["rss"] * 100
        g_log = (b["txlog"] - a["txlog"]) / a["txlog"] * 100
        worst = max(worst, g_rss, g_log)
        rows.append((f"{m['id']} RSS after {args.warmup} -> end",
                     f"{a['rss'] / 1024:.1f} -> {b['rss'] / 1024:.1f} MiB ({g_rss:+.1f} %)"))
        rows.append((f"{m['id']} txlog after {args.warmup} -> end",
                     f"{a['txlog'] / 2**20:.2f} -> {b['txlog'] / 2**20:.2f} MiB "
                     f"({g_log:+.1f} %)"))
        rows.append((f"{m['id']} agreed queue at the end",
                     f"position {b['seq']}, floor {b['floor']}, {b['held']} entries held"))
    rows.append(("largest growth", f"{worst:+.1f} % (target <= 5 %)"))
    show("Peered masters soak: bounded agreed state (3 masters x 1 worker, loopback)", rows)


if __name__ == "__main__":
    main()
