"""Deterministic execution of an update given its transaction (txid, agreed timestamp).

Why: peered data centres agree on the order of transactions and each one EXECUTES every
agreed transaction on its own probe worker (docs/design/sync-protocol.md). The
specification's known issue — an update with NOW(), RAND(), UUID(), STRUUID(), BNODE()
or template blank nodes gives each data centre different data — is prevented here, not
only detected: every value such an update can draw comes from the transaction itself.

* NOW() is the transaction's timestamp (the agreed one, milliseconds since the epoch),
  the same for the whole transaction, as SPARQL 1.1 (17.4.5.1) wants it for one query:
  the call is replaced by a constant ``("...Z"^^xsd:dateTime)`` (a bracketted
  expression is valid wherever a built-in call is: FILTER, ORDER BY, GROUP BY, HAVING);
* RAND(), UUID(), STRUUID() and BNODE() become calls of custom functions
  (``urn:x-txcluster:fn:*``) that pyoxigraph calls once per solution, drawing from a
  generator seeded by the transaction id (RAND: xsd:double in [0, 1); UUID: an IRI
  ``urn:uuid:`` + a version-4 UUID; STRUUID: the same form as a plain string);
* BNODE() gives a fresh node per call; BNODE(str) gives the same node for the same string
  within one solution mapping and different ones across solutions (SPARQL 1.1 17.4.2.2).
  A custom function does not see which solution it is called for, so each call site
  carries its own number and a call site called a second time starts a new solution:
  exact for BIND and projection expressions (evaluated solution after solution), which
  is where BNODE(str) is used;
* blank node labels (template blank nodes, INSERT DATA and RDF documents, BNODE) are
  minted by the transaction's ``BlankNodeMinter`` from its txid only (transaction.py).

The values are drawn in evaluation order, which pyoxigraph keeps the same for the same
store content and query (its hash maps use a fixed hasher; checked by the two-worker test
in tests/test_determinism.py); every data centre holds the same content at the same agreed
position, so it draws the same values for the same solutions.

Cost: ``find_calls`` runs once per operation at parse time, and tokenizes only a WHERE
that mentions one of the names at all (a case-insensitive regular expression); an update
without such calls is evaluated exactly as before, without custom functions.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid
from collections.abc import Callable
from typing import NamedTuple

import pyoxigraph as ox

from rdfcore import sparql_text as st
from worker_service.transaction import BlankNodeMinter

NOW, RAND, UUID, STRUUID, BNODE = "NOW", "RAND", "UUID", "STRUUID", "BNODE"
_NAMES = frozenset({NOW, RAND, UUID, STRUUID, BNODE})
# A cheap first look: a WHERE that contains none of these words (in any case, anywhere)
# cannot call any of the functions.
_MENTIONS = re.compile(r"(?i)now|rand|uuid|bnode")

FN = "urn:x-txcluster:fn:"
FN_RAND = ox.NamedNode(FN + "rand")
FN_UUID = ox.NamedNode(FN + "uuid")
FN_STRUUID = ox.NamedNode(FN + "struuid")
FN_BNODE = ox.NamedNode(FN + "bnode")
FN_BNODE_STR = ox.NamedNode(FN + "bnode-str")
_XSD = "http://www.w3.org/2001/XMLSchema#"
_XSD_STRING = ox.NamedNode(_XSD + "string")
_XSD_DOUBLE = ox.NamedNode(_XSD + "double")


class Call(NamedTuple):
    """One call of a non-deterministic built-in: ``text[start:end]`` is its name and its
    opening parenthesis (and, for a no-argument call, the closing one)."""

    name: str
    start: int
    end: int
    has_args: bool


def find_calls(text: str) -> tuple[Call, ...]:
    """The calls of NOW, RAND, UUID, STRUUID and BNODE in SPARQL ``text``, found by the
    tokenizer: never inside a string, an IRI or a comment; names case-insensitive
    (SPARQL keywords are), with white space or comments before the parenthesis
    (``NOW ()``). A prefixed name (``ex:now``) or a variable (``?now``) is no call."""
    if not _MENTIONS.search(text):
        return ()
    tokens = st.tokenize(text)
    calls: list[Call] = []
    for i, tok in enumerate(tokens[:-1]):
        if tok.kind != st.WORD:
            continue
        name = tok.text.upper()
        nxt = tokens[i + 1]
        if name not in _NAMES or nxt.kind != st.PUNCT or nxt.text != "(":
            continue
        after = tokens[i + 2] if i + 2 < len(tokens) else None
        empty = after is not None and after.kind == st.PUNCT and after.text == ")"
        end = after.end if empty and after is not None else nxt.end
        calls.append(Call(name, tok.start, end, not empty))
    return tuple(calls)


def now_literal(timestamp_ms: int) -> ox.Literal:
    """NOW()'s value for a transaction timestamp: xsd:dateTime in UTC, milliseconds."""
    when = dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.UTC)
    text = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{timestamp_ms % 1000:03d}Z"
    return ox.Literal(text, datatype=ox.NamedNode(_XSD + "dateTime"))


def rewrite(text: str, calls: tuple[Call, ...], timestamp_ms: int) -> str:
    """``text`` with each call replaced: NOW() by its constant, the others by their
    custom function (BNODE's call sites numbered, see the module docstring)."""
    out: list[str] = []
    pos = 0
    for site, call in enumerate(calls):
        out.append(text[pos:call.start])
        if call.name == NOW:
            out.append(f"({now_literal(timestamp_ms)})")
        elif call.name == BNODE and call.has_args:
            out.append(f"{FN_BNODE_STR}({site}, ")
        else:
            fn = {RAND: FN_RAND, UUID: FN_UUID, STRUUID: FN_STRUUID, BNODE: FN_BNODE}
            out.append(f"{fn[call.name]}(" + ("" if call.has_args else ")"))
        pos = call.end
    out.append(text[pos:])
    return "".join(out)


def custom_functions(calls: tuple[Call, ...], minter: BlankNodeMinter
                     ) -> dict[ox.NamedNode, Callable[..., object]] | None:
    """The custom functions a rewritten text calls (None when it calls none: NOW() only,
    or no call at all), drawing from ``minter``, the transaction's source of values."""
    names = {c.name for c in calls} - {NOW}
    if not names:
        return None
    rng = minter.random()
    functions: dict[ox.NamedNode, Callable[..., object]] = {}
    if RAND in names:
        functions[FN_RAND] = lambda: ox.Literal(repr(rng.random()), datatype=_XSD_DOUBLE)
    if UUID in names or STRUUID in names:
        def _uuid() -> str:
            return str(uuid.UUID(int=rng.getrandbits(128), version=4))
        functions[FN_UUID] = lambda: ox.NamedNode("urn:uuid:" + _uuid())
        functions[FN_STRUUID] = lambda: ox.Literal(_uuid())
    if BNODE in names:
        functions[FN_BNODE] = lambda: minter.fresh("b")
        functions[FN_BNODE_STR] = _BnodeOfString(minter)
    return functions


class _BnodeOfString:
    """BNODE(simple literal): one node per string and solution (SPARQL 1.1 17.4.2.2); a
    call site seen again starts the next solution. Other arguments: an error (unbound),
    as in pyoxigraph."""

    def __init__(self, minter: BlankNodeMinter) -> None:
        self.minter = minter
        self.sites: set[int] = set()
        self.solution = -1
        self.nodes: dict[str, ox.BlankNode] = {}

    def __call__(self, site: ox.Literal, value: object) -> ox.BlankNode | None:
        if type(value) is not ox.Literal or value.datatype != _XSD_STRING \
                or value.language is not None:
            return None
        number = int(site.value)
        if number in self.sites or self.solution < 0:
            self.sites.clear()
            self.nodes.clear()
            self.solution = self.minter.next_number()
        self.sites.add(number)
        node = self.nodes.get(value.value)
        if node is None:
            h = hashlib.blake2b(value.value.encode(), digest_size=8).hexdigest()
            node = self.nodes[value.value] = self.minter.labelled(f"s{self.solution}x{h}")
        return node
