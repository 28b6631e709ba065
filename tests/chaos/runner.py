"""Rounds of chaos and the table of their results.

A round, all from one seed: start a LocalCluster (1 master, 3 workers); start the
workload; after some acknowledged writes, inject 1-2 faults drawn from the registry
with random pauses between them while the workload runs; stop the workload; heal
(every process running); measure the time until the master reports every worker in sync
(time to converge); check the invariants. A failed round prints its seed and the event
history, and keeps its directory (logs, data) for inspection.
"""

from __future__ import annotations

import random
import shutil
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.checker import Verdict, check
from tests.chaos.faults import FAULTS, available
from tests.chaos.workload import History, Workload
from tests.conftest import LocalCluster
from tests.procs import make_secret

CONVERGE_TIMEOUT_S = 90.0


@dataclass
class Round:
    seed: int
    rng: random.Random
    cluster: LocalCluster
    history: History
    events: list[tuple[float, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def event(self, what: str, detail: str = "") -> None:
        self.events.append((self.history.now(), what, detail))

    def note(self, text: str) -> None:
        self.notes.append(text)


@dataclass
class RoundResult:
    seed: int
    faults: list[str]
    acked: int
    attempted: int
    verdict: Verdict
    converge_s: float | None
    stale_reads: int
    duration_s: float
    notes: list[str]
    events: list[tuple[float, str, str]]
    directory: Path | None = None

    @property
    def ok(self) -> bool:
        return self.verdict.ok and self.converge_s is not None

    def report(self) -> str:
        lines = [f"chaos round FAILED: seed={self.seed} faults={self.faults}",
                 f"replay: python -m tests.chaos --rounds 1 --seed {self.seed}",
                 *[f"  violation: {v}" for v in self.verdict.violations]]
        if self.converge_s is None:
            lines.append(f"  did not converge within {CONVERGE_TIMEOUT_S}s")
        lines.append("event history:")
        lines += [f"  {t:8.3f}s  {what:<14} {detail}" for t, what, detail in self.events]
        if self.directory:
            lines.append(f"logs and data kept in {self.directory}")
        return "\n".join(lines)


def plan(seed: int, topology: str = "single-dc") -> list[str]:
    """The faults of a round: 1-2 kinds drawn from the seed (a round replays exactly)."""
    rng = random.Random(f"faults-{seed}")
    kinds = available(topology)
    return [rng.choice(kinds) for _ in range(rng.randint(1, 2))]


def master_properties(seed: int, faults: list[str]) -> dict[str, str]:
    """Master settings of a round. Smart replication's absolute floor at 0 makes the
    master copy whole images instead of replaying the log for a worker that is behind
    (the small logs of a round replay in well under the default 600 s): drawn from the
    seed, and always so when the round kills the master during a replication."""
    rng = random.Random(f"config-{seed}")
    full = "kill-master-during-replication" in faults or rng.random() < 0.5
    return {"min-time-to-consider-full-replication-s": "0" if full else "600"}


def run_round(seed: int, faults: list[str] | None = None, root: Path | None = None,
              keep: bool = False) -> RoundResult:
    faults = faults if faults is not None else plan(seed)
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; known: {sorted(FAULTS)}")
    directory = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-", dir=root))
    started = time.monotonic()
    cluster = LocalCluster(directory, make_secret(directory / "secrets"), 3,
                           **master_properties(seed, faults))
    history = History()
    r = Round(seed, random.Random(seed), cluster, history)
    workload: Workload | None = None
    converge_s: float | None = None
    verdict = Verdict()
    try:
        cluster.start()
        history.t0 = time.monotonic()
        r.event("start", f"master {cluster.master.url}, 3 workers")
        workload = Workload(cluster.repo_url, history).start()
        workload.wait_acked(r.rng.randint(5, 30))
        for kind in faults:
            r.event("fault", kind)
            FAULTS[kind].inject(r)
            workload.wait_acked(workload.acked_count() + r.rng.randint(5, 30), timeout=30)
        workload.stop()
        r.event("healed", f"{len(history.acked)} acked, {len(history.attempted)} attempted")
        healed = time.monotonic()
        try:
            status = cluster.wait_in_sync(timeout=CONVERGE_TIMEOUT_S)
            converge_s = time.monotonic() - healed
            r.event("converged", f"head seq {status['head']['seq']} in {converge_s:.2f}s")
            verdict = check(status, cluster.workers, cluster.repository_id, history)
        except AssertionError as exc:
            verdict.violations.append(str(exc).splitlines()[0])
            verdict.divergent = True
    except Exception as exc:  # the harness itself failed: report it as the round's failure
        verdict.violations.append(f"round aborted: {type(exc).__name__}: {exc}")
    finally:
        if workload is not None:
            workload.stop()
        cluster.stop_all()
    result = RoundResult(seed, faults, len(history.acked), len(history.attempted), verdict,
                         converge_s, len(history.stale_reads), time.monotonic() - started,
                         r.notes, r.events)
    if result.ok and not keep:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        result.directory = directory
    return result


def table(results: list[RoundResult]) -> str:
    faults = Counter(f for r in results for f in r.faults)
    times = sorted(r.converge_s for r in results if r.converge_s is not None)
    notes = Counter(n for r in results for n in r.notes)
    rows = [
        ("rounds", f"{len(results)} ({sum(r.ok for r in results)} passed)"),
        *[(f"faults: {k}", str(n)) for k, n in sorted(faults.items())],
        *[(f"  {k}", str(n)) for k, n in sorted(notes.items())],
        ("acknowledged writes", str(sum(r.acked for r in results))),
        ("attempted writes", str(sum(r.attempted for r in results))),
        ("lost (acknowledged, missing)", str(sum(r.verdict.lost for r in results))),
        ("invented (never written)", str(sum(r.verdict.invented for r in results))),
        ("divergent rounds", str(sum(r.verdict.divergent for r in results))),
        ("stale read-your-writes", str(sum(r.stale_reads for r in results))),
        ("time to converge p50 / max",
         f"{statistics.median(times):.2f}s / {max(times):.2f}s" if times else "-"),
        ("round duration mean",
         f"{statistics.mean(r.duration_s for r in results):.1f}s" if results else "-"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def run(rounds: int, seed: int, root: Path | None = None, progress=print,
        results: list[RoundResult] | None = None) -> list[RoundResult]:
    """Rounds seed, seed + 1, ...; ``results`` (appended to as rounds end) keeps what was
    done if the run is interrupted."""
    results = [] if results is None else results
    for n in range(rounds):
        result = run_round(seed + n, root=root)
        results.append(result)
        progress(f"round {n + 1}/{rounds} seed={result.seed} faults={','.join(result.faults)} "
                 f"acked={result.acked} converge={result.converge_s or float('nan'):.2f}s "
                 f"{'ok' if result.ok else 'FAILED'} ({result.duration_s:.1f}s)")
        if not result.ok:
            progress(result.report())
    return results
