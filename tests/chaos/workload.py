"""The set workload: each client thread inserts statements nobody else inserts and asks
for each acknowledged one back (read-your-writes), recording every outcome with its time.

Statement i is ``<urn:chaos:s/i> <urn:chaos:p> i``: the set of i is what the checker
compares. A write whose answer is lost (connection reset by a kill) is "attempted": it
may or may not be in the data, and is never retried under the same i.

With several masters (peered data centres) every master gets ``threads`` clients of its
own: client n writes through ``repo_urls[n // threads]``, its i in n's own range.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import httpx

P = "urn:chaos:p"
UPDATE = {"content-type": "application/sparql-update"}
# Read-your-writes: a read that must see the newest acknowledged write (spec: "updating").
UPDATING = {"x-graphdb-local-consistency": "updating",
            "accept": "application/sparql-results+json"}


def statement(i: int) -> str:
    return f"<urn:chaos:s/{i}> <{P}> {i}"


@dataclass
class History:
    """Everything the clients saw, times in seconds since the round started."""

    t0: float = field(default_factory=time.monotonic)
    attempted: set[int] = field(default_factory=set)
    acked: dict[int, float] = field(default_factory=dict)  # i -> time of the ack
    errors: list[tuple[float, int, str]] = field(default_factory=list)
    stale_reads: list[tuple[float, int]] = field(default_factory=list)  # ASK false after ack
    reads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.t0


CLIENT_RANGE = 1_000_000  # client n writes i in n * CLIENT_RANGE + 1, ...


class Workload:
    def __init__(self, repo_urls: str | list[str], history: History,
                 threads: int = 3) -> None:
        self.urls = [repo_urls] if isinstance(repo_urls, str) else list(repo_urls)
        self.threads_per_url = threads
        self.history = history
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(t,), daemon=True,
                                          name=f"chaos-client-{t}")
                         for t in range(threads * len(self.urls))]

    def start(self) -> Workload:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def acked_count(self) -> int:
        with self.history.lock:
            return len(self.history.acked)

    def wait_acked(self, n: int, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while self.acked_count() < n:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def url_of(self, i: int) -> str:
        """The repository URL that statement i was written through."""
        return self.urls[i // CLIENT_RANGE // self.threads_per_url]

    def _client(self, number: int) -> None:
        h = self.history
        url = self.urls[number // self.threads_per_url]
        i = number * CLIENT_RANGE  # disjoint ranges: statements are unique across clients
        with httpx.Client(timeout=20) as client:
            while not self._stop.is_set():
                i += 1
                with h.lock:
                    h.attempted.add(i)
                try:
                    r = client.post(f"{url}/statements", content=f"INSERT DATA "
                                    f"{{ {statement(i)} }}".encode(), headers=UPDATE)
                except httpx.HTTPError as exc:
                    with h.lock:
                        h.errors.append((h.now(), i, f"{type(exc).__name__}"))
                    time.sleep(0.05)
                    continue
                if r.status_code != 204:
                    with h.lock:
                        h.errors.append((h.now(), i, f"{r.status_code} {r.text[:100]}"))
                    time.sleep(0.05)
                    continue
                with h.lock:
                    h.acked[i] = h.now()
                self._read_back(client, url, i)

    def _read_back(self, client: httpx.Client, url: str, i: int) -> None:
        h = self.history
        try:
            r = client.get(url, params={"query": f"ASK {{ {statement(i)} }}"},
                           headers=UPDATING)
        except httpx.HTTPError:
            return  # no answer is no anomaly: only a wrong answer is
        with h.lock:
            h.reads += 1
            if r.status_code == 200 and r.json().get("boolean") is False:
                h.stale_reads.append((h.now(), i))
