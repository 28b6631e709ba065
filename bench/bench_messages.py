"""CPU to write and read one message between nodes: a peer's status with its pushed
payloads, as ``Transport`` sends it and the peer API reads it (issue 18: several per agreed
transaction on every master).

    PYTHONPATH=$PWD .venv/bin/python -m bench.bench_messages [--calls 20000] [--rounds 3]

The status is built by the real wire code (``wire.status_to_json``) with a queue of 1, 8
and 32 transactions and a payload pushed for each (an INSERT DATA of one triple, as the
anchor's writes). Written: ``json.dumps`` (what the transport used) against
``jsonbody.dumps`` (orjson); read: the strict path (``json.loads`` and the checks, what
``jsonbody.parse`` was) against ``jsonbody.parse`` (orjson first). Microseconds per
message, the median of the rounds; the two reads are also checked to give the same value.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from master_service.sync import wire
from master_service.sync.messages import Mode, Status, TxMeta
from txinfra import jsonbody

OPERATIONS = [{"type": "update", "update": 'INSERT DATA { <http://example.org/bench/w1-1-123> '
               '<http://example.org/bench/p> "value 123" }'}]


def status_body(n: int) -> dict[str, Any]:
    """A status body as Transport._status_body writes it, with ``n`` queued transactions
    and each one's payload pushed."""
    payload = json.dumps(OPERATIONS)
    txs = tuple(TxMeta(str(uuid.uuid4()), 1_796_266_771_123 + i, "m1", len(payload), "ab" * 32)
                for i in range(n))
    st = Status("m1", Mode.READ_WRITE, str(uuid.uuid4()), 123_456, 1_796_266_771_200 + n, txs,
                "cd" * 32, None, "", 123_450, 120_000)
    return {"status": wire.status_to_json(st), "executed": {"pos": 123_450, "fingerprint":
                                                            "ef" * 32},
            "payloads": {tx.txid: payload for tx in txs}, "silent": []}


def per_call_us(fn: Callable[[], Any], calls: int) -> float:
    for _ in range(min(calls, 500)):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print("status with pushed payloads: us per message (median of "
          f"{args.rounds} rounds of {args.calls:,})")
    print(f"{'queue':>5} {'bytes':>7} | {'json.dumps':>10} {'orjson':>8} {'x':>5} | "
          f"{'strict read':>11} {'parse':>8} {'x':>5}")
    for n in (1, 8, 32):
        body = status_body(n)
        raw = jsonbody.dumps(body)
        if jsonbody.parse(raw) != jsonbody._parse_strictly(raw) or \
                json.loads(json.dumps(body)) != jsonbody.parse(raw):
            raise SystemExit("the two reads differ: not a comparison")
        figures: dict[str, list[float]] = {k: [] for k in ("dumps", "orjson", "strict", "fast")}
        for _ in range(args.rounds):  # alternated, so machine noise falls on all four
            figures["dumps"].append(per_call_us(lambda b=body: json.dumps(b).encode(),
                                                args.calls))
            figures["orjson"].append(per_call_us(lambda b=body: jsonbody.dumps(b), args.calls))
            figures["strict"].append(per_call_us(lambda r=raw: jsonbody._parse_strictly(r),
                                                 args.calls))
            figures["fast"].append(per_call_us(lambda r=raw: jsonbody.parse(r), args.calls))
        m = {k: statistics.median(v) for k, v in figures.items()}
        print(f"{n:>5} {len(raw):>7} | {m['dumps']:>10.1f} {m['orjson']:>8.1f} "
              f"{m['dumps'] / m['orjson']:>5.1f} | {m['strict']:>11.1f} {m['fast']:>8.1f} "
              f"{m['strict'] / m['fast']:>5.1f}")


if __name__ == "__main__":
    main()
