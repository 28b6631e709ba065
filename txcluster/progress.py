"""Progress of the long operations an operator starts from the command line: backup,
restore, a worker's replication or catch-up (`txcluster backup`, `restore`, `wait-sync`),
and `txcluster status --watch`.

Thin over the master's HTTP API (txcluster/admin_client.py): the operation is one admin
call (run on a thread, it blocks until the master answers) while the master's
`/status/data` is polled for the
operations in progress (master_service/api/status_page.py) and drawn as a click progress
bar. `txcluster load` has its own progress line (spark_pipeline/progress.py), fed by
Spark's accumulators.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from txcluster.admin_client import AdminClient, AdminError

STEPS = 1000  # the bar's resolution: fractions are drawn in thousandths


class OperationFailed(AdminError):
    """The operation did not finish in time; the message says how far it got."""


@dataclass
class Snapshot:
    fraction: float | None  # None: the master cannot tell how far it is
    detail: str


def sync_progress(data: dict) -> Snapshot:
    """How far the cluster is from every worker in sync at the head of the log, from one
    `/status/data` answer: workers in sync count 1, a worker being replicated or caught
    up counts the fraction its operation reports (an estimate for a replication)."""
    status = data["status"]
    head = status["head"]
    workers = status["workers"]
    if not workers:
        return Snapshot(None, "no workers")
    by_worker = {op["worker"]: op for op in data.get("operations", []) if op.get("worker")}
    done, lines = 0.0, []
    for w in workers:
        if w["status"] in ("ON", "WRITING", "WAITING_WRITE") and w["seq"] == head["seq"]:
            done += 1
            continue
        op = by_worker.get(w["url"])
        if op and op.get("progress") is not None:
            done += op["progress"]
        lines.append(op["text"] if op else f"{w['url']} {w['status']}")
    detail = "; ".join(lines) if lines else "every worker in sync"
    return Snapshot(done / len(workers), detail)


def in_sync(data: dict) -> bool:
    status = data["status"]
    return status["status"] == 0 and all(w["seq"] == status["head"]["seq"]
                                         for w in status["workers"])


def run_with_progress(label: str, call: Callable[[], Any], poll: Callable[[], Snapshot],
                      interval: float = 0.5) -> Any:
    """Run ``call`` (blocking) on a thread and draw ``poll()`` until it returns; its
    result, or its exception raised here."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = call()
        except BaseException as exc:  # re-raised on the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    started = time.monotonic()
    thread.start()
    detail = ""
    with click.progressbar(length=STEPS, label=label, show_eta=False, show_percent=True,
                           item_show_func=lambda _: detail,
                           file=sys.stderr) as bar:
        drawn = 0
        while thread.is_alive():
            thread.join(interval)
            try:
                snap = poll()
            except AdminError as exc:  # a missed poll is not the operation failing
                snap = Snapshot(None, str(exc))
            elapsed = f"{time.monotonic() - started:.0f}s"
            detail = f"{elapsed} {snap.detail}"
            if snap.fraction is not None:
                target_steps = int(snap.fraction * STEPS)
                if target_steps > drawn:
                    bar.update(target_steps - drawn)
                    drawn = target_steps
            else:
                bar.update(0)  # redraw the elapsed time
        if "error" not in outcome:
            detail = f"{time.monotonic() - started:.1f}s done"
            bar.update(STEPS - drawn)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def wait_for_sync(calls: AdminClient, label: str, timeout: float) -> dict:
    """Draw the cluster's way to every worker in sync; the last status data, or
    OperationFailed after ``timeout`` seconds."""
    last: dict = {}

    def poll() -> Snapshot:
        last.update(calls.status_data())
        return sync_progress(last)

    def wait() -> dict:
        deadline = time.monotonic() + timeout
        while True:
            data = calls.status_data()
            if in_sync(data):
                return data
            if time.monotonic() > deadline:
                raise OperationFailed(
                    f"not in sync after {timeout:.0f}s: {sync_progress(data).detail}")
            time.sleep(0.3)

    return run_with_progress(label, wait, poll)


def backup_progress(data: dict) -> Snapshot:
    """A backup reports no fraction (the worker writes one image); say who writes it."""
    ops = [op for op in data.get("operations", []) if op["kind"] == "backup"]
    return Snapshot(None, ops[0]["text"] if ops else "")


def watch(fetch: Callable[[], str], interval: float, count: int | None,
          clear: bool) -> None:
    """`status --watch`: redraw ``fetch()`` every ``interval`` seconds (``count`` times,
    or until Ctrl-C). A master that does not answer is said on the screen, and the
    watch goes on: the operator is often watching it come back."""
    shown = 0
    try:
        while count is None or shown < count:
            try:
                text = fetch()
            except AdminError as exc:
                text = f"error: {exc}"
            if clear:
                click.clear()
            stamp = time.strftime("%H:%M:%S")
            click.echo(f"{stamp}  (every {interval:g}s, Ctrl-C to stop)\n{text}")
            shown += 1
            if count is None or shown < count:
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
