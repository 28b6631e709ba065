"""The master's control plane: every runtime change goes through here.

Set mode and read-only, set parameters (smart replication, replication compression,
LogMaxSize / LogMaxDepth, ProtectSingleWorker, MaxPeerLag, SplitRecovery, MasterURL),
add / remove / drain a worker, backup / restore, add / remove a sync peer. Each follows
one order:

1. validate: a value is parsed by the parser of its cluster.properties key (so a value
   accepted at runtime is one a restart accepts), and the request is checked against
   the running master (a known worker, a known peer, no SplitRecovery change during a
   split);
2. persist: ``update_properties`` checks the whole resulting file as a restart would,
   then writes it atomically;
3. apply: the running cluster and the peering (its sync driver) take the change.

A refused request raises a ``ControlError`` before step 2 and changes nothing
(ARCHITECTURE.md: every bad input gets a clear error and changes nothing). The admin
API (api/admin.py, api/sync_admin.py) and the MBean (jmx/attributes.py, served by the
JVM bridge and Jolokia) are shells that translate their inputs into these calls and a
``ControlError`` into their own error (an HTTP status, a JMX exception).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from master_service.cluster.core import Cluster
from master_service.cluster.worker_client import WorkerRefused, WorkerUnavailable
from master_service.config import SCHEMA, MasterConfig, parse_node_id, update_properties
from master_service.errors import NoWorkerAvailable
from master_service.sync.messages import mode_of
from master_service.sync.peering import Peering
from master_service.sync.ready import SplitRecovery
from master_service.sync.seeding import SeedingFailed
from txinfra.properties import BACKUP_NAME_RULE, ConfigError, is_backup_name, parse_url

log = logging.getLogger("txcluster.master.control")


# ---- refusals: nothing changed; ``status`` is the admin API's HTTP status ----


class ControlError(Exception):
    status = 400


class Invalid(ControlError):
    """A bad value or argument."""


class Conflict(ControlError):
    """The thing to add is already there."""

    status = 409


class NotFound(ControlError):
    """An unknown worker, peer or backup."""

    status = 404


class Unavailable(ControlError):
    """A valid request the master cannot carry out now (still starting, no worker for a
    backup, a SplitRecovery change during a split)."""

    status = 503


class Failed(ControlError):
    """A worker failed the operation."""

    status = 502


# ---- the settings that change at runtime ----


def _on_params(field_name: str) -> Callable[[Cluster, Any], None]:
    def apply(cluster: Cluster, value: Any) -> None:
        cluster.params = dataclasses.replace(cluster.params, **{field_name: value})

    return apply


def _on_cluster(field_name: str) -> Callable[[Cluster, Any], None]:
    return lambda cluster, value: setattr(cluster, field_name, value)


@dataclass(frozen=True)
class Setting:
    """A cluster.properties key that changes at runtime and what takes the new value:
    ``apply`` sets it on the running cluster (None: readers take it from the reloaded
    config); ``sync`` names what the sync driver is told (``Control._tell_sync``)."""

    key: str
    apply: Callable[[Cluster, Any], None] | None = None
    sync: str | None = None


SETTINGS: dict[str, Setting] = {s.key: s for s in (
    Setting("net-speed-bits-per-sec", _on_params("net_speed_bits_per_sec")),
    Setting("full-replication-time-factor", _on_params("full_replication_time_factor")),
    Setting("min-time-to-consider-full-replication-s",
            _on_params("min_time_to_consider_full_replication_s")),
    Setting("replication.compression", _on_params("compression")),
    Setting("log-max-size", _on_cluster("log_max_size")),
    Setting("log-max-depth", _on_cluster("log_max_depth_h")),
    Setting("protect-single-worker", _on_cluster("protect_single_worker")),
    # The sync protocol's mode follows ReadOnly and Mode (messages.mode_of).
    Setting("read-only", _on_cluster("read_only"), sync="mode"),
    Setting("mode", _on_cluster("mode"), sync="mode"),
    Setting("master-url"),
    Setting("max-peer-lag-s", sync="max-peer-lag"),
    Setting("split-recovery", sync="split-recovery"),
)}


def as_text(value: Any) -> str:
    """A typed value as cluster.properties spells it."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def unknown_worker(url: str, workers: Mapping[str, Any]) -> NotFound:
    return NotFound(f"unknown worker {url!r}; the workers are: " + (", ".join(workers)
                                                                     or "none"))


class Control:
    """The control plane of one master process: it owns the configuration (reloaded
    after each persisted change) and acts on the cluster (``cluster()``: None while the
    master starts) and the peering."""

    def __init__(self, config: MasterConfig, cluster: Callable[[], Cluster | None],
                 peering: Peering) -> None:
        self.config = config
        self._cluster = cluster
        self.peering = peering
        # Sync driver changes that run after the answer (a core restart waits for the
        # round in progress); held here so that they are not collected while they run.
        self._follow_ups: set[asyncio.Task] = set()

    @property
    def cluster(self) -> Cluster:
        cluster = self._cluster()
        if cluster is None:
            raise Unavailable("the master is still starting: its cluster is not up yet")
        return cluster

    def _persist(self, changes: Mapping[str, str | None], label: str | None = None) -> None:
        try:
            self.config = update_properties(self.config.path, changes)
        except ConfigError as exc:
            raise Invalid(f"{label}: {exc}" if label else str(exc)) from None

    # ---- settings ----

    async def set(self, values: Mapping[str, Any],
                  labels: Mapping[str, str] | None = None) -> None:
        """Set runtime settings, ``{cluster.properties key: value}`` (a typed value or
        its text). ``labels`` names each key in messages as the caller's user knows it
        (an MBean attribute); by default the key itself."""
        labels = labels or {}
        parsed: dict[str, Any] = {}
        for key, value in values.items():
            label = labels.get(key, key)
            if key not in SETTINGS:
                raise Invalid(f"{label}: not a setting that changes at runtime")
            try:
                parsed[key] = SCHEMA.key(key).parse(as_text(value))  # type: ignore[union-attr]
            except ValueError as exc:
                raise Invalid(f"{label}: {exc}; nothing changed") from None
        if not parsed:
            return
        if "split-recovery" in parsed:
            self._check_split_recovery(parsed["split-recovery"])
        settings = [SETTINGS[key] for key in parsed]
        # A master still starting changes nothing, not even the file.
        cluster = self.cluster if any(s.apply for s in settings) else None
        self._persist({key: as_text(v) for key, v in parsed.items()},
                      ", ".join(labels[k] for k in parsed if k in labels) or None)
        for s in settings:
            if s.apply is not None:
                s.apply(cluster, parsed[s.key])  # type: ignore[arg-type]
        for what in dict.fromkeys(s.sync for s in settings if s.sync):
            self._tell_sync(what)

    def _check_split_recovery(self, strategy: str) -> None:
        # The strategy is state: it cannot change during a split
        # (docs/design/sync-protocol.md#split-recovery).
        # Refused here, before anything is persisted, in every state in which the sync
        # driver would refuse it (SyncDriver.set_split_recovery): split, or recovering
        # from a split (the data centre going back to the split backup).
        current = self.config.split_recovery
        state = (self.peering.status() or {}).get("state")
        if strategy == current or state not in ("split", "recovering"):
            return
        if state == "split":
            raise Unavailable(
                f"SplitRecovery cannot be changed during a cluster split: the strategy "
                f"'{current}' stays until the split is recovered; nothing changed")
        raise Unavailable(
            f"SplitRecovery cannot be changed while a cluster split is being recovered "
            f"(this data centre is returning to its split backup): the strategy "
            f"'{current}' stays until the recovery is done; nothing changed")

    def _tell_sync(self, what: str) -> None:
        """The sync driver follows a persisted change (the reloaded config has it)."""
        sync, config = self.peering.driver, self.config
        if sync is None:
            return  # not peered: the driver takes the config when it starts
        if what == "max-peer-lag":
            sync.set_max_peer_lag(config.max_peer_lag_s)
        elif what == "split-recovery":
            self._follow_up(sync.set_split_recovery(SplitRecovery(config.split_recovery)))
        elif what == "mode":
            self._follow_up(sync.set_mode(mode_of(config.read_only, config.mode)))

    def _follow_up(self, change: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(change)
        self._follow_ups.add(task)
        task.add_done_callback(self._follow_up_done)

    def _follow_up_done(self, task: asyncio.Task) -> None:
        self._follow_ups.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("the sync driver did not take a setting: %s", task.exception())

    # ---- workers ----

    def worker_url(self, url: str) -> str:
        """A worker of the cluster, as the cluster names it; NotFound otherwise."""
        cluster = self.cluster
        url = url.strip().rstrip("/")
        if url not in cluster.workers:
            raise unknown_worker(url, cluster.workers)
        return url

    async def add_worker(self, url: str, readable: bool = True) -> None:
        """addClusterNode: persisted as worker.<n>.url, then synchronised or replicated."""
        cluster = self.cluster
        url = url.strip().rstrip("/")
        if url in cluster.workers:
            raise Conflict(f"worker {url} is already part of the cluster")
        self._persist(self.config.add_worker_changes(url))
        await cluster.add_worker(url, readable)

    async def remove_worker(self, url: str) -> None:
        """removeClusterNode: its worker.<n>.url goes, then the worker."""
        url = self.worker_url(url)
        self._persist(self.config.remove_worker_changes(url))
        await self.cluster.remove_worker(url)

    async def set_readable(self, url: str, readable: bool) -> None:
        """Drain a worker (no new reads, not the probe) or put it back; not persisted."""
        self.cluster.set_readable(self.worker_url(url), readable)

    # ---- backup and restore ----

    @staticmethod
    def backup_name(name: str) -> str:
        if not is_backup_name(name):
            raise Invalid(f"backup name {name!r} is not valid: {BACKUP_NAME_RULE}")
        return name

    async def backup(self, name: str) -> dict:
        """An up-to-date worker writes the named image; its record."""
        name = self.backup_name(name)
        try:
            return await self.cluster.backup(name)
        except NoWorkerAvailable as exc:
            raise Unavailable(str(exc)) from None
        except (WorkerUnavailable, WorkerRefused) as exc:
            raise Failed(f"backup failed: {exc}") from None

    async def restore(self, name: str) -> dict:
        """Every worker from the named image, then the log after it is replayed."""
        name = self.backup_name(name)
        try:
            return await self.cluster.restore(name)
        except KeyError as exc:
            raise NotFound(str(exc.args[0])) from None

    async def backups(self) -> list:
        cluster = self.cluster
        return await cluster.db(cluster.txlog.backups)

    # ---- sync peers (addSyncPeer / removeSyncPeer) ----

    async def add_peer(self, peer_id: str, url: str) -> None:
        """Peer with another master; persisted as peer.<n>.id / peer.<n>.url. The first
        peer starts the sync driver: from then on every write is agreed among peers."""
        config = self.config
        try:
            peer_id, url = parse_node_id(peer_id), parse_url(url)
        except ValueError as exc:  # the parsers' messages name what is wrong
            raise Invalid(str(exc)) from None
        if peer_id == config.node_id:
            raise Invalid(f"'{peer_id}' is this master's own node id")
        if any(known == peer_id for known, _ in config.peers):
            raise Conflict(f"'{peer_id}' is already a sync peer")
        self._persist(config.add_peer_changes(peer_id, url))
        await self.peering.add_peer(peer_id, url)

    async def remove_peer(self, peer_id: str) -> None:
        """Stop peering with a master."""
        config = self.config
        if not any(known == peer_id for known, _ in config.peers):
            raise NotFound(f"'{peer_id}' is not a sync peer of {config.node_id}")
        self._persist(config.remove_peer_changes(peer_id))
        await self.peering.remove_peer(peer_id)

    async def seed(self, peer_id: str) -> dict:
        """Seed this data centre from a peer's worker image (master_service/sync/seeding.py):
        started in the background; the progress it returns goes on in GET /admin/sync."""
        if self.peering.seeding is None:
            raise Unavailable("the master is still starting")
        try:
            return await self.peering.seed_from(peer_id)
        except KeyError as exc:
            raise NotFound(str(exc.args[0])) from None
        except SeedingFailed as exc:
            raise Conflict(str(exc)) from None
