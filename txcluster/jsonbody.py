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
"""

from __future__ import annotations

import json
import math
from typing import Any

# No request of ours nests deeper than a handful of levels (a peer message: 4, a Jolokia
# request: 3); the limit keeps echoing a request in a response far below the JSON
# encoder's own recursion limit.
MAX_DEPTH = 64


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
        value = json.loads(body, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep") from None
    _check(value)
    return value


def _check(value: Any) -> None:
    stack = [(value, 1)]  # iterative: the value may be nested as deep as the parser allows
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
            continue
        if not isinstance(item, dict | list):
            continue
        if depth > MAX_DEPTH:
            raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, dict):
            for key in item:
                _check_text(key)
            children = item.values()
        else:
            children = item
        stack.extend((child, depth + 1) for child in children)


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"the string {text[:40]!r} holds a lone UTF-16 surrogate "
                         "escape: not Unicode text") from None
