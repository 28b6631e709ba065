"""JSON forms of the protocol's messages, as masters POST them to each other.

Parsing goes through the frozen message types, so whatever breaks a rule of the protocol
is an ``InvalidMessage`` naming the rule (the peer API answers 400 with it) and the state
machine only ever sees well-formed values.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from master_service.sync.messages import (
    InvalidMessage,
    Mode,
    SeedPoint,
    Status,
    TailSegment,
    TxMeta,
)


def canonical_payload(operations: Sequence[dict[str, Any]]) -> bytes:
    """The bytes that travel between masters and that a transaction's digest covers."""
    return json.dumps(list(operations), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode()


def payload_digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def tx_to_json(tx: TxMeta) -> dict[str, Any]:
    return {"txid": tx.txid, "timestamp": tx.timestamp, "origin": tx.origin,
            "size": tx.size, "digest": tx.digest}


def status_to_json(st: Status) -> dict[str, Any]:
    out = {"sender": st.sender, "mode": st.mode.value, "merge_base": st.merge_base,
           "seq": st.seq, "counter": st.counter, "chain": st.chain,
           "queue": [tx_to_json(t) for t in st.queue]}
    if st.split_point is not None:
        out["split_point"] = st.split_point
        out["split_chain"] = st.split_chain
    if st.executed or st.floor:
        out["executed"] = st.executed
        out["floor"] = st.floor
    if st.heard:
        out["heard"] = dict(st.heard)
    return out


def tail_to_json(seg: TailSegment) -> dict[str, Any]:
    out = {"sender": seg.sender, "after_seq": seg.after_seq, "after": seg.after,
           "after_chain": seg.after_chain, "entries": [tx_to_json(t) for t in seg.entries]}
    if seg.split_point is not None or seg.excluded:
        out["split_point"] = seg.split_point
        out["excluded"] = list(seg.excluded)
    return out


# A status body's field with tail segments of its sender, taken before the status, in
# order (one request instead of several: transport.py).
TAILS_FIELD = "tails"


def status_tails(body: dict[str, Any], sender: str) -> list[TailSegment]:
    """The tail segments a status body carries (TAILS_FIELD), its sender's only."""
    tails = body.get(TAILS_FIELD, [])
    if not isinstance(tails, list):
        raise InvalidMessage(f"'{TAILS_FIELD}' must be a JSON array")
    segments = [tail_from_json(t) for t in tails]
    if any(seg.sender != sender for seg in segments):
        raise InvalidMessage(f"a status of {sender} carries another node's tail segment")
    return segments


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidMessage(f"{what} must be a JSON object")
    return value


def _field(obj: dict[str, Any], name: str, what: str) -> Any:
    if name not in obj:
        raise InvalidMessage(f"{what} lacks the field '{name}'")
    return obj[name]


def _txs(value: Any, what: str) -> tuple[TxMeta, ...]:
    if not isinstance(value, list):
        raise InvalidMessage(f"{what} must be a JSON array")
    out = []
    for i, item in enumerate(value):
        obj = _obj(item, f"{what}[{i}]")
        out.append(TxMeta(*(_field(obj, k, f"{what}[{i}]")
                            for k in ("txid", "timestamp", "origin", "size", "digest"))))
    return tuple(out)


def status_from_json(value: Any) -> Status:
    obj = _obj(value, "status")
    mode = _field(obj, "mode", "status")
    try:
        mode = Mode(mode)
    except ValueError:
        raise InvalidMessage(f"mode must be one of {[m.value for m in Mode]}, got {mode!r}") \
            from None
    return Status(_field(obj, "sender", "status"), mode, _field(obj, "merge_base", "status"),
                  _field(obj, "seq", "status"), _field(obj, "counter", "status"),
                  _txs(_field(obj, "queue", "status"), "queue"), obj.get("chain", ""),
                  obj.get("split_point"), obj.get("split_chain", ""),
                  obj.get("executed", 0), obj.get("floor", 0), _heard(obj.get("heard", {})))


def _heard(value: Any) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, dict):
        raise InvalidMessage("'heard' must be a JSON object of peer -> counter")
    return tuple(sorted(value.items()))


def tail_from_json(value: Any) -> TailSegment:
    obj = _obj(value, "tail segment")
    return TailSegment(_field(obj, "sender", "tail segment"),
                       _field(obj, "after_seq", "tail segment"),
                       _field(obj, "after", "tail segment"),
                       _txs(_field(obj, "entries", "tail segment"), "entries"),
                       obj.get("after_chain", ""), obj.get("split_point"),
                       _strs(obj.get("excluded", []), "excluded"))


def _strs(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise InvalidMessage(f"{what} must be a JSON array")
    return tuple(value)  # TailSegment checks that each is a non-empty string


SEED_FIELDS = ("name", "pos", "txid", "chain", "newest", "seq", "fingerprint", "quads",
               "sha256", "bytes")


def seed_to_json(point: SeedPoint) -> dict[str, Any]:
    return {**{k: getattr(point, k) for k in SEED_FIELDS}, "ids": list(point.ids),
            "known_after": point.known_after}


def seed_from_json(value: Any) -> SeedPoint:
    obj = _obj(value, "seed point")
    # ids / known_after: absent from a donor of an earlier release (the recipient then
    # decides by timestamp alone, compaction.leaves_incoming)
    return SeedPoint(*(obj.get(k) if k in ("txid", "sha256", "bytes")
                       else _field(obj, k, "seed point") for k in SEED_FIELDS),
                     ids=_strs(obj.get("ids", []), "seed point ids"),
                     known_after=obj.get("known_after"))
