"""SPARQL results written in Python for the RDF4J listings (repositories, contexts,
namespaces) and for boolean answers; query results proper are written by the backend
(pyoxigraph's writers, or rdf4j_protocol.binary_results).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from xml.sax.saxutils import escape, quoteattr

import pyoxigraph as ox

from rdf4j_protocol import binary_results
from rdf4j_protocol.negotiation import BINARY_RESULTS, BOOLEAN_TEXT, Negotiated
from rdf4j_protocol.parameters import Term

Row = Sequence[Term | None]

XSD_STRING = "http://www.w3.org/2001/XMLSchema#string"
RDF_LANG_STRING = "http://www.w3.org/1999/02/22-rdf-syntax-ns#langString"
XSD_BOOLEAN = "http://www.w3.org/2001/XMLSchema#boolean"


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
        return binary_results.write_results(variables, rows)
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
