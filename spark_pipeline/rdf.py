"""The RDF work done inside the pipeline's tasks: plain Python over pyoxigraph, no Spark.

Everything here is pure (bytes and paths in, records out) so it is tested without a
SparkSession; ``transform`` wraps it in ``mapInArrow``.

Rules it implements (issue "data pipeline"):

* A line format (N-Triples, N-Quads) is validated **line by line**: a chunk of lines is
  parsed at once, and a group that fails (or yields another number of statements than
  it has statement lines) is halved down to single lines. pyoxigraph reports a missing
  dot on the *next* line and an unterminated string swallows the following one
  (docs/design/dependencies.md#pyspark-43-in-local-mode-the-pipeline), so an error position is
  never used to blame a line: exactly the lines that fail on their own are rejects. Invalid UTF-8
  is such a failure.
* Other formats (Turtle, TriG, RDF/XML, JSON-LD) are validated **per file**, one file
  per task, in a first pass: a file with an error is rejected as a whole (none of its
  statements is loaded), with the line of the error, that line's text and the parser's
  message; a good one is parsed again to give its quads.
* Relative IRIs are resolved against ``--base-iri`` in the formats that have them
  (Turtle, TriG, RDF/XML, JSON-LD; a document's own ``@base``/``xml:base`` wins). Without
  one a relative IRI is an error of its document (rejected whole, with the line), except
  in JSON-LD, whose parser drops such a statement (the JSON-LD rule). N-Triples and
  N-Quads allow only absolute IRIs: a relative one is a line reject, base or not.
* The prefixes a Turtle or TriG document declares (as they stand at its end) come back
  with its last batch of quads, for the repository's namespaces (``jobs``).
* A file that cannot be read at all (gone since it was listed, not readable) is not a
  reject but a failure of its task (``READ_FAILURES``; ``transform`` names the file and
  the lines it had read): nothing is known about its content.
* Terms are canonicalised as the store holds them (``canonical_quad``, the worker's own
  function: ``"01"^^xsd:integer`` -> ``"1"``); language tags come lowercased from the
  parser. The canonical N-Quads line is ``str(quad) + " ."`` — what ``dump`` writes and
  what ``rdfcore.fingerprint`` hashes.
* Blank node labels are scoped per source file: in a line-format file ``_:b1`` becomes
  ``_:<scope>b1``, the scope being derived from the file's absolute path, so the same
  label in two files is two nodes while all lines of one file (in any Spark split) agree;
  in a document, every blank node (anonymous ones included, which pyoxigraph labels at
  random) is numbered by first appearance, ``_:<scope>1``, ``_:<scope>2`` ... Labels are
  deterministic, so a re-run of the same files adds nothing.
"""

from __future__ import annotations

import bz2
import gzip
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyoxigraph as ox
import xxhash

from rdfcore.canonical import canonical_lines, canonical_quad
from rdfcore.fingerprint import MOD, line_hash

# Kinds of the records a parse produces (one schema for all, see transform.PARSED).
QUAD = 0  # a canonical quad
LINE_REJECT = 1  # a line of a line-format file that does not parse alone
SPLIT_LINES = 2  # how many lines one split (a Spark file split) of a file has
FILE_REJECT = 3  # a document with an error: the whole file is rejected
PREFIX = 4  # a prefix a document declares (for the repository's namespaces)
PART = 5  # quads as a part of an initial load: N-Quads text and the lines' digests

LINE_FORMATS = {"nt": ox.RdfFormat.N_TRIPLES, "nq": ox.RdfFormat.N_QUADS}
DOCUMENT_FORMATS = {
    "ttl": ox.RdfFormat.TURTLE, "trig": ox.RdfFormat.TRIG, "rdf": ox.RdfFormat.RDF_XML,
    "owl": ox.RdfFormat.RDF_XML, "xml": ox.RdfFormat.RDF_XML,
    "jsonld": ox.RdfFormat.JSON_LD,
}
COMPRESSIONS = {"gz": gzip.open, "bz2": bz2.open}


@dataclass(frozen=True)
class InputFile:
    """One input file: absolute path, format extension (``nt``, ``ttl``...), compression."""

    path: str
    format: str
    compression: str | None
    size: int

    @property
    def line_based(self) -> bool:
        return self.format in LINE_FORMATS

    @property
    def rdf_format(self) -> ox.RdfFormat:
        return LINE_FORMATS.get(self.format) or DOCUMENT_FORMATS[self.format]


def detect(path: str | Path) -> tuple[str, str | None] | None:
    """(format extension, compression) from a file name, or None if not an RDF file."""
    parts = Path(path).name.lower().split(".")
    compression = None
    if len(parts) > 2 and parts[-1] in COMPRESSIONS:
        compression = parts.pop()
    if len(parts) < 2:
        return None
    ext = parts[-1]
    if ext in LINE_FORMATS or ext in DOCUMENT_FORMATS:
        return ext, compression
    return None


def scope_of(path: str) -> str:
    """The blank node scope of a file: a label prefix valid as the start of a label."""
    return f"f{xxhash.xxh3_64_hexdigest(path.encode())}x"


# A blank node label in N-Triples/N-Quads text: a ``_:`` that is not inside a string
# literal or an IRI (group 1 matches those, and they are kept as they are). Comments may
# be rewritten too, which changes nothing.
_TOKENS = re.compile(
    rb'("(?:[^"\\\n]|\\.)*"'  # a string literal, escapes included
    rb'|<(?:[^<>"{}|^`\\\x00-\x20]|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*>)'  # an IRI
    rb'|_:')


# A ``_:`` after a ``<`` with no ``>`` between: one that may be inside an IRI.
_AFTER_OPEN_IRI = re.compile(rb"<[^>]*_:")


def scope_line(line: bytes, prefix: bytes) -> bytes:
    """``_:label`` -> ``_:<scope>label`` in one N-Triples/N-Quads line."""
    if b'"' not in line and not _AFTER_OPEN_IRI.search(line):
        # No literal, and no ``_:`` inside anything _TOKENS could take for an IRI (an
        # IRI token is a ``<...>`` without ``>`` in it): every ``_:`` is one _TOKENS
        # rewrites. ~4x faster than its callback per token, which was a sixth of the
        # parse tasks' time on data with blank nodes (bench/README, "The Spark pipeline").
        return line.replace(b"_:", prefix)
    return _TOKENS.sub(lambda m: m.group(1) or prefix, line)


def _statement(line: bytes) -> bool:
    """A line that must hold one statement (not blank, not only a comment)."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith(b"#")


# pyoxigraph's words for a relative IRI where an absolute one is needed.
_RELATIVE = "No scheme found in an absolute IRI"
# Errors of the file system, not of the data: the task fails (transform names the file
# and the lines read).
READ_FAILURES = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def _message(exc: Exception, hint: str = "") -> str:
    message = str(exc) or type(exc).__name__
    return f"{message} ({hint})" if hint and _RELATIVE in message else message


# What a relative IRI's reject says about it.
LINE_HINT = "a relative IRI: N-Triples and N-Quads allow only absolute IRIs"
DOCUMENT_HINT = "a relative IRI: give --base-iri to resolve it"


def _text(line: bytes) -> str:
    return line.decode("utf-8", errors="backslashreplace")


@dataclass
class Parsed:
    """What one chunk (or one document) gave: canonical quads and rejects."""

    quads: list[str] = field(default_factory=list)  # canonical N-Quads lines, no newline
    graphs: list[str] = field(default_factory=list)  # graph per quad ("" = default), or []
    rejects: list[tuple[int, str, str]] = field(default_factory=list)  # (index, text, msg)
    lines: int = 0
    prefixes: dict[str, str] = field(default_factory=dict)  # a document's, at its end

    def hashes(self) -> list[int]:
        return [line_hash(q.encode()) for q in self.quads]


class Canonicaliser:
    """Quads -> canonical lines, with an optional graph that replaces every quad's graph
    (``--graph``, as RDF4J's ``context`` parameter does for an add)."""

    def __init__(self, graph: str | None = None, with_graphs: bool = True) -> None:
        self.graph = ox.NamedNode(graph) if graph else None
        self.with_graphs = with_graphs  # fill Parsed.graphs (costs an attribute access)

    def add(self, out: Parsed, quads: Sequence[ox.Quad]) -> None:
        if self.graph is None and not self.with_graphs:
            out.quads.extend(canonical_lines(quads))
            return
        graph = self.graph
        default = ox.DefaultGraph
        for q in quads:
            if graph is not None:
                q = ox.Quad(q.subject, q.predicate, q.object, graph)
            q, line = canonical_quad(q)
            out.quads.append(line)
            if self.with_graphs:
                g = q.graph_name
                out.graphs.append("" if type(g) is default else str(g))


def parse_lines(lines: Sequence[bytes], fmt: ox.RdfFormat, scope: str | None,
                canon: Canonicaliser) -> Parsed:
    """Parse consecutive lines of one file. Reject indexes are positions in ``lines``.

    The statement lines are parsed together; a group that fails (or gives another number
    of quads than it has lines) is split in halves, down to single lines, so a chunk with
    one bad line costs about twice a clean one, and a line is a reject only when it fails
    on its own."""
    out = Parsed(lines=len(lines))
    prefix = b"_:" + scope.encode() if scope else None
    work = [scope_line(x, prefix) if prefix and b"_:" in x else x for x in lines]

    def judge(group: list[int]) -> None:
        try:
            quads = list(ox.parse(b"\n".join(work[i] for i in group), format=fmt))
            if len(quads) == len(group):
                canon.add(out, quads)
                return
        except SyntaxError as exc:
            if len(group) == 1:
                reject(group[0], exc)
                return
        if len(group) == 1:  # a line of several statements: judged as pyoxigraph sees it
            canon.add(out, quads)
            return
        half = len(group) // 2
        judge(group[:half])
        judge(group[half:])

    def reject(i: int, exc: SyntaxError) -> None:
        message = _message(exc, LINE_HINT)
        if work[i] is not lines[i]:  # report against the text as written
            try:
                list(ox.parse(lines[i], format=fmt))
            except SyntaxError as original:
                message = _message(original, LINE_HINT)
        out.rejects.append((i, _text(lines[i]), message))

    statements = [i for i, x in enumerate(work) if _statement(x)]
    if statements:
        judge(statements)
    return out


class CountingReader(io.RawIOBase):
    """A binary reader that counts the newlines passing through (the file's lines)."""

    def __init__(self) -> None:
        self.raw = None
        self.newlines = 0
        self.last = b"\n"

    def wrap(self, raw) -> CountingReader:
        self.raw = raw
        return self

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.raw.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        if n:
            self.newlines += data.count(b"\n")
            self.last = data[-1:]
        return n

    @property
    def lines(self) -> int:
        return self.newlines + (self.last != b"\n")


def open_input(path: str, compression: str | None, data: bytes | None = None):
    """The file's bytes, decompressed: from ``data`` when given (a document Spark read
    from a URL, ``extract.documents``), else from the local ``path``."""
    source = io.BytesIO(data) if data is not None else path
    if compression:
        return COMPRESSIONS[compression](source, "rb")
    return source if data is not None else open(path, "rb")


def _scoped(term, labels: dict[str, ox.BlankNode], scope: str):
    kind = type(term)
    if kind is ox.BlankNode:
        node = labels.get(term.value)
        if node is None:
            node = labels[term.value] = ox.BlankNode(f"{scope}{len(labels) + 1}")
        return node
    if kind is ox.Triple:
        return ox.Triple(_scoped(term.subject, labels, scope), term.predicate,
                         _scoped(term.object, labels, scope))
    return term


def _document_quads(file: InputFile, reader: CountingReader | None = None,
                    base_iri: str | None = None, prefixes: dict[str, str] | None = None,
                    data: bytes | None = None) -> Iterator[ox.Quad]:
    """The document's quads as pyoxigraph parses them (streaming); its prefixes, once
    it is read, into ``prefixes``."""
    with open_input(file.path, file.compression, data) as raw:
        source = io.BufferedReader(reader.wrap(raw) if reader else raw, 1 << 20)
        parser = ox.parse(source, format=file.rdf_format, base_iri=base_iri)
        yield from parser
        if prefixes is not None:
            prefixes.update(parser.prefixes)


def _document_error(file: InputFile, base_iri: str | None = None,
                    data: bytes | None = None) -> Parsed | None:
    """None for a good document, else its reject: (line index, text of that line,
    message), with the file's line count."""
    try:
        for _ in _document_quads(file, base_iri=base_iri, data=data):
            pass
    except READ_FAILURES:
        raise
    except (SyntaxError, ValueError, OSError, EOFError) as exc:
        line = getattr(exc, "lineno", None)
        text, count = "", 0
        try:
            with open_input(file.path, file.compression, data) as fh:
                for count, raw in enumerate(fh, 1):
                    if count == line:
                        text = _text(raw.rstrip(b"\r\n"))
        except (OSError, EOFError):
            pass
        hint = "" if base_iri else DOCUMENT_HINT
        return Parsed(rejects=[((line or 0) - 1, text,
                                f"file rejected: {_message(exc, hint)}")], lines=count)
    return None


def parse_document(file: InputFile, canon: Canonicaliser, batch: int = 10_000,
                   base_iri: str | None = None, reader: CountingReader | None = None,
                   data: bytes | None = None) -> Iterator[Parsed]:
    """Parse one document, ``batch`` quads at a time (the last Parsed has the file's
    line count and its prefixes). A document is validated whole first: one with an
    error gives only its reject (index = line number - 1, or -1 when the parser gives
    none) and no quads. ``reader`` (given by the caller) counts the lines read so far.
    ``data``: the file's bytes when Spark read them (a URL), else it is opened by path."""
    rejected = _document_error(file, base_iri, data)
    if rejected is not None:
        yield rejected
        return
    scope = scope_of(file.path)
    labels: dict[str, ox.BlankNode] = {}
    reader = reader or CountingReader()
    prefixes: dict[str, str] = {}
    pending: list[ox.Quad] = []
    for q in _document_quads(file, reader, base_iri, prefixes, data):
        if "_:" in str(q):
            q = ox.Quad(_scoped(q.subject, labels, scope), q.predicate,
                        _scoped(q.object, labels, scope), _scoped(q.graph_name, labels, scope))
        pending.append(q)
        if len(pending) >= batch:
            out = Parsed()
            canon.add(out, pending)
            pending = []
            yield out
    out = Parsed(lines=reader.lines, prefixes=prefixes)
    canon.add(out, pending)
    yield out


# ---- the fingerprint in 32-bit pieces (ANSI-mode sums: docs/design/dependencies.md) ----

PIECES = 4


def pieces(h: int) -> tuple[int, int, int, int]:
    """A 128-bit hash as four 32-bit pieces, least significant first."""
    m = 0xFFFFFFFF
    return h & m, (h >> 32) & m, (h >> 64) & m, h >> 96


def combine(sums: Sequence[int | None]) -> int:
    """Recombine per-piece sums (of any size) into the fingerprint: sum mod 2**128."""
    return sum((int(s or 0) << (32 * i)) for i, s in enumerate(sums)) % MOD
