"""The Jolokia protocol (version 7) for the master's MBean, at ``/jolokia``.

Operators' scripts reach the MBean over HTTP through Jolokia
(docs/design/cluster-basics.md#the-clusterinfo-mbean-jolokia-and-the-admin-api). The
handler serves the same ``ClusterInfo`` object as the JVM bridge, so it works with or
without the JVM. Requests: GET ``/jolokia/<type>/<args...>`` (``read``, ``write``,
``exec``, ``list``, ``search``, ``version``) with Jolokia's escaping in path elements
(``!/`` for a slash inside an element, ``!!`` for ``!``), and POST of one JSON request
or a list of them (bulk). Each answer is Jolokia's envelope: ``value``, ``status``,
``timestamp``, ``request``; errors carry ``error_type`` and ``error`` instead of
``value``. Like Jolokia, errors of a request are in its envelope (the HTTP status stays
200), except authentication (401), which is the admin API's guard (api/guard.py): reads,
list, search and version need a user, write and exec a user with the write role.

``handle`` and ``parse_path`` are pure logic over the attribute table; ``jolokia_router``
is the thin FastAPI shell.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.convertors import PathConvertor, register_url_convertor
from starlette.responses import JSONResponse, Response

from master_service.api.guard import AdminGuard
from master_service.jmx.attributes import (
    ATTRIBUTES,
    DOMAIN,
    MBEAN_DESCRIPTION,
    OPERATIONS,
    ManagementError,
)
from master_service.jmx.clusterinfo import ClusterInfo
from txinfra import jsonbody

PROTOCOL = "7.2"
AGENT = "txcluster"
TYPES = ("read", "write", "exec", "list", "search", "version")
WRITE_TYPES = ("write", "exec")


class RequestError(Exception):
    """A malformed Jolokia request (status 400, java.lang.IllegalArgumentException)."""


class InstanceNotFound(Exception):
    """No MBean of that name (status 404, javax.management.InstanceNotFoundException)."""


# ---- the GET path ----


def split_path(path: str) -> list[str]:
    """Path elements, with Jolokia's escapes: ``!/`` a slash in an element, ``!!`` a ``!``."""
    parts: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(path):
        ch = path[i]
        if ch == "!" and i + 1 < len(path):
            current.append(path[i + 1])
            i += 2
            continue
        if ch == "/":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    parts.append("".join(current))
    return [p for p in parts if p != ""] if path.strip("/") else []


def parse_path(path: str, known_mbeans: list[str]) -> dict[str, Any]:
    """The JSON request a GET path stands for.

    An unescaped ``/`` inside the MBean name (``ClusterInfo/master1``) is accepted too:
    elements are joined back while they spell a known MBean name, so the spelling the
    issue and operators use (``/jolokia/read/ReplicationCluster:name=ClusterInfo/master1/
    Status``) works as well as Jolokia's ``ClusterInfo!/master1``.
    """
    parts = split_path(path)
    if not parts:
        return {"type": "version"}
    kind, args = parts[0].lower(), parts[1:]
    if kind not in TYPES:
        raise RequestError(f"unknown request type '{parts[0]}'; one of {', '.join(TYPES)}")
    if kind == "version":
        return {"type": "version"}
    if kind == "list":
        return {"type": "list", **({"path": "/".join(args)} if args else {})}
    if not args:
        raise RequestError(f"{kind} needs an MBean name")
    if kind == "search":
        return {"type": "search", "mbean": "/".join(args)}
    mbean, rest = args[0], args[1:]
    for i in range(1, len(args)):
        if mbean in known_mbeans:
            break
        candidate = "/".join(args[: i + 1])
        if any(m == candidate or m.startswith(candidate + "/") for m in known_mbeans):
            mbean, rest = candidate, args[i + 1:]
    request: dict[str, Any] = {"type": kind, "mbean": mbean}
    if kind == "read":
        if rest:
            request["attribute"] = rest[0]
            if len(rest) > 1:
                request["path"] = "/".join(rest[1:])
    elif kind == "write":
        if len(rest) < 2:
            raise RequestError("write needs /<mbean>/<attribute>/<value>")
        request["attribute"], request["value"] = rest[0], "/".join(rest[1:])
    else:  # exec
        if not rest:
            raise RequestError("exec needs /<mbean>/<operation>/<arguments...>")
        # Jolokia: "[null]" is null, an empty element is "" (here: "" when given as "").
        request["operation"] = rest[0]
        request["arguments"] = [None if a == "[null]" else ('' if a == '""' else a)
                                for a in rest[1:]]
    return request


# ---- search and list ----


def object_name_matches(pattern: str, name: str) -> bool:
    """JMX ObjectName pattern matching: ``*``/``?`` in the domain and in property values,
    ``*`` as a property-list wildcard (``ReplicationCluster:*``, ``*:name=ClusterInfo/*``)."""
    p_domain, sep, p_props = pattern.partition(":")
    domain, _, props = name.partition(":")
    if not sep or not fnmatch.fnmatchcase(domain, p_domain):
        return False
    have = dict(kv.split("=", 1) for kv in props.split(",") if "=" in kv)
    want = [kv for kv in p_props.split(",") if kv]
    wildcard = "*" in want
    pairs = [kv.split("=", 1) for kv in want if kv != "*"]
    if any(len(kv) != 2 for kv in pairs):
        return False
    if not wildcard and len(pairs) != len(have):
        return False
    return all(k in have and fnmatch.fnmatchcase(have[k], v) for k, v in pairs)


def mbean_listing() -> dict[str, Any]:
    """Jolokia's ``list`` entry for the MBean: desc, attr, op."""
    return {
        "desc": MBEAN_DESCRIPTION,
        "class": "txcluster.ClusterInfo",
        "attr": {a.name: {"type": a.java_type, "desc": a.description, "rw": a.writable}
                 for a in ATTRIBUTES},
        "op": {o.name: {"args": [{"name": p.name, "type": p.java_type, "desc": p.description}
                                 for p in o.params],
                        "ret": o.return_type, "desc": o.description}
               for o in OPERATIONS},
    }


def _list(info: ClusterInfo, path: str | None) -> Any:
    _, _, props = info.object_name.partition(":")
    tree: Any = {DOMAIN: {props: mbean_listing()}}
    # The path walks the tree: domain, then the property list, then attr/op, ...; a
    # property list holds '/', so a path element is matched by joining as needed.
    elements = split_path(path or "")
    while elements:
        if not isinstance(tree, dict):
            raise RequestError(f"list: no path {path!r}")
        for n in range(1, len(elements) + 1):
            key = "/".join(elements[:n])
            if key in tree:
                tree, elements = tree[key], elements[n:]
                break
        else:
            raise InstanceNotFound(f"list: nothing at {path!r}")
    return tree


# ---- requests ----


def _attribute_value(value: Any, path: str | None) -> Any:
    """A read's inner path into a String[] value (index) is Jolokia's; nothing else nests."""
    if not path:
        return value
    if isinstance(value, list):
        try:
            return value[int(path.split("/")[0])]
        except (ValueError, IndexError):
            raise RequestError(f"no element {path!r} in the value") from None
    raise RequestError(f"path {path!r}: the value is not a list")


def _path(request: dict[str, Any]) -> str | None:
    """A read's or list's inner path (anything but a string is a 400)."""
    path = request.get("path")
    if path is not None and not isinstance(path, str):
        raise RequestError(f"'path' must be a string, got {path!r}")
    return path


def _check_mbean(info: ClusterInfo, request: dict[str, Any]) -> None:
    mbean = request.get("mbean")
    if not isinstance(mbean, str) or not mbean:
        raise RequestError(f"{request.get('type')} needs 'mbean'")
    if mbean != info.object_name:
        # The name quoted: a bare ":" or "*:*" after the exception's " : " reads as nothing.
        raise InstanceNotFound(f"no MBean {mbean!r} here; this master is {info.object_name}")


async def execute(info: ClusterInfo, request: dict[str, Any]) -> Any:
    """The ``value`` of one request; raises for the envelope's error."""
    kind = request.get("type")
    if not isinstance(kind, str) or kind.lower() not in TYPES:
        raise RequestError(f"'type' must be one of {', '.join(TYPES)}, got {kind!r}")
    kind = kind.lower()
    if kind == "version":
        return {"agent": AGENT, "protocol": PROTOCOL,
                "info": {"product": "txcluster", "vendor": "txcluster",
                         "mbean": info.object_name},
                "config": {}}
    if kind == "list":
        return _list(info, _path(request))
    if kind == "search":
        pattern = request.get("mbean")
        if not isinstance(pattern, str) or ":" not in pattern:
            raise RequestError(f"search needs an MBean name pattern like {DOMAIN}:*")
        return [info.object_name] if object_name_matches(pattern, info.object_name) else []
    _check_mbean(info, request)
    if kind == "read":
        attribute = request.get("attribute")
        if attribute is None:
            return await info.read_many()
        if isinstance(attribute, list):
            return await info.read_many([str(a) for a in attribute])
        return _attribute_value(await info.read(str(attribute)), _path(request))
    if kind == "write":
        if "attribute" not in request or "value" not in request:
            raise RequestError("write needs 'attribute' and 'value'")
        return await info.write(str(request["attribute"]), request["value"])
    # exec: the operation may carry a signature, "backup(java.lang.String)"
    operation = request.get("operation")
    if not isinstance(operation, str) or not operation:
        raise RequestError("exec needs 'operation'")
    name, paren, signature = operation.partition("(")
    sig = None
    if paren:
        sig = [s.strip() for s in signature.rstrip(")").split(",") if s.strip()]
    args = request.get("arguments", [])
    if not isinstance(args, list):
        args = [args]
    return await info.invoke(name, args, sig)


def _error(request: Any, status: int, error_type: str, message: str) -> dict[str, Any]:
    return {"request": request, "status": status, "error_type": error_type,
            "error": f"{error_type} : {message}", "timestamp": int(time.time())}


async def handle(info: ClusterInfo, request: Any, may_write: bool = True) -> dict[str, Any]:
    """The envelope for one request (never raises for a bad request)."""
    if not isinstance(request, dict):
        return _error(request, 400, "java.lang.IllegalArgumentException",
                      "a request must be a JSON object")
    kind = str(request.get("type", "")).lower()
    if kind in WRITE_TYPES and not may_write:
        return _error(request, 403, "java.lang.SecurityException",
                      f"{kind} needs a user with the write role")
    try:
        value = await execute(info, request)
    except RequestError as exc:
        return _error(request, 400, "java.lang.IllegalArgumentException", str(exc))
    except InstanceNotFound as exc:
        return _error(request, 404, "javax.management.InstanceNotFoundException", str(exc))
    except ManagementError as exc:
        return _error(request, exc.status, exc.java_class, str(exc))
    return {"request": request, "value": value, "status": 200, "timestamp": int(time.time())}


# ---- HTTP ----


class _AnyPath(PathConvertor):
    """Starlette's "path" (``.*``) stops at a newline, so a GET element holding an encoded
    one (``%0A``) would be FastAPI's bare 404 instead of a Jolokia envelope."""

    regex = "(?s:.*)"


register_url_convertor("jolokia_path", _AnyPath())


def jolokia_router(info_provider: Callable[[], ClusterInfo], guard: AdminGuard) -> APIRouter:
    router = APIRouter(prefix="/jolokia", tags=["jmx"])

    def known() -> list[str]:
        return [info_provider().object_name]

    async def get(request: Request, path: str) -> Response:
        guard.require(request, write=False)
        try:
            parsed: Any = parse_path(path, known())
        except RequestError as exc:
            return JSONResponse(_error({"type": path.split("/")[0]}, 400,
                                       "java.lang.IllegalArgumentException", str(exc)))
        return JSONResponse(await handle(info_provider(), parsed, guard.may_write(request)))

    @router.get("", summary="Jolokia version")
    async def version(request: Request) -> Response:
        return await get(request, "")

    @router.get("/{path:jolokia_path}", summary="Jolokia GET request: read, write, exec, list, "
                "search, version")
    async def get_request(path: str, request: Request) -> Response:
        return await get(request, path)

    @router.post("", summary="Jolokia POST: one JSON request or a list of them (bulk)")
    @router.post("/", include_in_schema=False)
    async def post(request: Request) -> Response:
        guard.require(request, write=False)
        try:
            body = jsonbody.parse(await request.body() or b"null")
        except ValueError as exc:
            return JSONResponse(_error(None, 400, "java.lang.IllegalArgumentException",
                                       f"the body is not JSON: {exc}"))
        write = guard.may_write(request)
        if isinstance(body, list):
            return JSONResponse([await handle(info_provider(), r, write) for r in body])
        return JSONResponse(await handle(info_provider(), body, write))

    return router
