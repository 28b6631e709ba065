"""RDF4J's Binary RDF (``application/x-binary-rdf``), without IO.

RDF4J's ``HTTPRepository`` sends the statements it adds and removes as Binary RDF and asks
for it first when it reads statements or runs a graph query. This module reads and writes
it, to and from pyoxigraph terms, and holds the byte cursor the binary results table
(rdf4j_protocol.binary_results) reads with too. It does no IO beyond bytes and binary
streams.

Binary RDF (file magic ``BRDF``). A 4-byte magic number, a 32-bit big-endian format
version, then records, each starting with a type byte:

* ``0`` namespace declaration: prefix, namespace IRI;
* ``1`` statement: subject, predicate, object, context (``NULL`` = no context);
* ``2`` comment: text;
* ``3`` value declaration: an id and a value, after which ``VALUE_REF id`` stands for it
  (RDF4J declares a value that occurs more than once, at its second occurrence);
* ``127`` end of data.

A value is a type byte and its fields: ``0`` NULL, ``1`` IRI, ``2`` blank node (its id),
``3`` plain literal (label), ``4`` language-tagged literal (label, tag), ``5`` typed
literal (label, datatype IRI), ``6`` reference to a declared value (id), ``7`` an
RDF-star triple (subject, predicate, object values).

Version 1 (what RDF4J 3.x reads and writes, and what this module writes): ids are 32-bit
big-endian integers and a string is its length **in UTF-16 code units** (Java's
``String.length()``: a character outside the Basic Multilingual Plane, an emoji, counts
two) followed by its UTF-16BE bytes. Version 2 (RDF4J 4.3 and later write it by default)
writes ids and lengths as unsigned LEB128 varints, declares the charset of its strings
after the version (UTF-8 by default), and a string's length is its byte count; this
module reads it too.

Blank node ids. RDF4J accepts any string as a blank node id; pyoxigraph (and N-Quads)
only labels of the N-Triples syntax. A label that pyoxigraph refuses is read as
``rdf4jx`` followed by the hexadecimal of its UTF-8 bytes, the same label for the same
id, so a document's blank nodes keep their identity.

Malformed input raises :class:`BinaryRdfError` (a ``ValueError``), whose message says what
is wrong and at which byte offset.
"""

from __future__ import annotations

import codecs
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pyoxigraph as ox

MEDIA_TYPE = "application/x-binary-rdf"

RDF_MAGIC = b"BRDF"
RDF_VERSION = 1  # the version written; versions 1 and 2 are read

XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"
# RDF4J's special values in a removal (see rdf4j_protocol.writes.remove_quads_operations).
SESAME_WILDCARD = "http://www.openrdf.org/schema/sesame#wildcard"
SESAME_NIL = "http://www.openrdf.org/schema/sesame#nil"
RDF4J_NIL = "http://rdf4j.org/schema/rdf4j#nil"

Term = ox.NamedNode | ox.BlankNode | ox.Literal | ox.Triple

# Binary RDF record and value types
_NAMESPACE_DECL, _STATEMENT, _COMMENT, _VALUE_DECL, _END_OF_DATA = 0, 1, 2, 3, 127
_NULL, _IRI, _BNODE, _PLAIN, _LANG, _TYPED, _REF, _TRIPLE = 0, 1, 2, 3, 4, 5, 6, 7
_INT = struct.Struct(">i")
_pack_int = _INT.pack
_unpack_int = _INT.unpack_from
_DEFAULT_GRAPH = ox.DefaultGraph()
_DIRECTIONS = {"ltr": ox.BaseDirection.LTR, "rtl": ox.BaseDirection.RTL}
_BNODE_FALLBACK = "rdf4jx"
_CACHE_SIZE = 65536  # IRIs and blank nodes kept for reuse while reading


class BinaryRdfError(ValueError):
    """Malformed Binary RDF or binary query results; the message says what is wrong."""


@dataclass
class BinaryRdfDocument:
    """What a Binary RDF document holds: its statements (statements without context are
    in the default graph), its namespace declarations (a prefix declared twice keeps the
    last IRI) and its comments, in document order."""

    quads: list[ox.Quad] = field(default_factory=list)
    namespaces: dict[str, str] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)
    version: int = RDF_VERSION


def _as_bytes(source: bytes | bytearray | memoryview | BinaryIO) -> bytes:
    if isinstance(source, bytes):
        return source
    if isinstance(source, bytearray | memoryview):
        return bytes(source)
    read = getattr(source, "read", None)
    if read is None:
        raise TypeError(f"expected bytes or a binary stream, got {type(source).__name__}")
    data = read()
    if not isinstance(data, bytes | bytearray):
        raise TypeError("the stream must be opened in binary mode")
    return bytes(data)


# ---------------------------------------------------------------------------------------
# Binary RDF: writing
# ---------------------------------------------------------------------------------------


def _utf16(text: str) -> bytes:
    """A version 1 string: its length in UTF-16 code units, then its UTF-16BE bytes."""
    data = text.encode("utf-16-be")
    return _pack_int(len(data) >> 1) + data


def _language(term: ox.Literal) -> str:
    language = term.language or ""
    direction = term.direction
    if language and direction is not None:
        language = f"{language}--{direction.value}"  # how RDF4J 5 writes a base direction
    return language


def _encode_value(term: Any) -> bytes:
    kind = type(term)
    if kind is ox.NamedNode:
        return b"\x01" + _utf16(term.value)
    if kind is ox.BlankNode:
        return b"\x02" + _utf16(term.value)
    if kind is ox.Literal:
        language = _language(term)
        if language:
            return b"\x04" + _utf16(term.value) + _utf16(language)
        datatype = term.datatype.value
        if datatype == XSD_STRING:
            return b"\x03" + _utf16(term.value)
        return b"\x05" + _utf16(term.value) + _utf16(datatype)
    if kind is ox.Triple:
        return (b"\x07" + _encode_value(term.subject) + _encode_value(term.predicate)
                + _encode_value(term.object))
    raise ValueError(f"cannot write {term!r} as a Binary RDF value")


def _terms(statement: Any) -> tuple:
    kind = type(statement)
    if kind is ox.Quad:
        g = statement.graph_name
        return (statement.subject, statement.predicate, statement.object,
                None if type(g) is ox.DefaultGraph else g)
    if kind is ox.Triple:
        return statement.subject, statement.predicate, statement.object, None
    raise ValueError(f"expected pyoxigraph Quads or Triples, got {statement!r}")


def write_rdf(statements: Iterable[ox.Quad | ox.Triple],
              namespaces: Mapping[str, str] | Iterable[tuple[str, str]] = (),
              comments: Iterable[str] = ()) -> bytes:
    """A Binary RDF (version 1) document: the namespace declarations, the comments, then
    the statements (a Triple, or a Quad in the default graph, has no context). A value
    that occurs more than once is declared once, at its first occurrence, and referred to
    by id (as RDF4J's writer does from its second occurrence)."""
    items = statements if isinstance(statements, list | tuple) else list(statements)
    # Two passes, fetching the terms again in the second: fewer live objects than keeping
    # them all (pyoxigraph makes a new object per attribute access), so less GC work.
    counts: dict[Any, int] = {}
    get = counts.get
    for st in items:
        for term in _terms(st):
            counts[term] = get(term, 0) + 1
    out = bytearray(RDF_MAGIC + _pack_int(RDF_VERSION))
    pairs = namespaces.items() if isinstance(namespaces, Mapping) else namespaces
    try:
        for prefix, iri in pairs:
            out += b"\x00" + _utf16(prefix) + _utf16(iri)
        for text in comments:
            out += b"\x02" + _utf16(text)
    except UnicodeEncodeError as exc:
        raise ValueError(f"a namespace or comment is not valid Unicode text: {exc}") from None
    refs: dict[Any, bytes] = {}
    for st in items:
        record = b"\x01"
        for term in _terms(st):
            if term is None:
                record += b"\x00"
                continue
            ref = refs.get(term)
            if ref is None:
                if counts[term] == 1:
                    record += _encode_value(term)
                    continue
                ident = _pack_int(len(refs))
                out += b"\x03" + ident + _encode_value(term)
                ref = refs[term] = b"\x06" + ident
            record += ref
        out += record
    out += b"\x7f"
    return bytes(out)


# ---------------------------------------------------------------------------------------
# Reading: a cursor over the bytes, shared by both formats
# ---------------------------------------------------------------------------------------


class _Cursor:
    __slots__ = ("blank_nodes", "buf", "end", "iris", "pos", "what")

    def __init__(self, buf: bytes, what: str) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)
        self.what = what
        self.blank_nodes: dict[str, ox.BlankNode] = {}
        self.iris: dict[str, ox.NamedNode] = {}

    def fail(self, message: str, at: int | None = None) -> BinaryRdfError:
        return BinaryRdfError(f"malformed {self.what}: {message} "
                              f"(at byte {self.pos if at is None else at})")

    def truncated(self, need: int, what: str) -> BinaryRdfError:
        left = self.end - self.pos
        return BinaryRdfError(
            f"truncated {self.what}: {what} at byte {self.pos} needs {need} byte(s), "
            f"{left} left")

    def header(self, magic: bytes) -> int:
        got = self.buf[:4]
        if got != magic:
            if len(got) < 4 and magic.startswith(got):
                raise self.truncated(4, "the magic number")
            raise BinaryRdfError(f"not a {self.what}: it starts with {got!r}, not the magic "
                                 f"number {magic!r}")
        self.pos = 4
        return self.int32("the format version")

    def byte(self, what: str) -> int:
        pos = self.pos
        if pos >= self.end:
            raise self.truncated(1, what)
        self.pos = pos + 1
        return self.buf[pos]

    def int32(self, what: str) -> int:
        pos = self.pos
        if pos + 4 > self.end:
            raise self.truncated(4, what)
        self.pos = pos + 4
        return _unpack_int(self.buf, pos)[0]

    def varint(self, what: str) -> int:
        """An unsigned LEB128 integer of at most 5 bytes (RDF4J IOUtil.readVarInt)."""
        value = shift = 0
        start = self.pos
        while True:
            b = self.byte(what)
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 28:
                raise self.fail(f"{what} is a varint longer than 5 bytes", start)
        if value > 0x7FFFFFFF:
            raise self.fail(f"{what} is a varint beyond 32 bits", start)
        return value

    def take(self, n: int, what: str) -> bytes:
        pos = self.pos
        if n < 0:
            raise self.fail(f"negative length {n} for {what}", pos - 4)
        if pos + n > self.end:
            raise self.truncated(n, what)
        self.pos = pos + n
        return self.buf[pos:pos + n]

    def decode(self, data: bytes, encoding: str, what: str, at: int) -> str:
        try:
            return data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise self.fail(f"{what} is not valid {encoding.upper()} text ({exc.reason})",
                            at) from None

    # ---- terms ----

    def iri(self, text: str, at: int) -> ox.NamedNode:
        node = self.iris.get(text)
        if node is None:
            if len(self.iris) >= _CACHE_SIZE:
                self.iris.clear()
            try:
                node = self.iris[text] = ox.NamedNode(text)
            except ValueError as exc:
                raise self.fail(f"invalid IRI <{text}> ({exc})", at) from None
        return node

    def blank_node(self, label: str) -> ox.BlankNode:
        node = self.blank_nodes.get(label)
        if node is None:
            if len(self.blank_nodes) >= _CACHE_SIZE:
                self.blank_nodes.clear()  # the mapping is a function of the id: no loss
            try:
                node = ox.BlankNode(label)
            except ValueError:
                node = ox.BlankNode(_BNODE_FALLBACK + label.encode("utf-8").hex())
            self.blank_nodes[label] = node
        return node

    def literal(self, label: str, language: str | None, datatype: str | None,
                at: int) -> ox.Literal:
        try:
            if language is not None:
                base, sep, direction = language.rpartition("--")
                if sep and direction.lower() in _DIRECTIONS:
                    return ox.Literal(label, language=base,
                                      direction=_DIRECTIONS[direction.lower()])
                return ox.Literal(label, language=language)
            if datatype is None or datatype == XSD_STRING:
                return ox.Literal(label)
            return ox.Literal(label, datatype=self.iri(datatype, at))
        except ValueError as exc:
            raise self.fail(f"invalid literal {label!r} (language {language!r}, datatype "
                            f"{datatype!r}): {exc}", at) from None


def _triple(s: Any, p: Any, o: Any, fail: Any) -> ox.Triple:
    if type(s) not in (ox.NamedNode, ox.BlankNode):
        raise fail(f"a triple term's subject must be an IRI or a blank node, got {s!r}")
    if type(p) is not ox.NamedNode:
        raise fail(f"a triple term's predicate must be an IRI, got {p!r}")
    if o is None:
        raise fail("a triple term's object is NULL")
    return ox.Triple(s, p, o)


# ---------------------------------------------------------------------------------------
# Binary RDF: reading
# ---------------------------------------------------------------------------------------


class _Truncated(Exception):
    """Internal: a string runs past the end of the data."""


_RECORD_NAMES = {_NAMESPACE_DECL: "namespace declaration", _STATEMENT: "statement",
                 _COMMENT: "comment", _VALUE_DECL: "value declaration"}


def _statement_problem(s: Any, p: Any, o: Any, g: Any) -> str:
    if type(s) not in (ox.NamedNode, ox.BlankNode):
        return f"a statement's subject must be an IRI or a blank node, got {s!r}"
    if type(p) is not ox.NamedNode:
        return f"a statement's predicate must be an IRI, got {p!r}"
    if o is None:
        return "a statement's object is NULL"
    return f"a statement's context must be an IRI, a blank node or NULL, got {g!r}"


def _read_records(c: _Cursor, pos: int, version: int, encoding: str,
                  doc: BinaryRdfDocument) -> None:
    """The records after the header, up to END_OF_DATA. Written as closures over local
    variables, returning (value, next position): the hot loop of the reader."""
    buf = c.buf
    size = len(buf)
    unpack = _unpack_int
    fail = c.fail
    table: dict[int, Any] = {}
    Literal, NamedNode, BlankNode, Quad = ox.Literal, ox.NamedNode, ox.BlankNode, ox.Quad

    if version == 1:
        def count(pos: int) -> tuple[int, int]:
            n = unpack(buf, pos)[0]
            if n < 0:
                raise fail(f"negative length or id {n}", pos)
            return n, pos + 4

        def string(pos: int) -> tuple[str, int]:
            n = unpack(buf, pos)[0]
            if n < 0:
                raise fail(f"negative string length {n}", pos)
            start = pos + 4
            end = start + 2 * n
            if end > size:
                raise _Truncated
            try:
                return buf[start:end].decode("utf-16-be"), end
            except UnicodeDecodeError as exc:
                raise fail(f"a string is not valid UTF-16 ({exc.reason})", pos) from None
    else:
        def count(pos: int) -> tuple[int, int]:
            value = shift = 0
            start = pos
            while True:
                b = buf[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if not b & 0x80:
                    break
                shift += 7
                if shift > 28:
                    raise fail("a varint longer than 5 bytes", start)
            if value > 0x7FFFFFFF:
                raise fail("a varint beyond 32 bits", start)
            return value, pos

        def string(pos: int) -> tuple[str, int]:
            n, start = count(pos)
            end = start + n
            if end > size:
                raise _Truncated
            try:
                return buf[start:end].decode(encoding), end
            except UnicodeDecodeError as exc:
                raise fail(f"a string is not valid {encoding} ({exc.reason})", pos) from None

    iris = c.iris

    def iri(pos: int) -> tuple[Any, int]:
        text, end = string(pos)
        node = iris.get(text)
        if node is None:
            if len(iris) >= _CACHE_SIZE:
                iris.clear()
            try:
                node = iris[text] = NamedNode(text)
            except ValueError as exc:
                raise fail(f"invalid IRI <{text}> ({exc})", pos) from None
        return node, end

    def value(pos: int) -> tuple[Any, int]:
        at = pos
        kind = buf[pos]
        pos += 1
        if kind == _REF:
            ident, pos = count(pos)
            try:
                return table[ident], pos
            except KeyError:
                raise fail(f"a reference to value id {ident}, which was not declared",
                           at) from None
        if kind == _IRI:
            return iri(pos)
        if kind == _PLAIN:
            label, pos = string(pos)
            return Literal(label), pos
        if kind == _TYPED:
            label, pos = string(pos)
            datatype, end = iri(pos)
            if datatype.value == XSD_STRING:
                return Literal(label), end
            return Literal(label, datatype=datatype), end
        if kind == _LANG:
            label, pos = string(pos)
            language, end = string(pos)
            return c.literal(label, language, None, at), end
        if kind == _BNODE:
            label, pos = string(pos)
            return c.blank_node(label), pos
        if kind == _NULL:
            return None, pos
        if kind == _TRIPLE:
            s, pos = value(pos)
            p, pos = value(pos)
            o, pos = value(pos)
            return _triple(s, p, o, lambda m: fail(m, at)), pos
        raise fail(f"unknown value type {kind}", at)

    quads = doc.quads
    append = quads.append
    kind = -1
    while True:
        at = pos
        try:
            kind = buf[pos]
            pos += 1
            if kind == _STATEMENT:
                s, pos = value(pos)
                p, pos = value(pos)
                o, pos = value(pos)
                g, pos = value(pos)
                ts = type(s)
                if (ts is NamedNode or ts is BlankNode) and type(p) is NamedNode \
                        and o is not None:
                    if g is None:
                        append(Quad(s, p, o))
                        continue
                    tg = type(g)
                    if tg is NamedNode or tg is BlankNode:
                        append(Quad(s, p, o, g))
                        continue
                raise fail(_statement_problem(s, p, o, g), at)
            if kind == _VALUE_DECL:
                ident, pos = count(pos)
                table[ident], pos = value(pos)
            elif kind == _NAMESPACE_DECL:
                prefix, pos = string(pos)
                doc.namespaces[prefix], pos = string(pos)
            elif kind == _COMMENT:
                comment, pos = string(pos)
                doc.comments.append(comment)
            elif kind == _END_OF_DATA:
                return
            else:
                raise fail(f"unknown record type {kind}", at)
        except (IndexError, struct.error, _Truncated):
            if at >= size:
                raise BinaryRdfError(
                    f"truncated {c.what}: it ends at byte {size} without its END_OF_DATA "
                    "record") from None
            raise BinaryRdfError(
                f"truncated {c.what}: the {_RECORD_NAMES.get(kind, 'record')} record at "
                f"byte {at} runs past the end of the data ({size} bytes)") from None


def read_rdf(source: bytes | bytearray | memoryview | BinaryIO) -> BinaryRdfDocument:
    """Read a Binary RDF document (version 1 or 2) from bytes or a binary stream."""
    c = _Cursor(_as_bytes(source), "Binary RDF document")
    version = c.header(RDF_MAGIC)
    if version not in (1, 2):
        raise BinaryRdfError(f"unsupported Binary RDF format version {version} (versions 1 "
                             "and 2 are supported)")
    encoding = "utf-16-be"
    if version == 2:  # the charset's name, as a varint length and UTF-8 bytes
        at = c.pos
        name = c.decode(c.take(c.varint("the charset name's length"), "the charset name"),
                        "utf-8", "the charset name", at)
        try:
            encoding = codecs.lookup(name).name
        except LookupError:
            raise c.fail(f"unknown charset {name!r}", at) from None
    doc = BinaryRdfDocument(version=version)
    _read_records(c, c.pos, version, encoding, doc)
    return doc


def read_rdf_quads(source: bytes | bytearray | memoryview | BinaryIO) -> list[ox.Quad]:
    """Just the statements of a Binary RDF document."""
    return read_rdf(source).quads
