"""Writes of the RDF4J REST protocol as the cluster's transaction operations, in their JSON
wire form (plain dicts, what a master writes into its transaction log and a worker's
``execute_local`` runs):

  ``{"type": "update", "update": str, "base_iri": str | None}``
  ``{"type": "add", "data": str, "format": mime, "contexts": None | [enc, ...], "base_iri": ..}``
  ``{"type": "remove", "subject": enc | None, "predicate": .., "object": .., "contexts": ..}``
  ``{"type": "namespace", "prefix": str, "namespace": str | None}``
  ``{"type": "clear_namespaces"}``

where ``enc`` is an RDF4J N-Triples encoded value (``<iri>``, ``_:b``, ``"lit"@en``) and
the context ``"null"`` is the default graph; ``contexts: None`` means every graph.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import pyoxigraph as ox

from rdf4j_protocol import binary_rdf
from rdf4j_protocol.negotiation import BINARY_RDF, rdf_body
from rdf4j_protocol.parameters import (
    FORM,
    SPARQL_UPDATE,
    GraphName,
    Params,
    ProtocolError,
    Term,
    bool_param,
    check_iri,
    decode_contexts,
    decode_text,
    encode_contexts,
    encode_value,
    malformed_data,
    malformed_query,
    media_type,
    param_values,
    single_param,
)
from rdf4j_protocol.reads import parse_statement_pattern, sparql_keyword
from rdfcore import update_syntax


def update_operation(update: str, base_iri: str | None = None,
                     using: Sequence[tuple[bool, str]] = (), *, check: bool = True) -> dict:
    """``using``: the protocol's dataset for the update's WHERE, (named, IRI) pairs from
    ``using-graph-uri`` (False) and ``using-named-graph-uri`` (True). ``check``: refuse
    what no worker would run (:func:`check_update`) before it becomes an operation."""
    if not isinstance(update, str) or not update.strip():
        raise ProtocolError(400, "missing SPARQL update")
    if base_iri is not None:
        check_iri(base_iri, "base IRI")
    op: dict = {"type": "update", "update": update, "base_iri": base_iri}
    if using:
        op["using"] = [[named, f"<{check_iri(iri, 'using graph').value}>"]
                       for named, iri in using]
    if check:
        check_update(update, base_iri, [(named, iri) for named, iri in op.get("using", ())])
    return op


def check_update(update: str, base_iri: str | None = None,
                 using: Sequence[tuple[bool, str]] = ()) -> None:
    """The checks a worker's parse makes before it looks at data (rdfcore/update_syntax.py),
    made on a master before the update is logged, agreed or sent to a probe (issue 60):
    400 ``MALFORMED QUERY: <one line>`` for a syntax error, 400 for LOAD (never run in a
    cluster), 501 for a form txcluster cannot compute a changeset of. Costs one
    pyoxigraph parse of the text, nothing executed (bench/bench_update_check.py)."""
    try:
        update_syntax.check_update(update, base_iri, using)
    except update_syntax.UpdateSyntax as exc:
        raise malformed_query(exc.summary) from None
    except update_syntax.LoadRefused as exc:
        raise ProtocolError(400, str(exc), "not_supported") from None
    except update_syntax.UnsupportedForm as exc:
        raise ProtocolError(501, str(exc)) from None


def check_rdf(data: str, fmt: ox.RdfFormat, base_iri: str | None = None) -> None:
    """Refuse an RDF document that does not parse (400 MALFORMED DATA with the reason)."""
    try:
        for _ in ox.parse(data, format=fmt, base_iri=base_iri):
            pass
    except SyntaxError as exc:
        raise malformed_data(str(exc)) from None


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


def update_from(params: Params, body: bytes, content_type: str | None) -> dict | None:
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


def add_from(params: Params, body: bytes, content_type: str | None,
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
        op = update_from(params, body, content_type)
        return [op] if op is not None else [add_from(params, body, content_type)]
    if method == "PUT":
        contexts = decode_contexts(params)
        add = add_from(params, body, content_type, contexts)
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
        return [clear_operation(contexts), add_from(params, body, content_type, contexts)]
    if method == "POST":
        return [add_from(params, body, content_type, contexts)]
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
        raise malformed_data(str(exc)) from None
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
            raise malformed_data("RDF-star statements are not supported")
        graphs: Sequence[GraphName] | None = contexts
        if graphs is None and not isinstance(g, ox.DefaultGraph):
            graphs = [ox.DefaultGraph() if g in NIL_CONTEXTS else g]
        ops.append(remove_operation(None if s == WILDCARD else s,
                                    None if p == WILDCARD else p,
                                    None if o == WILDCARD else o, graphs))
    return ops

