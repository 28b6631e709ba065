"""The ReplicationCluster ClusterInfo MBean as a table: attributes and operations.

Names and Java types are the documented ones
(docs/design/cluster-basics.md#the-clusterinfo-mbean-jolokia-and-the-admin-api); each entry has
the description shown in MBeanInfo and by Jolokia's ``list``. Getters and setters work on the
master's control plane (``Control``: its configuration, cluster and peering) and are called on
the master's asyncio loop only (the JVM bridge hops there from its RMI threads). Setters and
operations are the control plane's (master_service/control.py: validate, persist to
cluster.properties, take effect), as for the admin API; its refusal becomes a
``ManagementError`` and nothing changed (ARCHITECTURE.md: every bad input gets an error saying
what is wrong and changes nothing).

This module does not import jpype: the documentation's JMX reference is generated from
``ATTRIBUTES`` and ``OPERATIONS``.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from master_service.cluster.core import Cluster
from master_service.config import key_for_attribute
from master_service.control import (
    SETTINGS,
    Control,
    ControlError,
    Failed,
    Invalid,
    Unavailable,
)
from txinfra.properties import parse_url

DOMAIN = "ReplicationCluster"


def object_name(node_id: str) -> str:
    """The MBean's name
    (docs/design/cluster-basics.md#the-clusterinfo-mbean-jolokia-and-the-admin-api); the '/' needs
    no quoting (docs/design/dependencies.md#jpype1-the-jmx-bridge)."""
    return f"{DOMAIN}:name=ClusterInfo/{node_id}"


# Java types as MBeanAttributeInfo.getType() spells them.
LONG = "long"
INT = "int"
DOUBLE = "double"
BOOLEAN = "boolean"
STRING = "java.lang.String"
STRING_ARRAY = "[Ljava.lang.String;"
VOID = "void"
JAVA_TYPES = (LONG, INT, DOUBLE, BOOLEAN, STRING, STRING_ARRAY, VOID)


# ---- errors: each becomes the javax.management / java.lang exception it names ----


class ManagementError(Exception):
    """A refused request; nothing changed. ``java_class`` is what a JMX client sees
    (wrapped in MBeanException where the JMX interface demands) and Jolokia's
    ``error_type``; ``status`` is Jolokia's status code. Subclasses name both as class
    keywords."""

    java_class = "javax.management.MBeanException"
    status = 500

    def __init_subclass__(cls, java_class: str | None = None, status: int | None = None,
                          **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if java_class is not None:
            cls.java_class = java_class
        if status is not None:
            cls.status = status


class AttributeNotFound(ManagementError, status=404,
                        java_class="javax.management.AttributeNotFoundException"):
    pass


class ReadOnlyAttribute(AttributeNotFound, status=400):
    """A write to a read-only attribute (AttributeNotFoundException, as the JMX
    interface allows, with a message that explains)."""


class InvalidAttributeValue(ManagementError, status=400,
                            java_class="javax.management.InvalidAttributeValueException"):
    pass


class OperationNotFound(ManagementError, status=404,
                        java_class="javax.management.ReflectionException"):
    pass


class InvalidArgument(ManagementError, status=400,
                      java_class="java.lang.IllegalArgumentException"):
    """Bad operation arguments (an unknown worker URL, a bad backup name, ...)."""


class OperationFailed(ManagementError, status=500,
                      java_class="java.lang.IllegalStateException"):
    """A valid request the cluster cannot carry out now (no worker for a backup, a
    SplitRecovery change during a split, ...)."""


# ---- values ----


def coerce(java_type: str, value: Any) -> Any:
    """A client's value (JSON, text from a Jolokia URL, a Java value already unboxed) as
    the Python value of ``java_type``; ValueError with what is wrong otherwise."""
    if java_type in (LONG, INT):
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ValueError(f"expected a whole number ({java_type}), got '{value}'") \
                    from None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number ({java_type}), got {value!r}")
        bits = 63 if java_type == LONG else 31
        if not -(2 ** bits) <= value < 2 ** bits:
            raise ValueError(f"{value} is out of range for a Java {java_type}")
        return value
    if java_type == DOUBLE:
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise ValueError(f"expected a number (double), got '{value}'") from None
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value):
            raise ValueError(f"expected a finite number (double), got {value!r}")
        return float(value)
    if java_type == BOOLEAN:
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false (boolean), got {value!r}")
        return value
    if java_type == STRING:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError(f"expected a string, got {value!r}")
        return str(value)
    if java_type == STRING_ARRAY:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"expected a list of strings, got {value!r}")
        return list(value)
    raise ValueError(f"unsupported Java type {java_type}")


# ---- the table ----


@dataclass(frozen=True)
class Attribute:
    name: str  # the documented attribute name
    java_type: str
    description: str
    writable: bool
    get: Callable[[Control], Any] = field(repr=False, compare=False)
    # The control plane's: validates, persists, takes effect; a refusal (ControlError,
    # as a ManagementError through ClusterInfo.write) changed nothing.
    set: Callable[[Control, Any], Awaitable[None]] | None = field(
        default=None, repr=False, compare=False)
    config_key: str | None = None  # the cluster.properties key a write persists to

    def __post_init__(self) -> None:
        assert self.java_type in JAVA_TYPES, self.java_type
        assert self.writable == (self.set is not None), self.name


class Param(NamedTuple):
    name: str
    java_type: str
    description: str


@dataclass(frozen=True)
class Operation:
    name: str
    params: tuple[Param, ...]
    return_type: str
    description: str
    run: Callable[..., Awaitable[Any]] = field(repr=False, compare=False)
    impact: str = "ACTION"  # MBeanOperationInfo impact: ACTION changes the cluster

    def signature(self) -> tuple[str, ...]:
        return tuple(p.java_type for p in self.params)


def cluster_of(control: Control) -> Cluster:
    with refusal_as_management():
        return control.cluster


@contextmanager
def refusal_as_management(invalid: type[ManagementError] = InvalidArgument) -> Iterator[None]:
    """The control plane's refusal as the JMX exception a client sees: what the master
    cannot do now is OperationFailed, a bad value ``invalid``, any other refusal (an
    unknown or a known worker, peer or backup) a bad argument."""
    try:
        yield
    except (Unavailable, Failed) as exc:
        raise OperationFailed(str(exc)) from None
    except Invalid as exc:
        raise invalid(str(exc)) from None
    except ControlError as exc:
        raise InvalidArgument(str(exc)) from None


def _counter(name: str) -> Callable[[Control], int]:
    return lambda s: int(getattr(cluster_of(s).counters, name))


_STATUS_WORDS = {0: "available", 1: "needs attention", 2: "no worker available"}


def _summary(s: Control) -> str:
    c = cluster_of(s)
    reason = c.writable_reason()
    in_sync = len(c.in_sync())
    return (f"{_STATUS_WORDS[c.status_code()]}: {in_sync} of {len(c.workers)} workers in "
            f"sync; {'writable' if reason is None else 'not writable: ' + reason}; "
            f"log head seq {c.head_seq} ({c.head_quads} statements)")


def _per_worker(value: Callable[[Any], str]) -> Callable[[Control], list[str]]:
    return lambda s: [f"{w.url} {value(w)}" for w in cluster_of(s).workers.values()]


def _setter(name: str, key: str) -> Callable[[Control, Any], Awaitable[None]]:
    return lambda s, value: s.set({key: value}, labels={key: name})


def _attr(name: str, java_type: str, description: str, get: Callable[[Control], Any],
          writable: bool = False, key: str | None = None) -> Attribute:
    """A writable attribute persists to its name in hyphens (key_for_attribute), or to
    ``key`` (MaxPeerLag is max-peer-lag-s: seconds, like the key's other users)."""
    if not writable:
        return Attribute(name, java_type, description, False, get)
    key = key or key_for_attribute(name)
    assert key in SETTINGS, f"{name}: {key} does not change at runtime (control.SETTINGS)"
    return Attribute(name, java_type, description, True, get, _setter(name, key), key)


ATTRIBUTES: tuple[Attribute, ...] = (
    _attr("NodeStatus", STRING_ARRAY,
          "One '[STATUS] url' per worker; STATUS is UNINITIALIZED, ON, OFF, "
          "REPLICATION_SERVER, REPLICATION_CLIENT, OUT_OF_SYNC, OUT_OF_SYNC_FORCED, "
          "WAITING_WRITE or WRITING",
          lambda s: [f"[{w.status}] {w.url}" for w in cluster_of(s).workers.values()]),
    _attr("ClusterStatusSummary", STRING,
          "One line: status, workers in sync, whether writable (and why not), log head",
          _summary),
    _attr("Status", INT,
          "0 available, 1 needs attention (a worker not in sync, or not writable), "
          "2 no worker available", lambda s: cluster_of(s).status_code()),
    _attr("IsWritable", BOOLEAN, "Whether the cluster takes client writes now",
          lambda s: cluster_of(s).writable_reason() is None),
    _attr("NetSpeedBitsPerSec", LONG,
          "Smart replication: network speed in bits/s, estimates the time of a full "
          "replication (default 104857600); persisted as net-speed-bits-per-sec",
          lambda s: cluster_of(s).params.net_speed_bits_per_sec, writable=True),
    _attr("FullReplicationTimeFactor", DOUBLE,
          "Smart replication: speed-up ratio a full replication must beat (default 1.3); "
          "persisted as full-replication-time-factor",
          lambda s: cluster_of(s).params.full_replication_time_factor, writable=True),
    _attr("MinTimeToConsiderFullReplicationS", LONG,
          "Smart replication: minimum seconds of incremental replay before a full "
          "replication is considered (default 600); persisted as "
          "min-time-to-consider-full-replication-s",
          lambda s: cluster_of(s).params.min_time_to_consider_full_replication_s,
          writable=True),
    # Read-only: the node id is in the MBean's name and in every logged transaction;
    # change node-id in cluster.properties and restart.
    _attr("NodeID", STRING,
          "Unique id of this master across the whole cluster (node-id; read-only: set it "
          "in cluster.properties and restart)", lambda s: s.config.node_id),
    _attr("MasterURL", STRING,
          "RDF4J protocol URL of this master, as peers reach it (master-url)",
          lambda s: s.config.master_url, writable=True),
    _attr("SyncPeers", STRING_ARRAY,
          "One 'id url' per synchronised peer master (peer.<n>.id / peer.<n>.url); "
          "change with addSyncPeer / removeSyncPeer",
          lambda s: [f"{peer_id} {url}" for peer_id, url in s.config.peers]),
    _attr("ReadOnly", BOOLEAN,
          "Read-only master: takes transactions only from its peers, applies none to its "
          "workers (read-only)", lambda s: cluster_of(s).read_only, writable=True),
    _attr("Mode", STRING,
          "NORMAL, or MUTE: applies its peers' transactions but takes no client writes "
          "(mode)", lambda s: cluster_of(s).mode, writable=True),
    _attr("ProtectSingleWorker", BOOLEAN,
          "With two workers, refuse writes while only one is in sync "
          "(protect-single-worker)",
          lambda s: cluster_of(s).protect_single_worker, writable=True),
    _attr("LogMaxSize", LONG,
          "Transactions kept in the transaction log (default 100000; log-max-size)",
          lambda s: cluster_of(s).log_max_size, writable=True),
    _attr("LogMaxDepth", LONG,
          "Hours transactions are kept in the transaction log (default 168 = 7 days; "
          "log-max-depth)", lambda s: int(cluster_of(s).log_max_depth_h), writable=True),
    _attr("MaxPeerLag", DOUBLE,
          "Seconds without progress after which peers not heard from for that long are "
          "left out: the split is detected, writes no longer wait for them (default 20, "
          "below the 30 s request timeout; 0 waits for them indefinitely; "
          "max-peer-lag-s)", lambda s: float(s.config.max_peer_lag_s or 0.0),
          writable=True, key="max-peer-lag-s"),
    _attr("SplitRecovery", STRING,
          "Strategy after a cluster split: None, Simple or Smart (case-insensitive; "
          "split-recovery); cannot change during a split",
          lambda s: s.config.split_recovery, writable=True),
    _attr("CompletedReads", LONG, "Read requests answered since start",
          _counter("completed_reads")),
    _attr("CompletedWrites", LONG, "Write transactions acknowledged since start",
          _counter("completed_writes")),
    _attr("FailedReads", LONG, "Read requests that failed since start",
          _counter("failed_reads")),
    _attr("FailedWrites", LONG, "Write transactions that failed since start",
          _counter("failed_writes")),
    _attr("RunningReads", LONG, "Read requests in progress", _counter("running_reads")),
    _attr("RunningWrites", LONG, "Write transactions in progress", _counter("running_writes")),
    _attr("PendingWrites", LONG, "Write transactions waiting for the write path",
          lambda s: int(cluster_of(s).pending_writes)),
    _attr("AverageReadTime", DOUBLE, "Average time of a completed read, in milliseconds",
          lambda s: (1000 * cluster_of(s).counters.read_time_s
                     / cluster_of(s).counters.completed_reads)
          if cluster_of(s).counters.completed_reads else 0.0),
    _attr("AverageTaskTimes", STRING_ARRAY,
          "Per worker: 'url milliseconds', the average time of its completed tasks",
          _per_worker(lambda w: f"{1000 * w.average_task_time_s:.3f}")),
    _attr("CompletedTasks", STRING_ARRAY,
          "Per worker: 'url count', the tasks (updates, replays, replications) it completed",
          _per_worker(lambda w: str(w.completed_tasks))),
    _attr("NumberOfTriples", LONG, "Statements in the repository at the head of the log",
          lambda s: cluster_of(s).head_quads),
    # pyoxigraph stores no inferred statements: every statement is explicit.
    _attr("NumberOfExplicitTriples", LONG,
          "Explicit statements in the repository at the head of the log (all of them: "
          "workers hold no inferred statements)", lambda s: cluster_of(s).head_quads),
)


# ---- operations ----


def _worker_url(url: str, port: int) -> str:
    """addClusterNode's (url, port): the worker's base URL. The documented signature has a
    port (the worker's JMX port in the original); here it is the worker's HTTP port when
    the URL has none, 0 keeps the URL's own port."""
    try:
        url = parse_url(url.strip())
    except ValueError as exc:
        raise InvalidArgument(f"url: {exc}") from None
    if port == 0:
        return url
    if not 1 <= port <= 65535:
        raise InvalidArgument(f"port must be 0 (the URL's own) or 1-65535, got {port}")
    parts = urlsplit(url)
    if parts.port is None:
        return parts._replace(netloc=f"{parts.netloc}:{port}").geturl()
    if parts.port != port:
        raise InvalidArgument(f"url {url} has port {parts.port} but the port argument is "
                              f"{port}: give 0 or the same port")
    return url


async def add_cluster_node(s: Control, url: str, port: int, readable: bool) -> None:
    url = _worker_url(url, port)
    await s.add_worker(url, readable)


async def remove_cluster_node(s: Control, url: str) -> None:
    await s.remove_worker(url)


async def add_sync_peer(s: Control, peer_id: str, url: str) -> None:
    await s.add_peer(peer_id, url)


async def remove_sync_peer(s: Control, peer_id: str) -> None:
    await s.remove_peer(peer_id)


async def backup(s: Control, name: str) -> str:
    record = await s.backup(name)
    return (f"backup '{name}' written by {record['worker']} at seq {record['seq']} "
            f"({record['quads']} statements)")


async def restore_from_image(s: Control, name: str) -> str:
    result = await s.restore(name)
    workers = result["workers"]
    return (f"restoring from image '{name}' (seq {result['backup']['seq']}): "
            + "; ".join(f"{url} {state}" for url, state in workers.items()))


OPERATIONS: tuple[Operation, ...] = (
    Operation("addClusterNode", (
        Param("url", STRING, "base URL of the worker, e.g. http://10.0.0.5:7300"),
        Param("port", INT, "the worker's port when the URL has none; 0: the URL's own"),
        Param("readable", BOOLEAN, "whether reads may be routed to the worker"),
    ), VOID, "Add a worker: it is synchronised or replicated automatically; persisted as "
       "worker.<n>.url", add_cluster_node),
    Operation("removeClusterNode", (
        Param("url", STRING, "base URL of the worker, as NodeStatus shows it"),
    ), VOID, "Remove a worker from the cluster; persisted", remove_cluster_node),
    Operation("addSyncPeer", (
        Param("id", STRING, "the peer master's NodeID"),
        Param("url", STRING, "the peer master's MasterURL"),
    ), VOID, "Synchronise the transaction log with another master; persisted as "
       "peer.<n>.id / peer.<n>.url", add_sync_peer),
    Operation("removeSyncPeer", (
        Param("id", STRING, "the peer master's NodeID"),
    ), VOID, "Stop synchronising with a peer master; persisted", remove_sync_peer),
    Operation("backup", (
        Param("name", STRING, "name of the image; 'default' is the one used to recover "
              "workers when no worker can serve a replication; reusing a name replaces it"),
    ), STRING, "An up-to-date worker writes a named backup image", backup),
    Operation("restoreFromImage", (
        Param("name", STRING, "name of a backup image"),
    ), STRING, "Restore every worker from a named backup image, then replay the log after "
       "it", restore_from_image),
)

ATTRIBUTES_BY_NAME = {a.name: a for a in ATTRIBUTES}
OPERATIONS_BY_NAME = {o.name: o for o in OPERATIONS}
MBEAN_DESCRIPTION = ("txcluster master: the replication cluster's state, parameters and "
                     "administration (ReplicationCluster ClusterInfo)")
