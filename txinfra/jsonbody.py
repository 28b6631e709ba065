"""Request bodies as plain JSON, or a ValueError that says what is wrong with them.

Python's ``json.loads`` takes more than RFC 8259 JSON and fails in ways a handler does
not expect: ``NaN`` and ``Infinity``, and numbers too large for a
double (``1e999`` is read as infinity), which a response that echoes the request cannot
encode again (Starlette's JSONResponse refuses them); lone UTF-16
surrogates written as escapes (``"\\ud800"``), which are not Unicode text and fail when
encoded again (in a response, a URL, a signature); and deep nesting, which raises
RecursionError rather than ValueError. ``parse`` turns each of them into a ValueError
naming the problem, so that an HTTP handler answers 400 (or its protocol's error
envelope) instead of 500.

Fast and strict paths. The bodies parsed most often are the calls between nodes (a peer's
status, a worker's execute), several per agreed transaction. orjson reads them in a tenth
of the time ``json.loads`` and the checks took together (bench/README.md), and refuses by
itself what the checks refuse but depth: NaN, infinities, lone surrogates. So a body is
read by orjson first, and its value stands when it is the one ``json.loads`` would give:
not when orjson refuses the body (the strict path then finds the value or the reason, in
the same words as always) nor when the body holds a run of 19 digits or more (orjson
keeps 64 bits and reads a longer integer as a float). The depth is checked on the value when
the body has more than MAX_DEPTH brackets at all.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
from starlette.responses import JSONResponse

# No request of ours nests deeper than a handful of levels (a peer message: 4, a Jolokia
# request: 3); the limit keeps echoing a request in a response far below the JSON
# encoder's own recursion limit.
MAX_DEPTH = 64

# A run of 19 digits: maybe an integer orjson reads as a float (it keeps 64 bits: a
# negative one of 19 digits may not fit; json.loads keeps every digit). Such a run inside
# a string only sends the body the strict way. Found as 19 zeros once every digit is a
# zero: bytes.translate and find run in C, ~10x faster than a regular expression's scan.
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON (orjson: a status or an execute call is written
    ~10x faster than by ``json.dumps``), for the messages between nodes. What orjson does
    not write (an integer beyond 64 bits, a key that is not a string: a peer's payload may
    hold one) or a string that is not Unicode text (a lone surrogate) is written by
    ``json.dumps`` (ASCII, escaped), so that the receiver refuses it and a journal line
    reads back as it was."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value, separators=(",", ":")).encode()


class JSONAnswer(JSONResponse):
    """Starlette's JSONResponse written by ``dumps``: the same compact UTF-8 JSON, for the
    answers between nodes (a worker's execute and apply)."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for a double")
    return value


def parse(body: bytes | str) -> Any:
    """The JSON value of ``body``; ValueError with the reason if it is not plain JSON."""
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _parse_strictly(body)  # the reason (or a value orjson does not read)
    raw = body.encode() if isinstance(body, str) else body  # (orjson took it: no surrogates)
    if _LONG_DIGITS in raw.translate(_DIGITS_TO_ZERO):
        return _parse_strictly(body)
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:  # else it cannot nest deeper
        _check_depth(value)
    return value


def _parse_strictly(body: bytes | str) -> Any:
    try:
        value = json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise _too_deep() from None
    _check(value)
    return value


def _check(value: Any) -> None:
    """Depth, and every string and key (no lone surrogates)."""
    stack = [(value, 1)]  # iterative: the value may be nested as deep as the parser allows
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise _too_deep()
        if isinstance(item, dict):
            for key in item:
                _check_text(key)
            children = item.values()
        else:
            children = item
        stack.extend((child, depth + 1) for child in children)


def _check_depth(value: Any) -> None:
    """Depth only (orjson refused lone surrogates), visiting containers only: orjson gives
    plain dicts and lists."""
    stack = [(value, 1)] if type(value) is dict or type(value) is list else []
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _too_deep()
        for child in (item.values() if type(item) is dict else item):
            if type(child) is dict or type(child) is list:
                stack.append((child, depth + 1))


def _too_deep() -> ValueError:
    return ValueError(f"nested more than {MAX_DEPTH} levels deep")


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"the string {text[:40]!r} holds a lone UTF-16 surrogate "
                         "escape: not Unicode text") from None
