"""A small SPARQL 1.1 Update tokenizer: structure of an update request, not its terms.

Why: a worker must compute the exact changeset of an update
(docs/design/write-path.md#exact-changesets), so it needs the structure pyoxigraph does not expose
— the operations of a request, their dataset clauses, the text of their templates and of their
WHERE pattern. rdflib's parser gives that but costs milliseconds; this module gets it from a
regular-expression tokenizer in a few microseconds, and leaves everything about terms (IRI
resolution, literals, blank nodes, syntax checking) to pyoxigraph.

What the tokenizer must get right is what decides structure (SPARQL 1.1 grammar, section
19.8 "Grammar" terminals):

* strings ('..', "..", '''..''', \"\"\"..\"\"\" with ECHAR escapes): may contain braces,
  ``;``, ``#`` and ``?``;
* IRIREF ``'<' ([^<>"{}|^`\\]-[#x00-#x20])* '>'``, with the \\u and \\U escapes that
  SPARQL allows anywhere (section 19.2, so pyoxigraph accepts ``<http://ex.org/\\u00e9>``):
  may contain ``#`` and ``;``. A ``<``
  that does not start a well-formed IRIREF is the less-than operator (in FILTER). Like a
  longest-match lexer, ``?a<?b&&?c>1`` (no spaces) reads as an IRI; that harmless
  ambiguity cannot hide a brace, a string or white space;
* comments: ``#`` to the end of the line, outside strings and IRIs;
* braces (nesting) and ``;`` at brace depth 0 (the operation separator).

Words (keywords, prefixed names, blank node labels, numbers, operators) are kept whole;
keywords are matched case-insensitively (SPARQL keywords are case-insensitive).

Speed: :func:`split_update` tokenizes only what lies outside braces; a block (QuadData,
template, WHERE) is one BLOCK token whose end is found by a scanner that recognises only
strings, IRIs, comments and braces. Templates, which need variables and subject
positions, are tokenized by :func:`rewrite_template`.

The text is assumed to have been accepted by pyoxigraph's parser first, except for
:func:`split_update`, which must work on any text (LOAD has to be found before any dry
run, since running LOAD would fetch from the network).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

IRI = "IRI"
STRING = "STRING"
VAR = "VAR"
WORD = "WORD"
PUNCT = "PUNCT"
BLOCK = "BLOCK"  # a whole brace-delimited block, from split_update


class SparqlTextError(ValueError):
    """The text does not have the structure this tokenizer expects of an update."""


class Token(NamedTuple):
    kind: str
    text: str
    start: int
    end: int


# A character that can be part of a word: anything but white space and the characters
# that delimit terms in SPARQL. '.' is handled apart (a word may contain a dot but not end
# with one: "ex:a." is the name ex:a followed by the triple terminator; PN_LOCAL rule).
_W = r"""[^\s<>"'{}()\[\];,.#?$^|\\`]"""
_TOKEN_RE = re.compile(
    r"(?P<WS>\s+)"
    r"|(?P<COMMENT>#[^\r\n]*)"
    # STRING_LITERAL_LONG1/2 first: ''' must not read as '' followed by '.
    r"|(?P<STRING>'''(?:'{0,2}(?:[^'\\]|\\.))*'''"
    r'|"""(?:"{0,2}(?:[^"\\]|\\.))*"""'
    r"|'(?:[^'\\\r\n]|\\.)*'"
    r'|"(?:[^"\\\r\n]|\\.)*")'
    r'|(?P<IRI><(?:[^<>"{}|^`\\\x00-\x20]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*>)'
    # VAR1/VAR2: VARNAME ::= (PN_CHARS_U|[0-9]) (PN_CHARS_U|[0-9]|#xB7|[#x300-#x36F]|...)*
    r"|(?P<VAR>[?$][\w\u00b7\u0300-\u036f\u203f\u2040]+)"
    # A word starts with a word character, an escape, or '.' before a digit (".5").
    # (runs of plain word characters are matched by one class loop: this is hot)
    rf"|(?P<WORD>(?:{_W}|\\.|\.(?=[0-9]))(?:{_W}+|\\.|\.(?={_W}|\\))*)"
    r"|(?P<PUNCT>\^\^|<<\(|\)>>|<<|>>|\{\||\|\}|\|\||.)",
    re.DOTALL,
)


# Inside a block only braces matter, and what can hide them: strings, IRIs and comments.
# Scanning for just those (the C regex engine skips everything else) is several times
# faster than tokenizing a QuadData block whose content pyoxigraph parses anyway.
_BLOCK_SCAN = re.compile(
    r"'''(?:'{0,2}(?:[^'\\]|\\.))*'''"
    r'|"""(?:"{0,2}(?:[^"\\]|\\.))*"""'
    r"|'(?:[^'\\\r\n]|\\.)*'"
    r'|"(?:[^"\\\r\n]|\\.)*"'
    r'|<(?:[^<>"{}|^`\\\x00-\x20]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*>'
    r"|#[^\r\n]*"
    r"|[{}]",
    re.DOTALL,
)


# The same as one match in C for blocks nested up to 4 deep (QuadData is 2 deep): a
# balanced block of atoms, with possessive quantifiers so that a broken text fails in
# linear time instead of backtracking. Deeper or unbalanced blocks take the loop below.
# Inside strings and IRIs a run of plain characters is one possessive step ("++"), not one
# alternation per character: the same matches, and a 1000-triple INSERT DATA (88 kB) is
# scanned in ~1.3 ms instead of ~20 (every update is checked on a master before it is
# logged, and split again on the worker: bench/bench_update_check.py).
_ATOM = (r"'''(?:'{0,2}(?:[^'\\]++|\\.))*+'''"
         r'|"""(?:"{0,2}(?:[^"\\]++|\\.))*+"""'
         r"|'(?:[^'\\\r\n]++|\\.)*+'"
         r'|"(?:[^"\\\r\n]++|\\.)*+"'
         r'|<(?:[^<>"{}|^`\\\x00-\x20]++|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*+>'
         r"|#[^\r\n]*+"
         r"""|[^{}'"<#]++|['"<]""")
_NESTED = r"\{(?:" + _ATOM + r")*+\}"
for _ in range(3):
    _NESTED = r"\{(?:" + _ATOM + "|" + _NESTED + r")*+\}"
_BLOCK_RE = re.compile(_NESTED, re.DOTALL)


def block_end(text: str, start: int) -> int:
    """Offset just after the '}' matching the '{' at ``start`` (len(text) if none)."""
    m = _BLOCK_RE.match(text, start)
    if m is not None:
        return m.end()
    depth = 0
    for m in _BLOCK_SCAN.finditer(text, start):
        g = m.group()
        if g == "{":
            depth += 1
        elif g == "}":
            depth -= 1
            if depth == 0:
                return m.end()
    return len(text)


def tokenize(text: str) -> list[Token]:
    """Significant tokens of ``text`` (white space and comments dropped). Never fails:
    a character that starts no token (an unterminated quote) is a PUNCT token."""
    out: list[Token] = []
    append = out.append
    for m in _TOKEN_RE.finditer(text):
        kind = m.lastgroup
        if kind == "WS" or kind == "COMMENT":
            continue
        append(Token(kind, m.group(), m.start(), m.end()))  # type: ignore[arg-type]
    return out


def keyword(tok: Token) -> str | None:
    """The upper-cased word of a WORD token (keywords are case-insensitive), else None."""
    return tok.text.upper() if tok.kind == WORD else None


def uses_service(text: str) -> bool:
    """True if ``text`` (a query or update, well-formed or not) has the SERVICE keyword
    outside strings, IRIs and comments: evaluating it calls another endpoint."""
    return any(tok.kind == WORD and tok.text.upper() == "SERVICE" for tok in tokenize(text))


def _is_iri(tok: Token) -> bool:
    """iri ::= IRIREF | PrefixedName (a prefixed name always contains ':')."""
    return tok.kind == IRI or (tok.kind == WORD and ":" in tok.text
                               and not tok.text.startswith("_:"))


# ---------------------------------------------------------------------------------------
# Splitting a request into operations
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RawOperation:
    """One operation of a request: its tokens (without the prologue and the ';')."""

    prologue: str  # PREFIX/BASE/VERSION declarations in force, as SPARQL text
    tokens: tuple[Token, ...]

    @property
    def start(self) -> int:
        return self.tokens[0].start

    @property
    def end(self) -> int:
        return self.tokens[-1].end

    @property
    def head(self) -> str | None:
        return keyword(self.tokens[0])


@dataclass(frozen=True)
class SplitUpdate:
    operations: tuple[RawOperation, ...]
    # Offset just after the first prologue: where an operation can be inserted before
    # the request's own (pyoxigraph accepts a prologue only at the start of a request).
    prologue_end: int


def _operation_tokens(text: str, pos: int) -> tuple[list[Token], int | None]:
    """Tokens from ``pos`` to the next ';' outside braces (each brace-delimited block is
    one BLOCK token), and the offset after that ';' (None at the end of the text)."""
    out: list[Token] = []
    append = out.append
    match = _TOKEN_RE.match
    n = len(text)
    while pos < n:
        m = match(text, pos)
        assert m is not None  # the last PUNCT alternative matches any character
        kind = m.lastgroup
        end = m.end()
        if kind == "PUNCT":
            g = m.group()
            if g == ";":
                return out, end
            if g == "{":
                end = block_end(text, pos)
                append(Token(BLOCK, text[pos:end], pos, end))
            else:
                append(Token(kind, g, pos, end))
        elif kind != "WS" and kind != "COMMENT":
            append(Token(kind, m.group(), pos, end))  # type: ignore[arg-type]
        pos = end
    return out, None


# Prologue ::= ( BaseDecl | PrefixDecl | VersionDecl )*, white space and comments
# included, as one regular expression: the prologue is re-read for every request.
_SKIP = r"(?:\s|#[^\r\n]*)"
_IRIREF = r'<(?:[^<>"{}|^`\\\x00-\x20]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*>'
_PROLOGUE_RE = re.compile(
    rf"{_SKIP}*(?:(?:PREFIX{_SKIP}+[^\s<>\"'{{}}()\[\];,#?$^|\\`]*:{_SKIP}*{_IRIREF}"
    rf"|BASE{_SKIP}*{_IRIREF}"
    rf"|VERSION{_SKIP}*(?:'[^'\\\r\n]*'|\"[^\"\\\r\n]*\")){_SKIP}*)*",
    re.IGNORECASE,
)


def split_update(text: str) -> SplitUpdate:
    """Update ::= Prologue ( Update1 ( ';' Update )? )? — operations are separated by
    ';' outside braces; each gets the prologue declarations seen so far (SPARQL lets a
    later operation add declarations; pyoxigraph only accepts them at the start).
    Works on any text: an unbalanced '{' makes one block to the end of the text."""
    parts: list[str] = []
    ops: list[RawOperation] = []
    prologue_end: int | None = None
    pos: int | None = 0
    while pos is not None:
        m = _PROLOGUE_RE.match(text, pos)
        assert m is not None  # the expression matches the empty string
        if m.end() > m.start():
            parts.append(m.group().strip())
        if prologue_end is None:
            prologue_end = m.end()
        tokens, pos = _operation_tokens(text, m.end())
        if tokens:
            ops.append(RawOperation("\n".join(parts), tuple(tokens)))
    return SplitUpdate(tuple(ops), prologue_end or 0)


# ---------------------------------------------------------------------------------------
# Classifying an operation (SPARQL 1.1 Update grammar, rules [29]-[44])
# ---------------------------------------------------------------------------------------

INSERT_DATA = "INSERT DATA"
DELETE_DATA = "DELETE DATA"
DELETE_WHERE = "DELETE WHERE"
MODIFY = "MODIFY"
CLEAR = "CLEAR"
DROP = "DROP"
CREATE = "CREATE"
ADD = "ADD"
MOVE = "MOVE"
COPY = "COPY"
LOAD = "LOAD"


@dataclass(frozen=True)
class ParsedOperation:
    """The structure of one operation; IRIs and blocks are kept as source text.

    ``target`` for CLEAR/DROP is GRAPH, DEFAULT, NAMED or ALL (GraphRefAll), with ``graph``
    the IRI text for GRAPH and for CREATE. ``source``/``destination`` of ADD/MOVE/COPY are
    IRI texts, None for DEFAULT (GraphOrDefault). Blocks include their braces: ``data``
    (QuadData), ``delete``/``insert`` (QuadPattern templates), ``where``
    (GroupGraphPattern; for DELETE WHERE the quad pattern itself). ``using`` lists
    (named, IRI text) in order."""

    kind: str
    prologue: str
    text: str
    silent: bool = False
    target: str | None = None
    graph: str | None = None
    source: str | None = None
    destination: str | None = None
    with_iri: str | None = None
    delete: str | None = None
    insert: str | None = None
    using: tuple[tuple[bool, str], ...] = ()
    where: str | None = None
    data: str | None = None


class _Cursor:
    def __init__(self, text: str, op: RawOperation) -> None:
        self.text = text
        self.tokens = op.tokens
        self.i = 0

    def peek(self) -> Token | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def peek_kw(self) -> str | None:
        tok = self.peek()
        return keyword(tok) if tok is not None else None

    def fail(self, what: str) -> SparqlTextError:
        tok = self.peek()
        where = f"'{tok.text}' at offset {tok.start}" if tok else "the end of the operation"
        return SparqlTextError(f"expected {what}, found {where}")

    def accept(self, kw: str) -> bool:
        if self.peek_kw() == kw:
            self.i += 1
            return True
        return False

    def expect(self, kw: str) -> None:
        if not self.accept(kw):
            raise self.fail(kw)

    def iri(self) -> str:
        tok = self.peek()
        if tok is None or not _is_iri(tok):
            raise self.fail("an IRI")
        self.i += 1
        return tok.text

    def block(self) -> str:
        """A brace-delimited block, returned as source text (braces included)."""
        tok = self.peek()
        if tok is None or tok.kind != BLOCK:
            raise self.fail("'{'")
        if not tok.text.endswith("}"):
            raise SparqlTextError(f"unbalanced '{{' at offset {tok.start}")
        self.i += 1
        return tok.text

    def end(self) -> None:
        if self.peek() is not None:
            raise self.fail("the end of the operation")


def classify(text: str, op: RawOperation) -> ParsedOperation:
    """The structure of one operation of ``text`` (already accepted by pyoxigraph)."""
    c = _Cursor(text, op)
    head = c.peek_kw()
    src = text[op.start:op.end]
    base = {"prologue": op.prologue, "text": src}
    if head in (CLEAR, DROP):
        c.i += 1
        silent = c.accept("SILENT")
        target = c.peek_kw()
        graph = None
        if target == "GRAPH":  # GraphRefAll ::= GraphRef | DEFAULT | NAMED | ALL
            c.i += 1
            graph = c.iri()
        elif target in ("DEFAULT", "NAMED", "ALL"):
            c.i += 1
        else:
            raise c.fail("GRAPH, DEFAULT, NAMED or ALL")
        c.end()
        return ParsedOperation(head, silent=silent, target=target, graph=graph, **base)
    if head == CREATE:
        c.i += 1
        silent = c.accept("SILENT")
        c.expect("GRAPH")
        graph = c.iri()
        c.end()
        return ParsedOperation(CREATE, silent=silent, target="GRAPH", graph=graph, **base)
    if head in (ADD, MOVE, COPY):
        c.i += 1
        silent = c.accept("SILENT")
        source = _graph_or_default(c)
        c.expect("TO")
        destination = _graph_or_default(c)
        c.end()
        return ParsedOperation(head, silent=silent, source=source, destination=destination,
                               **base)
    if head == LOAD:
        return ParsedOperation(LOAD, **base)
    if head in ("INSERT", "DELETE") and c.i + 1 < len(c.tokens):
        nxt = keyword(c.tokens[c.i + 1])
        if nxt == "DATA":
            c.i += 2
            data = c.block()
            c.end()
            return ParsedOperation(f"{head} DATA", data=data, **base)
        if head == "DELETE" and nxt == "WHERE":
            c.i += 2
            pattern = c.block()
            c.end()
            return ParsedOperation(DELETE_WHERE, delete=pattern, where=pattern, **base)
    if head in ("INSERT", "DELETE", "WITH"):
        # Modify ::= ('WITH' iri)? (DeleteClause InsertClause? | InsertClause)
        #            UsingClause* 'WHERE' GroupGraphPattern
        with_iri = c.iri() if c.accept("WITH") else None
        delete = c.block() if c.accept("DELETE") else None
        insert = c.block() if c.accept("INSERT") else None
        if delete is None and insert is None:
            raise c.fail("DELETE or INSERT")
        using: list[tuple[bool, str]] = []
        while c.accept("USING"):
            named = c.accept("NAMED")
            using.append((named, c.iri()))
        c.expect("WHERE")
        where = c.block()
        c.end()
        return ParsedOperation(MODIFY, with_iri=with_iri, delete=delete, insert=insert,
                               using=tuple(using), where=where, **base)
    raise c.fail("an update operation")


def _graph_or_default(c: _Cursor) -> str | None:
    """GraphOrDefault ::= 'DEFAULT' | 'GRAPH'? iri"""
    if c.accept("DEFAULT"):
        return None
    c.accept("GRAPH")
    return c.iri()


# ---------------------------------------------------------------------------------------
# Templates
# ---------------------------------------------------------------------------------------

_OPEN = frozenset({"(", "[", "<<", "<<(", "{|"})
_CLOSE = frozenset({")", "]", ">>", ")>>", "|}"})


def rewrite_template(block: str, var_iri: Callable[[str], str], literal_subject: str) -> str:
    """Rewrite a QuadPattern so that it is valid QuadData (INSERT DATA content).

    Every variable token becomes the IRI ``var_iri(name)`` (?x and $x are the same
    variable). A literal in subject position — allowed by the template grammar
    (TriplesSameSubject ::= VarOrTerm PropertyListNotEmpty) but never instantiable, so
    its triples are always skipped (SPARQL 1.1 Update 3.1.3) — becomes the IRI
    ``literal_subject``, so its triples can be recognised and dropped; the triples nested
    in its object list (e.g. ``[ ex:p 1 ]``) stay, as in pyoxigraph.

    Subject position: after '{', after '}' (end of a GRAPH block), and after '.' outside
    brackets. Everything else (comments, spacing) is kept as written.
    """
    tokens = tokenize(block)
    out: list[str] = []
    pos = 0
    expect_subject = False
    brackets = 0
    i = 0
    n = len(tokens)
    while i < n:
        tok = tokens[i]
        replacement: str | None = None
        last = i
        if tok.kind == PUNCT and tok.text in ("{", "}"):
            expect_subject, brackets = True, 0
        elif tok.kind == PUNCT and tok.text == "." and brackets == 0:
            expect_subject = True
        elif expect_subject:
            expect_subject = False
            if tok.kind == WORD and tok.text.upper() == "GRAPH":
                pass  # GRAPH VarOrIri '{' — the graph name is not a subject
            elif tok.kind == STRING:
                replacement = f"<{literal_subject}>"
                # RDFLiteral ::= String ( LANGTAG | ( '^^' iri ) )?
                if i + 1 < n and tokens[i + 1].kind == WORD and tokens[i + 1].text[0] == "@":
                    last = i + 1
                elif i + 2 < n and tokens[i + 1].text == "^^" and tokens[i + 1].kind == PUNCT:
                    last = i + 2
            elif tok.kind == WORD and ":" not in tok.text:
                # Not a prefixed name nor a blank node label: a numeric or boolean literal.
                replacement = f"<{literal_subject}>"
        if tok.kind == PUNCT:
            if tok.text in _OPEN:
                brackets += 1
            elif tok.text in _CLOSE:
                brackets -= 1
        if tok.kind == VAR:
            replacement = f"<{var_iri(tok.text[1:])}>"
        if replacement is not None:
            out.append(block[pos:tok.start])
            out.append(replacement)
            pos = tokens[last].end
        i = last + 1
    out.append(block[pos:])
    return "".join(out)
