"""Fuzzing the peer API of a real master: POST /peer/status, POST /peer/tail and
GET /peer/transactions/<txid>?peer=, what the masters of other data centres call.

Two data centres (DataCentres of tests/clusters.py): masters m1 and m2 with one
worker each and a few agreed transactions; the fuzz talks to m1. Every message is signed
with the peer secret by ``txinfra.auth.sign``, the function SyncDriver signs with, so
that the fuzzed content passes the credential and reaches the parser (sync/wire.py into
sync/messages.py) and the protocol; the credential header is fuzzed on its own.

- Malformed messages: a message that would change nothing (m2's status at m1's merge
  base with an empty queue, or ahead of it; a tail segment of entries m1 holds), broken
  by at least one mutation — a field missing or of the wrong type, a negative number, a
  queue out of order or listing a transaction twice, a timestamp above the counter, a bad
  split_point or excluded, deep nesting, a lone surrogate, bytes that are not JSON — plus
  noise that breaks nothing (unknown fields, unicode, huge numbers, unknown senders).
  Expected: 400 with a message that names one of the problems.
- Well-formed messages from m2 that the protocol must report as inconsistent: a status
  at a merge base m1 does not have (or the right one with another hash chain), a tail
  segment that does not extend m1's queue, a transaction that conflicts with one m1
  holds. Expected: 204, reported in GET /admin/sync's divergences, not applied. Also
  messages the protocol ignores (a tail segment past m1's queue, a status ahead of it)
  and well-formed messages from nodes that are not peers (403).
- Transaction fetches with any id and requesting peer; the Authorization header.

Everywhere: never a 5xx, and nothing changes — m1's and m2's agreed queues, m1's incoming
queue, its txlog head and its worker's fingerprint. At the end both masters still agree
on new writes, and neither logged a traceback.

Left out by construction: well-formed messages the protocol accepts and acts on (a new
transaction merged into the incoming queue, a tail segment that extends the queue, a
counter far ahead of the clock). Accepting them is the protocol's business
(test_sync_peering.py, test_sync_protocol.py), and they would change what every later
example sees: a transaction that nobody holds stays unacquired and stops ADD for good.
The last test keeps, as an expected failure, the bug a counter beyond 64 bits shows.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from master_service.sync.messages import chain_hash
from tests.clusters import DataCentres, insert
from tests.fuzz.checks import assert_clear_answer, master_head
from tests.fuzz.settings import fuzz_settings
from tests.procs import agreed_queue
from txinfra.auth import sign, sign_for, signed_target

pytestmark = pytest.mark.processes

AGREED = 4  # transactions agreed before the fuzzing: merge bases and tails to aim at
TX_FIELDS = ("txid", "timestamp", "origin", "size", "digest")
STATUS_FIELDS = ("sender", "mode", "merge_base", "seq", "counter", "chain", "queue")
TAIL_FIELDS = ("sender", "after_seq", "after", "after_chain", "entries", "split_point",
               "excluded")
BODY_FIELDS = ("status", "executed", "payloads", "silent", "relayed")
UNIQUE = itertools.count(1)  # makes the fake ids of each example new to the master


@dataclass
class Peering:
    dcs: DataCentres
    secret: bytes
    client: httpx.Client  # to m1
    agreed: list[dict]  # m1's agreed transactions as the wire spells them (TX_FIELDS)
    chains: list[str]  # chains[i]: the synchronised queue's hash chain after i entries
    counter: int  # m1's counter before the fuzzing: >= every agreed timestamp
    baseline: dict[str, Any] = field(default_factory=dict)  # state() before the fuzzing
    reported: set[tuple[str, str, str]] = field(default_factory=set)  # (peer, kind, detail)

    @property
    def n(self) -> int:
        return len(self.agreed)

    def url(self, target: str) -> str:
        """The absolute URL of a target on m1 (the credential signs the Host)."""
        return self.dcs.dcs[0].master.url + target


@pytest.fixture(scope="module")
def peering(tmp_path_factory):
    dcs = DataCentres(tmp_path_factory.mktemp("fuzz-peer"), n=2, workers=1)
    try:
        dcs.start()
        m1, m2 = dcs.dcs
        for i in range(AGREED):
            r = insert(m2 if i % 2 else m1, f"urn:fuzz:peer{i}")
            assert r.status_code == 204, r.text
        dcs.wait_converged()
        r = httpx.get(f"{m1.master.url}/admin/sync/agreed", timeout=10)
        agreed = [{k: e[k] for k in TX_FIELDS} for e in r.json()]
        assert len(agreed) == AGREED, agreed
        chains = [""]
        for e in agreed:
            chains.append(chain_hash(chains[-1], e["txid"]))
        with httpx.Client(base_url=m1.master.url, timeout=60) as client:
            p = Peering(dcs, dcs.secret[1], client, agreed, chains,
                        DataCentres.sync(m1)["counter"])
            p.baseline = state(p)
            assert p.baseline["agreed m1"] == (AGREED, agreed[-1]["txid"]), p.baseline
            yield p
    finally:
        dcs.stop_all()


# ---- what must not change, and the calls ----


def state(p: Peering) -> dict[str, Any]:
    """What no example may change. An agreed queue is its length and merge base: the
    hash chain makes any other change to it show there (a truncation, a divergence)."""
    m1, m2 = p.dcs.dcs
    s1, s2 = DataCentres.sync(m1), DataCentres.sync(m2)
    return {"agreed m1": (s1["seq"], s1["merge_base"]),
            "agreed m2": (s2["seq"], s2["merge_base"]),
            "incoming m1": s1["incoming"], "failed": (s1["failed"], s2["failed"]),
            "head m1": master_head(p.client), "fingerprints m1": m1.fingerprints()}


def assert_unchanged(p: Peering, what: object) -> None:
    """Every example leaves the state as it was before the fuzzing began."""
    now = state(p)
    assert now == p.baseline, f"changed by {what!r}: {now} != {p.baseline}"


def post(p: Peering, path: str, body: bytes) -> httpx.Response:
    return p.client.post(path, content=body, headers={
        "content-type": "application/json",
        "authorization": sign(p.secret, "POST", p.url(path), body)})


def detail(r: httpx.Response) -> str:
    try:
        return str(r.json()["detail"])
    except (ValueError, KeyError, TypeError):
        return r.text


def collect_reports(p: Peering) -> None:
    for d in DataCentres.sync(p.dcs.dcs[0])["divergences"]:
        p.reported.add((d["peer"], d["kind"], d["detail"]))


def wait_reported(p: Peering, kind: str, needle: str, what: object) -> None:
    """m1 reported ``kind`` from m2 with ``needle`` in its detail, now or before (the
    protocol reports a given inconsistency once; ``p.reported`` keeps what it listed)."""
    deadline = time.monotonic() + 10
    while True:
        collect_reports(p)
        if any(peer == "m2" and k == kind and needle in d for peer, k, d in p.reported):
            return
        assert time.monotonic() < deadline, f"not reported as {kind} ({needle!r}): {what!r}"
        time.sleep(0.02)


# ---- values ----

_labels = st.text(min_size=1, max_size=8)  # any unicode; Hypothesis draws no surrogates
# what a transaction id may hold (messages.py: it travels in URLs)
_tx_labels = st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1,
                     max_size=8)
_unknown_ids = st.one_of(st.sampled_from(["m3", "intruder", "m1", "M2", "m2 ", "é", "m2\n",
                                          "\x00", "a" * 300]),
                         _labels.filter(lambda s: s not in ("m2",)))
_hex = st.text("0123456789abcdef", min_size=32, max_size=32)
_big = st.sampled_from([2**31, 2**53 + 1, 2**62 - 1, 2**62, 2**63 - 1, 2**63, 2**64, 2**70, 10**30])
# Noise breaks no rule: no NaN or Infinity (a parse error of its own), at most a few levels.
_noise = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), _big, _big.map(lambda i: -i),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)
# Placeholders replaced in the JSON text: raw nesting (json.dumps would recurse) and the
# constants Python's json takes but JSON has not.
_DEEP = "\u0001deep\u0001"
_CONSTANT = "\u0001constant\u0001"


def _extra_name(known: tuple[str, ...]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(["x", "Sender", "seq ", "é", "", "queue2", "__proto__"]),
                     st.text(max_size=8)).filter(lambda k: k not in known)


@st.composite
def fake_entries(draw, p: Peering, uid: int, min_size: int = 0) -> list[dict]:
    """Well-formed transactions m1 never saw, sorted, timestamps within the counter."""
    out = []
    for i in range(draw(st.integers(min_size, 3))):
        out.append({"txid": f"{draw(_tx_labels)}~{uid}-{i}",
                    "timestamp": draw(st.integers(0, p.counter)),
                    "origin": draw(st.one_of(st.just("m2"), _labels)),
                    "size": draw(st.one_of(st.integers(0, 10**6), _big.filter(
                        lambda b: b < 2**62))),
                    "digest": draw(st.one_of(_hex, _labels))})
    return sorted(out, key=lambda t: (t["timestamp"], t["txid"]))


# ---- malformed messages: a no-op message, then mutations ----


@dataclass
class Draft:
    """A message being damaged: ``body`` is what is sent (for a status, {"status": msg,
    ...}; for a tail segment, msg itself until a mutation replaces the body)."""

    kind: str  # "status" or "tail"
    msg: dict
    body: Any
    keywords: list[str]  # words the 400 may name: one per breaking mutation

    @property
    def list_key(self) -> str:
        return "queue" if self.kind == "status" else "entries"

    def entries(self, draw, p: Peering) -> list[dict]:
        """The queue or segment as a list of transaction objects (agreed ones if empty)."""
        current = self.msg.get(self.list_key)
        if not current:
            current = self.msg[self.list_key] = _copies(draw, p)
        return current


@dataclass(frozen=True)
class Mutation:
    """Changes one part of a message. ``keyword``: what the 400 must say when it breaks a
    rule (None for noise that breaks nothing, or when ``apply`` adds its own)."""

    part: str  # two mutations of one part would undo each other: one per part
    keyword: str | None
    apply: Callable[[Any, Draft, Peering], None]


def _copies(draw, p: Peering, min_size: int = 1) -> list[dict]:
    """Agreed transactions, in order: m1 holds them exactly so."""
    i = draw(st.integers(0, p.n - min_size))
    j = draw(st.integers(i + min_size, p.n))
    return [dict(e) for e in p.agreed[i:j]]


def _part(name: str) -> str:
    return "list" if name in ("queue", "entries") else name


def _set(name: str, values: list, keyword: str) -> Mutation:
    def apply(draw, d: Draft, p: Peering) -> None:
        d.msg[name] = draw(st.sampled_from(values))
    return Mutation(_part(name), keyword, apply)


def _drop(name: str) -> Mutation:
    return Mutation(_part(name), "lacks the field",
                    lambda draw, d, p: d.msg.pop(name, None))


_ENTRY_DAMAGE = {
    "txid": ([None, 5, "", [], True], "transaction id"),
    "timestamp": ([-1, "1", 1.5, None, True, -2**70], "timestamp"),
    "origin": ([None, "", 5, []], "origin"),
    "size": ([-1, "1", 1.5, None, False, -2**70], "size"),
    "digest": ([None, "", 5, {}], "digest"),
}


def _damage_entry(draw, d: Draft, p: Peering) -> None:
    """One transaction broken: not an object, a field missing or of the wrong type."""
    entries = d.entries(draw, p)
    i = draw(st.integers(0, len(entries) - 1))
    how = draw(st.sampled_from(["object", "drop", *_ENTRY_DAMAGE]))
    if how == "object":
        entries[i] = draw(st.sampled_from([5, "x", None, [], True]))
        d.keywords.append(f"{d.list_key}[{i}]")
    elif how == "drop":
        del entries[i][draw(st.sampled_from(TX_FIELDS))]
        d.keywords.append("lacks the field")
    else:
        values, keyword = _ENTRY_DAMAGE[how]
        entries[i][how] = draw(st.sampled_from(values))
        d.keywords.append(keyword)


def _twice(draw, d: Draft, p: Peering) -> None:
    """A transaction listed twice (in a segment: also the one it follows)."""
    entries = d.entries(draw, p)
    after = next((e for e in p.agreed if e["txid"] == d.msg.get("after")), None)
    if d.kind == "tail" and after is not None and draw(st.booleans()):
        entries.insert(0, dict(after))
    else:
        i = draw(st.integers(0, len(entries) - 1))
        entries.insert(i + 1, dict(entries[i]))


def _unsorted(draw, d: Draft, p: Peering) -> None:
    d.msg["queue"] = _copies(draw, p, min_size=2)[::-1]


def _above_counter(draw, d: Draft, p: Peering) -> None:
    entries = _copies(draw, p)
    entries[-1]["timestamp"] = p.counter + draw(st.integers(1, 2**40))
    d.msg["queue"] = entries


def _body_not_object(draw, d: Draft, p: Peering) -> None:
    if d.kind == "status" and draw(st.booleans()):
        if draw(st.booleans()):
            del d.body["status"]
        else:
            d.body["status"] = draw(st.sampled_from([None, 5, "x", [], True]))
    else:
        d.body = draw(st.sampled_from([None, 5, "x", [d.msg], True, 1.5]))


def _surrogate(draw, d: Draft, p: Peering) -> None:
    """A lone surrogate, as JSON writes it (an escape): in a key or in a value, nested."""
    text = draw(st.sampled_from(["\ud800", "a\udfff", "\udc00\ud800", "x\ud83d"]))
    if draw(st.booleans()):
        d.msg[text] = 1
    else:
        d.msg["lone"] = [{"txid": text}]


def _noise_field(known: tuple[str, ...]) -> Mutation:
    def apply(draw, d: Draft, p: Peering) -> None:
        d.msg[draw(_extra_name(known))] = draw(_noise)
    return Mutation("extra", None, apply)


def _body_extras(draw, d: Draft, p: Peering) -> None:
    """The optional parts of a status body, with anything in them."""
    d.body[draw(st.sampled_from((*BODY_FIELDS[1:], "x")))] = draw(_noise)


_BREAKING = {
    "status": [
        *(_drop(f) for f in STATUS_FIELDS if f != "chain"),
        _set("sender", [None, 5, "", [], {}, True, 1.5], "sender"),
        _set("mode", [None, 5, "READ-WRITE", "rw", "", [], {}, "read-write "], "mode"),
        _set("seq", [-1, -2**70, "1", 1.5, None, True, []], "seq"),
        _set("counter", [-1, -2**70, "5", 1.5, None, False, []], "counter"),
        _set("merge_base", [None, 5, "", [], {}], "merge base"),
        _set("chain", [5, None, "", [], {}], "chain"),
        _set("queue", ["x", {}, 5, None, True, "[]"], "queue"),
        Mutation("list", None, _damage_entry),
        Mutation("list", "twice", _twice),
        Mutation("list", "not sorted", _unsorted),
        Mutation("list", "counter", _above_counter),
    ],
    "tail": [
        *(_drop(f) for f in ("sender", "after_seq", "after", "entries")),
        _set("sender", [None, 5, "", [], {}, True, 1.5], "sender"),
        _set("after_seq", [-1, -2**70, "0", 1.5, None, True], "after_seq"),
        _set("entries", ["x", {}, 5, None, True, []], "entr"),
        _set("split_point", ["1", -1, -2**70, 1.5, True, [], {}], "split_point"),
        _set("excluded", ["m3", 5, {}, None, True, [5], [""], [None], [[]]], "excluded"),
        Mutation("list", None, _damage_entry),
        Mutation("list", "twice", _twice),
    ],
}
_BREAKING_EITHER = [
    Mutation("body", "JSON object", _body_not_object),
    Mutation("nested", "nested", lambda draw, d, p: d.msg.__setitem__("nested", _DEEP)),
    Mutation("unicode", "surrogate", _surrogate),
    Mutation("constant", "not a JSON number",
             lambda draw, d, p: d.msg.__setitem__("ratio", [_CONSTANT])),
]
_NOISE = {
    "status": [_noise_field(STATUS_FIELDS), Mutation("body extras", None, _body_extras)],
    "tail": [_noise_field(TAIL_FIELDS),
             Mutation("split_point", None, lambda draw, d, p: d.msg.__setitem__(
                 "split_point", draw(st.one_of(st.none(), st.integers(0, 2**62))))),
             Mutation("excluded", None, lambda draw, d, p: d.msg.__setitem__(
                 "excluded", draw(st.lists(st.one_of(st.just("m1"), _labels), max_size=3))))],
}
# Parsing comes first: a malformed message from a stranger is a 400 too.
_STRANGER = Mutation("sender", None, lambda draw, d, p: d.msg.__setitem__(
    "sender", draw(_unknown_ids)))


def _after_mutations(msg: dict) -> list[Mutation]:
    """A tail segment's after and after_chain: what breaks them depends on after_seq."""
    k = msg["after_seq"]
    return [_set("after", [None, 5, ""] if k else ["x", 5], "after"),
            _set("after_chain", [5, "", None, []] if k else ["abc", 5], "chain")]


@st.composite
def no_op_status(draw, p: Peering) -> dict:
    """m2's status at m1's merge base with an empty queue, or ahead of m1: it changes no
    queue."""
    if draw(st.booleans()):
        return {"sender": "m2", "mode": "read-write", "merge_base": p.agreed[-1]["txid"],
                "seq": p.n, "counter": p.counter, "chain": p.chains[-1], "queue": []}
    return {"sender": "m2", "mode": "read-write", "merge_base": f"ahead~{draw(_tx_labels)}",
            "seq": p.n + draw(st.integers(1, 2**62 - 1 - p.n)), "counter": p.counter,
            "chain": draw(_hex), "queue": []}


@st.composite
def no_op_tail(draw, p: Peering) -> dict:
    """A tail segment of agreed entries m1 holds, where it holds them: nothing to append."""
    k = draw(st.integers(0, p.n - 1))
    j = draw(st.integers(k + 1, p.n))
    return {"sender": "m2", "after_seq": k, "after": p.agreed[k - 1]["txid"] if k else None,
            "after_chain": p.chains[k], "entries": [dict(e) for e in p.agreed[k:j]]}


@st.composite
def malformed_messages(draw, p: Peering) -> tuple[str, bytes, list[str]]:
    """(path, body, keywords): a no-op message broken by at least one mutation, with
    noise; the 400 must say one of the keywords."""
    kind = draw(st.sampled_from(["status", "tail"]))
    msg = draw(no_op_status(p) if kind == "status" else no_op_tail(p))
    d = Draft(kind, msg, {"status": msg} if kind == "status" else msg, [])
    breaking = _BREAKING[kind] + _BREAKING_EITHER + \
        (_after_mutations(msg) if kind == "tail" else [])
    others = st.lists(st.sampled_from([*breaking, *_NOISE[kind], _STRANGER]), max_size=2)
    chosen = [draw(st.sampled_from(breaking)), *draw(others)]
    done: set[str] = set()
    for m in chosen:
        # One mutation per part; a body that is no object takes no other.
        if m.part in done or "body" in done or (m.part == "body" and done):
            continue
        done.add(m.part)
        m.apply(draw, d, p)
        if m.keyword is not None:
            d.keywords.append(m.keyword)
    data = json.dumps(d.body).encode()
    deep = draw(st.integers(70, 3000))
    data = data.replace(json.dumps(_DEEP).encode(), b"[" * deep + b"]" * deep)
    data = data.replace(json.dumps(_CONSTANT).encode(),
                        draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity"])))
    how = draw(st.sampled_from(["keep"] * 6 + ["truncate", "prefix", "space"]))
    if how == "truncate":
        data = data[:draw(st.integers(0, len(data) - 1))]
        d.keywords.append("not valid JSON")
    elif how == "prefix":
        data = draw(st.sampled_from([b"{", b"]", b",", b"\xff", b"\x00", b"\xc3",
                                     b"\xef\xbb\xbf\xef\xbb\xbf"])) + data
        d.keywords.append("not valid JSON")
    elif how == "space":  # whitespace and a byte order mark around JSON: still JSON
        data = draw(st.sampled_from([b" ", b"\n\t", b"\xef\xbb\xbf"])) + data + b" "
    return f"/peer/{kind}", data, d.keywords


@fuzz_settings(0.6)
@given(data=st.data())
def test_malformed_messages(peering, data):
    p = peering
    path, body, keywords = data.draw(malformed_messages(p))
    r = post(p, path, body)
    assert_clear_answer("peer: malformed messages", r, body)
    assert r.status_code == 400, f"{r.status_code} {r.text[:500]} for {body[:2000]!r}"
    assert any(k in detail(r) for k in keywords), \
        f"the 400 names none of {keywords}: {detail(r)!r} for {body[:2000]!r}"
    assert_unchanged(p, body[:2000])


# ---- well-formed messages that are wrong ----


@dataclass
class Case:
    path: str
    body: dict
    status: int  # the answer the protocol gives
    reports: list[tuple[str, str]]  # (kind, needle in the detail) m1 must report


def _status_body(draw, status: dict) -> dict:
    body: dict[str, Any] = {"status": status}
    if draw(st.booleans()):
        body["silent"] = draw(st.sampled_from([[], ["m1"], ["m2", "x"]]))
    if draw(st.booleans()):
        body[draw(_extra_name(BODY_FIELDS))] = draw(_noise)
    if draw(st.booleans()):  # payloads of nothing m1 is waiting for: ignored
        body["payloads"] = draw(st.dictionaries(_labels, st.text(max_size=5), max_size=2))
    return body


def _tail(draw, k: int, after: str | None, chain: str, entries: list[dict]) -> dict:
    seg = {"sender": "m2", "after_seq": k, "after": after, "after_chain": chain,
           "entries": entries}
    if draw(st.booleans()):  # ignored under split recovery None (this cluster's)
        seg["split_point"] = draw(st.one_of(st.none(), st.integers(0, 10)))
        seg["excluded"] = draw(st.lists(st.sampled_from(["m1", "m3", "é"]), max_size=2,
                                        unique=True))
    if draw(st.booleans()):
        seg[draw(_extra_name(TAIL_FIELDS))] = draw(_noise)
    return seg


@st.composite
def inconsistent_messages(draw, p: Peering, uid: int) -> Case:
    """A well-formed message from m2 whose effect is known exactly: reported and not
    applied, or ignored; sometimes from a stranger instead (403)."""
    how = draw(st.sampled_from(["status: unknown merge base", "status: other chain",
                                "status: conflicting transaction", "status: ahead",
                                "tail: unknown after", "tail: other chain",
                                "tail: other entry", "tail: entry listed again",
                                "tail: past the queue"]))
    fake = f"{draw(_tx_labels)}~{uid}"
    reports: list[tuple[str, str]] = []
    if how.startswith("status"):
        s = draw(st.integers(1, p.n))
        mb, chain, queue = p.agreed[s - 1]["txid"], p.chains[s], draw(fake_entries(p, uid))
        if how == "status: unknown merge base":
            mb = fake
        elif how == "status: other chain":
            chain = f"{uid:08x}" + draw(_hex)[8:]
        elif how == "status: ahead":
            s, mb, chain, queue = p.n + draw(st.integers(1, 2**62 - 1 - p.n)), fake, draw(_hex), []
        if how in ("status: unknown merge base", "status: other chain"):
            reports.append(("diverged", f"merge base {mb} at seq {s} (chain {chain[:8]})"))
        if how == "status: conflicting transaction":
            # At m1's merge base, listing agreed transactions of which some differ.
            s, mb, chain = p.n, p.agreed[-1]["txid"], p.chains[-1]
            queue = _copies(draw, p)
            for e in draw(st.lists(st.sampled_from(queue), min_size=1, unique_by=id)):
                name = draw(st.sampled_from(TX_FIELDS[1:]))
                old = e[name]
                new = draw(st.integers(0, p.counter) if name == "timestamp" else
                           st.integers(0, 10**9) if name == "size" else _labels)
                if new == old:  # a timestamp stays within the counter
                    new = (old - 1 if old else 1) if isinstance(old, int) else old + "x"
                e[name] = new
                reports.append(("conflicting-transaction", f"{e['txid']} differs"))
            queue.sort(key=lambda t: (t["timestamp"], t["txid"]))
        status = {"sender": "m2", "mode": "read-write", "merge_base": mb, "seq": s,
                  "counter": p.counter, "chain": chain, "queue": queue}
        case = Case("/peer/status", _status_body(draw, status), 204, reports)
    else:
        k = draw(st.integers(1, p.n))
        after, chain = p.agreed[k - 1]["txid"], p.chains[k]
        entries = draw(fake_entries(p, uid, min_size=1))
        if how == "tail: unknown after":
            after = fake
            reports.append(("tail-diverged", f"segment after {after} at seq {k},"))
        elif how == "tail: other chain":
            chain = draw(_hex)
            reports.append(("tail-diverged", f"segment after {after} at seq {k},"))
        elif how == "tail: other entry":
            # What m1 holds after k, then, where m1 holds more, a transaction it does not.
            k = draw(st.integers(0, p.n - 1))
            after, chain = (p.agreed[k - 1]["txid"] if k else None), p.chains[k]
            j = draw(st.integers(0, p.n - 1 - k))
            entries = [dict(e) for e in p.agreed[k:k + j]] + [{**entries[0], "txid": fake}] \
                + entries[1:]
            reports.append(("tail-diverged",
                            f"seq {k + j + 1} is {fake}, ours is {p.agreed[k + j]['txid']}"))
        elif how == "tail: entry listed again":
            # Everything m1 holds after k, then an earlier agreed transaction again.
            k = draw(st.integers(2, p.n))
            after, chain = p.agreed[k - 1]["txid"], p.chains[k]
            again = p.agreed[draw(st.integers(0, k - 2))]
            entries = [dict(e) for e in p.agreed[k:]] + [dict(again)]
            reports.append(("tail-diverged", f"{again['txid']} conflicts with what we hold"))
        else:  # past the queue: m1 waits for the segment that follows its own
            k = p.n + draw(st.integers(1, 2**62 - 1 - p.n))
            after, chain = fake, draw(_hex)
        case = Case("/peer/tail", _tail(draw, k, after, chain, entries), 204, reports)
    if draw(st.booleans()) and draw(st.booleans()):  # one in four: a stranger
        sender = draw(_unknown_ids)
        (case.body["status"] if case.path == "/peer/status" else case.body)["sender"] = sender
        case.status, case.reports = 403, []
    return case


@fuzz_settings(0.4)
@given(data=st.data())
def test_wrong_but_well_formed_messages(peering, data):
    p = peering
    case = data.draw(inconsistent_messages(p, next(UNIQUE)))
    body = json.dumps(case.body).encode()
    r = post(p, case.path, body)
    assert_clear_answer("peer: well-formed, wrong", r, case)
    assert r.status_code == case.status, f"{r.status_code} {r.text[:500]} for {case!r}"
    if case.status == 403:
        assert "not a configured peer" in detail(r), r.text
    for kind, needle in case.reports:
        wait_reported(p, kind, needle, case)
    assert_unchanged(p, case)


# ---- transaction fetches ----

_PLAIN = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_~-")


@fuzz_settings(0.3)
@given(data=st.data(),
       peer=st.one_of(st.just("m2"), st.just("m2"), st.none(), _unknown_ids,
                      st.lists(st.sampled_from(["m2", "m3", ""]), min_size=2, max_size=2)))
def test_transaction_fetches(peering, data, peer):
    """GET /peer/transactions/<txid>?peer=: an agreed transaction's payload for a peer
    (its size and digest as agreed), 404 for one m1 does not hold, 403 for a stranger."""
    p = peering
    txid = data.draw(st.one_of(
        st.sampled_from([e["txid"] for e in p.agreed]),
        _labels, st.sampled_from(["..", ".", "%", "a/b", "a?b", "a#b", " ", "\x00", "\n",
                                  "é", "😀", "a" * 3000, "%2F", "null", "x" + "%00"])))
    path = "/peer/transactions/" + quote(txid, safe="")
    pairs = [] if peer is None else [("peer", v) for v in
                                     (peer if isinstance(peer, list) else [peer])]
    query = urlencode(pairs)
    url = path + (f"?{query}" if query else "")
    r = p.client.get(url, headers={"authorization": sign(p.secret, "GET", p.url(url))})
    assert_clear_answer("peer: transaction fetch", r, (txid, peer))
    plain = set(txid) <= _PLAIN
    agreed = {e["txid"]: e for e in p.agreed}
    if plain and peer == "m2":
        if txid in agreed:
            assert r.status_code == 200, r.text
            assert len(r.content) == agreed[txid]["size"]
            assert hashlib.sha256(r.content).hexdigest() == agreed[txid]["digest"]
        else:
            assert r.status_code == 404 and "not held" in r.text, r.text
    elif plain and isinstance(peer, str):
        assert r.status_code == 403 and "not a configured peer" in r.text, r.text
    elif plain and peer is None:
        assert r.status_code == 422, r.text
    assert_unchanged(p, (txid, peer))


# ---- the credential header ----


def _fields(header: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in header.partition(" ")[2].split(","))


def _header_bytes(text: str | bytes) -> bytes:
    """What an HTTP header can carry: no control characters, no surrounding space."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return bytes(b for b in raw if (b >= 0x20 and b != 0x7F) or b == 0x09).strip(b" \t")


@st.composite
def bad_credentials(draw, good: str) -> bytes | None:
    """An Authorization header that must be refused: missing, junk, or the right one
    damaged (scheme, a field missing, repeated or spelt otherwise, separators)."""
    f = _fields(good)
    how = draw(st.sampled_from(["missing", "junk", "bytes", "scheme", "drop", "ts", "nonce",
                                "sig", "duplicate", "separator"]))
    if how == "missing":
        return None
    if how == "junk":
        return _header_bytes(draw(st.one_of(st.text(max_size=60), st.sampled_from(
            ["", "TXC-HMAC", "TXC-HMAC ", "TXC-HMAC ts", "TXC-HMAC =,=,=", "TXC-HMAC ,,,",
             "Bearer x", "Basic bTI6cHc=", "TXC-HMAC ts=1,nonce=2,sig=3"]))))
    if how == "bytes":
        return _header_bytes(draw(st.binary(max_size=80)))
    if how == "scheme":
        return _header_bytes(draw(st.sampled_from(["txc-hmac", "TXC_HMAC", "HMAC", "TXC-HMAC2",
                                                   ""])) + " " + good.partition(" ")[2])
    pairs = [("ts", f["ts"]), ("nonce", f["nonce"]), ("sig", f["sig"])]
    sep = ","
    if how == "drop":
        del pairs[draw(st.integers(0, 2))]
    elif how == "ts":
        now = int(time.time())
        pairs[0] = ("ts", draw(st.sampled_from([
            "", "-1", "1.5", "0x10", " " + f["ts"], f["ts"] + " ", "١٢٣", "1_000", "1" * 400,
            "9" * 4000, str(now - 10_000), str(now + 10_000), "0" + f["ts"], "nan"])))
    elif how == "nonce":
        pairs[1] = ("nonce", draw(st.one_of(st.sampled_from(["", "é", "a" * 5000]),
                                            st.text(max_size=10))))
    elif how == "sig":
        pairs[2] = ("sig", draw(st.sampled_from([
            "", "é" * 64, f["sig"].upper(), f["sig"][:-1], f["sig"] + "0", "0" * 64,
            f["sig"][::-1], "zz" * 32])))
    elif how == "duplicate":
        pairs.insert(0, draw(st.sampled_from(pairs)))
        pairs.append(("ts", "1"))
    else:
        sep = draw(st.sampled_from([";", ", ", " ", "&"]))
    return _header_bytes("TXC-HMAC " + sep.join(f"{k}={v}" for k, v in pairs))


_other_hosts = st.one_of(st.sampled_from([
    "", "127.0.0.1", "127.0.0.1:1", "127.0.0.2:{port}", "evil.example:{port}", "[::1",
    "[::1]:{port}", "127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:{port}/x", "a@127.0.0.1:{port}",
    "127.0.0.1:{port}:1", "0.0.0.0:{port}", "[::]:{port}", "%31%32%37.0.0.1:{port}"]),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20))


@fuzz_settings(0.3)
@given(data=st.data(), target=st.sampled_from(["status", "tail", "fetch", "replay", "host"]))
def test_credential_header(peering, data, target):
    """A malformed or wrong Authorization header, or one rightly signed for a Host that is
    not m1's: 403 naming the credential problem, never a 5xx, nothing changes; a correct
    one sent twice: the second is a replay."""
    p = peering
    no_op = {"status": {"sender": "m2", "mode": "read-write", "merge_base": p.agreed[-1]["txid"],
                        "seq": p.n, "counter": p.counter, "chain": p.chains[-1], "queue": []}}
    method, path, body = ("POST", "/peer/status", json.dumps(no_op).encode())
    if target == "tail":
        path, body = "/peer/tail", json.dumps(data.draw(no_op_tail(p))).encode()
    elif target == "fetch":
        method, path, body = "GET", f"/peer/transactions/{p.agreed[0]['txid']}?peer=m2", b""
    good = sign(p.secret, method, p.url(path), body)
    headers: dict[str, str | bytes] = {"content-type": "application/json"}
    if target == "replay":
        first = p.client.request(method, path, content=body, headers={"authorization": good})
        assert first.status_code == 204, first.text
        header: str | bytes | None = good
    elif target == "host":
        host = data.draw(_other_hosts).replace("{port}", p.url("").rpartition(":")[2])
        header = sign_for(p.secret, method, host, signed_target(path), body)
        headers["host"] = host
    else:
        header = data.draw(bad_credentials(good))
    if header is not None:
        headers["authorization"] = header
    r = p.client.request(method, path, content=body, headers=headers)
    assert_clear_answer("peer: credential header", r, header)
    assert r.status_code in (401, 403), f"{r.status_code} {r.text[:300]} for {header!r}"
    assert "credential" in r.text, r.text
    if target == "replay":
        assert "replayed" in r.text, r.text
    assert_unchanged(p, header)


# ---- afterwards ----


def test_both_masters_still_agree_after_fuzzing(peering):
    """Nothing the fuzz sent left either master unable to agree: a write through each is
    agreed by both and reaches both workers; no traceback in either master's log."""
    p = peering
    m1, m2 = p.dcs.dcs
    for dc, subject in ((m1, "urn:fuzz:after1"), (m2, "urn:fuzz:after2")):
        r = insert(dc, subject)
        assert r.status_code == 204, r.text
    p.dcs.wait_converged()
    assert agreed_queue(m1.master.url) == agreed_queue(m2.master.url)
    assert len(set(p.dcs.fingerprints().values())) == 1
    for dc in (m1, m2):
        sync = DataCentres.sync(dc)
        assert sync["failed"] is None and sync["incoming"] == 0, sync
        assert dc.master.alive()
        assert "Traceback" not in dc.master.log_path.read_text(), dc.master.log_tail(5000)
    collect_reports(p)
    assert {k for _, k, _ in p.reported} <= {"diverged", "tail-diverged",
                                              "conflicting-transaction"}, p.reported


# Last in the module: when it fails, both masters' clocks are at 2**63 (or a year ahead)
# and their next write stops peering for good.
def test_a_counter_beyond_64_bits_is_refused(peering):
    p = peering
    status = {"sender": "m2", "mode": "read-write", "merge_base": p.agreed[-1]["txid"],
              "seq": p.n, "counter": 2**63, "chain": p.chains[-1], "queue": []}
    r = post(p, "/peer/status", json.dumps({"status": status}).encode())
    assert r.status_code == 400 and "counter" in detail(r), r.text
    # below 2**62 but a year ahead of the clock: a forged or badly skewed peer
    status["counter"] = int(time.time() * 1000) + 365 * 86_400_000
    r = post(p, "/peer/status", json.dumps({"status": status}).encode())
    assert r.status_code == 400 and "ahead of this master's clock" in detail(r), r.text
