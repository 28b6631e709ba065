"""RDF4J's binary tuple query results table
(``application/x-binary-rdf-results-table``), without IO.

RDF4J's ``HTTPRepository`` asks first for it for SELECT results (and the repository
listings). This module reads and writes it, to and from pyoxigraph terms.

Binary results table (magic ``BRTR``, RDF4J ``BinaryQueryResultWriter``): the magic, a
32-bit version (RDF4J 3.x writes 4; this module writes 4 and reads 1 to 4; version 2 has
a flags byte after the version, version 1 writes strings as Java's modified UTF-8 with a
16-bit length), the number of columns, the column names, then records: ``0`` NULL
(unbound), ``1`` REPEAT (same value as the previous row's in this column), ``2``
NAMESPACE (id, IRI prefix), ``3`` QNAME (namespace id, local name), ``4`` URI, ``5``
BNODE, ``6`` plain literal, ``7`` language literal, ``8`` typed literal (label, then a
QNAME or URI record for the datatype), ``9`` EMPTY_ROW (a row with no value bound),
``10`` triple, ``126`` ERROR (type byte, message), ``127`` end of table. Strings there are
a 32-bit byte count and UTF-8. RDF4J has no binary format for boolean results.

Malformed input raises :class:`BinaryRdfError` (a ``ValueError``), whose message says what
is wrong and at which byte offset.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import pyoxigraph as ox

from rdf4j_protocol.binary_rdf import (
    BinaryRdfError,
    Term,
    _as_bytes,
    _Cursor,
    _language,
    _pack_int,
    _triple,
)

MEDIA_TYPE = "application/x-binary-rdf-results-table"
RESULTS_MAGIC = b"BRTR"
_SHORT = struct.Struct(">H")
RESULTS_VERSION = 4  # the version written (RDF4J 3.x); versions 1 to 4 are read

Row = Sequence[Term | None]

# Results table record types
(_R_NULL, _R_REPEAT, _R_NAMESPACE, _R_QNAME, _R_URI, _R_BNODE, _R_PLAIN, _R_LANG, _R_TYPED,
 _R_EMPTY_ROW, _R_TRIPLE) = range(11)
_R_ERROR, _R_END = 126, 127
_ERROR_TYPES = {1: "malformed query", 2: "query evaluation error"}


class BinaryResultsQueryError(BinaryRdfError):
    """A results table that carries an ERROR record (the server's query failed)."""


@dataclass
class BinaryResults:
    """A tuple query result: column names and rows (``None`` for an unbound value)."""

    variables: list[str]
    rows: list[tuple[Term | None, ...]]


def _utf8(text: str) -> bytes:
    data = text.encode("utf-8")
    return _pack_int(len(data)) + data


def _split_iri(iri: str) -> int:
    """Where RDF4J's IRI.getLocalName starts: after the first '#', else the last '/', else
    the last ':'."""
    i = iri.find("#")
    if i < 0:
        i = iri.rfind("/")
        if i < 0:
            i = iri.rfind(":")
    return i + 1


class _ResultsWriter:
    __slots__ = ("namespaces",)

    def __init__(self) -> None:
        self.namespaces: dict[str, bytes] = {}

    def namespace(self, namespace: str, out: list[bytes]) -> bytes:
        ident = self.namespaces.get(namespace)
        if ident is None:
            ident = self.namespaces[namespace] = _pack_int(len(self.namespaces))
            out.append(b"\x02" + ident + _utf8(namespace))
        return ident

    def qname(self, iri: str, out: list[bytes]) -> None:
        split = _split_iri(iri)
        ident = self.namespace(iri[:split], out)
        out.append(b"\x03" + ident + _utf8(iri[split:]))

    def value(self, term: Any, out: list[bytes]) -> None:
        kind = type(term)
        if kind is ox.NamedNode:
            self.qname(term.value, out)
        elif kind is ox.BlankNode:
            out.append(b"\x05" + _utf8(term.value))
        elif kind is ox.Literal:
            language = _language(term)
            if language:
                out.append(b"\x07" + _utf8(term.value) + _utf8(language))
            else:
                # As RDF4J: every literal without a language is written with its datatype
                # (xsd:string included), the datatype's namespace declared first.
                datatype = term.datatype.value
                split = _split_iri(datatype)
                ident = self.namespace(datatype[:split], out)
                out.append(b"\x08" + _utf8(term.value) + b"\x03" + ident
                           + _utf8(datatype[split:]))
        elif kind is ox.Triple:
            out.append(b"\x0a")
            self.value(term.subject, out)
            self.value(term.predicate, out)
            self.value(term.object, out)
        else:
            raise ValueError(f"cannot write {term!r} as a binary query result value")


def write_results(variables: Sequence[str], rows: Iterable[Row]) -> bytes:
    """A binary results table (version 4, as RDF4J 3.x writes it): one row per item of
    ``rows``, one value (or ``None`` for unbound) per variable."""
    n = len(variables)
    out = [RESULTS_MAGIC, _pack_int(RESULTS_VERSION), _pack_int(n)]
    out.extend(_utf8(v) for v in variables)
    writer = _ResultsWriter()
    previous: Sequence[Any] = (None,) * n
    for row in rows:
        if len(row) != n:
            raise ValueError(f"every row needs one value (or None) per variable ({n}), got "
                             f"{len(row)}")
        if all(t is None for t in row):
            out.append(b"\x09")  # RDF4J: an empty binding set; REPEAT still refers back
            continue             # to the last row with a value
        for term, before in zip(row, previous, strict=True):
            if term is None:
                out.append(b"\x00")
            elif term == before:
                out.append(b"\x01")
            else:
                writer.value(term, out)
        previous = row
    out.append(b"\x7f")
    return b"".join(out)


class _ResultsReader(_Cursor):
    __slots__ = ("namespaces", "version")

    def __init__(self, buf: bytes) -> None:
        super().__init__(buf, "binary query results table")
        self.version = RESULTS_VERSION
        self.namespaces: dict[int, str] = {}

    def string(self, what: str) -> str:
        at = self.pos
        if self.version == 1:  # Java's DataInput.readUTF: modified UTF-8, 16-bit length
            data = self.take(self.u16(f"the length of {what}"), what)
            try:
                text = data.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
                return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be")
            except UnicodeError as exc:
                raise self.fail(f"{what} is not valid modified UTF-8 ({exc.reason})",
                                at) from None
        n = self.int32(f"the length of {what}")
        return self.decode(self.take(n, what), "utf-8", what, at)

    def u16(self, what: str) -> int:
        pos = self.pos
        if pos + 2 > self.end:
            raise self.truncated(2, what)
        self.pos = pos + 2
        return _SHORT.unpack_from(self.buf, pos)[0]

    def namespace_record(self) -> None:
        at = self.pos
        ident = self.int32("a namespace id")
        if ident < 0:
            raise self.fail(f"negative namespace id {ident}", at)
        self.namespaces[ident] = self.string("a namespace")

    def qname(self, at: int) -> ox.NamedNode:
        ident = self.int32("a namespace id")
        local = self.string("a local name")
        try:
            namespace = self.namespaces[ident]
        except KeyError:
            raise self.fail(f"a QNAME refers to namespace id {ident}, which was not declared",
                            at) from None
        return self.iri(namespace + local, at)

    def value(self, kind: int, at: int) -> Any:
        if kind == _R_QNAME:
            return self.qname(at)
        if kind == _R_URI:
            return self.iri(self.string("an IRI"), at)
        if kind == _R_BNODE:
            return self.blank_node(self.string("a blank node id"))
        if kind == _R_PLAIN:
            return self.literal(self.string("a literal label"), None, None, at)
        if kind == _R_LANG:
            label = self.string("a literal label")
            return self.literal(label, self.string("a language tag"), None, at)
        if kind == _R_TYPED:
            label = self.string("a literal label")
            dt_at = self.pos
            marker = self.byte("a literal's datatype")
            if marker == _R_QNAME:
                datatype = self.qname(dt_at).value
            elif marker == _R_URI:
                datatype = self.string("a datatype IRI")
            else:
                raise self.fail(f"a literal's datatype must be a QNAME or URI record, got "
                                f"record type {marker}", dt_at)
            return self.literal(label, None, datatype, at)
        if kind == _R_TRIPLE:
            s = self.direct_value("a triple term's subject")
            p = self.direct_value("a triple term's predicate")
            o = self.direct_value("a triple term's object")
            return _triple(s, p, o, lambda m: self.fail(m, at))
        raise self.fail(f"unknown record type {kind}", at)

    def direct_value(self, what: str) -> Any:
        while True:
            at = self.pos
            kind = self.byte(what)
            if kind != _R_NAMESPACE:
                return self.value(kind, at)
            self.namespace_record()


def read_results(source: bytes | bytearray | memoryview | BinaryIO) -> BinaryResults:
    """Read a binary results table (versions 1 to 4) from bytes or a binary stream. An
    ERROR record raises :class:`BinaryResultsQueryError` with the server's message."""
    r = _ResultsReader(_as_bytes(source))
    version = r.header(RESULTS_MAGIC)
    if not 1 <= version <= RESULTS_VERSION:
        raise BinaryRdfError(f"unsupported binary query results format version {version} "
                             f"(versions 1 to {RESULTS_VERSION} are supported)")
    r.version = version
    if version == 2:
        r.byte("the flags byte")  # 'distinct' and 'ordered': ignored, as RDF4J does
    at = r.pos
    n = r.int32("the column count")
    if n < 0:
        raise r.fail(f"negative column count {n}", at)
    variables = [r.string("a column name") for _ in range(n)]
    rows: list[tuple[Any, ...]] = []
    previous: tuple[Any, ...] = (None,) * n
    empty = previous
    current: list[Any] = []
    while True:
        at = r.pos
        if at >= r.end:
            raise r.truncated(1, "the next record (the table has no end record)")
        kind = r.buf[at]
        r.pos = at + 1
        if kind == _R_END:
            if current:
                raise r.fail(f"the table ends in the middle of a row ({len(current)} of {n} "
                             "values)", at)
            return BinaryResults(variables, rows)
        if kind == _R_NAMESPACE:
            r.namespace_record()
            continue
        if kind == _R_EMPTY_ROW:
            if current:
                raise r.fail("an EMPTY_ROW record in the middle of a row", at)
            rows.append(empty)
            continue
        if kind == _R_ERROR:
            error = r.byte("an error type")
            message = r.string("an error message")
            raise BinaryResultsQueryError(
                f"the results table reports an error ({_ERROR_TYPES.get(error, error)}): "
                f"{message}")
        if n == 0:
            raise r.fail(f"a value record (type {kind}) in a table without columns", at)
        if kind == _R_NULL:
            current.append(None)
        elif kind == _R_REPEAT:
            current.append(previous[len(current)])
        else:
            current.append(r.value(kind, at))
        if len(current) == n:
            previous = tuple(current)
            rows.append(previous)
            current = []
