"""The agreed ordering: the write path of a peered master.

A client write is submitted to the TxLog sync protocol (the driver) and answered once it
is agreed with the peers and executed here (before the record of its execution is
durable: ``execute``); the driver's execution room (execution.py)
hands the agreed transactions, in agreed order, to ``execute``, which runs them through
the cluster's one ``execute`` and records them in the agreement log. The cluster asks
this ordering what to roll forward: the next agreed, not yet executed transactions (none
while a split recovery's rollback is owed), recorded as executed at their positions;
their answers are kept for the execution room, which may be retrying those very
positions, so that nothing is executed twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from master_service.cluster import rollforward
from master_service.cluster.core import Cluster
from master_service.cluster.write_path import Outcome
from master_service.errors import NotWritable, WriteFailed
from master_service.sync.storage import Agreed, ExecutionStorage


class AgreedOrdering:
    """The cluster's ordering for a peered master (module docstring)."""

    def __init__(self, cluster: Cluster, agreement: ExecutionStorage) -> None:
        self.cluster, self.agreement = cluster, agreement
        # The driver's submit, once it runs (sync/peering.py wires it).
        self.submit_to: Callable[[list[dict]], Awaitable[dict]] | None = None
        # Agreed positions rolled forward while the driver runs: pos -> (txid, answer),
        # handed to the next ``execute`` instead of executing them again.
        self._rolled_forward: dict[int, tuple[str, Any]] = {}
        self._pending = 0

    @property
    def pending(self) -> int:
        """Client writes submitted at this master and not answered yet: waiting for
        agreement, agreed and waiting for execution, or executing (PendingWrites)."""
        return self._pending

    async def start(self) -> None:
        """Transactions logged but not executed are waiting for agreement, not writes
        lost by a crash: nothing to fail."""

    async def stop(self) -> None:
        """The driver stops on its own (sync/peering.py)."""

    async def submit(self, operations: list[dict]) -> dict:
        if self.submit_to is None:
            raise NotWritable("cluster is not writable: peering is starting")
        counters = self.cluster.counters
        self._pending += 1
        try:
            result = await self.submit_to(operations)
        except Exception:
            counters.failed_writes += 1
            raise
        finally:
            self._pending -= 1
        counters.completed_writes += 1
        return result

    # ---- roll-forward ----

    def expected_next(self, limit: int) -> list[rollforward.Expected] | None:
        if self.agreement.rollback_owed() is not None:
            return None  # the agreed queue after it is being renegotiated
        pos = self.agreement.executed()[0]
        return [rollforward.Expected(a.txid, a.pos)
                for a in self.agreement.to_execute(pos, limit)]

    def record_rolled_forward(self, plan: rollforward.Plan, now: float) -> None:
        self.agreement.record_executed(plan.done, plan.entries, plan.failures, now)

    def rolled_forward(self, plan: rollforward.Plan) -> None:
        for pos, txid, *_ in plan.done:
            answer = plan.answers[txid]
            self._rolled_forward[pos] = (txid, answer if isinstance(answer, dict)
                                         else WriteFailed(*answer))

    # ---- execution of agreed transactions ----

    async def execute(self, batch: Sequence[Agreed],
                      answer_now: Callable[[dict[str, Any]], None] | None = None
                      ) -> dict[str, Any]:
        """Execute agreed transactions in their agreed order and record them executed
        (SqliteStorage.record_executed), in one SQLite transaction with their changesets.
        Returns txid -> the client's answer: a dict like a local write's with the agreed
        ``position``, or a WriteFailed. NotWritable when no worker can execute now: the
        transactions stay agreed and the caller retries.

        ``answer_now(answers)``: given the answers as soon as the probe has executed them,
        before the record is durable. They are agreed and durable on every master already
        (the ADD, docs/design/sync-protocol.md#durable-writes-on-the-commit-path), and
        executing them again after a crash gives the same answers (same data, same order,
        deterministic execution), so the record need not be on the client's latency."""
        answers: dict[str, Any] = {}

        async def due(group: Sequence[Agreed]) -> Sequence[Agreed]:
            if not self._rolled_forward:
                return group
            return await self._take_rolled_forward(group, answers)

        early: dict[str, Any] = {}

        def executed(outcome: Outcome) -> None:
            assert answer_now is not None
            answer_now(_answers(outcome, early))

        outcome = await self.cluster.execute(
            batch, self._record, admit=self.cluster.execution_reason, due=due,
            executed=executed if answer_now is not None else None)
        # The answers given early are the outcome's: not worked out a second time.
        return {**answers, **early} if early else _answers(outcome, answers)

    def _record(self, outcome: Outcome, now: float) -> None:
        """(log thread) Each agreed position executed, with the fingerprint after it: a
        refused transaction leaves the fingerprint as it was."""
        done = []
        fp, quads = outcome.fingerprint, outcome.quads
        for a, res in zip(outcome.group, outcome.results, strict=True):
            if res["ok"]:
                fp, quads = res["fingerprint"], res["quads"]
            done.append((a.pos, a.txid, fp, quads))
        self.agreement.record_executed(done, outcome.entries, outcome.failures, now)

    async def _take_rolled_forward(self, batch: Sequence[Agreed], answers: dict) -> list:
        """The part of ``batch`` not executed yet: positions a roll-forward recorded meanwhile
        are answered from it (into ``answers``), never executed twice."""
        executed = (await self.cluster.db(self.agreement.executed))[0]
        for a in batch:
            if a.pos <= executed:
                txid, answer = self._rolled_forward.pop(a.pos, (None, None))
                if txid == a.txid:
                    answers[a.txid] = answer
        for pos in [p for p in self._rolled_forward if p <= executed and p < batch[0].pos]:
            del self._rolled_forward[pos]  # the driver is past them
        return [a for a in batch if a.pos > executed]


def _answers(outcome: Outcome, answers: dict[str, Any]) -> dict[str, Any]:
    """``answers`` with the client's answer to each transaction of ``outcome``."""
    for a, res in zip(outcome.group, outcome.results, strict=True):
        if res["ok"]:
            answers[a.txid] = {"txid": a.txid, "seq": res["seq"],
                               "fingerprint": res["fingerprint"], "position": a.pos}
        else:
            answers[a.txid] = WriteFailed(res["status"], res["error"])
    return answers
