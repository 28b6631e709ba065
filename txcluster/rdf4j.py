"""The RDF4J REST protocol and the query side of the SPARQL 1.1 Protocol, without IO.

Theory of operation. An HTTP shell (the worker's router today, the master's facade later)
hands this module what it received — the query string, the body, the Content-Type and
Accept headers — and gets back typed, validated values:

* reads: a :class:`QueryRequest` (query text, dataset, bindings, timeout) or a
  :class:`StatementPattern` (``subj``/``pred``/``obj``/``context`` filters), and the result
  format chosen by content negotiation (:func:`negotiate_tuple_format`,
  :func:`negotiate_boolean_format`, :func:`negotiate_rdf_format`);
* writes: the cluster's transaction operations in their JSON wire form (plain dicts, what a
  master writes into its transaction log and a worker's ``execute_local`` runs):

  ``{"type": "update", "update": str, "base_iri": str | None}``
  ``{"type": "add", "data": str, "format": mime, "contexts": None | [enc, ...], "base_iri": ..}``
  ``{"type": "remove", "subject": enc | None, "predicate": .., "object": .., "contexts": ..}``
  ``{"type": "namespace", "prefix": str, "namespace": str | None}``
  ``{"type": "clear_namespaces"}``

  where ``enc`` is an RDF4J N-Triples encoded value (``<iri>``, ``_:b``, ``"lit"@en``) and
  the context ``"null"`` is the default graph; ``contexts: None`` means every graph.

RDF4J's binary formats (txcluster.binary_rdf) are negotiated like the others, with
``Negotiated.format`` BINARY_RDF or BINARY_RESULTS; a Binary RDF request body becomes an
N-Quads document at this edge (:func:`rdf_body`), so operations never carry binary data.

Everything malformed raises :class:`ProtocolError` with the HTTP status to answer and a
message saying what is wrong; nothing here touches a store, a socket or a clock. The
module uses pyoxigraph only for its term classes, its format tables and its parsers.

Parameter names follow the RDF4J server (``queryLn``, ``infer``, ``baseURI``, ``subj``,
``pred``, ``obj``, ``context``, ``$var`` bindings, ``timeout`` in seconds, ``action`` for
transactions) and the SPARQL 1.1 Protocol (``query``, ``update``, ``default-graph-uri``,
``named-graph-uri``) and Graph Store Protocol (``graph``, ``default``). Unknown parameters
are ignored, as RDF4J does: SPARQLWrapper, for one, always sends ``format=``/``output=``.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape, quoteattr

import pyoxigraph as ox

from txcluster import binary_rdf

log = logging.getLogger("txcluster.rdf4j")

PROTOCOL_VERSION = "12"

Params = Sequence[tuple[str, str]]
Term = ox.NamedNode | ox.BlankNode | ox.Literal
GraphName = ox.NamedNode | ox.BlankNode | ox.DefaultGraph

XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"
RDF_LANG_STRING = "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString"
XSD_BOOLEAN = "http://www.w3.org/2001/XMLSchema#boolean"

FORM = "application/x-www-form-urlencoded"
SPARQL_QUERY = "application/sparql-query"
SPARQL_UPDATE = "application/sparql-update"


class ProtocolError(Exception):
    """A request the protocol refuses: ``status`` is the HTTP status, ``message`` why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def __repr__(self) -> str:
        return f"ProtocolError({self.status}, {self.message!r})"


# ---------------------------------------------------------------------------------------
# Request parameters
# ---------------------------------------------------------------------------------------


def media_type(content_type: str | None) -> str:
    """``'Text/Turtle; charset=utf-8'`` -> ``'text/turtle'``; ``''`` when absent."""
    if not content_type:
        return ""
    return content_type.split(";", 1)[0].strip().lower()


def _charset(content_type: str | None) -> str:
    for part in (content_type or "").split(";")[1:]:
        name, _, value = part.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return "utf-8"


def decode_text(body: bytes, content_type: str | None, what: str) -> str:
    """A request body as text, in its declared charset (UTF-8 by default)."""
    charset = _charset(content_type)
    try:
        return body.decode(charset)
    except LookupError:
        raise ProtocolError(415, f"unknown charset '{charset}' for the {what}") from None
    except UnicodeDecodeError as exc:
        raise ProtocolError(400, f"the {what} is not valid {charset}: {exc}") from None


def parse_params(query_string: str | bytes, body: bytes = b"",
                 content_type: str | None = None) -> tuple[tuple[str, str], ...]:
    """The request parameters: URL query string, then a form-encoded body if there is one.

    Parsed here rather than by Starlette, whose form parser needs python-multipart even for
    URL-encoded bodies."""
    if isinstance(query_string, bytes):
        query_string = query_string.decode("latin-1")
    try:
        pairs = parse_qsl(query_string, keep_blank_values=True, errors="strict")
        if body and media_type(content_type) == FORM:
            pairs += parse_qsl(decode_text(body, content_type, "form body"),
                               keep_blank_values=True, errors="strict")
    except UnicodeDecodeError as exc:
        raise ProtocolError(400, f"request parameters are not valid UTF-8: {exc}") from None
    return tuple(pairs)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def path_problem(path: str) -> str | None:
    """Why a request path (percent-decoded) is refused, or None: a control character
    (``%00``, ``%0A``...) names no repository, prefix or graph. Check the ASGI scope's
    ``path``: Starlette's ``request.url`` goes through urlsplit, which drops newlines."""
    if (m := _CONTROL.search(path)) is not None:
        return f"the request path contains a control character (U+{ord(m.group()):04X})"
    return None


def param_values(params: Params, name: str) -> list[str]:
    return [v for k, v in params if k == name]


def single_param(params: Params, name: str) -> str | None:
    """The value of a parameter that may be given at most once. The same value given
    twice is taken: Ontotext's graphdb.js sends ``query`` both in the URL and in the
    form body of a POST."""
    values = param_values(params, name)
    if len(set(values)) > 1:
        raise ProtocolError(400, f"parameter '{name}' must be given at most once (it has "
                                 f"{len(values)} different values)")
    return values[0] if values else None


def bool_param(params: Params, name: str, default: bool) -> bool:
    value = single_param(params, name)
    if value is None or value == "":
        return default
    lowered = value.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ProtocolError(400, f"parameter '{name}' must be true or false, got '{value}'")


def check_iri(value: str, what: str) -> ox.NamedNode:
    """An absolute IRI (as the SPARQL protocol passes them: not in angle brackets)."""
    try:
        return ox.NamedNode(value)
    except ValueError as exc:
        raise ProtocolError(400, f"{what} is not an absolute IRI: '{value}' ({exc})") from None


# ---------------------------------------------------------------------------------------
# N-Triples encoded values (RDF4J's subj/pred/obj/context and $var parameters)
# ---------------------------------------------------------------------------------------

_PARSER_NOISE = re.compile(
    r"^Parser error at line \d+ (?:between columns \d+ and \d+|column \d+): ")


def _parser_message(exc: Exception) -> str:
    text = _PARSER_NOISE.sub("", str(exc))
    return text.removesuffix(" (line 1)")


def decode_value(text: str, param: str = "value") -> Term:
    """Decode one RDF4J N-Triples encoded value: ``<iri>``, ``_:label`` or a literal."""
    if "\n" in text or "\r" in text:
        raise ProtocolError(
            400, f"parameter '{param}' is not an N-Triples encoded value: '{text}' "
                 "(line breaks must be escaped)")
    try:
        triples = list(ox.parse(f"<urn:x-txcluster:s> <urn:x-txcluster:p> {text} .",
                                format=ox.RdfFormat.N_TRIPLES))
    except SyntaxError as exc:
        raise ProtocolError(
            400, f"parameter '{param}' is not an N-Triples encoded value: '{text}' "
                 f"({_parser_message(exc)})") from None
    if len(triples) != 1:
        raise ProtocolError(400, f"parameter '{param}' is not one N-Triples encoded value: "
                                 f"'{text}'")
    return triples[0].object


def decode_resource(text: str, param: str) -> ox.NamedNode | ox.BlankNode:
    term = decode_value(text, param)
    if isinstance(term, ox.Literal):
        raise ProtocolError(400, f"parameter '{param}' must be an IRI or a blank node, "
                                 f"got the literal {text}")
    return term


def decode_iri(text: str, param: str) -> ox.NamedNode:
    term = decode_value(text, param)
    if not isinstance(term, ox.NamedNode):
        raise ProtocolError(400, f"parameter '{param}' must be an IRI, got {text}")
    return term


def decode_context(text: str, param: str = "context") -> GraphName:
    """A context: an IRI, a blank node, or ``null`` for the default graph."""
    if text == "null":
        return ox.DefaultGraph()
    return decode_resource(text, param)


def encode_value(term: Term | ox.DefaultGraph | None) -> str | None:
    """The N-Triples encoding of a term; ``"null"`` for the default graph."""
    if term is None:
        return None
    if isinstance(term, ox.DefaultGraph):
        return "null"
    return str(term)


def decode_contexts(params: Params, name: str = "context") -> tuple[GraphName, ...] | None:
    """All ``context`` parameters; None when there is none (= every graph)."""
    values = param_values(params, name)
    if not values:
        return None
    return tuple(decode_context(v, name) for v in values)


def encode_contexts(contexts: Iterable[GraphName] | None) -> list[str] | None:
    return None if contexts is None else [encode_value(c) for c in contexts]  # type: ignore[misc]


# ---------------------------------------------------------------------------------------
# Content negotiation
# ---------------------------------------------------------------------------------------

BOOLEAN_TEXT = "text/boolean"  # RDF4J's plain "true"/"false" boolean result format
# RDF4J's binary formats, written and read by txcluster.binary_rdf rather than pyoxigraph:
# as a Negotiated.format they are these media type strings (like BOOLEAN_TEXT).
BINARY_RDF = binary_rdf.MEDIA_TYPE  # application/x-binary-rdf (quads, namespaces)
BINARY_RESULTS = binary_rdf.RESULTS_MEDIA_TYPE  # application/x-binary-rdf-results-table


@dataclass(frozen=True)
class Negotiated:
    """A chosen result format: ``media_type`` is what the client asked for (an alias such as
    ``application/x-turtle`` is answered with that Content-Type), ``format`` what to write."""

    media_type: str
    format: Any  # ox.QueryResultsFormat, ox.RdfFormat, BOOLEAN_TEXT, BINARY_*

    @property
    def content_type(self) -> str:
        if self.media_type.startswith("text/"):
            return f"{self.media_type}; charset=utf-8"
        return self.media_type

    @property
    def supports_datasets(self) -> bool:
        if self.format == BINARY_RDF:
            return True
        return isinstance(self.format, ox.RdfFormat) and self.format.supports_datasets

    @property
    def binary(self) -> bool:
        """Written by txcluster.binary_rdf (RDF4J's binary formats), not by pyoxigraph."""
        return self.format in (BINARY_RDF, BINARY_RESULTS)


_QR = ox.QueryResultsFormat
_RDF = ox.RdfFormat

TUPLE_FORMATS: tuple[Negotiated, ...] = (
    Negotiated("application/sparql-results+json", _QR.JSON),
    Negotiated("application/json", _QR.JSON),
    Negotiated("application/sparql-results+xml", _QR.XML),
    Negotiated("application/xml", _QR.XML),
    Negotiated("text/csv", _QR.CSV),
    Negotiated("text/tab-separated-values", _QR.TSV),
    # Last: chosen only when asked for by name (RDF4J's HTTPRepository prefers it).
    Negotiated(BINARY_RESULTS, BINARY_RESULTS),
)
BOOLEAN_FORMATS: tuple[Negotiated, ...] = (  # RDF4J has no binary boolean result format
    *(n for n in TUPLE_FORMATS if n.format != BINARY_RESULTS),
    Negotiated(BOOLEAN_TEXT, BOOLEAN_TEXT),
)
RDF_FORMATS: tuple[Negotiated, ...] = (
    Negotiated("text/turtle", _RDF.TURTLE),
    Negotiated("application/x-turtle", _RDF.TURTLE),
    Negotiated("application/n-triples", _RDF.N_TRIPLES),
    Negotiated("text/plain", _RDF.N_TRIPLES),
    Negotiated("application/n-quads", _RDF.N_QUADS),
    Negotiated("text/x-nquads", _RDF.N_QUADS),
    Negotiated("application/trig", _RDF.TRIG),
    Negotiated("application/x-trig", _RDF.TRIG),
    Negotiated("application/rdf+xml", _RDF.RDF_XML),
    Negotiated("application/xml", _RDF.RDF_XML),
    Negotiated("application/ld+json", _RDF.JSON_LD),
    Negotiated("text/n3", _RDF.N3),
    Negotiated("text/rdf+n3", _RDF.N3),
    # Last: chosen only when asked for by name (RDF4J's HTTPRepository prefers it).
    Negotiated(BINARY_RDF, BINARY_RDF),
)
_RDF_BY_MEDIA_TYPE = {n.media_type: n for n in RDF_FORMATS}


def _accept_ranges(accept: str) -> list[tuple[str, str, float, int]]:
    """(type, subtype, q, position) per media range; malformed ranges are skipped."""
    ranges = []
    for position, item in enumerate(accept.split(",")):
        parts = item.split(";")
        mtype, _, subtype = parts[0].strip().lower().partition("/")
        if not mtype or not subtype:
            continue
        q = 1.0
        for p in parts[1:]:
            name, _, value = p.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = -1.0
        if 0.0 <= q <= 1.0:
            ranges.append((mtype, subtype, q, position))
    return ranges


_OFFERS: dict[str, tuple[tuple[Negotiated, ...], Negotiated]] = {
    "tuple": (TUPLE_FORMATS, TUPLE_FORMATS[0]),
    "boolean": (BOOLEAN_FORMATS, BOOLEAN_FORMATS[0]),
    "graph": (RDF_FORMATS, _RDF_BY_MEDIA_TYPE["text/turtle"]),
    "dataset": (RDF_FORMATS, _RDF_BY_MEDIA_TYPE["application/n-quads"]),
}


@lru_cache(maxsize=1024)  # clients send the same few Accept headers: keep the hot path cheap
def _negotiate(accept: str, kind: str) -> Negotiated | None:
    offers, default = _OFFERS[kind]
    ranges = _accept_ranges(accept)
    if not ranges:
        return default
    best_key, best = None, None
    for server_rank, offer in enumerate(offers):
        otype, _, osubtype = offer.media_type.partition("/")
        match = None  # (specificity, q, client position) of the most specific range
        for mtype, subtype, q, position in ranges:
            if mtype == otype and subtype == osubtype:
                spec = 2
            elif mtype == otype and subtype == "*":
                spec = 1
            elif mtype == "*" and subtype == "*":
                spec = 0
            else:
                continue
            if match is None or spec > match[0]:
                match = (spec, q, position)
        if match is None or match[1] <= 0:
            continue
        # Highest q, then the most specific range, then the client's order, then ours
        # (with the default first, so "*/*" gets the default).
        key = (-match[1], -match[0], match[2], -1 if offer is default else server_rank)
        if best_key is None or key < best_key:
            best_key, best = key, offer
    return best


def _negotiate_or_406(accept: str | None, kind: str, what: str) -> Negotiated:
    if accept is None or not accept.strip():
        return _OFFERS[kind][1]
    chosen = _negotiate(accept.strip(), kind)
    if chosen is None:
        supported = ", ".join(o.media_type for o in _OFFERS[kind][0])
        raise ProtocolError(406, f"unsupported {what} '{accept.strip()}' (supported: {supported})")
    return chosen


def negotiate_tuple_format(accept: str | None) -> Negotiated:
    """SELECT results (and the RDF4J listings): SPARQL JSON unless the client prefers."""
    return _negotiate_or_406(accept, "tuple", "query result format")


def negotiate_boolean_format(accept: str | None) -> Negotiated:
    return _negotiate_or_406(accept, "boolean", "query result format")


def negotiate_rdf_format(accept: str | None, *, dataset: bool = False) -> Negotiated:
    """CONSTRUCT/DESCRIBE results and statements. The default is Turtle for graphs and
    N-Quads for ``dataset`` reads (statements in several contexts) so that graph names
    survive; a triples-only format asked for explicitly is honoured (graph names dropped,
    as RDF4J does)."""
    return _negotiate_or_406(accept, "dataset" if dataset else "graph", "RDF format")


def rdf_format_of_body(content_type: str | None) -> ox.RdfFormat:
    """The pyoxigraph RDF format of a request body, from its Content-Type (415 if not RDF
    we parse). A Binary RDF body has none: read it with :func:`rdf_body`."""
    mtype = media_type(content_type)
    offer = _RDF_BY_MEDIA_TYPE.get(mtype)
    if offer is not None and isinstance(offer.format, ox.RdfFormat):
        return offer.format
    fmt = ox.RdfFormat.from_media_type(mtype) if mtype else None
    if fmt is None:
        supported = ", ".join(o.media_type for o in RDF_FORMATS)
        if not mtype:
            raise ProtocolError(415, "the request body has no Content-Type: name its format "
                                     f"(an RDF format: {supported}; or "
                                     f"{SPARQL_UPDATE} or {FORM} for an update)")
        shown = mtype
        if mtype == BINARY_RDF:
            raise ProtocolError(415, f"'{BINARY_RDF}' is not parsed by pyoxigraph: read the "
                                     "body with rdf_body()")
        raise ProtocolError(415, f"unsupported RDF format '{shown}' for the request body "
                                 f"(supported: {supported})")
    return fmt


def binary_rdf_quads(body: bytes) -> list[ox.Quad]:
    """The statements of a Binary RDF request body (400 MALFORMED DATA if it is not)."""
    try:
        return binary_rdf.read_rdf(body).quads
    except binary_rdf.BinaryRdfError as exc:
        raise ProtocolError(400, f"MALFORMED DATA: {exc}") from None


def rdf_body(body: bytes, content_type: str | None) -> tuple[str, ox.RdfFormat]:
    """A request body as RDF text and its pyoxigraph format. A Binary RDF body (RDF4J's
    ``application/x-binary-rdf``) becomes N-Quads text: everything downstream (the
    transaction log, the workers) sees an N-Quads document. Its blank nodes keep their ids
    as labels (one label per id, see txcluster.binary_rdf), so they keep their identity
    within the request exactly as the labels of an N-Quads body do; its namespace
    declarations are dropped, as a Turtle body's prefixes are."""
    if media_type(content_type) == BINARY_RDF:
        quads = binary_rdf_quads(body)
        return ox.serialize(quads, format=ox.RdfFormat.N_QUADS).decode(), ox.RdfFormat.N_QUADS
    fmt = rdf_format_of_body(content_type)
    return decode_text(body, content_type, "RDF data"), fmt


# ---------------------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------------------

_UPDATE_KEYWORDS = frozenset(
    {"INSERT", "DELETE", "LOAD", "CLEAR", "DROP", "CREATE", "ADD", "MOVE", "COPY", "WITH"})
_WORD = re.compile(r"[A-Za-z]+")
_PREFIX_NAME = re.compile(r"[^\s:]*:")


def sparql_keyword(text: str) -> str | None:
    """The first keyword after the prologue (BASE/PREFIX, comments), upper-cased:
    ``SELECT``, ``ASK``, ``INSERT``, ... — enough to tell a query from an update."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        else:
            m = _WORD.match(text, i)
            if not m:
                return None
            word = m.group().upper()
            i = m.end()
            if word not in ("BASE", "PREFIX"):
                return word
            if word == "PREFIX":
                while i < n and text[i].isspace():
                    i += 1
                p = _PREFIX_NAME.match(text, i)
                if not p:
                    return None
                i = p.end()
            j = text.find("<", i)
            k = text.find(">", j + 1) if j >= 0 else -1
            if k < 0:
                return None
            i = k + 1
    return None


def is_update(text: str) -> bool:
    return sparql_keyword(text) in _UPDATE_KEYWORDS


@dataclass(frozen=True)
class QueryRequest:
    """A validated query request; :meth:`query_kwargs` are ``ox.Store.query`` arguments."""

    query: str
    base_iri: str | None = None
    infer: bool = True  # accepted, ignored: the store does no inference
    default_graphs: tuple[ox.NamedNode | ox.DefaultGraph, ...] | None = None
    named_graphs: tuple[ox.NamedNode, ...] | None = None
    bindings: tuple[tuple[ox.Variable, Term], ...] = ()
    timeout_s: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.query, str) or not self.query.strip():
            raise ProtocolError(400, "missing parameter 'query'")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ProtocolError(400, "a query timeout must be positive")

    def query_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.base_iri is not None:
            kwargs["base_iri"] = self.base_iri
        # SPARQL 1.1 Protocol: when either dataset parameter is given, the dataset is
        # exactly what they name (an unnamed part is empty) and overrides FROM/FROM NAMED.
        if self.default_graphs is not None or self.named_graphs is not None:
            kwargs["default_graph"] = list(self.default_graphs or ())
            kwargs["named_graphs"] = list(self.named_graphs or ())
        if self.bindings:
            kwargs["substitutions"] = dict(self.bindings)
        return kwargs


def _dataset_graph(value: str, param: str) -> ox.NamedNode | ox.DefaultGraph:
    if value == "null":  # RDF4J: the default graph of the store
        return ox.DefaultGraph()
    return check_iri(value, f"parameter '{param}'")


def _mentions_variable(query: str, name: str) -> bool:
    return re.search(rf"[?$]{re.escape(name)}(?![\w\u00b7\u0300-\u036f\u203f\u2040])",
                     query) is not None


def parse_query_request(method: str, params: Params, body: bytes = b"",
                        content_type: str | None = None) -> QueryRequest:
    """A query sent by GET (URL parameters), POST form-encoded, or POST with an
    ``application/sparql-query`` body (other parameters then in the URL)."""
    method = method.upper()
    mtype = media_type(content_type)
    if method == "POST" and mtype == SPARQL_QUERY:
        query: str | None = decode_text(body, content_type, "query")
        if any(v != query for v in param_values(params, "query")):
            raise ProtocolError(400, "a query sent as application/sparql-query must not also "
                                     "have a different 'query' parameter")
    elif method == "POST" and mtype not in (FORM, "") and body:
        raise ProtocolError(415, f"unsupported Content-Type '{mtype}' for a query: send "
                                 f"{FORM} or {SPARQL_QUERY}")
    else:
        query = single_param(params, "query")
    if query is None or not query.strip():
        if param_values(params, "update"):
            raise ProtocolError(400, "this is the query endpoint: send SPARQL updates to "
                                     "/repositories/{id}/statements")
        raise ProtocolError(400, "missing parameter 'query'")
    language = single_param(params, "queryLn")
    if language is not None and language.lower() != "sparql":
        raise ProtocolError(400, f"UNSUPPORTED QUERY LANGUAGE: '{language}' (only sparql)")
    base = single_param(params, "baseURI")
    if base:
        check_iri(base, "parameter 'baseURI'")
    infer = bool_param(params, "infer", True)
    defaults = param_values(params, "default-graph-uri")
    named = param_values(params, "named-graph-uri")
    default_graphs = named_graphs = None
    if defaults or named:
        default_graphs = tuple(_dataset_graph(v, "default-graph-uri") for v in defaults)
        named_graphs = tuple(check_iri(v, "parameter 'named-graph-uri'") for v in named)
    timeout_s = None
    raw_timeout = single_param(params, "timeout")
    if raw_timeout not in (None, ""):
        try:
            timeout_s = float(raw_timeout)  # type: ignore[arg-type]
        except ValueError:
            raise ProtocolError(400, f"parameter 'timeout' must be a number of seconds, "
                                     f"got '{raw_timeout}'") from None
        if timeout_s < 0 or timeout_s != timeout_s:
            raise ProtocolError(400, f"parameter 'timeout' must not be negative, "
                                     f"got '{raw_timeout}'")
        timeout_s = timeout_s or None  # RDF4J: 0 means no limit
    bindings = []
    for key, value in params:
        if key.startswith("$"):
            name = key[1:]
            try:
                variable = ox.Variable(name)
            except ValueError:
                raise ProtocolError(400, f"binding parameter '{key}' does not name a SPARQL "
                                         "variable") from None
            term = decode_value(value, key)
            # RDF4J ignores bindings of variables the query does not use; pyoxigraph
            # refuses them, so drop those that cannot occur in the text at all.
            if _mentions_variable(query, name):
                bindings.append((variable, term))
    return QueryRequest(query=query, base_iri=base or None, infer=infer,
                        default_graphs=default_graphs, named_graphs=named_graphs,
                        bindings=tuple(bindings), timeout_s=timeout_s)


# ---------------------------------------------------------------------------------------
# Statement patterns (GET /statements, /size, graph store reads)
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatementPattern:
    """``None`` is a wildcard; ``contexts=None`` is every graph, ``()`` is no graph."""

    subject: ox.NamedNode | ox.BlankNode | None = None
    predicate: ox.NamedNode | None = None
    object: Term | None = None
    contexts: tuple[GraphName, ...] | None = None
    infer: bool = True

    def graph_names(self) -> list[GraphName | None]:
        """``graph_name`` arguments for ``Store.quads_for_pattern`` (one call each)."""
        if self.contexts is None:
            return [None]
        return list(dict.fromkeys(self.contexts))  # a context named twice is read once


def parse_statement_pattern(params: Params) -> StatementPattern:
    subj = single_param(params, "subj")
    pred = single_param(params, "pred")
    obj = single_param(params, "obj")
    return StatementPattern(
        subject=None if subj is None else decode_resource(subj, "subj"),
        predicate=None if pred is None else decode_iri(pred, "pred"),
        object=None if obj is None else decode_value(obj, "obj"),
        contexts=decode_contexts(params),
        infer=bool_param(params, "infer", True),
    )


# ---------------------------------------------------------------------------------------
# Writes -> transaction operations (JSON wire form)
# ---------------------------------------------------------------------------------------


def update_operation(update: str, base_iri: str | None = None,
                     using: Sequence[tuple[bool, str]] = ()) -> dict:
    """``using``: the protocol's dataset for the update's WHERE, (named, IRI) pairs from
    ``using-graph-uri`` (False) and ``using-named-graph-uri`` (True)."""
    if not isinstance(update, str) or not update.strip():
        raise ProtocolError(400, "missing SPARQL update")
    if base_iri is not None:
        check_iri(base_iri, "base IRI")
    op: dict = {"type": "update", "update": update, "base_iri": base_iri}
    if using:
        op["using"] = [[named, f"<{check_iri(iri, 'using graph').value}>"]
                       for named, iri in using]
    return op


def check_rdf(data: str, fmt: ox.RdfFormat, base_iri: str | None = None) -> None:
    """Refuse an RDF document that does not parse (400 MALFORMED DATA with the reason)."""
    try:
        for _ in ox.parse(data, format=fmt, base_iri=base_iri):
            pass
    except SyntaxError as exc:
        raise ProtocolError(400, f"MALFORMED DATA: {exc}") from None


def add_operation(data: str, fmt: ox.RdfFormat,
                  contexts: Sequence[GraphName] | None = None,
                  base_iri: str | None = None, *, check: bool = True,
                  preserve_node_ids: bool = False) -> dict:
    """Add the statements of an RDF document; with ``contexts`` into those graphs.
    ``preserve_node_ids`` (RDF4J's ``preserveNodeId``) keeps the document's blank node
    labels instead of making each one a fresh node: a bulk loader that scoped its labels
    itself can then send one data set in several transactions, and send it again."""
    if base_iri is not None:
        check_iri(base_iri, "base IRI")
    if check:
        check_rdf(data, fmt, base_iri)
    op = {"type": "add", "data": data, "format": fmt.media_type,
          "contexts": encode_contexts(contexts), "base_iri": base_iri}
    if preserve_node_ids:
        op["preserve_node_ids"] = True
    return op


def remove_operation(subject: ox.NamedNode | ox.BlankNode | None = None,
                     predicate: ox.NamedNode | None = None, obj: Term | None = None,
                     contexts: Sequence[GraphName] | None = None) -> dict:
    """Remove the statements matching a pattern (``None`` matches anything)."""
    return {"type": "remove", "subject": encode_value(subject),
            "predicate": encode_value(predicate), "object": encode_value(obj),
            "contexts": encode_contexts(contexts)}


def clear_operation(contexts: Sequence[GraphName] | None = None) -> dict:
    """Remove every statement (of ``contexts``; of every graph when None)."""
    return remove_operation(contexts=contexts)


# PN_PREFIX ::= PN_CHARS_BASE ((PN_CHARS|'.')* PN_CHARS)?  (SPARQL 1.1 grammar [168])
_PN_CHARS_BASE = ("A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u037d\u037f-\u1fff"
                  "\u200c\u200d\u2070-\u218f\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf"
                  "\ufdf0-\ufffd\U00010000-\U000effff")
_PN_CHARS = _PN_CHARS_BASE + "_\\-0-9\u00b7\u0300-\u036f\u203f\u2040"
_PN_PREFIX = re.compile(f"(?:[{_PN_CHARS_BASE}](?:[{_PN_CHARS}.]*[{_PN_CHARS}])?)?")


def namespace_operation(prefix: str, namespace: str | None) -> dict:
    """Declare (or with ``None`` remove) a namespace prefix."""
    if not _PN_PREFIX.fullmatch(prefix):
        raise ProtocolError(400, f"'{prefix}' is not a valid namespace prefix")
    if namespace is not None:
        namespace = namespace.strip()
        if not namespace:
            raise ProtocolError(400, f"missing namespace IRI for prefix '{prefix}'")
        check_iri(namespace, "namespace")
    return {"type": "namespace", "prefix": prefix, "namespace": namespace}


def clear_namespaces_operation() -> dict:
    return {"type": "clear_namespaces"}


# RDF4J's own extensions for the templates' graphs: not supported.
_UNSUPPORTED_UPDATE_PARAMS = ("insert-graph-uri", "remove-graph-uri")


def _update_from(params: Params, body: bytes, content_type: str | None) -> dict | None:
    """An update op when the request carries a SPARQL update, else None."""
    mtype = media_type(content_type)
    if mtype == SPARQL_UPDATE:
        if param_values(params, "update"):
            raise ProtocolError(400, "an update sent as application/sparql-update must not "
                                     "also have an 'update' parameter")
        text = decode_text(body, content_type, "update")
    else:
        text = single_param(params, "update")
        if text is None:
            return None
    for name in _UNSUPPORTED_UPDATE_PARAMS:
        if param_values(params, name):
            raise ProtocolError(400, f"parameter '{name}' is not supported: state the "
                                     "dataset in the update itself (USING, WITH)")
    bool_param(params, "infer", True)
    base = single_param(params, "baseURI") or None
    if not text.strip():
        raise ProtocolError(400, "missing SPARQL update")
    keyword = sparql_keyword(text)
    if keyword in ("SELECT", "ASK", "CONSTRUCT", "DESCRIBE"):
        raise ProtocolError(400, f"a {keyword} query is not an update: send queries to "
                                 "/repositories/{id}")
    # SPARQL 1.1 Protocol 2.2.3: the update's dataset from the request.
    using = [(False, iri) for iri in param_values(params, "using-graph-uri")] + \
        [(True, iri) for iri in param_values(params, "using-named-graph-uri")]
    return update_operation(text, base, using)


def _add_from(params: Params, body: bytes, content_type: str | None,
              contexts: Sequence[GraphName] | None = None) -> dict:
    mtype = media_type(content_type)
    if mtype == FORM:
        raise ProtocolError(400, "a form-encoded write needs an 'update' parameter")
    data, fmt = rdf_body(body, content_type)
    if contexts is None:
        contexts = decode_contexts(params)
    # N-Quads made from a Binary RDF body are valid by construction: not parsed again.
    return add_operation(data, fmt, contexts, single_param(params, "baseURI") or None,
                         check=mtype != BINARY_RDF,
                         preserve_node_ids=bool_param(params, "preserveNodeId", False))


def statements_write(method: str, params: Params, body: bytes = b"",
                     content_type: str | None = None) -> list[dict]:
    """``POST|PUT|DELETE /repositories/{id}/statements`` as operations.

    POST: a SPARQL update (``update=`` form parameter or an application/sparql-update
    body, the SPARQL 1.1 Protocol update form) or an RDF body to add (into the
    ``context`` graphs if given). PUT: replace the ``context`` graphs (everything when no
    context) by the RDF body. DELETE: remove what matches ``subj``/``pred``/``obj``/
    ``context`` (everything when no filter)."""
    method = method.upper()
    if method == "POST":
        op = _update_from(params, body, content_type)
        return [op] if op is not None else [_add_from(params, body, content_type)]
    if method == "PUT":
        contexts = decode_contexts(params)
        add = _add_from(params, body, content_type, contexts)
        return [clear_operation(contexts), add]
    if method == "DELETE":
        p = parse_statement_pattern(params)
        return [remove_operation(p.subject, p.predicate, p.object, p.contexts)]
    raise ProtocolError(405, f"method {method} is not allowed on statements")


def namespace_write(method: str, prefix: str, body: bytes = b"",
                    content_type: str | None = None) -> list[dict]:
    """``PUT /namespaces/{prefix}`` (body: the namespace IRI) or ``DELETE``."""
    method = method.upper()
    if method == "PUT":
        return [namespace_operation(prefix, decode_text(body, content_type, "namespace"))]
    if method == "DELETE":
        return [namespace_operation(prefix, None)]
    raise ProtocolError(405, f"method {method} is not allowed on a namespace")


def graph_store_target(params: Params) -> GraphName:
    """The graph of ``/rdf-graphs/service``: ``?graph=<absolute IRI>`` or ``?default``
    (``graph=default`` is taken as the default graph too)."""
    graph = single_param(params, "graph")
    has_default = bool(param_values(params, "default"))
    if has_default and graph is not None:
        raise ProtocolError(400, "give either 'graph' or 'default', not both")
    if has_default or graph == "default":
        return ox.DefaultGraph()
    if graph is None:
        raise ProtocolError(400, "missing parameter 'graph' (or 'default')")
    return check_iri(graph, "parameter 'graph'")


def graph_store_write(method: str, graph: GraphName, params: Params, body: bytes = b"",
                      content_type: str | None = None) -> list[dict]:
    """SPARQL 1.1 Graph Store Protocol writes: PUT replaces, POST merges, DELETE drops."""
    method = method.upper()
    contexts = [graph]
    if method == "PUT":
        return [clear_operation(contexts), _add_from(params, body, content_type, contexts)]
    if method == "POST":
        return [_add_from(params, body, content_type, contexts)]
    if method == "DELETE":
        return [clear_operation(contexts)]
    raise ProtocolError(405, f"method {method} is not allowed on a graph")


def remove_statements_operations(data: str, fmt: ox.RdfFormat,
                                 contexts: Sequence[GraphName] | None = None,
                                 base_iri: str | None = None) -> list[dict]:
    """The removals of an RDF document (a transaction's DELETE with a body): see
    :func:`remove_quads_operations`."""
    try:
        quads = list(ox.parse(data, format=fmt, base_iri=base_iri))
    except SyntaxError as exc:
        raise ProtocolError(400, f"MALFORMED DATA: {exc}") from None
    return remove_quads_operations(quads, contexts)


# RDF4J's special values in the statements of a removal. HTTPRepositoryConnection
# (removeWithoutCommit) writes a null subject, predicate or object of remove(s, p, o, c...)
# as sesame:wildcard, and since RDF4J 4.1.1 (GH-4126) a null context (the default graph)
# as rdf4j:nil; the server's Transaction.WildcardRDFRemover reads them back.
WILDCARD = ox.NamedNode(binary_rdf.SESAME_WILDCARD)
NIL_CONTEXTS = frozenset({ox.NamedNode(binary_rdf.RDF4J_NIL),
                          ox.NamedNode(binary_rdf.SESAME_NIL)})


def remove_quads_operations(quads: Iterable[ox.Quad],
                            contexts: Sequence[GraphName] | None = None) -> list[dict]:
    """One remove per statement of a removal document, with RDF4J's semantics
    (tools/server-spring .../transaction/Transaction.java, WildcardRDFRemover):

    * ``sesame:wildcard`` as subject, predicate or object matches any value (all three: the
      context is cleared, as RDF4J's ``clear``);
    * a statement without context is removed from every graph;
    * the context ``rdf4j:nil`` or ``sesame:nil`` is the default graph only;
    * any other context: that graph only.

    ``contexts`` (the request's ``context`` parameters), when given, replace every
    statement's own context."""
    ops = []
    for q in quads:
        s, p, o, g = q.subject, q.predicate, q.object, q.graph_name
        if isinstance(s, ox.Triple) or isinstance(o, ox.Triple):
            raise ProtocolError(400, "MALFORMED DATA: RDF-star statements are not supported")
        graphs: Sequence[GraphName] | None = contexts
        if graphs is None and not isinstance(g, ox.DefaultGraph):
            graphs = [ox.DefaultGraph() if g in NIL_CONTEXTS else g]
        ops.append(remove_operation(None if s == WILDCARD else s,
                                    None if p == WILDCARD else p,
                                    None if o == WILDCARD else o, graphs))
    return ops


# ---------------------------------------------------------------------------------------
# RDF4J transactions (/repositories/{id}/transactions)
# ---------------------------------------------------------------------------------------

TRANSACTION_ACTIONS = frozenset(
    {"ADD", "DELETE", "UPDATE", "COMMIT", "ROLLBACK", "PING", "PREPARE", "GET", "EXPORT",
     "SIZE", "QUERY"})
# Actions that change the pending transaction's operations.
WRITE_ACTIONS = frozenset({"ADD", "DELETE", "UPDATE"})
# Reads inside a transaction: they see the committed state plus the transaction's own
# pending operations (RDF4J's TransactionController: SIZE, GET, QUERY; EXPORT is taken as
# GET, the statements export some clients name so). The HTTP shells answer them.
READ_ACTIONS = frozenset({"GET", "EXPORT", "SIZE", "QUERY"})
# Default idle time after which an open transaction is forgotten (both node kinds;
# key transaction-idle-timeout-s). RDF4J's server forgets after 60 s and its client pings
# to keep a transaction alive; a longer default spares clients that do not ping.
TRANSACTION_IDLE_S = 600.0


@dataclass(frozen=True)
class TransactionStep:
    """One request on an open transaction: its action and the operations it adds."""

    action: str
    operations: tuple[dict, ...] = ()

    def __post_init__(self) -> None:
        if self.action not in TRANSACTION_ACTIONS:
            raise ProtocolError(400, f"unknown transaction action '{self.action}' (one of "
                                     f"{', '.join(sorted(TRANSACTION_ACTIONS))})")


def parse_transaction_step(params: Params, body: bytes = b"",
                           content_type: str | None = None) -> TransactionStep:
    """``PUT|POST /transactions/{txid}?action=...`` as a step.

    ADD: RDF body (``context``, ``baseURI``). DELETE: an RDF body of statements to remove,
    or ``subj``/``pred``/``obj``/``context`` filters. UPDATE: ``update=`` or an
    application/sparql-update body."""
    raw = single_param(params, "action")
    if raw is None:
        raise ProtocolError(400, "missing parameter 'action'")
    action = raw.upper()
    if action not in TRANSACTION_ACTIONS:
        TransactionStep(action)  # raises with the list of actions
    if action == "ADD":
        return TransactionStep(action, (_add_from(params, body, content_type),))
    if action == "UPDATE":
        op = _update_from(params, body, content_type)
        if op is None:
            raise ProtocolError(400, "transaction action UPDATE needs an 'update' parameter "
                                     "or an application/sparql-update body")
        return TransactionStep(action, (op,))
    if action == "DELETE":
        mtype = media_type(content_type)
        if body and mtype not in ("", FORM):
            if mtype == BINARY_RDF:
                ops = remove_quads_operations(binary_rdf_quads(body), decode_contexts(params))
                return TransactionStep(action, tuple(ops))
            fmt = rdf_format_of_body(content_type)
            data = decode_text(body, content_type, "RDF data")
            ops = remove_statements_operations(data, fmt, decode_contexts(params),
                                               single_param(params, "baseURI") or None)
            return TransactionStep(action, tuple(ops))
        p = parse_statement_pattern(params)
        return TransactionStep(action, (remove_operation(p.subject, p.predicate, p.object,
                                                         p.contexts),))
    return TransactionStep(action)


@dataclass
class PendingTransaction:
    """The operations of an open RDF4J transaction, run as one transaction on COMMIT.

    Mutable on purpose (one per open transaction, owned by the HTTP shell under its lock);
    once committed or rolled back it refuses further steps."""

    id: str
    operations: list[dict] = field(default_factory=list)
    closed: bool = False

    def record(self, step: TransactionStep) -> list[dict] | None:
        """Apply one step: the operations to execute now (on COMMIT), else None."""
        if self.closed:
            raise ProtocolError(409, f"transaction '{self.id}' is already closed")
        if step.action in WRITE_ACTIONS:
            self.operations.extend(step.operations)
            return None
        if step.action == "COMMIT":
            self.closed = True
            return list(self.operations)
        if step.action == "ROLLBACK":
            self.rollback()
            return None
        return None  # PING, PREPARE, reads (answered by the shell): nothing to record

    def rollback(self) -> None:
        self.closed = True
        self.operations.clear()


class TransactionRegistry:
    """The open RDF4J transactions of one endpoint (master or worker), thread-safe.

    A transaction no client touched for ``idle_s`` is forgotten (a client that died
    between BEGIN and COMMIT must not keep its operations in memory for ever); the next
    step on it is a 404 naming it. ``clock`` is a value source, for tests."""

    def __init__(self, idle_s: float = TRANSACTION_IDLE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._open: dict[str, tuple[PendingTransaction, float]] = {}
        self._lock = threading.Lock()
        self._idle_s = idle_s
        self._clock = clock

    def __len__(self) -> int:
        return len(self._open)

    @property
    def idle_s(self) -> float:
        return self._idle_s

    def _forget_idle(self, now: float) -> list[str]:
        forgotten = []
        for txid, (_, touched) in list(self._open.items()):
            if now - touched > self._idle_s:
                log.warning("forgetting RDF4J transaction %s: idle for %.0f s", txid,
                            now - touched)
                del self._open[txid]
                forgotten.append(txid)
        return forgotten

    def sweep(self) -> list[str]:
        """Forget the transactions idle for too long (run periodically, so that an
        abandoned one does not wait for the next request); their ids."""
        with self._lock:
            return self._forget_idle(self._clock())

    def pending(self, tx: PendingTransaction) -> list[dict]:
        """The operations ``tx`` has recorded so far, for a read inside it; the read
        counts as activity (keeps the transaction from being forgotten)."""
        with self._lock:
            if tx.closed:
                raise ProtocolError(409, f"transaction '{tx.id}' is already closed")
            self._open[tx.id] = (tx, self._clock())
            return list(tx.operations)

    def begin(self) -> str:
        txid = uuid.uuid4().hex
        with self._lock:
            now = self._clock()
            self._forget_idle(now)
            self._open[txid] = (PendingTransaction(txid), now)
        return txid

    def get(self, txid: str, rollback: bool = False) -> PendingTransaction:
        """The open transaction ``txid`` (ProtocolError 404 if unknown or forgotten);
        ``rollback``: also close and forget it (DELETE)."""
        with self._lock:
            self._forget_idle(self._clock())
            entry = self._open.get(txid)
            if entry is None:
                raise ProtocolError(404, f"unknown transaction '{txid}'")
            if rollback:
                del self._open[txid]
                entry[0].rollback()
            return entry[0]

    def record(self, tx: PendingTransaction, step: TransactionStep) -> list[dict] | None:
        """Apply one step (PendingTransaction.record); a closed transaction is forgotten."""
        with self._lock:
            to_execute = tx.record(step)
            if tx.closed:
                self._open.pop(tx.id, None)
            else:
                self._open[tx.id] = (tx, self._clock())
            return to_execute


def transaction_location(transactions_url: str, txid: str) -> str:
    """The ``Location`` of a new transaction, below ``.../transactions``."""
    return f"{transactions_url.rstrip('/')}/{txid}"


# ---------------------------------------------------------------------------------------
# Writing SPARQL results for the RDF4J listings (repositories, contexts, namespaces)
# ---------------------------------------------------------------------------------------

Row = Sequence[Term | None]


def _json_term(term: Term) -> dict:
    if isinstance(term, ox.NamedNode):
        return {"type": "uri", "value": term.value}
    if isinstance(term, ox.BlankNode):
        return {"type": "bnode", "value": term.value}
    out = {"type": "literal", "value": term.value}
    if term.language:
        out["xml:lang"] = term.language
    elif term.datatype.value != XSD_STRING:
        out["datatype"] = term.datatype.value
    return out


def _xml_term(term: Term) -> str:
    if isinstance(term, ox.NamedNode):
        return f"<uri>{escape(term.value)}</uri>"
    if isinstance(term, ox.BlankNode):
        return f"<bnode>{escape(term.value)}</bnode>"
    if term.language:
        attr = f" xml:lang={quoteattr(term.language)}"
    elif term.datatype.value not in (XSD_STRING, RDF_LANG_STRING):
        attr = f" datatype={quoteattr(term.datatype.value)}"
    else:
        attr = ""
    return f"<literal{attr}>{escape(term.value)}</literal>"


def _csv_field(term: Term | None) -> str:
    if term is None:
        return ""
    text = f"_:{term.value}" if isinstance(term, ox.BlankNode) else term.value
    if any(c in text for c in ',"\r\n'):
        text = '"' + text.replace('"', '""') + '"'
    return text


def serialize_table(variables: Sequence[str], rows: Iterable[Row],
                    fmt: ox.QueryResultsFormat | str) -> bytes:
    """SPARQL SELECT results of a small table built in Python (not from a query); ``fmt``
    may also be BINARY_RESULTS (RDF4J's binary table)."""
    rows = list(rows)
    for row in rows:
        if len(row) != len(variables):
            raise ValueError("every row needs one value (or None) per variable")
    if fmt == BINARY_RESULTS:
        return binary_rdf.write_results(variables, rows)
    if fmt == ox.QueryResultsFormat.JSON:
        bindings = [{v: _json_term(t) for v, t in zip(variables, row, strict=True)
                     if t is not None} for row in rows]
        doc = {"head": {"vars": list(variables)}, "results": {"bindings": bindings}}
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode()
    if fmt == ox.QueryResultsFormat.XML:
        out = ['<?xml version="1.0"?><sparql xmlns="http://www.w3.org/2005/sparql-results#">',
               "<head>", *(f"<variable name={quoteattr(v)}/>" for v in variables),
               "</head><results>"]
        for row in rows:
            out.append("<result>")
            out.extend(f"<binding name={quoteattr(v)}>{_xml_term(t)}</binding>"
                       for v, t in zip(variables, row, strict=True) if t is not None)
            out.append("</result>")
        out.append("</results></sparql>")
        return "".join(out).encode()
    if fmt == ox.QueryResultsFormat.CSV:
        lines = [",".join(variables)] + [",".join(_csv_field(t) for t in r) for r in rows]
        return ("\r\n".join(lines) + "\r\n").encode()
    if fmt == ox.QueryResultsFormat.TSV:
        lines = ["\t".join(f"?{v}" for v in variables)]
        lines += ["\t".join("" if t is None else str(t) for t in r) for r in rows]
        return ("\n".join(lines) + "\n").encode()
    raise ValueError(f"unsupported results format {fmt}")


def serialize_boolean(value: bool, negotiated: Negotiated) -> bytes:
    if negotiated.format == BOOLEAN_TEXT:
        return b"true" if value else b"false"
    fmt = negotiated.format
    if fmt == ox.QueryResultsFormat.JSON:
        return b'{"head":{},"boolean":true}' if value else b'{"head":{},"boolean":false}'
    if fmt == ox.QueryResultsFormat.XML:
        word = "true" if value else "false"
        return (f'<?xml version="1.0"?><sparql xmlns="http://www.w3.org/2005/sparql-results#">'
                f"<head></head><boolean>{word}</boolean></sparql>").encode()
    return b"true" if value else b"false"  # CSV and TSV, as pyoxigraph writes them


def boolean_literal(value: bool) -> ox.Literal:
    return ox.Literal("true" if value else "false", datatype=ox.NamedNode(XSD_BOOLEAN))


REPOSITORY_LIST_VARIABLES = ("uri", "id", "title", "readable", "writable")


def repository_list_rows(repositories_url: str,
                         repositories: Iterable[tuple[str, str, bool, bool]]) -> list[Row]:
    """Rows of ``GET /repositories``: (id, title, readable, writable) per repository."""
    base = repositories_url.rstrip("/")
    return [(ox.NamedNode(f"{base}/{rid}"), ox.Literal(rid), ox.Literal(title),
             boolean_literal(readable), boolean_literal(writable))
            for rid, title, readable, writable in repositories]


def namespace_rows(namespaces: dict[str, str]) -> list[Row]:
    return [(ox.Literal(p), ox.Literal(ns)) for p, ns in sorted(namespaces.items())]
