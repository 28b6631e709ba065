"""A transaction's operations from the JSON wire form a master sends (a list of objects
``{"type": "update" | "add" | "remove" | "namespace" | "clear_namespaces", ...}``), every
one validated and parsed (SPARQL and RDF syntax included) before anything runs.

RDF4J terms travel N-Triples encoded (``<iri>``, ``_:b``, ``"lit"@en``), contexts as
such terms or ``null`` (the default graph).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pyoxigraph as ox

from rdfcore.canonical import GraphName, canonical_term
from worker_service.operations import (
    AddOperation,
    ClearNamespacesOperation,
    NamespaceOperation,
    Operation,
    RemoveOperation,
)
from worker_service.transaction import TransactionError, UnsupportedFormat, UpdateSyntaxError
from worker_service.update_parsing import check_absolute_iri, parse_update

_DEFAULT = ox.DefaultGraph()

# PN_PREFIX ::= PN_CHARS_BASE ((PN_CHARS|'.')* PN_CHARS)?  (SPARQL 1.1 grammar [168])
_PN_CHARS_BASE = ("A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u037d\u037f-\u1fff"
                  "\u200c\u200d\u2070-\u218f\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf"
                  "\ufdf0-\ufffd\U00010000-\U000effff")
_PN_CHARS = _PN_CHARS_BASE + "_\\-0-9\u00b7\u0300-\u036f\u203f\u2040"
_PN_PREFIX = re.compile(f"(?:[{_PN_CHARS_BASE}](?:[{_PN_CHARS}.]*[{_PN_CHARS}])?)?")


def _parse_nt_term(value: Any, what: str) -> Any:
    """One RDF4J N-Triples encoded value (``<iri>``, ``_:b``, ``"lit"@en``, ...)."""
    if not isinstance(value, str):
        raise UpdateSyntaxError(f"{what} must be an N-Triples encoded string, got {value!r}")
    try:
        [triple] = list(ox.parse(f"<urn:x-txcluster:s> <urn:x-txcluster:p> {value} .",
                                 format=ox.RdfFormat.N_TRIPLES))
    except (SyntaxError, ValueError) as exc:
        raise UpdateSyntaxError(
            f"{what} is not one N-Triples encoded term: {value!r} ({exc})") from None
    return triple.object


def _parse_context(value: Any, what: str) -> GraphName:
    if value == "null":
        return _DEFAULT
    term = _parse_nt_term(value, what)
    if type(term) not in (ox.NamedNode, ox.BlankNode):
        raise UpdateSyntaxError(f"{what} must be <iri>, _:label or null, got {value!r}")
    return term  # type: ignore[no-any-return]


def _parse_contexts(value: Any) -> tuple[GraphName, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise UpdateSyntaxError(
            f"'contexts' must be null (every graph / as in the data) or a non-empty list, "
            f"got {value!r}")
    return tuple(dict.fromkeys(_parse_context(v, f"context {v!r}") for v in value))


def _fields(item: Mapping[str, Any], required: tuple[str, ...],
            optional: tuple[str, ...] = ()) -> None:
    missing = [k for k in required if k not in item]
    if missing:
        raise UpdateSyntaxError(f"missing field(s) {', '.join(missing)}")
    unknown = sorted(set(item) - {"type", *required, *optional})
    if unknown:
        raise UpdateSyntaxError(f"unknown field(s) {', '.join(unknown)}")


def _parse_add(item: Mapping[str, Any]) -> AddOperation:
    _fields(item, ("data", "format"), ("contexts", "base_iri", "preserve_node_ids"))
    data, fmt_text = item["data"], item["format"]
    if not isinstance(data, str):
        raise UpdateSyntaxError("'data' must be a string")
    if not isinstance(fmt_text, str):
        raise UpdateSyntaxError("'format' must be a media type string")
    fmt = ox.RdfFormat.from_media_type(fmt_text)
    if fmt is None:
        raise UnsupportedFormat(f"unsupported RDF format '{fmt_text}'")
    base_iri = item.get("base_iri")
    if base_iri is not None:
        check_absolute_iri(base_iri, "base_iri")
    contexts = _parse_contexts(item.get("contexts"))
    preserve = item.get("preserve_node_ids", False)
    if not isinstance(preserve, bool):
        raise UpdateSyntaxError("'preserve_node_ids' must be true or false")
    try:
        # Labels as written: scope markers, replaced by minted ones unless preserved.
        quads = tuple(ox.parse(data, format=fmt, base_iri=base_iri))
    except (SyntaxError, ValueError) as exc:
        raise UpdateSyntaxError(f"invalid {fmt.name} data: {exc}") from None
    return AddOperation(data, fmt.media_type, contexts, base_iri, quads, preserve)


def _parse_remove(item: Mapping[str, Any]) -> RemoveOperation:
    _fields(item, (), ("subject", "predicate", "object", "contexts"))
    s = p = o = None
    if item.get("subject") is not None:
        s = _parse_nt_term(item["subject"], "subject")
        if type(s) not in (ox.NamedNode, ox.BlankNode):
            raise UpdateSyntaxError(f"subject must be an IRI or a blank node: {item['subject']}")
    if item.get("predicate") is not None:
        p = _parse_nt_term(item["predicate"], "predicate")
        if type(p) is not ox.NamedNode:
            raise UpdateSyntaxError(f"predicate must be an IRI: {item['predicate']}")
    if item.get("object") is not None:
        o = canonical_term(_parse_nt_term(item["object"], "object"))
    return RemoveOperation(s, p, o, _parse_contexts(item.get("contexts")))


def _parse_namespace(item: Mapping[str, Any]) -> NamespaceOperation:
    _fields(item, ("prefix", "namespace"))
    prefix, namespace = item["prefix"], item["namespace"]
    if not isinstance(prefix, str) or not _PN_PREFIX.fullmatch(prefix):
        raise UpdateSyntaxError(f"'{prefix}' is not a valid namespace prefix (PN_PREFIX)")
    if namespace is not None:
        check_absolute_iri(namespace, "namespace")
    return NamespaceOperation(prefix, namespace)


def _parse_using(wire: Any) -> tuple[tuple[bool, str], ...]:
    """An update's protocol dataset: ``[[named, "<iri>"], ...]`` (rdf4j.py writes it)."""
    if wire is None:
        return ()
    if not isinstance(wire, list) or not all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], bool)
            and isinstance(e[1], str) for e in wire):
        raise UpdateSyntaxError("'using' must be a list of [named, \"<iri>\"] pairs")
    for _named, iri in wire:
        if not (iri.startswith("<") and iri.endswith(">")):
            raise UpdateSyntaxError(f"'using' graph {iri!r} must be an IRI in <>")
        check_absolute_iri(iri[1:-1], "using graph")
    return tuple((named, iri) for named, iri in wire)


def _parse_one(item: Any) -> Operation:
    if not isinstance(item, Mapping):
        raise UpdateSyntaxError(f"an operation must be a JSON object, got {type(item).__name__}")
    kind = item.get("type")
    if kind == "update":
        _fields(item, ("update",), ("base_iri", "using"))
        return parse_update(item["update"], item.get("base_iri"),
                            _parse_using(item.get("using")))
    if kind == "add":
        return _parse_add(item)
    if kind == "remove":
        return _parse_remove(item)
    if kind == "namespace":
        return _parse_namespace(item)
    if kind == "clear_namespaces":
        _fields(item, ())
        return ClearNamespacesOperation()
    raise UpdateSyntaxError(
        f"unknown operation type {kind!r} (expected update, add, remove, namespace or "
        "clear_namespaces)")


def parse_operations(wire: list) -> list[Operation]:
    """Validate and parse every operation of a transaction (SPARQL and RDF syntax
    included) before anything runs; errors name the operation (1-based)."""
    if not isinstance(wire, list):
        raise UpdateSyntaxError(
            f"a transaction's operations must be a JSON list, got {type(wire).__name__}")
    ops: list[Operation] = []
    for index, item in enumerate(wire, 1):
        try:
            ops.append(_parse_one(item))
        except TransactionError as exc:
            label = item.get("type") if isinstance(item, Mapping) else None
            where = f"operation {index}" + (f" ({label})" if isinstance(label, str) else "")
            raise type(exc)(f"{where}: {exc.message}", exc.status) from None
    return ops
