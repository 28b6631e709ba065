"""Rounds of chaos and the table of their results.

A round, all from one seed: start the topology (tests/chaos/topology.py: "single-dc", a
LocalCluster of 1 master and 3 workers; "multi-dc", three peered masters of two data
centres in a network lab); start the workload on every master; after some acknowledged
writes, inject 1-2 faults drawn from the registry (the kinds of that topology) with
random pauses between them while the workload runs; stop the workload; heal (every
process running, every link up); measure the time until the cluster agrees again (time
to converge: from that heal, and from the last fault's own heal); check the invariants.
A failed round prints its seed and the event history, and keeps its directory (logs,
data) for inspection.
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

from tests.chaos.checker import Verdict
from tests.chaos.faults import FAULTS, available
from tests.chaos.topology import TOPOLOGIES, MultiDC, SingleDC
from tests.chaos.workload import CLIENT_RANGE, History, Workload
from tests.dclab import Site
from tests.procs import NodeProcess

CONVERGE_TIMEOUT_S = 90.0


@dataclass
class Round:
    seed: int
    rng: random.Random
    topology: SingleDC | MultiDC
    history: History
    events: list[tuple[float, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)  # seen while a fault lasted
    skipped: dict[str, str] = field(default_factory=dict)  # kind -> why not here
    last_heal: float | None = None  # time.monotonic() of the last fault's heal
    workload: Workload | None = None

    def event(self, what: str, detail: str = "") -> None:
        self.events.append((self.history.now(), what, detail))

    def healed(self, what: str, detail: str = "") -> None:
        """The event that ends a fault (a restart, a link back up)."""
        self.last_heal = time.monotonic()
        self.event(what, detail)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def violation(self, text: str) -> None:
        self.violations.append(text)
        self.event("VIOLATION", text)

    # ---- the topology, for the faults ----

    @property
    def sites(self) -> list[Site]:
        return self.topology.sites

    @property
    def masters(self) -> list[NodeProcess]:
        return [s.master for s in self.sites]

    @property
    def workers(self) -> list[NodeProcess]:
        return [w for s in self.sites for w in s.workers]

    def pick(self, items: list):
        """One of ``items`` drawn from the seed; a single item draws nothing (so rounds of
        one master replay as before there were several)."""
        return items[0] if len(items) == 1 else self.rng.choice(items)

    def site_of(self, node: NodeProcess) -> Site:
        return next(s for s in self.sites if node is s.master or node in s.workers)

    def label(self, node: NodeProcess) -> str:
        site = self.site_of(node)
        if len(self.sites) == 1:
            return f"{node.kind} {node.url}"
        return f"{site.name} {node.kind}" + (f" {node.directory.name} {node.url}"
                                             if node.kind == "worker" else "")

    def acks_by_master(self, since: float, until: float | None = None) -> dict[str, int]:
        """Acknowledged writes per master from ``since`` (to ``until``), history times."""
        assert self.workload is not None
        per = self.workload.threads_per_url
        end = float("inf") if until is None else until
        with self.history.lock:
            acked = [i for i, t in self.history.acked.items() if since <= t <= end]
        out = {s.name: 0 for s in self.sites}
        for i in acked:
            out[self.sites[i // CLIENT_RANGE // per].name] += 1
        return out


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
    topology: str = "single-dc"
    skipped: dict[str, str] = field(default_factory=dict)  # kind -> why not injected
    heal_converge_s: float | None = None  # from the last fault's own heal

    @property
    def injected(self) -> list[str]:
        return [f for f in self.faults if f not in self.skipped]

    @property
    def ok(self) -> bool:
        return self.verdict.ok and self.converge_s is not None

    def history(self) -> str:
        return "\n".join(["event history:", *[f"  {t:8.3f}s  {what:<14} {detail}"
                                               for t, what, detail in self.events]])

    def report(self) -> str:
        topo = "" if self.topology == "single-dc" else f" --topology {self.topology}"
        lines = [f"chaos round FAILED: seed={self.seed} topology={self.topology} "
                 f"faults={self.faults}",
                 f"replay: python -m tests.chaos --rounds 1 --seed {self.seed}{topo} "
                 f"--faults {','.join(self.faults)}",
                 *[f"  violation: {v}" for v in self.verdict.violations]]
        if self.converge_s is None:
            lines.append(f"  did not converge within {CONVERGE_TIMEOUT_S}s")
        lines.append(self.history())
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
    seed, and always so when the round kills the master during a replication. A round
    that wipes a data centre keeps a short horizon (log-max-size 50)."""
    rng = random.Random(f"config-{seed}")
    full = "kill-master-during-replication" in faults or rng.random() < 0.5
    props = {"min-time-to-consider-full-replication-s": "0" if full else "600"}
    if "wipe-dc" in faults:
        # A short horizon: the peers forget past the wiped data centre's position, so it
        # must seed instead of replaying from position 1.
        props["log-max-size"] = "50"
    return props


def run_round(seed: int, faults: list[str] | None = None, root: Path | None = None,
              keep: bool = False, topology: str = "single-dc") -> RoundResult:
    faults = faults if faults is not None else plan(seed, topology)
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; known: {sorted(FAULTS)}")
    if wrong := [f for f in faults if topology not in FAULTS[f].needs]:
        raise ValueError(f"fault kinds {wrong} need topology {FAULTS[wrong[0]].needs}, "
                         f"not {topology!r}")
    directory = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-", dir=root))
    started = time.monotonic()
    topo = TOPOLOGIES[topology](directory, master_properties(seed, faults))
    history = History()
    r = Round(seed, random.Random(seed), topo, history)
    workload: Workload | None = None
    converge_s: float | None = None
    heal_converge_s: float | None = None
    verdict = Verdict()
    try:
        description = topo.start()
        history.t0 = time.monotonic()
        r.event("start", description)
        workload = r.workload = Workload(topo.repo_urls, history,
                                         topo.threads_per_master).start()
        workload.wait_acked(r.rng.randint(5, 30))
        for kind in faults:
            fk = FAULTS[kind]
            why = fk.probe(r) if fk.probe else None
            if why:
                r.skipped[kind] = why
                r.event("skipped", f"{kind}: {why}")
                continue
            r.event("fault", kind)
            fk.inject(r)
            workload.wait_acked(workload.acked_count() + r.rng.randint(5, 30), timeout=30)
        workload.stop()
        topo.heal()
        r.event("healed", f"{len(history.acked)} acked, {len(history.attempted)} attempted")
        healed = time.monotonic()
        try:
            detail = topo.converge(healed, CONVERGE_TIMEOUT_S)
            converged = time.monotonic()
            converge_s = converged - healed
            heal_converge_s = converged - (r.last_heal or healed)
            r.event("converged", f"{detail} in {converge_s:.2f}s "
                                 f"({heal_converge_s:.2f}s after the last fault healed)")
            verdict = topo.check(history)
        except AssertionError as exc:
            verdict.violations.append(str(exc).splitlines()[0])
            verdict.divergent = True
    except Exception as exc:  # the harness itself failed: report it as the round's failure
        verdict.violations.append(f"round aborted: {type(exc).__name__}: {exc}")
    finally:
        if workload is not None:
            workload.stop()
        if not verdict.ok or r.violations:
            for line in topo.failure_details():
                r.event("at the end", line)
        topo.stop()
    verdict.violations += r.violations
    result = RoundResult(seed, faults, len(history.acked), len(history.attempted), verdict,
                         converge_s, len(history.stale_reads), time.monotonic() - started,
                         r.notes, r.events, topology=topology, skipped=r.skipped,
                         heal_converge_s=heal_converge_s)
    if result.ok and not keep:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        result.directory = directory
    return result


def _p50_max(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}s / {max(values):.2f}s" if values else "-"


def table(results: list[RoundResult]) -> str:
    faults = Counter(f for r in results for f in r.injected)
    skipped = Counter(f for r in results for f in r.faults if f in r.skipped)
    why = {k: w for r in results for k, w in r.skipped.items()}
    times = sorted(r.converge_s for r in results if r.converge_s is not None)
    heal_times = [r.heal_converge_s for r in results if r.heal_converge_s is not None]
    notes = Counter(n for r in results for n in r.notes)
    topologies = Counter(r.topology for r in results)
    rows = [
        ("rounds", f"{len(results)} ({sum(r.ok for r in results)} passed)"),
        *([("topology", ", ".join(f"{k} {n}" for k, n in sorted(topologies.items())))]
          if set(topologies) != {"single-dc"} else []),
        *[(f"faults: {k}", str(n)) for k, n in sorted(faults.items())],
        *[(f"skipped: {k}", f"{n} ({why[k]})") for k, n in sorted(skipped.items())],
        *[(f"  {k}", str(n)) for k, n in sorted(notes.items())],
        ("acknowledged writes", str(sum(r.acked for r in results))),
        ("attempted writes", str(sum(r.attempted for r in results))),
        ("lost (acknowledged, missing)", str(sum(r.verdict.lost for r in results))),
        ("invented (never written)", str(sum(r.verdict.invented for r in results))),
        ("divergent rounds", str(sum(r.verdict.divergent for r in results))),
        ("stale read-your-writes", str(sum(r.stale_reads for r in results))),
        ("time to converge p50 / max", _p50_max(times)),
        ("  from the last fault's heal", _p50_max(heal_times)),
        ("round duration mean",
         f"{statistics.mean(r.duration_s for r in results):.1f}s" if results else "-"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def run(rounds: int, seed: int, root: Path | None = None, progress=print,
        results: list[RoundResult] | None = None, topology: str = "single-dc",
        faults: list[str] | None = None, history: bool = False) -> list[RoundResult]:
    """Rounds seed, seed + 1, ... (their faults drawn from each seed, or ``faults`` in
    every round); ``results`` (appended to as rounds end) keeps what was done if the run
    is interrupted."""
    results = [] if results is None else results
    for n in range(rounds):
        result = run_round(seed + n, faults, root=root, topology=topology)
        results.append(result)
        skipped = f" (skipped: {','.join(result.skipped)})" if result.skipped else ""
        progress(f"round {n + 1}/{rounds} seed={result.seed} faults={','.join(result.faults)}"
                 f"{skipped} "
                 f"acked={result.acked} converge={result.converge_s or float('nan'):.2f}s "
                 f"{'ok' if result.ok else 'FAILED'} ({result.duration_s:.1f}s)")
        if not result.ok:
            progress(result.report())
        elif history:
            progress(result.history())
    return results
