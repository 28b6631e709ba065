"""Content negotiation of the RDF4J REST protocol: the result format an Accept header
chooses, and the RDF format of a request body from its Content-Type.

RDF4J's binary formats (rdf4j_protocol.binary_rdf, rdf4j_protocol.binary_results) are
negotiated like the others, with ``Negotiated.format`` BINARY_RDF or BINARY_RESULTS; a
Binary RDF request body becomes an N-Quads document at this edge (:func:`rdf_body`), so
operations never carry binary data.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pyoxigraph as ox

from rdf4j_protocol import binary_rdf, binary_results
from rdf4j_protocol.parameters import (
    FORM,
    SPARQL_UPDATE,
    ProtocolError,
    decode_text,
    malformed_data,
    media_type,
)

BOOLEAN_TEXT = "text/boolean"  # RDF4J's plain "true"/"false" boolean result format
# RDF4J's binary formats, written and read by binary_rdf and binary_results, not pyoxigraph:
# as a Negotiated.format they are these media type strings (like BOOLEAN_TEXT).
BINARY_RDF = binary_rdf.MEDIA_TYPE  # application/x-binary-rdf (quads, namespaces)
BINARY_RESULTS = binary_results.MEDIA_TYPE  # application/x-binary-rdf-results-table


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
        """Written by binary_rdf / binary_results (RDF4J's binary formats), not by pyoxigraph."""
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
        raise malformed_data(str(exc)) from None


def rdf_body(body: bytes, content_type: str | None) -> tuple[str, ox.RdfFormat]:
    """A request body as RDF text and its pyoxigraph format. A Binary RDF body (RDF4J's
    ``application/x-binary-rdf``) becomes N-Quads text: everything downstream (the
    transaction log, the workers) sees an N-Quads document. Its blank nodes keep their ids
    as labels (one label per id, see rdf4j_protocol.binary_rdf), so they keep their identity
    within the request exactly as the labels of an N-Quads body do; its namespace
    declarations are dropped, as a Turtle body's prefixes are."""
    if media_type(content_type) == BINARY_RDF:
        quads = binary_rdf_quads(body)
        return ox.serialize(quads, format=ox.RdfFormat.N_QUADS).decode(), ox.RdfFormat.N_QUADS
    fmt = rdf_format_of_body(content_type)
    return decode_text(body, content_type, "RDF data"), fmt

