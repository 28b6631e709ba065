"""What the master's check of an update costs a write (issue 60: at most 10 % of a
single-master commit).

    PYTHONPATH=$PWD .venv/bin/python -m bench.bench_update_check [--writes 200] [--workers 1]

A master parses every SPARQL update before it logs it (rdf4j_protocol/writes.py,
check_update: rdfcore/update_syntax.py, pyoxigraph's parse with nothing executed). For
updates of typical sizes — INSERT DATA of 1, 10, 100 and 1000 triples, and a DELETE/INSERT
WHERE — this prints the check's median time in this process and the p50 of a commit of
the same update through the master of `txcluster up --masters 1 --workers N`, measured in
the same run by one sequential client (bench_peer_commit.latencies), and their ratio.
The commit itself includes the check (it runs in the master's handler): the ratio is the
share of the commit's latency the check takes.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

import httpx

from bench import bench_anchor as ba
from bench._common import workdir
from bench.bench_peer_commit import latencies
from rdf4j_protocol.writes import check_update

TARGET = 0.10


def insert_data(triples: int) -> Callable[[int], str]:
    def text(k: int) -> str:
        s = f"urn:bench:check-{uuid.uuid4()}"
        body = " ".join(f'<{s}> <urn:bench:p{i}> "value {k} {i}" .' for i in range(triples))
        return f"INSERT DATA {{ {body} }}"
    return text


def modify(k: int) -> str:
    return ("PREFIX ex: <urn:bench:> DELETE { ?s ex:state ?old } "
            f'INSERT {{ ?s ex:state "v{k}" }} WHERE {{ ?s ex:p0 ?o OPTIONAL {{ ?s ex:state ?old }} '
            f'FILTER(?o = "value {k} 0") }}')


SHAPES: dict[str, Callable[[int], str]] = {
    "INSERT DATA, 1 triple": insert_data(1),
    "INSERT DATA, 10 triples": insert_data(10),
    "INSERT DATA, 100 triples": insert_data(100),
    "INSERT DATA, 1000 triples": insert_data(1000),
    "DELETE/INSERT WHERE": modify,
}


def check_us(text: str, repeat: int) -> float:
    """Median microseconds of the master's check of ``text``."""
    check_update(text)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        check_update(text)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def commit_ms(url: str, headers: dict[str, str], texts: list[str]) -> float:
    """p50 of sequential commits of ``texts`` (one writer, a kept-alive connection)."""
    out = []
    with httpx.Client(timeout=60) as client:
        for text in texts:
            started = time.perf_counter()
            r = client.post(url, content=text, headers=headers)
            out.append((time.perf_counter() - started) * 1000)
            if r.status_code != 204:
                raise ba.BenchError(f"write answered {r.status_code}: {r.text[:300]}")
    return statistics.median(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=200, help="commits per shape")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=200, help="checks per shape")
    args = parser.parse_args()
    rows = []
    with workdir("update-check") as root, ba.cluster(root, 1, args.workers) as info:
        auth = ba.auth_headers(info)
        url = f"{info['masters'][0]['url']}/repositories/{info['repository']}/statements"
        headers = {"Content-Type": "application/sparql-update", **ba.header_dict(auth)}
        latencies(url, headers, 50, 0)  # warm-up
        for name, shape in SHAPES.items():
            texts = [shape(k) for k in range(args.writes)]
            commit = commit_ms(url, headers, texts)
            check = check_us(texts[0], args.repeat)
            rows.append((name, len(texts[0]), check, commit))
    print(f"\nthe master's update check against a commit through one master + "
          f"{args.workers} worker(s), {args.writes} sequential commits per shape")
    print(f"  {'update':<26} | {'chars':>7} | {'check us':>9} | {'commit p50 ms':>13} | "
          f"{'ratio':>6}")
    worst = 0.0
    for name, chars, check, commit in rows:
        ratio = check / 1000 / commit
        worst = max(worst, ratio)
        print(f"  {name:<26} | {chars:>7} | {check:9.1f} | {commit:13.2f} | {ratio:6.1%}")
    print(f"  worst ratio {worst:.1%} (target <= {TARGET:.0%})")
    print(f"command: python -m bench.bench_update_check --writes {args.writes} "
          f"--workers {args.workers}")


if __name__ == "__main__":
    main()
