"""Fuzzing the Jolokia endpoint of a real master (/jolokia: master_service/jmx/jolokia.py
over the MBean table of master_service/jmx/attributes.py), without the JVM.

- Writes of every attribute (the writable ones, the read-only ones, unknown names), by
  POST and by GET path, with values of every kind: well typed and in range, of the wrong
  type, out of range, huge, empty, unicode, nested JSON.
- Exec of every operation (and of unknown ones, with wrong signatures) with generated
  argument lists: wrong count, wrong types, bad URLs, ports, names and peer ids.
- Bulk POSTs mixing good and bad requests, the answer to each known in advance.
- Malformed requests: POST bodies that are not JSON or not requests, nested deep, with
  NaN or lone surrogates; GET paths of any shape, with Jolokia's escapes.

Property: never a 5xx — the HTTP answer is 200 with Jolokia envelopes, one per request of
a bulk; an error envelope has an error_type and a message (naming the attribute or the
operation it refuses); a refused request changes nothing: the attributes (read back),
cluster.properties (byte for byte), the log head, the workers. An accepted write is what
the master now runs with and what a restart would load (the value read back is the one
cluster.properties holds, parsed), and it is then undone, so that every example starts
from the same master.

Left out by construction: exec calls that change the master for good. addSyncPeer with a
valid new peer (it turns the agreement log on, and removeSyncPeer does not turn it off),
removeClusterNode of a real worker, restoreFromImage of an existing image:
test_jmx_jolokia.py and test_sync_peering.py cover those.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from master_service.config import SCHEMA, parse_node_id
from master_service.jmx.attributes import (
    ATTRIBUTES,
    ATTRIBUTES_BY_NAME,
    BOOLEAN,
    DOUBLE,
    INT,
    LONG,
    OPERATIONS,
    OPERATIONS_BY_NAME,
    STRING,
    STRING_ARRAY,
    object_name,
)
from tests.fuzz.checks import master_head
from tests.fuzz.settings import fuzz_settings, record
from txinfra.properties import parse_url, read_properties

WRITABLE = [a.name for a in ATTRIBUTES if a.writable]
READ_ONLY = [a.name for a in ATTRIBUTES if not a.writable]
WATCHED = [*WRITABLE, "NodeStatus", "SyncPeers", "NodeID"]
BACKUPS = ("fuzz-a", "fuzz-b")  # the only images the fuzz may write; never restored
REFUSED = {"java.lang.IllegalArgumentException", "java.lang.SecurityException",
           "javax.management.AttributeNotFoundException",
           "javax.management.InvalidAttributeValueException",
           "javax.management.InstanceNotFoundException", "javax.management.ReflectionException"}


@dataclass
class Jolokia:
    cluster: Any
    client: httpx.Client
    mbean: str
    baseline: dict[str, Any] = field(default_factory=dict)

    @property
    def workers(self) -> set[str]:
        return {w.url for w in self.cluster.workers}


@pytest.fixture(scope="module")
def jolokia(module_cluster_factory):
    cluster = module_cluster_factory(1, name="fuzz-jolokia")
    with httpx.Client(base_url=cluster.master.url, timeout=120) as client:
        j = Jolokia(cluster, client, object_name("master1"))
        j.baseline = state(j)
        assert j.baseline["attributes"]["NodeID"] == "master1"
        yield j


# ---- calls and state ----


def post(j: Jolokia, body: bytes | Any) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = j.client.post("/jolokia", content=data, headers={"content-type": "application/json"})
    assert r.status_code == 200, f"{r.status_code} {r.text[:500]} for {data[:1000]!r}"
    return r.json()


def get(j: Jolokia, path: str) -> Any:
    r = j.client.get("/jolokia/" + path)
    assert r.status_code == 200, f"{r.status_code} {r.text[:500]} for {path[:1000]!r}"
    return r.json()


def element(value: Any) -> str:
    """A value as one element of a GET path: Jolokia's escapes (``!!``, ``!/``), then
    percent-encoding (dots too: a '.' or '..' element would be resolved away)."""
    text = value if isinstance(value, str) else json.dumps(value)
    return quote(text.replace("!", "!!").replace("/", "!/"), safe="!").replace(".", "%2E")


def read(j: Jolokia, names: list[str]) -> dict[str, Any]:
    env = post(j, {"type": "read", "mbean": j.mbean, "attribute": names})
    assert env["status"] == 200, env
    return env["value"]


def state(j: Jolokia) -> dict[str, Any]:
    values = read(j, WATCHED)
    workers = sorted(s.split(" ", 1)[1] for s in values.pop("NodeStatus"))
    return {"attributes": values, "workers": workers, "head": master_head(j.client),
            "config": j.cluster.master.config.read_bytes()}


def check_envelope(env: Any, what: object) -> None:
    """Jolokia's envelope: a value, or an error_type and a message; a refusal is a 4xx
    status (an IllegalStateException — a valid request the cluster cannot carry out now —
    is Jolokia's 500, with its message)."""
    assert isinstance(env, dict) and isinstance(env.get("status"), int), (env, what)
    if env["status"] == 200:
        assert "value" in env, (env, what)
        return
    assert isinstance(env.get("error_type"), str) and env["error_type"], (env, what)
    assert isinstance(env.get("error"), str) and \
        env["error"].removeprefix(env["error_type"]).strip(" :"), (env, what)
    assert env["error_type"] in REFUSED or (
        env["error_type"] == "java.lang.IllegalStateException"), (env, what)
    assert 400 <= env["status"] < 500 or env["error_type"] == \
        "java.lang.IllegalStateException", (env, what)


def settle(j: Jolokia, envelopes: list[Any]) -> None:
    """After the envelopes were checked: what accepted writes set is what the master runs
    with and what cluster.properties holds; undo them and any worker added; then the
    master is as before the fuzzing (cluster.properties may now spell defaults)."""
    written: list[str] = []
    for env in envelopes:
        req = env.get("request") if isinstance(env, dict) else None
        if env.get("status") == 200 and isinstance(req, dict) and \
                str(req.get("type")).lower() == "write":
            written.append(str(req["attribute"]))
    if written:
        live = read(j, sorted(set(written)))
        props = read_properties(j.cluster.master.config)
        for name, value in live.items():
            key = ATTRIBUTES_BY_NAME[name].config_key
            assert SCHEMA.key(key).parse(props[key]) == value, (name, props[key], value)
            old = j.baseline["attributes"][name]
            env = post(j, {"type": "write", "mbean": j.mbean, "attribute": name, "value": old})
            assert env["status"] == 200, env
    now = state(j)
    added = set(now["workers"]) - set(j.baseline["workers"])
    for url in added:
        env = post(j, {"type": "exec", "mbean": j.mbean, "operation": "removeClusterNode",
                       "arguments": [url]})
        assert env["status"] == 200, env
        now = state(j)
    if written or added:
        j.baseline["config"] = now["config"]  # the same values, maybe spelt out now
    assert now == j.baseline, f"{now} != {j.baseline}"


# ---- values ----

_big = st.sampled_from([2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30])
_odd_text = st.sampled_from([
    "", " ", "0", "-0", "1e3", "0x10", "١٢", "NaN", "Infinity", "-inf", "null", "true",
    "TRUE", "yes", "on", "1.0", " 42 ", "4_2", "+7", "http://", "é", "\\", "!", "/", "a/b",
    "[null]", '""', "\u0000", "\n", "😀", "x" * 300])
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), _big,
                     _big.map(lambda i: -i), st.floats(allow_nan=False, allow_infinity=False),
                     st.text(max_size=20), _odd_text)
_junk = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)

_NUMBERS = {
    LONG: st.one_of(st.integers(-5, 10**7), st.integers(-2**63 - 2, 2**63 + 2),
                    st.integers(0, 10**6).map(float), st.integers(-10, 10**6).map(str),
                    st.sampled_from([" 42 ", "1e3", "42.0", "0x10", "4_2", "+7", 1e300])),
    INT: st.one_of(st.integers(-5, 10**5), st.integers(-2**31 - 2, 2**31 + 2),
                   st.integers(0, 100).map(str)),
    DOUBLE: st.one_of(st.floats(-10, 10), st.floats(allow_nan=False, allow_infinity=False),
                      st.integers(-5, 100), st.floats(0, 10).map(str),
                      st.sampled_from(["nan", "inf", "-inf", "1e309", "1,5", " 2.5 ", "1e-320",
                                       0.0, 5e-324])),
    BOOLEAN: st.sampled_from([True, False, "true", "FALSE", "True", " true ", "yes", "1", 1, 0,
                              "on", "t"]),
}
_STRINGS = {
    "Mode": ["NORMAL", "mute", "MUTE", "Mute", "quiet", " NORMAL", "normal", "MUTED"],
    "SplitRecovery": ["None", "simple", "SMART", "Smart ", "bogus", "none", "Simple"],
    "MasterURL": ["http://127.0.0.1:7999", "https://master.example:8443/", "http://a/b#c",
                  "http://a/\\u0041", "http://é.example", "ftp://x", "http://", "http://a b",
                  "http://a/=x", "http://a/!x:y", "HTTP://A", "http://a/\\"],
}


def values_for(name: str) -> st.SearchStrategy[Any]:
    """Mostly values of the attribute's own type (in range or not), otherwise anything."""
    attribute = ATTRIBUTES_BY_NAME.get(name)
    if attribute is None:
        return _junk
    if attribute.java_type in _NUMBERS:
        typed = _NUMBERS[attribute.java_type]
    elif attribute.java_type == STRING_ARRAY:
        typed = st.lists(st.text(max_size=10), max_size=3)
    else:
        typed = st.one_of(st.sampled_from(_STRINGS.get(name, ["x"])), st.text(max_size=20))
    assert attribute.java_type in (*_NUMBERS, STRING, STRING_ARRAY)
    return st.one_of(typed, typed, typed, _junk)


attribute_names = st.one_of(
    st.sampled_from(WRITABLE), st.sampled_from(WRITABLE), st.sampled_from(WRITABLE),
    st.sampled_from(READ_ONLY),
    st.sampled_from(["", "nodeid", "Status ", "NoSuch", "NetSpeedBitsPerSec/0", "é"]))


# ---- writes ----


@fuzz_settings()
@given(name=attribute_names, data=st.data(), via=st.sampled_from(["POST", "POST", "GET"]))
def test_attribute_writes(jolokia, name, data, via):
    j = jolokia
    value = data.draw(values_for(name))
    if via == "GET" and not isinstance(value, list | dict) and value is not None:
        env = get(j, f"write/{element(j.mbean)}/{element(name)}/{element(value)}")
    else:
        env = post(j, {"type": "write", "mbean": j.mbean, "attribute": name, "value": value})
    check_envelope(env, (name, value))
    record("jolokia: write", env["status"])
    if env["status"] == 200:
        assert name in WRITABLE, env
        assert env["value"] == j.baseline["attributes"][name], env  # the previous value
    elif name and env["error_type"] in ("javax.management.InvalidAttributeValueException",
                                        "javax.management.AttributeNotFoundException"):
        assert name in env["error"], env
    settle(j, [env])


# ---- operations ----


def _refused_peer(args: list[Any]) -> list[Any]:
    """addSyncPeer(id, url) as generated, unless both are valid (then the URL is not)."""
    try:
        peer_id, url = (str(a) if isinstance(a, str | int | float) and not isinstance(a, bool)
                        else None for a in args)
        if peer_id is not None and url is not None and peer_id != "master1":
            parse_node_id(peer_id)
            parse_url(url)
            return [args[0], "ftp://" + url]
    except (ValueError, TypeError):
        pass
    return args


def _params(j: Jolokia) -> dict[tuple[str, str], st.SearchStrategy[Any]]:
    urls = st.one_of(
        st.sampled_from(["http://127.0.0.1:1", "http://127.0.0.1:9", "http://127.0.0.1",
                         "http://localhost:65535/", "https://127.0.0.1:2", "ftp://127.0.0.1:3",
                         "http://", "127.0.0.1:4", "http://127.0.0.1:5 ", " http://127.0.0.1:6",
                         "http://127.0.0.1:0", "http://127.0.0.1:99999", "http://[::1]:7"]),
        _scalars).filter(lambda u: not (isinstance(u, str) and
                                        u.strip().rstrip("/") in j.workers))
    # backup writes only BACKUPS (a number would be a name: "5"); restoreFromImage gets
    # anything but those.
    names = st.sampled_from([*BACKUPS, "../x", "", "a" * 101, "é", " x", "x/y", ".hidden",
                             "-x", "x\n", None, True, [], {}])
    return {
        ("addClusterNode", "url"): urls,
        ("addClusterNode", "port"): st.one_of(st.sampled_from(
            [0, 1, 80, 65535, 65536, -1, 2**31, 2**40, "8080", "x", None, True, 1.5]), _scalars),
        ("addClusterNode", "readable"): st.one_of(st.booleans(), _scalars),
        ("removeClusterNode", "url"): urls,
        ("addSyncPeer", "id"): st.one_of(st.sampled_from(["m2", "master1", "", "a b", "é",
                                                          "x" * 200, 5, None]), _scalars),
        ("addSyncPeer", "url"): st.one_of(st.sampled_from(["http://127.0.0.1:1", "ftp://x", ""]),
                                          _scalars),
        ("removeSyncPeer", "id"): st.one_of(st.sampled_from(["m2", "master1", ""]), _scalars),
        ("backup", "name"): names,
        ("restoreFromImage", "name"): st.one_of(names, _scalars).filter(
            lambda n: str(n) not in (*BACKUPS, "default")),
    }


@st.composite
def exec_requests(draw, j: Jolokia) -> tuple[str, list[Any]]:
    """(operation, arguments): mostly a known operation with its arguments (each good or
    bad), sometimes a signature, another count, or an unknown operation."""
    name = draw(st.sampled_from([o.name for o in OPERATIONS]))
    op = OPERATIONS_BY_NAME[name]
    params = _params(j)
    args = [draw(params[(name, p.name)]) for p in op.params]
    how = draw(st.sampled_from(["plain"] * 6 + ["signature", "count", "unknown"]))
    operation = name
    if how == "signature":
        types = [p.java_type for p in op.params]
        operation = draw(st.sampled_from([
            f"{name}({','.join(types)})", f"{name}({', '.join(types)})", f"{name}(int)",
            f"{name}()", f"{name}(", f"{name}(java.lang.String", f"{name}(x,,y)"]))
    elif how == "count":
        args = draw(st.lists(_junk, max_size=4))
    elif how == "unknown":
        operation = draw(st.one_of(st.sampled_from(["", "nope", "BACKUP", "backup ", "toString",
                                                    "__init__", "exec", "é"]),
                                   st.text(max_size=10)))
    if name == "addSyncPeer" and len(args) == 2:
        args = _refused_peer(args)
    return operation, args


def _get_arg(value: Any) -> str:
    if value is None:
        return "[null]"
    if value == "":
        return '""'
    return value if isinstance(value, str) else json.dumps(value)


@fuzz_settings(0.6)
@given(data=st.data(), via=st.sampled_from(["POST", "POST", "GET"]))
def test_operation_exec(jolokia, data, via):
    j = jolokia
    operation, args = data.draw(exec_requests(j))
    # By GET only when every argument is a string or null: a path turns the others into
    # text ("true", "5"), which can be a valid peer id or image name after all.
    if via == "GET" and operation and all(a is None or isinstance(a, str) for a in args):
        env = get(j, "/".join(["exec", element(j.mbean), element(operation),
                               *(element(_get_arg(a)) for a in args)]))
    else:
        env = post(j, {"type": "exec", "mbean": j.mbean, "operation": operation,
                       "arguments": args})
    check_envelope(env, (operation, args))
    record("jolokia: exec", env["status"])
    name = operation.partition("(")[0]
    if env["status"] == 200:
        assert name in ("addClusterNode", "backup"), env  # the rest is refused by design
        if name == "backup":
            assert env["value"].startswith(f"backup '{env['request']['arguments'][0]}'"), env
    elif env["error_type"] == "javax.management.ReflectionException" and name:
        assert name in env["error"], env
    settle(j, [env])


# ---- bulk ----

# (attribute, value, what the attribute reads afterwards)
GOOD_WRITES = [
    ("NetSpeedBitsPerSec", 5000, 5000), ("NetSpeedBitsPerSec", "123456", 123456),
    ("NetSpeedBitsPerSec", 2000.0, 2000), ("FullReplicationTimeFactor", 1.5, 1.5),
    ("FullReplicationTimeFactor", "2", 2.0), ("FullReplicationTimeFactor", 3, 3.0),
    ("MinTimeToConsiderFullReplicationS", 0, 0), ("MinTimeToConsiderFullReplicationS", 60, 60),
    ("LogMaxSize", 777, 777), ("LogMaxSize", " 1000 ", 1000), ("LogMaxDepth", 24, 24),
    ("ProtectSingleWorker", True, True), ("ProtectSingleWorker", "FALSE", False),
    ("ReadOnly", "true", True), ("ReadOnly", False, False), ("Mode", "mute", "MUTE"),
    ("Mode", "NORMAL", "NORMAL"), ("SplitRecovery", "smart", "Smart"),
    ("SplitRecovery", "None", "None"), ("MasterURL", "http://127.0.0.1:7999/",
                                        "http://127.0.0.1:7999"),
]
BAD_WRITES = [
    ("NetSpeedBitsPerSec", -1), ("NetSpeedBitsPerSec", "fast"), ("NetSpeedBitsPerSec", 0),
    ("LogMaxSize", 2**63), ("LogMaxDepth", 1.5), ("LogMaxDepth", 0), ("Mode", "quiet"),
    ("SplitRecovery", "bogus"), ("MasterURL", "ftp://x"), ("ReadOnly", "maybe"),
    ("ProtectSingleWorker", None), ("FullReplicationTimeFactor", "nan"),
    ("FullReplicationTimeFactor", 0), ("FullReplicationTimeFactor", [1.5]), ("NodeID", "x"),
    ("Status", 1), ("NoSuch", 1), (["Mode"], "MUTE"),
]


@st.composite
def bulk_items(draw, j: Jolokia) -> tuple[dict, bool | None, tuple[str, Any] | None]:
    """(request, succeeds?, (attribute, value it then reads)): succeeds is None for junk
    whose answer is not predicted (it is never a write or exec of the MBean)."""
    m = j.mbean
    kind = draw(st.sampled_from(["read", "good write", "bad write", "bad exec", "junk"]))
    if kind == "read":
        request = draw(st.sampled_from([
            {"type": "read", "mbean": m}, {"type": "read", "mbean": m, "attribute": "Status"},
            {"type": "read", "mbean": m, "attribute": ["NodeID", "Mode"]},
            {"type": "read", "mbean": m, "attribute": "NodeStatus", "path": "0"},
            {"type": "version"}, {"type": "list"}, {"type": "LIST", "path": "ReplicationCluster"},
            {"type": "search", "mbean": "ReplicationCluster:*"}]))
        return request, True, None
    if kind == "good write":
        name, value, reads = draw(st.sampled_from(GOOD_WRITES))
        return {"type": "write", "mbean": m, "attribute": name, "value": value}, True, \
            (name, reads)
    if kind == "bad write":
        name, value = draw(st.sampled_from(BAD_WRITES))
        return {"type": "write", "mbean": m, "attribute": name, "value": value}, False, None
    if kind == "bad exec":
        request = draw(st.sampled_from([
            {"operation": "backup", "arguments": ["../x"]},
            {"operation": "backup", "arguments": []},
            {"operation": "backup(int)", "arguments": [1]},
            {"operation": "restoreFromImage", "arguments": ["absent"]},
            {"operation": "removeClusterNode", "arguments": ["http://127.0.0.1:1"]},
            {"operation": "addClusterNode", "arguments": ["ftp://x", 0, True]},
            {"operation": "addClusterNode", "arguments": ["http://127.0.0.1", 70000, True]},
            {"operation": "addSyncPeer", "arguments": ["master1", "http://127.0.0.1:1"]},
            {"operation": "removeSyncPeer", "arguments": ["m9"]},
            {"operation": "nope", "arguments": []}, {"arguments": ["x"]}]))
        return {"type": "exec", "mbean": m, **request}, False, None
    return draw(junk_requests(j)), None, None


@st.composite
def junk_requests(draw, j: Jolokia) -> Any:
    """Anything but a write or exec of the MBean (those are the other tests' business)."""
    kind = draw(st.one_of(st.sampled_from(["read", "write", "exec", "list", "search",
                                           "version", "READ", "Exec", "", "x"]), _scalars))
    request: Any = {"type": kind}
    if str(kind).lower() in ("write", "exec"):
        request["mbean"] = draw(st.one_of(st.sampled_from(
            [None, "", "ReplicationCluster:*", "Other:name=x", j.mbean + " ",
             j.mbean.lower()]), _scalars))
    else:
        request["mbean"] = draw(st.one_of(st.just(j.mbean), st.sampled_from(
            ["*:*", "ReplicationCluster:*", "ReplicationCluster", ":", "a:b=c=d,*"]),
            _scalars))
    for key in draw(st.lists(st.sampled_from(["attribute", "value", "path", "operation",
                                              "arguments", "config", "x"]), max_size=3)):
        request[key] = draw(st.one_of(st.sampled_from(
            [*WATCHED, "NodeStatus", "0", "-1", "99", "a/b"]), _junk))
    return draw(st.one_of(st.just(request), st.just(request), _junk))


@fuzz_settings(0.5)
@given(data=st.data())
def test_bulk_requests(jolokia, data):
    """A bulk answers each request in order, as if it came alone: the good ones succeed,
    the bad ones are refused and change nothing, whatever their neighbours."""
    j = jolokia
    items = data.draw(st.lists(bulk_items(j), min_size=2, max_size=6))
    envelopes = post(j, [request for request, _, _ in items])
    assert isinstance(envelopes, list) and len(envelopes) == len(items), envelopes
    record("jolokia: bulk", 200)
    expected = dict(j.baseline["attributes"])
    for (request, succeeds, effect), env in zip(items, envelopes, strict=True):
        check_envelope(env, request)
        assert env["request"] == request, (env, request)
        if succeeds is not None:
            assert (env["status"] == 200) == succeeds, (env, request)
        if effect is not None:
            expected[effect[0]] = effect[1]
    assert read(j, WRITABLE) == {k: expected[k] for k in WRITABLE}, items
    settle(j, envelopes)


# ---- malformed requests ----


def _raw(text: bytes, placeholder: str, replacement: bytes) -> bytes:
    return text.replace(json.dumps(placeholder).encode(), replacement)


@st.composite
def malformed_bodies(draw, j: Jolokia) -> bytes:
    how = draw(st.sampled_from(["bytes", "truncated", "scalar", "junk", "bulk", "deep",
                                "constant", "surrogate", "huge"]))
    request = draw(junk_requests(j))
    text = json.dumps(request).encode()
    if how == "bytes":
        return draw(st.binary(max_size=60))
    if how == "truncated":
        return text[:draw(st.integers(0, max(0, len(text) - 1)))]
    if how == "scalar":
        return draw(st.sampled_from([b"5", b'"read"', b"true", b"null", b"", b"[]", b"{}",
                                     b" ", b"1e999"]))
    if how == "junk":
        return text
    if how == "bulk":
        return json.dumps(draw(st.lists(junk_requests(j), max_size=5))).encode()
    if how == "deep":
        depth = draw(st.integers(60, 3000))
        return _raw(json.dumps({"type": "read", "mbean": j.mbean, "attribute": "$"}).encode(),
                    "$", b"[" * depth + b"]" * depth)
    if how == "constant":
        return _raw(json.dumps({"type": "write", "mbean": j.mbean, "attribute": draw(
            st.sampled_from(WRITABLE)), "value": "$"}).encode(), "$",
            draw(st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"[NaN]"])))
    if how == "surrogate":
        where = draw(st.sampled_from(["type", "mbean", "attribute", "value", "key"]))
        lone = draw(st.sampled_from(["\ud800", "x\udfff"]))
        bad = {"type": "read", "mbean": j.mbean, "attribute": "Status"}
        if where == "key":
            bad[lone] = 1
        else:
            bad[where] = lone
        return json.dumps(draw(st.sampled_from([bad, [bad]]))).encode()
    return _raw(json.dumps({"type": "write", "mbean": j.mbean, "attribute": draw(
        st.sampled_from(WRITABLE)), "value": "$"}).encode(), "$",
        draw(st.sampled_from([b"9" * 5000, b"-" + b"9" * 30, b"1" + b"0" * 400 + b".5"])))


_path_elements = st.one_of(
    st.sampled_from(["read", "write", "exec", "list", "search", "version", "READ", "x", "",
                     "!", "!!", "!/", "[null]", '""', "0", "-1", "..", ".", "%", "%2F", "*",
                     "ReplicationCluster:*", "*:*", "name=ClusterInfo", "ReplicationCluster",
                     "attr", "op"]),
    st.sampled_from(WATCHED), st.text(max_size=10))


@st.composite
def malformed_paths(draw, j: Jolokia) -> str:
    """A GET path: elements of the grammar and junk; the MBean's name (spelt either way)
    in any but an exec."""
    kind = draw(st.sampled_from(["read", "write", "list", "search", "version", "exec",
                                 "READ", "frobnicate", ""]))
    mbean = draw(st.sampled_from(["escaped", "plain", "junk"]))
    parts = [kind]
    if mbean != "junk" and kind != "exec":
        parts.append(j.mbean.replace("/", "!/") if mbean == "escaped" else j.mbean)
    parts += draw(st.lists(_path_elements, max_size=5))
    return "/".join(quote(p, safe="!:=*/").replace(".", "%2E") for p in parts)


@fuzz_settings()
@given(data=st.data(), via=st.sampled_from(["POST", "GET"]))
def test_malformed_requests(jolokia, data, via):
    j = jolokia
    if via == "POST":
        what: Any = data.draw(malformed_bodies(j))
        answer = post(j, what)
    else:
        what = data.draw(malformed_paths(j))
        answer = get(j, what)
    envelopes = answer if isinstance(answer, list) else [answer]
    for env in envelopes:
        check_envelope(env, what)
    # One case per request; a bulk's answer is HTTP 200 whatever its envelopes say.
    record("jolokia: malformed", envelopes[0]["status"] if len(envelopes) == 1 else 200)
    settle(j, envelopes)


def test_master_logged_no_traceback(jolokia):
    master = jolokia.cluster.master
    assert master.alive()
    assert "Traceback" not in master.log_path.read_text(), master.log_tail(5000)
    assert jolokia.cluster.wait_in_sync()
