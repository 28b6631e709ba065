"""The sync protocol's durable state in the master's transaction log file: the SQLite
implementation of the storage interfaces (storage.py).

The TxLog sync protocol (docs/design/sync-protocol.md) agrees on one order of transactions
among peer masters; ``protocol.py`` is its pure core and this module keeps what its
Readies ask to persist (applier.py), next to the data centre's own log (txlog/log.py):

- ``sync_incoming``: the incoming queue (transaction metadata; ``acquired`` when we hold
  the payload);
- ``sync_agreed``: the synchronised queue — position, metadata, and once this data centre
  executed the transaction, the repository fingerprint and quad count after it (and its
  data-centre seq, or NULL when the probe refused it: a refused transaction is refused
  the same way everywhere, the data being the same, so it moves no fingerprint);
- the payloads: rows of the ``transactions`` table (operations as JSON), pending until
  executed, so a payload is durable before its id is posted
  (docs/design/sync-protocol.md#transaction-exchange: only acquired transactions are posted);
- meta: the timestamp counter's high-water mark, and the *peering base* — this data
  centre's state when it started peering, the state at agreed position 0;
- meta: the *floor* (protocol.py, "Compaction"): the agreed entries up to that position
  were executed here and left ``sync_agreed`` with their payloads (every peer executed
  them too, or they passed the LogMaxSize / LogMaxDepth horizon); kept are the id of the
  entry at the floor, the hash chain up to it, and this data centre's state after it;
- ``sync_forgotten``: the ids (and positions) of forgotten entries that a lagging peer may
  still hold in its incoming queue (``Compaction.ids_after``), which a seeding asks about
  (compaction.py, "Seeding and the incoming queue").

Position p of the agreed queue is the same transaction on every master; "the state after
position p" is therefore comparable across data centres: that is how a divergence between
data centres is detected (the fingerprints after the same position differ).

Durability of the counter: a posted counter is a promise never to originate a timestamp
at or below it, so it must survive a crash. Writing it before every post would cost an
fsync per round; instead we persist a *high-water mark* some way ahead of the counter and
write again only when the counter passes it. A restart resumes the counter from the mark,
which is at least every counter ever posted; timestamps only move forward, so that is safe.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from master_service.sync.compaction import leaves_incoming
from master_service.sync.messages import SeedPoint, TxMeta
from master_service.sync.ready import Compaction, Incoming, PersistentState
from master_service.sync.storage import Agreed
from master_service.sync.wire import canonical_payload
from master_service.txlog.log import State, TxLog, TxLogError

COUNTER_LEASE = 10_000  # persist the counter this far ahead (driver units: ms)


class SqliteStorage:
    """The sync protocol's tables in one master's TxLog (module docstring): ``CoreStorage``,
    ``ExecutionStorage`` and ``SeedingStorage`` (storage.py)."""

    def __init__(self, txlog: TxLog) -> None:
        self.txlog = txlog
        with txlog.atomic() as db:
            db["sync_incoming"].create(
                {"txid": str, "timestamp": int, "origin": str, "size": int, "digest": str,
                 "acquired": int}, pk="txid", if_not_exists=True)
            db["sync_agreed"].create(
                {"pos": int, "txid": str, "timestamp": int, "origin": str, "size": int,
                 "digest": str, "seq": int, "fingerprint": str, "quads": int},
                pk="pos", if_not_exists=True)
            db["sync_agreed"].create_index(["txid"], unique=True, if_not_exists=True)
            db["sync_seed_holds"].create({"requester": str, "pos": int, "until": int},
                                         pk="requester", if_not_exists=True)
            db["sync_forgotten"].create({"pos": int, "txid": str}, pk="pos",
                                        if_not_exists=True)
            db["sync_forgotten"].create_index(["txid"], unique=True, if_not_exists=True)
        self._counter_mark = int(self._meta("sync_counter") or 0)

    # ---- meta ----

    def _meta(self, key: str) -> str | None:
        with self.txlog.atomic() as db:
            rows = list(db.query("select value from meta where key = ?", [key]))
        return rows[0]["value"] if rows else None

    @property
    def enabled(self) -> bool:
        """True once this master has peered: from then on every write goes through the
        protocol, even if its peers are removed again (its agreed queue is its history)."""
        return self._meta("sync_base_seq") is not None

    def enable(self) -> State:
        """Start peering at the data centre's current head: agreed position 0."""
        with self.txlog.atomic() as db:
            if self._meta("sync_base_seq") is None:
                head = self.txlog.head()
                db["meta"].upsert_all(
                    [{"key": "sync_base_seq", "value": str(head.seq)},
                     {"key": "sync_base_fingerprint", "value": head.fingerprint},
                     {"key": "sync_base_quads", "value": str(head.quads)}], pk="key")
        return self.base()

    def base(self) -> State:
        return State(int(self._meta("sync_base_seq") or 0),
                     self._meta("sync_base_fingerprint") or "0" * 32,
                     int(self._meta("sync_base_quads") or 0))

    def floor(self) -> tuple[int, str | None, str, State | None]:
        """(floor position, id of the entry there, hash chain up to it, this data
        centre's state after it); (0, None, "", None) before the first compaction."""
        pos = int(self._meta("sync_floor") or 0)
        if not pos:
            return 0, None, "", None
        return (pos, self._meta("sync_floor_txid"), self._meta("sync_floor_chain") or "",
                State(int(self._meta("sync_floor_seq") or 0),
                      self._meta("sync_floor_fingerprint") or "0" * 32,
                      int(self._meta("sync_floor_quads") or 0)))

    # ---- what the protocol core resumes from ----

    def load(self) -> tuple[PersistentState, list[str]]:
        """The persisted protocol state, and the agreed transactions whose payload we lack."""
        with self.txlog.atomic() as db:
            agreed = [(_meta_of(r), r["has"]) for r in db.query(
                "select a.*, t.txid is not null as has from sync_agreed a "
                "left join transactions t on t.txid = a.txid order by a.pos")]
            incoming = [Incoming(_meta_of(r), bool(r["acquired"])) for r in db.query(
                "select * from sync_incoming order by timestamp, txid")]
        newest = max([t.timestamp for t, _ in agreed] + [i.tx.timestamp for i in incoming],
                     default=0)
        counter = max(self._counter_mark, newest)
        floor, floor_txid, floor_chain, _ = self.floor()
        state = PersistentState(tuple(t for t, _ in agreed), tuple(incoming), counter,
                                split_point=self.split_point(), floor=floor,
                                floor_txid=floor_txid, floor_chain=floor_chain,
                                floor_newest=int(self._meta("sync_floor_newest") or 0))
        missing = [t.txid for t, has in agreed if not has]
        return state, missing

    def writes(self, *, counter: int | None, incoming: Sequence[Incoming],
               synchronised: Sequence[TxMeta], payloads: Sequence[Any] = (),
               truncate_after: int | None = None,
               split_point: tuple[int | None] | None = None,
               compacted: Compaction | None = None) -> bool:
        """Would ``persist`` with these arguments write anything? Not when all a Ready
        holds is a counter below the persisted mark, as most statuses a peer answers with
        do: the driver then acts on it without the log thread's round trip, which on the
        commit path held the ADD's commit back behind an empty one (~0.5 ms). Pure; the
        mark only moves inside ``persist``, which the driver's one applier never runs
        while it asks this."""
        return bool((counter is not None and counter > self._counter_mark) or incoming
                    or synchronised or payloads or truncate_after is not None
                    or split_point is not None or compacted is not None)

    def persist(self, *, counter: int | None, incoming: Sequence[Incoming],
                synchronised: Sequence[TxMeta],
                payloads: Sequence[tuple[TxMeta, Sequence[dict[str, Any]]]] = (),
                truncate_after: int | None = None,
                split_point: tuple[int | None] | None = None,
                compacted: Compaction | None = None) -> None:
        """One Ready (or several merged) in ONE SQLite transaction: payloads, the counter
        mark, a split recovery's truncation (before anything else of the Ready), incoming
        upserts, synchronised appends (which leave the incoming queue), the split point.

        ``truncate_after``: agreed entries after that position leave the agreed queue (the
        Ready lists them as incoming again); their transactions are pending again, and
        the data centre owes a rollback to the state at that position (``rollback``).
        ``split_point``: a 1-tuple holding the new split point (None: recovered).
        ``compacted``: last, the agreed entries up to its floor leave, with their payloads."""
        if not self.writes(counter=counter, incoming=incoming, synchronised=synchronised,
                           payloads=payloads, truncate_after=truncate_after,
                           split_point=split_point, compacted=compacted):
            return
        mark = None
        if counter is not None and counter > self._counter_mark:
            mark = counter + COUNTER_LEASE
        with self.txlog.atomic() as db:
            if truncate_after is not None:
                self._truncate(db, truncate_after)
            if split_point is not None:
                _set_meta(db, "sync_split_point",
                          "" if split_point[0] is None else str(split_point[0]))
            if payloads:
                known = {r["txid"] for r in db.query(
                    "select txid from transactions where txid in ("
                    + ",".join("?" * len(payloads)) + ")", [t.txid for t, _ in payloads])}
                # One payload can come twice in a group (fetched, and pushed or relayed
                # with a status): the
                # digest was checked on arrival, so the first copy stands.
                fresh = []
                for t, ops in payloads:
                    if t.txid not in known:
                        known.add(t.txid)
                        fresh.append((t, ops))
                if fresh:
                    self.txlog.log_pending(
                        (t.txid, t.timestamp / 1000.0, t.origin, ops) for t, ops in fresh)
            # Statements of their own rather than sqlite-utils' upsert_all/insert_all,
            # which look the table's schema up on every call: this runs for every status
            # and transaction (about 50 statements per commit became about 10).
            if mark is not None:
                _set_meta(db, "sync_counter", str(mark))
            if incoming:
                db.conn.executemany(
                    "insert into sync_incoming (txid, timestamp, origin, size, digest, "
                    "acquired) values (?, ?, ?, ?, ?, ?) on conflict(txid) do update set "
                    "timestamp = excluded.timestamp, origin = excluded.origin, "
                    "size = excluded.size, digest = excluded.digest, "
                    "acquired = excluded.acquired",
                    [(*_values(i.tx), int(i.acquired)) for i in incoming])
            if synchronised:
                row = db.conn.execute("select coalesce(max(pos), 0) from sync_agreed "
                                      "union all select value from meta where key = "
                                      "'sync_floor'").fetchall()
                # after the floor even when every entry was forgotten
                start = max(int(r[0] or 0) for r in row) + 1
                db.conn.executemany(
                    "insert into sync_agreed (pos, txid, timestamp, origin, size, digest) "
                    "values (?, ?, ?, ?, ?, ?)",
                    [(start + k, *_values(tx)) for k, tx in enumerate(synchronised)])
                db.conn.executemany("delete from sync_incoming where txid = ?",
                                    [(tx.txid,) for tx in synchronised])
            if compacted is not None:
                self._compact(db, compacted)
        if mark is not None:
            self._counter_mark = mark

    # ---- compaction ----

    def _compact(self, db: Any, c: Compaction) -> None:
        """The agreed entries up to ``c.floor`` leave, with their payloads (rows of
        ``transactions``, which this data centre executed: committed or failed); the
        state after the floor is kept in meta (state_at, executed)."""
        old = int(self._meta("sync_floor") or 0)
        if c.floor <= old:
            return
        rows = list(db.query("select txid, fingerprint, quads from sync_agreed where pos = ?",
                             [c.floor]))
        if not rows or rows[0]["txid"] != c.txid or rows[0]["fingerprint"] is None:
            raise TxLogError(f"cannot forget up to agreed position {c.floor}: it is not "
                             f"{c.txid} executed here")
        seq_row = next(iter(db.query(
            "select max(seq) as seq from sync_agreed where pos <= ? and seq is not null",
            [c.floor])))
        _, _, _, before = self.floor()
        seq = seq_row["seq"]
        if seq is None:
            seq = before.seq if before is not None else self.base().seq
        db.execute("delete from transactions where status != 'pending' and txid in "
                   "(select txid from sync_agreed where pos <= ?)", [c.floor])
        # the ids a lagging peer may still hold in its incoming queue stay (seeding)
        db.execute("insert or replace into sync_forgotten (pos, txid) select pos, txid "
                   "from sync_agreed where pos > ? and pos <= ?", [c.ids_after, c.floor])
        db.execute("delete from sync_forgotten where pos <= ?", [c.ids_after])
        db.execute("delete from sync_agreed where pos <= ?", [c.floor])
        db["meta"].upsert_all(
            [{"key": "sync_floor", "value": str(c.floor)},
             {"key": "sync_floor_txid", "value": c.txid},
             {"key": "sync_floor_chain", "value": c.chain},
             {"key": "sync_floor_newest", "value": str(c.newest)},
             {"key": "sync_floor_seq", "value": str(seq)},
             {"key": "sync_floor_fingerprint", "value": rows[0]["fingerprint"]},
             {"key": "sync_floor_quads", "value": str(rows[0]["quads"] or 0)}], pk="key")

    # ---- split recovery ----

    def _truncate(self, db: Any, after_pos: int) -> None:
        txids = [r["txid"] for r in db.query(
            "select txid from sync_agreed where pos > ? order by pos", [after_pos])]
        db.execute("delete from sync_agreed where pos > ?", [after_pos])
        # Payloads of transactions to negotiate again: pending, as when first received.
        # Those the data centre executed keep their rows in its log until the rollback.
        db.conn.executemany(
            "update transactions set status = 'pending', error = null where txid = ?",
            [(t,) for t in txids])
        owed = self._meta("sync_rollback_to")
        target = after_pos if owed is None else min(int(owed), after_pos)
        db["meta"].upsert({"key": "sync_rollback_to", "value": str(target)}, pk="key")

    def split_point(self) -> int | None:
        value = self._meta("sync_split_point")
        return int(value) if value else None

    def rollback_owed(self) -> int | None:
        """The agreed position whose state this data centre must return to (a split
        recovery truncated the agreed queue after it), or None."""
        value = self._meta("sync_rollback_to")
        return int(value) if value is not None else None

    def state_at(self, pos: int) -> tuple[int, str] | None:
        """(data-centre seq, fingerprint) after agreed position ``pos`` if it was executed
        here (position 0: the peering base)."""
        if pos == 0:
            base = self.base()
            return base.seq, base.fingerprint
        floor, _, _, at_floor = self.floor()
        if pos < floor:
            return None  # forgotten
        if pos == floor:
            assert at_floor is not None
            return at_floor.seq, at_floor.fingerprint
        with self.txlog.atomic() as db:
            rows = list(db.query(
                "select fingerprint from sync_agreed where pos = ? and fingerprint is not null",
                [pos]))
            if not rows:
                return None
            seq_rows = list(db.query(
                "select max(seq) as seq from sync_agreed where pos <= ? and seq is not null",
                [pos]))
        seq = seq_rows[0]["seq"]
        if seq is None:
            seq = at_floor.seq if at_floor is not None else self.base().seq
        return seq, rows[0]["fingerprint"]

    def record_split_backup(self, name: str, pos: int) -> None:
        with self.txlog.atomic() as db:
            db["meta"].upsert_all([{"key": "sync_split_backup", "value": name},
                                   {"key": "sync_split_backup_pos", "value": str(pos)}],
                                  pk="key")

    def split_backup(self) -> tuple[str, int] | None:
        name, pos = self._meta("sync_split_backup"), self._meta("sync_split_backup_pos")
        return (name, int(pos)) if name and pos is not None else None

    def forget_executed_after(self, seq: int) -> None:
        """A rollback is under way: the data centre's log forgets its entries after
        ``seq`` (their transactions are pending again). The owed rollback stays recorded
        until ``rolled_back``: a master that dies after the log forgot but before the
        workers were restored must restore them at its restart."""
        with self.txlog.atomic() as db:
            self._forget(db, seq)

    def rolled_back(self, pos: int, seq: int) -> None:
        """The data centre is back at agreed position ``pos`` (its log at ``seq``, every
        reachable worker restored): the log's entries after it are gone and the owed
        rollback is paid."""
        with self.txlog.atomic() as db:
            self._forget(db, seq)
            db.execute("delete from meta where key = 'sync_rollback_to'")

    @staticmethod
    def _forget(db: Any, seq: int) -> None:
        dropped = [r["txid"] for r in db.query(
            "select txid from sync_queue where seq > ?", [seq])]
        db.execute("delete from sync_queue where seq > ?", [seq])
        db.conn.executemany(
            "update transactions set status = 'pending', seq = null, error = null "
            "where txid = ?", [(t,) for t in dropped])

    # ---- seeding (master_service/sync/seeding.py) ----

    def position_of(self, seq: int, fingerprint: str) -> int | None:
        """The last agreed position after which this data centre was at (seq,
        fingerprint): what a worker image at that state stands for. None when the state
        is not one the agreed queue still knows (then no seed is made of it)."""
        with self.txlog.atomic() as db:
            rows = [r["pos"] for r in db.query(
                "select pos from sync_agreed where fingerprint = ? order by pos desc",
                [fingerprint])]
        for pos in rows:  # a refused transaction leaves the state as it was: the last
            if self.state_at(pos) == (seq, fingerprint):
                return pos
        floor, _, _, at_floor = self.floor()
        if at_floor is not None and (at_floor.seq, at_floor.fingerprint) == (seq, fingerprint):
            return floor
        base = self.base()
        if not floor and (base.seq, base.fingerprint) == (seq, fingerprint):
            return 0
        return None

    def agreed_position(self) -> int:
        """Our agreed position: the floor plus the synchronised entries held."""
        with self.txlog.atomic() as db:
            top = next(iter(db.query("select max(pos) as n from sync_agreed")))["n"]
        return top if top is not None else self.floor()[0]

    def known_ids(self, pos: int) -> tuple[int, list[str]]:
        """(known_after, ids): the ids of the entries agreed in (known_after, pos], in
        order, from the ids of forgotten entries kept and the queue (what a seed point
        of ``pos`` carries: compaction.py, "Seeding and the incoming queue")."""
        with self.txlog.atomic() as db:
            low = next(iter(db.query("select min(pos) as n from sync_forgotten")))["n"]
            ids = [r["txid"] for r in db.query(
                "select pos, txid from sync_forgotten where pos <= :p union all "
                "select pos, txid from sync_agreed where pos <= :p order by pos", {"p": pos})]
        known_after = low - 1 if low is not None else self.floor()[0]
        if len(ids) != pos - known_after:
            raise TxLogError(f"the ids kept of agreed positions {known_after + 1}..{pos} "
                             f"are not contiguous ({len(ids)} of them)")
        return known_after, ids

    def seeded(self, point: SeedPoint, state: State) -> None:
        """This data centre's workers now hold a peer's image of agreed position
        ``point.pos`` (data-centre state ``state``): in ONE SQLite transaction the agreed
        queue is forgotten up to it as a compaction would (the floor: id, hash chain,
        newest timestamp, state), entries after it leave too (peers send them again), any
        split or owed rollback is over, and the data centre's log starts over at
        ``state`` (TxLog.rebase).

        Incoming transactions that the image holds (agreed at or before ``point.pos``)
        leave the incoming queue with their payloads: posted again, they would be agreed
        twice. The donor said which (``point.ids``, ``point.known_after``:
        ``leaves_incoming``); the others stay and are negotiated as before. The ids stay
        known here (``sync_forgotten``): a peer lagging behind them may seed from us."""
        agreed = set(point.ids)
        with self.txlog.atomic() as db:
            position = self.agreed_position()  # inside: what the queue is when we decide
            done = [(r["txid"],) for r in db.query("select txid, timestamp from sync_incoming")
                    if leaves_incoming(r["txid"], r["timestamp"], point_txid=point.txid,
                                       point_newest=point.newest, agreed=agreed,
                                       known_after=point.known_after, position=position)]
            db.conn.executemany("delete from sync_incoming where txid = ?", done)
            db.conn.executemany("delete from transactions where txid = ?", done)
            db.execute("delete from sync_forgotten")
            if point.known_after is not None:
                db["sync_forgotten"].insert_all(
                    [{"pos": point.known_after + i + 1, "txid": t}
                     for i, t in enumerate(point.ids)], pk="pos")
            db.execute("delete from transactions where txid in "
                       "(select txid from sync_agreed where pos <= ?)", [point.pos])
            db.execute("delete from sync_agreed")
            self.txlog.rebase(state)
            at = {"seq": state.seq, "fingerprint": state.fingerprint, "quads": state.quads}
            if point.pos == 0 or self._meta("sync_base_seq") is None:
                # Position 0 is the donor's peering base: the state the image holds.
                db["meta"].upsert_all([{"key": f"sync_base_{k}", "value": str(v)}
                                       for k, v in at.items()], pk="key")
            db.execute("delete from meta where key in ('sync_floor', 'sync_rollback_to', "
                       "'sync_split_point', 'sync_split_backup', 'sync_split_backup_pos')")
            if point.pos:
                db["meta"].upsert_all(
                    [{"key": "sync_floor", "value": str(point.pos)},
                     {"key": "sync_floor_txid", "value": point.txid},
                     {"key": "sync_floor_chain", "value": point.chain},
                     {"key": "sync_floor_newest", "value": str(point.newest)},
                     *({"key": f"sync_floor_{k}", "value": str(v)} for k, v in at.items())],
                    pk="key")
            mark = max(self._counter_mark, point.newest + COUNTER_LEASE)
            db["meta"].upsert({"key": "sync_counter", "value": str(mark)}, pk="key")
        self._counter_mark = mark

    # ---- seeding holds (master_service/sync/seeding.py, SyncNode.hold_for_seeding) ----

    def hold_seed(self, requester: str, pos: int, until: int) -> None:
        """A data centre seeds from our image of ``pos``: keep what follows it until
        ``until`` (ms) — persisted, so that a restart of this donor keeps the hold."""
        with self.txlog.atomic() as db:
            db["sync_seed_holds"].upsert({"requester": requester, "pos": pos,
                                          "until": until}, pk="requester")

    def seed_holds(self, now: int) -> list[tuple[str, int, int]]:
        """The holds still running at ``now`` (ms): (requester, pos, until); the expired
        ones are deleted. A hold whose requester posted since is dropped again by the
        core at its first status (compaction.py)."""
        with self.txlog.atomic() as db:
            db.execute("delete from sync_seed_holds where until <= ?", [now])
            return [(r["requester"], r["pos"], r["until"]) for r in
                    db.query("select requester, pos, until from sync_seed_holds "
                             "order by requester")]

    # ---- payloads ----

    def payload(self, txid: str) -> bytes | None:
        """The canonical payload of a transaction we hold (for a peer acquiring it)."""
        tx = self.txlog.transaction(txid)
        return canonical_payload(tx.operations) if tx is not None else None

    # ---- execution in this data centre ----

    def executed(self) -> tuple[int, str]:
        """(position, fingerprint after it) of the last agreed transaction executed here."""
        with self.txlog.atomic() as db:
            rows = list(db.query("select pos, fingerprint from sync_agreed where "
                                 "fingerprint is not null order by pos desc limit 1"))
        if rows:
            return rows[0]["pos"], rows[0]["fingerprint"]
        floor, _, _, at_floor = self.floor()
        if at_floor is not None:
            return floor, at_floor.fingerprint
        return 0, self.base().fingerprint

    def agreed_count(self) -> int:
        with self.txlog.atomic() as db:
            return next(iter(db.query("select count(*) as n from sync_agreed")))["n"]

    def fingerprint_at(self, pos: int) -> str | None:
        """This data centre's fingerprint after agreed position ``pos``, if executed."""
        if pos == 0:
            return self.base().fingerprint
        floor, _, _, at_floor = self.floor()
        if pos == floor and at_floor is not None:
            return at_floor.fingerprint
        with self.txlog.atomic() as db:
            rows = list(db.query("select fingerprint from sync_agreed where pos = ?", [pos]))
        return rows[0]["fingerprint"] if rows else None

    def to_execute(self, after_pos: int, limit: int) -> list[Agreed]:
        """Agreed transactions after ``after_pos``, in order, up to the first whose payload
        has not arrived yet (they are executed strictly in the agreed order)."""
        out: list[Agreed] = []
        with self.txlog.atomic() as db:
            for r in db.query(
                    "select a.pos, a.txid, a.timestamp, t.operations from sync_agreed a "
                    "left join "
                    "transactions t on t.txid = a.txid where a.pos > ? order by a.pos "
                    "limit ?", [after_pos, limit]):
                if r["operations"] is None or r["pos"] != after_pos + len(out) + 1:
                    break
                out.append(Agreed(r["pos"], r["txid"], json.loads(r["operations"]),
                                  r["timestamp"]))
        return out

    def record_executed(self, done: Sequence[tuple[int, str, str, int]],
                        entries: Sequence[tuple], failures: Sequence[tuple[str, str]],
                        now: float) -> None:
        """Agreed transactions executed here, in ONE SQLite transaction with the data
        centre's log: ``entries`` go to its synchronised queue (``TxLog.commit_applied``),
        ``failures`` are marked failed, and each ``(pos, txid, fingerprint, quads)`` of
        ``done`` records the state after that position."""
        with self.txlog.atomic() as db:
            expected = self.executed()[0] + 1
            if done and done[0][0] != expected:
                raise TxLogError(f"agreed position {done[0][0]} executed, expected {expected}")
            self.txlog.commit_applied(entries, now)
            for txid, error in failures:
                self.txlog.mark_failed(txid, error)
            seqs = {e[1]: e[0] for e in entries}
            db.conn.executemany(
                "update sync_agreed set fingerprint = ?, quads = ?, seq = ? "
                "where pos = ? and txid = ?",
                [(fp, quads, seqs.get(txid), pos, txid) for pos, txid, fp, quads in done])


def _values(tx: TxMeta) -> tuple[str, int, str, int, str]:
    return tx.txid, tx.timestamp, tx.origin, tx.size, tx.digest


def _set_meta(db: Any, key: str, value: str) -> None:
    db.conn.execute("insert into meta (key, value) values (?, ?) on conflict(key) do "
                    "update set value = excluded.value", (key, value))


def _meta_of(row: dict[str, Any]) -> TxMeta:
    return TxMeta(row["txid"], row["timestamp"], row["origin"], row["size"], row["digest"])
