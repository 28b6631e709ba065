"""A SPARQL 1.1 Update request checked without running it: syntax (pyoxigraph's grammar,
the workers' store), LOAD, the structure ``sparql_text`` must find, and the protocol's
dataset against the request's own.

One check for both node kinds: a master runs :func:`check_update` on every update before
it is logged (rdf4j_protocol/writes.py), a worker runs the same pieces before it computes
a changeset (worker_service/update_parsing.py). Nothing a master accepts then fails a
worker's parse, and nothing a worker would run is refused by a master (issue 60: a
malformed update logged, agreed with the peers and failed on the probe).

How the syntax is checked without executing anything: the whole request is parsed once by
``Store.update`` on an empty in-memory store, with an operation that fails at execution
(CLEAR of a missing graph) inserted after the prologue. pyoxigraph parses the whole
request before it executes any operation, in order: a SyntaxError means the request is
malformed, the probe's RuntimeError means it is well-formed, and none of the request ran
(no SERVICE call, no data inserted: the cost is the parse's, in proportion to the text).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import pyoxigraph as ox

from rdfcore import sparql_text as st

_PROBE_GRAPH = "urn:x-txcluster:syntax-probe"
_PROBE = f" CLEAR GRAPH <{_PROBE_GRAPH}> ; "
# The only operations that reach out of the process. A text that mentions neither word
# anywhere (even in a literal) can be run on an empty scratch store without risk, should
# this module ever disagree with pyoxigraph about where operations start.
REMOTE = re.compile(r"[lLsS](?i:oad|ervice)")  # a leading class keeps the search fast

LOAD_REFUSED = (
    "LOAD is not supported in a cluster: every worker must end up with the same data, so a "
    "transaction has to carry it rather than fetch it from a URL; send the document as an "
    "RDF add instead (e.g. POST it to /repositories/{id}/statements)")
DATASET_CONFLICT = (
    "an update sent with using-graph-uri or using-named-graph-uri must not state USING, "
    "USING NAMED or WITH itself (SPARQL 1.1 Protocol)")


class UpdateRefused(ValueError):
    """An update no node will run; ``str()`` says why."""


class UpdateSyntax(UpdateRefused):
    """Malformed SPARQL: pyoxigraph's message, positions those of the request as sent
    (``str()``, several lines when it lists the expected tokens); :attr:`summary` is one
    line (position, what was found there, pyoxigraph's reason when it gives one)."""

    def __init__(self, message: str, text: str) -> None:
        super().__init__(message)
        self.summary = one_line(message, text)


class LoadRefused(UpdateRefused):
    def __init__(self) -> None:
        super().__init__(LOAD_REFUSED)


class UnsupportedForm(UpdateRefused):
    """pyoxigraph accepts the text but ``sparql_text`` cannot structure it: a limitation
    of ours, not the client's error (501, RDF4J's answer for a deliberate gap), e.g.
    keywords run together ("CLEARDEFAULT"), which pyoxigraph's grammar takes and RDF4J's
    and Jena's refuse (found by the fuzz suite)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"this form of update is not supported: txcluster cannot compute "
                         f"its changeset ({detail})")


def refuse_load(split: st.SplitUpdate) -> None:
    """LOAD is refused before anything is parsed (running it would fetch from the network)."""
    for raw in split.operations:
        if raw.head == st.LOAD:
            raise LoadRefused()


def check_syntax(text: str, base_iri: str | None, split: st.SplitUpdate) -> None:
    """Parse the whole request with pyoxigraph without executing any of it (UpdateSyntax).

    The probe operation inserted after the first prologue fails at execution (its graph
    does not exist), and operations execute in order after the whole request is parsed.
    A valid request stays valid with the probe inserted (SPARQL allows ``Update1 ;
    Update1``), so an invalid probe text means an invalid request; its own parse then gives
    pyoxigraph's message with the user's positions. (Unless the text mentions LOAD or
    SERVICE: then the probe's position is mapped back instead.)"""
    at = split.prologue_end
    if at >= len(text):
        # Nothing but a prologue, white space and comments: a valid, empty update (or a
        # broken prologue), parsed as it is: it has no operation to execute. The probe
        # can't go after it, where a final comment without a line break would swallow it.
        # (A request that is only a comment must be a valid empty update, not an error that
        # takes the probe out of rotation.)
        try:
            ox.Store().update(text, base_iri=base_iri)
        except SyntaxError as exc:
            raise UpdateSyntax(str(exc), text) from None
        return
    probe = text[:at] + _PROBE + text[at:]
    try:
        ox.Store().update(probe, base_iri=base_iri)
    except SyntaxError as exc:
        message = str(exc)
        if not REMOTE.search(text):
            try:
                ox.Store().update(text, base_iri=base_iri)
            except SyntaxError as original:
                message = str(original)
            except (RuntimeError, OSError, ValueError):
                pass
        else:
            message = _unshift_position(message, text, at)
        raise UpdateSyntax(message, text) from None
    except RuntimeError as exc:
        if _PROBE_GRAPH in str(exc):
            return
        raise
    raise AssertionError("the syntax probe operation did not fail")  # pragma: no cover


def check_update(text: str, base_iri: str | None = None,
                 using: Sequence[tuple[bool, str]] = ()) -> list[st.ParsedOperation]:
    """Everything a worker's parse of ``text`` checks before it looks at data: LOAD
    (LoadRefused), syntax (UpdateSyntax), the structure of each operation
    (UnsupportedForm), and that an update sent with the protocol's dataset (``using``)
    states none itself (UpdateSyntax). The operations' structure."""
    split = st.split_update(text)
    refuse_load(split)
    check_syntax(text, base_iri, split)
    return list(structured(text, split, using))


def structured(text: str, split: st.SplitUpdate,
               using: Sequence[tuple[bool, str]] = ()) -> Iterator[st.ParsedOperation]:
    """Each operation's structure, in order (UnsupportedForm), checked against the
    protocol's dataset (``using``: UpdateSyntax) as it comes: a worker turns each one into
    its step before it looks at the next, and reports the first error in that order."""
    for raw in split.operations:
        try:
            parsed = st.classify(text, raw)
        except st.SparqlTextError as exc:
            raise UnsupportedForm(str(exc)) from None
        if using:
            check_own_dataset(parsed)
        yield parsed


def check_own_dataset(parsed: st.ParsedOperation) -> None:
    """SPARQL 1.1 Protocol 2.2.3: with using-graph-uri / using-named-graph-uri, an
    operation with a WHERE may not state USING, USING NAMED or WITH."""
    if parsed.kind in (st.MODIFY, st.DELETE_WHERE) and (
            parsed.using or parsed.with_iri is not None):
        raise UpdateSyntax(DATASET_CONFLICT, "")


_POSITION = re.compile(r"^error at (\d+):(\d+)")


def _unshift_position(message: str, text: str, at: int) -> str:
    """Map "error at line:column" in the probe text back to ``text`` (the probe, without
    line breaks, was inserted at offset ``at``; pyoxigraph counts columns in characters)."""
    m = _POSITION.match(message)
    if m is None:
        return message
    line, col = int(m.group(1)), int(m.group(2))
    at_line = text.count("\n", 0, at) + 1
    at_col = at - (text.rfind("\n", 0, at) + 1) + 1
    if line == at_line and col > at_col:
        col = max(at_col, col - len(_PROBE))
    return f"error at {line}:{col}{message[m.end():]}"


# What stands at the error's position: an IRI, a string's start, a word or one character.
_FOUND = re.compile(r"<[^<>\s]{0,60}>?|\"[^\"\r\n]{0,30}\"?|'[^'\r\n]{0,30}'?|[\w:?$.-]+|\S")
# A reason pyoxigraph words as a sentence among its expected tokens ("Variables and blank
# nodes are not allowed in DELETE DATA"), not a quoted token or a character class.
_SENTENCE = re.compile(r"(?<![\"'\w\[])[A-Z][a-z]+(?: [\w-]+){3,}")
MAX_SUMMARY = 300


def one_line(message: str, text: str) -> str:
    """pyoxigraph's message as one line (RDF4J's server answers ``MALFORMED QUERY: <its
    parser's message>``): "error at L:C: unexpected <what is there>", with pyoxigraph's
    reason when it gives one in words, instead of every token it expected (up to twelve
    lines of Unicode ranges). Other messages: their first line."""
    m = _POSITION.match(message)
    if m is None:
        return _first_line(message)
    line, col = int(m.group(1)), int(m.group(2))
    out = f"error at {line}:{col}: unexpected {_found_at(text, line, col)}"
    if (reason := _SENTENCE.search(message, m.end())) is not None:
        out += f" ({reason.group()})"
    return _first_line(out)


def _found_at(text: str, line: int, col: int) -> str:
    lines = text.split("\n")
    if line > len(lines):
        return "end of input"
    rest = lines[line - 1][col - 1:] + "".join("\n" + s for s in lines[line:])
    rest = rest.lstrip()
    if not rest:
        return "end of input"
    found = _FOUND.match(rest)
    token = found.group() if found is not None else rest[:1]
    return f"'{token[:60]}'"


def _first_line(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else "syntax error"
    return first if len(first) <= MAX_SUMMARY else first[:MAX_SUMMARY - 3] + "..."
