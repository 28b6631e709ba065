"""The invariants after healing (issue 9's checker), as a list of violations.

* every acknowledged statement is on every worker (nothing acknowledged is lost);
* no worker holds a statement that no client wrote (nothing invented; the workload is
  the only writer, so a worker's quads are exactly its workload statements);
* every worker is at the head of the master's log (seq) with the head's fingerprint and
  quad count (no divergence, and the log agrees with the data).

Peered data centres (``check_peered``): the same for every master and its workers, and
across them: every worker of every data centre has one fingerprint, and every master's
agreed queue (GET /admin/sync/agreed) is the same list of transactions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

from tests.chaos.workload import History, P


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    lost: int = 0  # acknowledged statements missing from some worker
    invented: int = 0  # statements present that no client attempted
    divergent: bool = False  # workers (or the log) disagree on the state

    @property
    def ok(self) -> bool:
        return not self.violations


def worker_values(url: str, repository_id: str) -> set[int]:
    r = httpx.get(f"{url}/repositories/{repository_id}", timeout=60,
                  params={"query": f"SELECT ?o WHERE {{ ?s <{P}> ?o }}"},
                  headers={"accept": "application/sparql-results+json"})
    r.raise_for_status()
    return {int(b["o"]["value"]) for b in r.json()["results"]["bindings"]}


def check(status: dict, workers: list, repository_id: str, history: History,
          v: Verdict | None = None) -> Verdict:
    """``status`` is the master's /admin/status once in sync; ``workers`` the nodes.
    Violations are added to ``v`` (a new Verdict by default), which is returned."""
    v = Verdict() if v is None else v
    head = status["head"]
    acked = set(history.acked)
    for node in workers:
        values = worker_values(node.url, repository_id)
        health = httpx.get(f"{node.url}/health", timeout=10).json()
        missing = acked - values
        extra = values - history.attempted
        if missing:
            v.lost = max(v.lost, len(missing))
            v.violations.append(f"{node.url}: {len(missing)} acknowledged statements "
                                f"missing, e.g. {sorted(missing)[:5]}")
        if extra:
            v.invented = max(v.invented, len(extra))
            v.violations.append(f"{node.url}: {len(extra)} statements no client wrote, "
                                f"e.g. {sorted(extra)[:5]}")
        if health["quads"] != len(values):
            v.violations.append(f"{node.url}: {health['quads']} quads but "
                                f"{len(values)} workload statements")
        if (health["seq"], health["fingerprint"], health["quads"]) != \
                (head["seq"], head["fingerprint"], head["quads"]):
            v.divergent = True
            v.violations.append(
                f"{node.url}: state seq={health['seq']} fp={health['fingerprint']} "
                f"quads={health['quads']}, log head seq={head['seq']} "
                f"fp={head['fingerprint']} quads={head['quads']}")
    return v


def check_peered(statuses: dict[str, dict], workers: dict[str, list], repository_id: str,
                 history: History, agreed: dict[str, list[str | None]]) -> Verdict:
    """Peered masters once recovered: ``statuses`` each master's /admin/status,
    ``workers`` each master's worker nodes, ``agreed`` each master's agreed queue (txids
    in order, None where it forgot the entry), all by master name."""
    v = Verdict()
    fingerprints: dict[str, list[str]] = {}
    for name, status in statuses.items():
        check(status, workers[name], repository_id, history, v)
        for node in workers[name]:
            fp = httpx.get(f"{node.url}/health", timeout=10).json()["fingerprint"]
            fingerprints.setdefault(fp, []).append(f"{name}:{node.url}")
    if len(fingerprints) > 1:
        v.divergent = True
        v.violations.append(f"{len(fingerprints)} worker fingerprints: "
                            + "; ".join(f"{fp[:12]} on {', '.join(nodes)}"
                                        for fp, nodes in sorted(fingerprints.items())))
    # A position a master forgot (None: every data centre executed it, or LogMaxSize;
    # protocol.py, "Compaction") is compared where the others still hold it.
    queues = {tuple(q) for q in agreed.values()}
    first = min((len(q) for q in queues), default=0)
    at = next((k for k in range(first)
               if len({q[k] for q in queues if q[k] is not None}) > 1), first)
    if len(queues) > 1 and (at < first or len({len(q) for q in queues}) > 1):
        v.divergent = True
        v.violations.append("agreed queues differ from position " + str(at + 1) + ": "
                            + ", ".join(f"{n} has {len(q)} entries"
                                        + (f", {(q[at] or '(forgotten)')[:12]} at {at + 1}"
                                           if at < len(q) else "")
                                        for n, q in sorted(agreed.items())))
    return v
