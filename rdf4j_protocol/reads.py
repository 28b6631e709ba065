"""Reads of the RDF4J REST protocol as typed values: a :class:`QueryRequest` (query text,
dataset, bindings, timeout) or a :class:`StatementPattern` (``subj``/``pred``/``obj``/
``context`` filters). What runs them is the node's backend (rdf4j_protocol.routes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyoxigraph as ox

from rdf4j_protocol.parameters import (
    FORM,
    SPARQL_QUERY,
    ProtocolError,
    bool_param,
    check_iri,
    decode_contexts,
    decode_iri,
    decode_resource,
    decode_text,
    decode_value,
    media_type,
    param_values,
    single_param,
)

if TYPE_CHECKING:  # annotations only
    from rdf4j_protocol.parameters import GraphName, Params, Term

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
        if len(params) == 1 and params[0][0] == "query" and params[0][1].strip():
            # Nothing but the query (most requests): every other parameter's default.
            return QueryRequest(params[0][1])
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

