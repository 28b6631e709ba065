"""Request parameters of the RDF4J REST protocol and the SPARQL 1.1 Protocol, without IO.

An HTTP shell hands over what it received (the query string, the body, the Content-Type);
this module gives back the parameters as (name, value) pairs and decodes RDF4J's
N-Triples encoded values (``subj``/``pred``/``obj``/``context`` and ``$var`` bindings).
Everything malformed raises :class:`ProtocolError` with the HTTP status to answer and a
message saying what is wrong.

Parameter names follow the RDF4J server (``queryLn``, ``infer``, ``baseURI``, ``subj``,
``pred``, ``obj``, ``context``, ``$var`` bindings, ``timeout`` in seconds, ``action`` for
transactions) and the SPARQL 1.1 Protocol (``query``, ``update``, ``default-graph-uri``,
``named-graph-uri``) and Graph Store Protocol (``graph``, ``default``). Unknown parameters
are ignored, as RDF4J does: SPARQLWrapper, for one, always sends ``format=``/``output=``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from urllib.parse import unquote

import pyoxigraph as ox

Params = Sequence[tuple[str, str]]
Term = ox.NamedNode | ox.BlankNode | ox.Literal
GraphName = ox.NamedNode | ox.BlankNode | ox.DefaultGraph

FORM = "application/x-www-form-urlencoded"
SPARQL_QUERY = "application/sparql-query"
SPARQL_UPDATE = "application/sparql-update"


class ProtocolError(Exception):
    """A request the protocol refuses: ``status`` is the HTTP status, ``message`` why;
    ``reason`` names the kind of refusal for a master's count of refused requests
    (``txcluster_requests_refused``)."""

    def __init__(self, status: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason or _REASONS.get(status, f"http_{status}")

    def __repr__(self) -> str:
        return f"ProtocolError({self.status}, {self.message!r})"


_REASONS = {400: "bad_request", 404: "not_found", 405: "method_not_allowed",
            406: "not_acceptable", 409: "conflict", 413: "too_large",
            415: "unsupported_media_type", 501: "not_supported"}
# RDF4J's server answers a body its parsers refuse with ErrorInfo's text,
# "MALFORMED QUERY: <message>" or "MALFORMED DATA: <message>" (http/protocol
# error/ErrorType), on one line here: a client shows it as the error's message.
_MESSAGE_CHARS = 300


def malformed_query(message: str) -> ProtocolError:
    """400 ``MALFORMED QUERY: <one line>``."""
    return ProtocolError(400, f"MALFORMED QUERY: {_one_line(message)}", "malformed_query")


def malformed_data(message: str) -> ProtocolError:
    """400 ``MALFORMED DATA: <one line>`` (an RDF document, Binary RDF included)."""
    return ProtocolError(400, f"MALFORMED DATA: {_one_line(message)}", "malformed_data")


def _one_line(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else "syntax error"
    return first if len(first) <= _MESSAGE_CHARS else first[:_MESSAGE_CHARS - 3] + "..."


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


def _unquote_plus(text: str) -> str:
    """``urllib.parse.unquote_plus(text, errors="strict")``. The %XX escapes are decoded by
    the C codec ``unicode_escape`` (each one written as \\xXX, every backslash of the text
    doubled first so that it stays one), ~4x faster than urllib's Python loop on a query
    sent fully escaped (4.4 -> 1.0 us for a point SELECT, a tenth of a worker's Python per
    point read). Text that is not ASCII (urllib keeps such characters as they are), and
    whatever that codec refuses (a ``%`` not followed by two hex digits, escapes that are
    not UTF-8) goes to urllib, which says why."""
    text = text.replace("+", " ")
    if "%" not in text or not text.isascii():
        return unquote(text, errors="strict")
    try:
        return (text.replace("\\", "\\\\").replace("%", "\\x").encode("latin-1")
                .decode("unicode_escape").encode("latin-1").decode("utf-8"))
    except UnicodeError:
        return unquote(text, errors="strict")


def form_pairs(text: str) -> list[tuple[str, str]]:
    """``urllib.parse.parse_qsl(text, keep_blank_values=True, errors="strict")``: fields
    split at ``&``, empty ones skipped, a field without ``=`` a name with an empty value."""
    pairs = []
    for field in text.split("&"):
        if field:
            name, _, value = field.partition("=")
            pairs.append((_unquote_plus(name), _unquote_plus(value)))
    return pairs


def parse_params(query_string: str | bytes, body: bytes = b"",
                 content_type: str | None = None) -> tuple[tuple[str, str], ...]:
    """The request parameters: URL query string, then a form-encoded body if there is one.

    Parsed here rather than by Starlette, whose form parser needs python-multipart even for
    URL-encoded bodies."""
    if isinstance(query_string, bytes):
        query_string = query_string.decode("latin-1")
    try:
        pairs = form_pairs(query_string)
        if body and media_type(content_type) == FORM:
            pairs += form_pairs(decode_text(body, content_type, "form body"))
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

