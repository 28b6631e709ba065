"""Load: the prepared quads into the cluster, and the check that it holds them (IO only).

Two paths (issue "data pipeline"):

* **Transactions** (any repository): N-Quads documents of at most ``--batch-quads``
  quads, each one RDF4J add through the master (``POST .../statements``) with
  ``preserveNodeId=true``, so the per-file blank node labels the job gave are kept and
  a document may be sent twice. The master logs each as a transaction (the txlog orders
  them; every worker applies the same changeset). A few are in flight at once so the
  master's group commit has company; a refused or lost one is sent again (harmless).
* **Initial** (``--initial``, a cluster that never committed a transaction): the data
  goes in parts, sent by the Spark tasks as they parse (``part_push``), through the master
  (admin API) into one worker's staging store, then the master commits it there and
  adopts the worker's state as its log's base; the other workers are replicated from it
  ("Replicating (empty)").
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

import httpx

from rdfcore.fingerprint import ZERO, to_hex
from spark_pipeline import extract
from spark_pipeline.part_push import PartPush
from txcluster.admin_client import AdminClient, AdminError
from txinfra.tls import client_verify

T = TypeVar("T")


class LoadError(Exception):
    """The load cannot go on; the message says why."""


RETRY_STATUSES = {502, 503, 504}


class MasterAPI:
    """The calls the loader makes to a master (client auth when it is on): RDF4J adds,
    and the admin API through its one client (txcluster/admin_client.py)."""

    def __init__(self, url: str, auth: tuple[str, str] | None = None,
                 timeout: float = 3600.0, cadata: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.cadata = cadata  # PEM text of --ca-file: the tasks check the master with it
        self.http = httpx.Client(auth=auth, timeout=httpx.Timeout(timeout, connect=10),
                                 verify=client_verify(cadata))
        self.admin = AdminClient(self.url, http=self.http)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> MasterAPI:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs) -> httpx.Response:
        try:
            return self.http.request(method, self.url + path, **kwargs)
        except httpx.HTTPError as exc:
            raise LoadError(f"cannot reach the master {self.url}: {exc}") from None

    @staticmethod
    def _admin(call: Callable[[], T]) -> T:
        try:
            return call()
        except AdminError as exc:
            raise LoadError(str(exc)) from None

    def status(self) -> dict:
        return self._admin(lambda: self.admin.status(timeout=30))

    def repository(self, wanted: str | None) -> str:
        """The master's repository id (checked against ``wanted`` when given)."""
        r = self._request("GET", "/repositories", timeout=30,
                          headers={"accept": "application/sparql-results+json"})
        if r.status_code != 200:
            raise LoadError(f"GET /repositories answered {r.status_code}: {r.text[:300]}")
        ids = [b["id"]["value"] for b in r.json()["results"]["bindings"]]
        if wanted is None:
            if len(ids) != 1:
                raise LoadError(f"the master serves {ids}: give --repository")
            return ids[0]
        if wanted not in ids:
            raise LoadError(f"the master serves {ids}, not '{wanted}'")
        return wanted

    def add(self, repository: str, data: bytes, attempts: int = 8) -> None:
        """One transaction adding an N-Quads document, labels kept."""
        self._write("POST", f"/repositories/{repository}/statements", data, attempts,
                    params={"preserveNodeId": "true"},
                    headers={"content-type": "application/n-quads"})

    def namespaces(self, repository: str) -> dict[str, str]:
        """The repository's namespace prefixes (RDF4J ``GET .../namespaces``)."""
        r = self._request("GET", f"/repositories/{repository}/namespaces", timeout=30,
                          headers={"accept": "application/sparql-results+json"})
        if r.status_code != 200:
            raise LoadError(f"GET namespaces answered {r.status_code}: {r.text[:300]}")
        return {b["prefix"]["value"]: b["namespace"]["value"]
                for b in r.json()["results"]["bindings"]}

    def set_namespace(self, repository: str, prefix: str, namespace: str) -> None:
        """One transaction declaring a prefix (RDF4J ``PUT .../namespaces/{prefix}``)."""
        self._write("PUT", f"/repositories/{repository}/namespaces/{prefix}",
                    namespace.encode(), headers={"content-type": "text/plain"})

    def _write(self, method: str, path: str, data: bytes, attempts: int = 8,
               **kwargs) -> None:
        """A write through the master, sent again while the cluster is not writable or
        unreachable (a recovering worker, a busy master, replicas being made after an
        initial load): every write the loader makes may be applied twice."""
        delay = 0.5
        for attempt in range(attempts):
            try:
                r = self.http.request(method, self.url + path, content=data, **kwargs)
            except httpx.HTTPError as exc:
                problem = f"cannot reach the master {self.url}: {exc}"
            else:
                if r.status_code < 300:
                    return
                problem = f"the master answered {r.status_code}: {r.text[:500]}"
                if r.status_code not in RETRY_STATUSES:
                    raise LoadError(problem)
            if attempt + 1 < attempts:
                time.sleep(delay)
                delay = min(delay * 2, 10)
        raise LoadError(f"{problem} (after {attempts} attempts)")

    def bulk_sent(self, load_id: str, worker: str) -> dict:
        return self._admin(lambda: self.admin.bulk_load_sent(load_id, worker))

    def bulk_commit(self, load_id: str, worker: str, fingerprint: int, quads: int) -> dict:
        return self._admin(lambda: self.admin.bulk_load_commit(
            load_id, worker, to_hex(fingerprint), quads))

    def bulk_abort(self, load_id: str, worker: str) -> None:
        self._admin(lambda: self.admin.bulk_load_abort(load_id, worker))


# ---- the cluster as the loader needs it ----


def head(status: dict) -> tuple[int, int, int]:
    """(seq, fingerprint, quads) at the head of the master's log."""
    h = status["head"]
    return h["seq"], int(h["fingerprint"], 16), h["quads"]


def initial_target(status: dict) -> str:
    """The worker an initial load goes to; LoadError when the cluster cannot take one."""
    seq, fp, quads = head(status)
    if seq != 0 or fp != ZERO or quads != 0:
        raise LoadError(f"--initial needs an empty cluster whose log never committed a "
                        f"transaction; this one is at seq {seq} with {quads} quads: load "
                        f"without --initial")
    full = [w["url"] for w in status["workers"] if w["quads"]]
    if full:
        raise LoadError(f"--initial needs empty workers; these hold data: {', '.join(full)}")
    ready = [w["url"] for w in status["workers"] if w["status"] == "ON"]
    if not ready:
        raise LoadError("no worker is ON: nothing can take the initial load")
    return ready[0]


def up_to_date_worker(status: dict) -> str:
    """A worker at the head of the log, to export the repository's content from."""
    seq, fp, _ = head(status)
    for w in status["workers"]:
        if w["status"] == "ON" and w["seq"] == seq and int(w["fingerprint"], 16) == fp \
                and not w["pending_forwards"]:
            return w["url"]
    raise LoadError("no worker is at the head of the log to read the repository from")


def send_all(blobs: Iterable[tuple[bytes, int]], send: Callable[[int, bytes], object],
             parallel: int, on_sent: Callable[[int], None] | None = None) -> tuple[int, int]:
    """``send(index, data)`` every (N-Quads document, quad count), ``parallel`` at a time;
    returns (quads, documents) sent. The first failure stops it."""
    sent = documents = 0
    with ThreadPoolExecutor(parallel, thread_name_prefix="load") as pool:
        running: dict[Future, int] = {}

        def settle(futures) -> None:
            nonlocal sent, documents
            for f in futures:
                n = running.pop(f)
                f.result()  # raises the document's LoadError
                sent += n
                documents += 1
                if on_sent:
                    on_sent(sent)

        try:
            for index, (data, n) in enumerate(blobs):
                if len(running) >= parallel:
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    settle(done)
                running[pool.submit(send, index, data)] = n
            settle(list(running))
        except BaseException:
            for f in running:
                f.cancel()
            raise
    return sent, documents


def send_transactions(master: MasterAPI, repository: str,
                      blobs: Iterable[tuple[bytes, int]], parallel: int = 4,
                      on_sent: Callable[[int], None] | None = None) -> tuple[int, int]:
    """Every document as one transaction; returns (quads, transactions)."""
    return send_all(blobs, lambda _, data: master.add(repository, data), parallel, on_sent)


class BulkLoad:
    """The initial load into one worker: parts (sent by the Spark tasks: ``push``), then
    the commit (the master adopts the worker's state) or an abort, which leaves the
    worker empty."""

    def __init__(self, master: MasterAPI, worker: str,
                 auth: tuple[str, str] | None = None) -> None:
        self.master, self.worker = master, worker
        self.id = uuid.uuid4().hex
        self.push = PartPush(master.url, auth, self.id, worker, master.cadata)

    def sent(self) -> None:
        """Every part is sent: the worker loads the parts waiting for a batch while the
        job computes the commit's count and fingerprint, instead of at the commit. Only a
        hint: a master or worker of an earlier release lacks the call (404), and a
        staging that is gone fails the commit, which says so."""
        try:
            self.master.bulk_sent(self.id, self.worker)
        except LoadError:
            pass

    def commit(self, fingerprint: int, quads: int) -> dict:
        return self.master.bulk_commit(self.id, self.worker, fingerprint, quads)

    def abort(self) -> None:
        try:
            self.master.bulk_abort(self.id, self.worker)
        except LoadError:
            pass  # the worker drops its staging when it restarts anyway


def in_sync(status: dict) -> bool:
    seq, fp, _ = head(status)
    return all(w["status"] == "ON" and w["seq"] == seq and w["fingerprint"] == to_hex(fp)
               and not w["pending_forwards"] for w in status["workers"])


def wait_in_sync(master: MasterAPI, timeout: float,
                 on_progress: Callable[[dict], None] | None = None) -> tuple[dict, bool]:
    """Poll the master until every worker is ON at the head of the log (or timeout);
    returns the last status and whether it was in sync."""
    deadline = time.monotonic() + timeout
    while True:
        status = master.status()
        if on_progress:
            on_progress(status)
        if in_sync(status):
            return status, True
        if time.monotonic() > deadline:
            return status, False
        time.sleep(0.25)


def worker_states(status: dict, cadata: str | None = None) -> dict[str, dict]:
    """Each worker's own state (its /health), independent of the master's view."""
    out = {}
    with httpx.Client(timeout=30, verify=client_verify(cadata)) as client:
        for w in status["workers"]:
            try:
                out[w["url"]] = extract.worker_state(client, w["url"])
            except extract.ExportError as exc:
                out[w["url"]] = {"error": str(exc)}
    return out
