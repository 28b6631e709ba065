"""`txcluster status` as a table (the same data as `--json`)."""

from __future__ import annotations

STATUS_TEXT = {0: "available", 1: "needs attention", 2: "no workers"}


def render(data: dict) -> str:
    head = data["head"]
    writable = "writable" if data["writable"] else \
        f"NOT writable: {data['not_writable_because']}"
    lines = [
        f"master {data['node_id']}: {STATUS_TEXT.get(data['status'], data['status'])}, "
        f"{writable}, mode {data['mode']}{', read-only' if data['read_only'] else ''}",
        f"log head: seq {head['seq']}  fingerprint {head['fingerprint']}  quads {head['quads']}",
        "",
    ]
    cols = ["url", "status", "seq", "fingerprint", "quads", "running_reads",
            "completed_tasks", "failed_tasks", "average_task_time_s", "last_error"]
    rows = [[str(w.get(c) if w.get(c) is not None else "") for c in cols]
            for w in data["workers"]]
    header = ["worker", "status", "seq", "fingerprint", "quads", "running", "completed",
              "failed", "avg task s", "last error"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for r in rows:
        lines.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    c = data["counters"]
    lines += ["", f"reads: {c['completed_reads']} completed, {c['failed_reads']} failed; "
              f"writes: {c['completed_writes']} completed, {c['failed_writes']} failed, "
              f"{c['pending_writes']} pending"]
    return "\n".join(lines)


def render_operations(data: dict) -> str:
    """The operations in progress of a `/status/data` answer (`status --watch`)."""
    ops = data.get("operations") or []
    if not ops:
        return "\nin progress: nothing"
    lines = ["", "in progress:"]
    for op in ops:
        progress = "" if op.get("progress") is None else \
            f" {op['progress'] * 100:.0f}%" + (" (estimated)" if op["kind"] == "replication"
                                               else "")
        lines.append(f"  {op['text']} ({op['elapsed_s']:.0f}s{progress})")
    sync = data.get("sync")
    if sync:
        lines.append(f"peering: {sync['state']}, agreed seq {sync['seq']}, peers " + ", ".join(
            f"{p['id']} {'reachable' if p['reachable'] else 'UNREACHABLE'}"
            for p in sync["peers"]))
    return "\n".join(lines)
