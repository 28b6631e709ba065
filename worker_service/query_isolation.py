"""Which queries a worker may evaluate in its own threads, and how many query processes
it runs at once (the timeout rule itself, shared with the master: txinfra/query_limits.py).

Theory of operation. pyoxigraph has no query timeout and no cancellation: a thread inside
``Store.query`` cannot be interrupted, and aggregates, ORDER BY or a join that finds nothing
write no result for as long as they run
(docs/design/dependencies.md#pyoxigraph-the-workers-store). So a worker evaluates a query in one of
two places:

* in its own thread pool, only when the query is *provably cheap*
  (:func:`runs_in_process`): a single triple pattern of the default graph with a bound
  term and no repeated variable, as SELECT (no DISTINCT, no expressions) or ASK, with at
  most LIMIT and a small OFFSET. Every index entry such a pattern scans is a solution
  (pyoxigraph has an index for each combination of bound positions), so its cost grows
  with what it writes, and the deadline checked at each write of the results stops it;
* in a child process (worker_service/query_process.py) for everything else: the child is
  killed at the deadline, which really stops the evaluation and frees its CPU.

Pure code: no clock, no IO.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass

from rdfcore.sparql_text import IRI, PUNCT, STRING, VAR, WORD, Token, keyword, tokenize
from txinfra.query_limits import DEFAULT_QUERY_TIMEOUT_S
from worker_service.query_slots import DEFAULT_QUEUE_DEPTH, DEFAULT_QUEUE_WAIT_S

# An OFFSET skips solutions without writing them; this many are skipped in milliseconds.
MAX_IN_PROCESS_OFFSET = 10_000


def default_max_concurrent_queries(cpus: int | None) -> int:
    """Twice the cores: each query process keeps a core busy, and a worker should still
    have cores for its writes and point reads."""
    return 2 * max(1, cpus or 1)


@dataclass(frozen=True)
class QueryLimits:
    """A worker's query limits (worker.properties ``query-timeout-s``,
    ``max-concurrent-queries``, ``query-queue-depth``, ``query-queue-wait-s``: the queue
    of queries beyond the limit, worker_service/query_slots.py). ``isolate=False``
    evaluates every query in the worker's threads, stoppable only while results stream
    (how queries ran before query processes): only the benchmark's baseline uses it."""

    query_timeout_s: float = DEFAULT_QUERY_TIMEOUT_S
    max_concurrent_queries: int = 8
    isolate: bool = True
    queue_depth: int = DEFAULT_QUEUE_DEPTH
    queue_wait_s: float = DEFAULT_QUEUE_WAIT_S

    def __post_init__(self) -> None:
        if not self.query_timeout_s > 0 or math.isinf(self.query_timeout_s):
            raise ValueError(f"query timeout must be > 0 s, got {self.query_timeout_s}")
        if self.max_concurrent_queries < 1:
            raise ValueError("max concurrent queries must be >= 1")
        if self.queue_depth < 0 or not self.queue_wait_s >= 0:
            raise ValueError("query queue depth and wait must be >= 0")


# ---- the classifier ----

# A prefixed name that is a plain IRI: no path operators (/ | ^ * + ? !), no escapes.
_PNAME = re.compile(r"[A-Za-z][\w.-]*:[\w.%:-]*|:[\w.%:-]*")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_LANGTAG = re.compile(r"@[A-Za-z]+(?:-[A-Za-z0-9]+)*")
_INTEGER = re.compile(r"[0-9]{1,18}")


def _iri(tok: Token) -> bool:
    return tok.kind == IRI or (tok.kind == WORD and _PNAME.fullmatch(tok.text) is not None
                               and not tok.text.endswith("."))


class _NotCheap(Exception):
    pass


class _Tokens:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0

    def peek(self) -> Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def next(self) -> Token:
        tok = self.peek()
        if tok is None:
            raise _NotCheap
        self.i += 1
        return tok

    def keyword(self) -> str | None:
        tok = self.peek()
        return keyword(tok) if tok is not None else None

    def expect(self, kind: str, text: str | None = None) -> Token:
        tok = self.next()
        if tok.kind != kind or (text is not None and tok.text.upper() != text):
            raise _NotCheap
        return tok


def _term(t: _Tokens, position: str) -> str | None:
    """One term of a triple pattern: the variable's name (blank nodes are variables in a
    query pattern), or None for a bound term. _NotCheap for anything else (a path, a
    collection, a quoted triple, ...)."""
    tok = t.next()
    if tok.kind == VAR:
        return tok.text[1:]
    if tok.kind == WORD and tok.text.startswith("_:"):
        return tok.text
    if _iri(tok) or (position == "predicate" and tok.text == "a"):
        return None
    if position != "object":
        raise _NotCheap
    if tok.kind == STRING:
        after = t.peek()
        if after is not None and after.kind == WORD and _LANGTAG.fullmatch(after.text):
            t.next()
        elif after is not None and after.kind == PUNCT and after.text == "^^":
            t.next()
            if not _iri(t.next()):
                raise _NotCheap
        return None
    if tok.kind == WORD and (_NUMBER.fullmatch(tok.text) or tok.text in ("true", "false")):
        return None
    raise _NotCheap


def _one_index_range(names: list[str | None], bound: Collection[str]) -> bool:
    """A triple pattern whose terms are ``names`` (a variable's name, None for a bound
    term) reads only its own solutions: something bound, no variable twice."""
    variables = [n for n in names if n is not None and n not in bound]
    # nothing bound: a full scan; a repeated variable: a scan that may write nothing
    return len(variables) < 3 and len(set(variables)) == len(variables)


# The usual shapes of a cheap query as one regular expression: a point query is classified
# in ~2 us instead of ~19 us through the tokenizer (point SELECT throughput). It accepts a
# subset of what the tokenizer path accepts (no comments, no long strings, no escapes in
# names); a text it does not match is decided by the tokenizer path.
_F_IRI = r'<[^<>"{}|^`\\\x00-\x20]*>'
_F_PNAME = r"(?:[A-Za-z][\w-]*(?:\.+[\w-]+)*)?:(?:[\w%:-]+(?:\.+[\w%:-]+)*)?"
_F_VAR = r"[?$]\w+"
_F_BNODE = r"_:\w+"
_F_STRING = r'"(?:[^"\\\r\n]|\\.)*"|\'(?:[^\'\\\r\n]|\\.)*\''
_F_LITERAL = (rf"(?:{_F_STRING})(?:@[A-Za-z]+(?:-[A-Za-z0-9]+)*|\^\^(?:{_F_IRI}|{_F_PNAME}))?"
              r"|[+-]?(?:[0-9]+\.[0-9]+|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?|true|false")
_FAST = re.compile(
    rf"\s*(?:(?i:BASE)\s*{_F_IRI}\s*"
    rf"|(?i:PREFIX)\s+(?:[A-Za-z][\w-]*(?:\.+[\w-]+)*)?:\s*{_F_IRI}\s*)*"
    rf"(?:(?i:SELECT)\s*(?:\*|(?:{_F_VAR}\s*)+)|(?P<ask>(?i:ASK)))\s*(?:(?i:WHERE)\s*)?"
    rf"\{{\s*(?P<s>{_F_IRI}|{_F_PNAME}|{_F_VAR}|{_F_BNODE})"
    rf"\s*(?P<p>{_F_IRI}|{_F_PNAME}|{_F_VAR}|a)"
    rf"\s*(?P<o>{_F_IRI}|{_F_PNAME}|{_F_VAR}|{_F_BNODE}|{_F_LITERAL})\s*\.?\s*\}}"
    r"(?P<modifiers>(?:\s*(?i:LIMIT|OFFSET)\s+[0-9]+\b)*)\s*")
_MODIFIER = re.compile(r"(?i)(LIMIT|OFFSET)\s+([0-9]+)")


def _fast_path(m: re.Match[str], bound: Collection[str]) -> bool:
    names = [t[1:] if t[0] in "?$" else t if t.startswith("_:") else None
             for t in (m["s"], m["p"], m["o"])]
    if not _one_index_range(names, bound):
        return False
    modifiers = [(word.upper(), int(n)) for word, n in _MODIFIER.findall(m["modifiers"])]
    words = [w for w, _ in modifiers]
    return not (modifiers and m["ask"]) and len(set(words)) == len(words) and all(
        n <= MAX_IN_PROCESS_OFFSET for w, n in modifiers if w == "OFFSET")


def runs_in_process(query: str, bound: Collection[str] = (),
                    default_graphs: int | None = None) -> bool:
    """True when ``query`` is provably cheap (see the module docstring) and may run in
    the worker's threads; False sends it to a query process. ``bound``: names of the
    variables the request binds (``$name`` parameters); ``default_graphs``: how many
    graphs the request's dataset names as default graph (None: the store's)."""
    if default_graphs is not None and default_graphs != 1:
        return False  # a merge of graphs, not one index range
    if (m := _FAST.fullmatch(query)) is not None:
        return _fast_path(m, bound)
    return _by_tokens(query, bound)


def _by_tokens(query: str, bound: Collection[str]) -> bool:
    """runs_in_process for any text, from sparql_text's tokenizer."""
    t = _Tokens(tokenize(query))
    try:
        while (word := t.keyword()) in ("BASE", "PREFIX"):
            t.next()
            if word == "PREFIX":
                name = t.expect(WORD)
                if not name.text.endswith(":"):
                    return False
            t.expect(IRI)
        form = t.keyword()
        t.next()
        if form == "SELECT":
            if t.peek() is not None and t.peek().text == "*":  # type: ignore[union-attr]
                t.next()
            else:
                t.expect(VAR)
                while t.peek() is not None and t.peek().kind == VAR:  # type: ignore[union-attr]
                    t.next()
        elif form != "ASK":
            return False
        if t.keyword() == "WHERE":
            t.next()
        t.expect(PUNCT, "{")
        names = [_term(t, "subject"), _term(t, "predicate"), _term(t, "object")]
        if (tok := t.peek()) is not None and tok.kind == PUNCT and tok.text == ".":
            t.next()
        t.expect(PUNCT, "}")
        if not _one_index_range(names, bound):
            return False
        seen: set[str] = set()
        while (word := t.keyword()) in ("LIMIT", "OFFSET") and form == "SELECT" \
                and word not in seen:
            seen.add(word)
            t.next()
            count = t.expect(WORD)
            if not _INTEGER.fullmatch(count.text) or (
                    word == "OFFSET" and int(count.text) > MAX_IN_PROCESS_OFFSET):
                return False
        return t.peek() is None
    except _NotCheap:
        return False
