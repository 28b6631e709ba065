"""The peering of one master: its sync driver, the agreed ordering, and seeding, as one
object with a lifecycle.

A master peers when its agreement log says it did once or its configuration names peers;
then the write path is the agreed ordering (ordering.py), chosen before the cluster
starts (``open``), and the sync driver (driver.py) runs from ``start`` on. A master that
never peered starts peering when its first peer is added (``add_peer``) or when a joining
data centre asks it for a seed (``start_if_needed``, api/seeding.py): from then on its
state is an agreed position (docs/design/sync-protocol.md#seeding-a-data-centre).

Seeding (seeding.py) stops the driver, seeds the data centre from a peer's worker image
and starts the driver again from the seeded floor: asked by the operator (``seed_from``),
by ``sync-seed-from`` at the first start of a joining data centre (retried until it
works), or by the driver itself when no peer can bring this data centre up to date by
replay any more (``needs_seeding``: from the peer that executed the most, again
SEED_RETRY_S after a failure).

Everything runs on the master's asyncio loop. The configuration is the control plane's
(master_service/control.py): read through ``config()`` each time, so a persisted change
(a peer added, a setting) is what the next driver starts with.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from master_service.cluster.core import Cluster
from master_service.config import MasterConfig
from master_service.sync.driver import SyncDriver
from master_service.sync.messages import mode_of
from master_service.sync.ordering import AgreedOrdering
from master_service.sync.ready import SplitRecovery, Timing
from master_service.sync.seeding import SeedImages, Seeding, SeedingFailed
from master_service.sync.sqlite_storage import SqliteStorage
from master_service.sync.status import seeding_before_peering

log = logging.getLogger("txcluster.master")

# After a failed seeding, a data centre that still needs seeding tries again this late.
SEED_RETRY_S = 30.0
# A joining data centre seeded at its first start (sync-seed-from) asks again this often.
FIRST_SEED_RETRY_S = 5.0


class Peering:
    """One master's side of peering (module docstring). ``driver`` is the running sync
    driver, None while this master does not peer or while it is being seeded."""

    def __init__(self, *, config: Callable[[], MasterConfig], secret: bytes,
                 tls: ssl.SSLContext | None,
                 on_round: Callable[[float], None] | None = None) -> None:
        self._config = config
        self._secret = secret  # the peer credential
        self._tls = tls
        self._on_round = on_round  # metrics: each round's duration
        self.cluster: Cluster | None = None
        self.agreement: SqliteStorage | None = None
        self._scheduler: Any = None
        self.driver: SyncDriver | None = None
        # The write path of a peered master; None: the cluster's own group commit
        # (cluster/local_ordering.py).
        self.ordering: AgreedOrdering | None = None
        # The donor's images for peers, and this data centre's own seeding from a peer.
        self.images: SeedImages | None = None
        self.seeding: Seeding | None = None
        self._seed_task: asyncio.Task | None = None
        self._lock = asyncio.Lock()
        self._peered = False

    # ---- lifecycle ----

    async def open(self, cluster: Cluster, agreement: SqliteStorage) -> None:
        """Take the data centre's cluster and agreement log, before the cluster starts:
        a master that peers chooses the agreed ordering here, once."""
        c = self._config()
        self.cluster, self.agreement = cluster, agreement
        self._peered = agreement.enabled or bool(c.peers)
        if self._peered:
            # A master that gets its first peer at runtime switches in _start_driver.
            self.ordering = AgreedOrdering(cluster, agreement)
            await cluster.order_by(self.ordering)
        self.images = SeedImages(cluster, agreement, lambda: self.driver,
                                 lambda: cluster.params.compression)
        self.seeding = Seeding(
            cluster=cluster, agreement=agreement, secret=self._secret,
            node_id=c.node_id, master_url=c.master_url, data_dir=c.data_dir,
            request_timeout=c.request_timeout_s, tls=self._tls)

    @property
    def peered(self) -> bool:
        """Whether this master peered at its start (agreement log or configured peers)."""
        return self._peered

    async def start(self, scheduler: Any) -> None:
        """Once the cluster runs: a joining data centre (sync-seed-from, never peered) is
        seeded first, in the background; any other master that peers starts its driver."""
        c = self._config()
        assert self.agreement is not None
        self._scheduler = scheduler
        if self._peered and c.sync_seed_from and not self.agreement.enabled:
            url = dict(c.peers)[c.sync_seed_from]
            self._seed_task = asyncio.create_task(
                self._seed(c.sync_seed_from, url, retry_s=FIRST_SEED_RETRY_S), name="seeding")
        elif self._peered:
            await self._start_driver()

    async def stop(self) -> None:
        if self._seed_task is not None:
            self._seed_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._seed_task
        if self.seeding is not None:
            await self.seeding.close()
        if self.driver:
            await self.driver.stop()

    async def _start_driver(self) -> None:
        """Peer: from here on every write goes through the TxLog sync protocol. The
        data centre's current state is agreed position 0 (the peering base)."""
        c = self._config()
        assert self.agreement is not None and self.cluster is not None
        await self.cluster.db(self.agreement.enable)
        if self.ordering is None:  # the first peer, added at runtime
            self.ordering = AgreedOrdering(self.cluster, self.agreement)
            await self.cluster.order_by(self.ordering)
        self.driver = SyncDriver(
            node_id=c.node_id, mode=mode_of(c.read_only, c.mode), peers=dict(c.peers),
            secret=self._secret, agreement=self.agreement, cluster=self.cluster,
            scheduler=self._scheduler, request_timeout=c.request_timeout_s,
            data_centre=c.data_centre, on_round=self._on_round,
            on_needs_seeding=self._needs_seeding,
            split_recovery=SplitRecovery(c.split_recovery), tls=self._tls,
            ordering=self.ordering,
            timing=Timing(round_timeout=c.sync_round_timeout_ms,
                          idle_interval=c.sync_idle_interval_ms,
                          max_peer_lag=None if c.max_peer_lag_s is None
                          else int(c.max_peer_lag_s * 1000)))
        await self.driver.start()
        if self.images is not None and (held := await self.images.reinstate()):
            log.info("sync: holding the agreed entries seedings of %s still need",
                     ", ".join(held))
        self.ordering.submit_to = self.driver.submit

    async def start_if_needed(self) -> None:
        """Peer from now on, with the configured peers or none yet (a seed request to a
        master that never peered: api/seeding.py)."""
        async with self._lock:  # two seed requests at once: one driver
            if self.driver is None and self.cluster is not None and not self._seeding_now:
                await self._start_driver()

    # ---- peers ----

    async def add_peer(self, peer_id: str, url: str) -> None:
        """A peer added to the configuration (control.py persisted it): the running
        driver takes it; the first peer of a master that never peered starts the driver
        (the write path now agrees)."""
        if self.driver is not None:
            await self.driver.add_peer(peer_id, url)
        elif self.cluster is not None:
            await self._start_driver()

    async def remove_peer(self, peer_id: str) -> None:
        if self.driver is not None:
            await self.driver.remove_peer(peer_id)

    # ---- status ----

    def status(self) -> dict | None:
        """The peering state for status pages, the admin API and JMX, None when this
        master has no peers.

        Keys: node_id, mode ("read-write" | "read-only" | "muted"), state ("connected" |
        "waiting" | "split" | "recovering", or "seeding"), seq (agreed position),
        executed_seq, merge_base, counter, activity ("busy" | "idle"), incoming (count),
        peers: a list of {id, url, mode, reachable, last_heard_s, seq, fingerprint_match},
        divergences: a list of {peer, kind, detail, time}; also data_centre,
        missing_peers, split_suspected, executed_fingerprint, failed; and the progress
        of a seeding under "seeding"."""
        status = self.driver.status() if self.driver is not None else None
        progress = self.seeding.progress if self.seeding is not None else None
        if progress is not None:
            if status is None:  # seeding before peering: nothing agreed yet
                c = self._config()
                status = seeding_before_peering(c.node_id, c.data_centre)
            elif self.seeding is not None and self.seeding.running:
                status["state"] = "seeding"
            status["seeding"] = dict(progress)
        return status

    # ---- seeding ----

    @property
    def _seeding_now(self) -> bool:
        """A seeding of this data centre is under way (its task has not ended)."""
        return self._seed_task is not None and not self._seed_task.done()

    def _needs_seeding(self) -> None:
        """The driver found that no peer can bring this data centre up to date by replay
        any more: seed it from the peer that executed the most (once at a time; after a
        failure, again SEED_RETRY_S later)."""
        if self.driver is None or self._seeding_now:
            return
        progress = self.seeding.progress if self.seeding is not None else None
        if progress and progress["phase"] == "failed" and \
                time.time() - progress["finished"] < SEED_RETRY_S:
            return  # the next needs_seeding after a failure waits a while
        donor = self.driver.node.seed_donor()
        url = dict(self._config().peers).get(donor) if donor else None
        if url is not None:
            log.warning("this data centre needs seeding: seeding it from %s", donor)
            self._seed_task = asyncio.create_task(self._seed(donor, url), name="seeding")

    async def seed_from(self, peer: str) -> dict:
        """Seed this data centre from peer ``peer`` (admin API, JMX): in the background,
        progress in status()["seeding"]. KeyError: not a peer; SeedingFailed: one is
        running already."""
        c = self._config()
        url = dict(c.peers).get(peer)
        if url is None:
            raise KeyError(f"'{peer}' is not a sync peer of {c.node_id}")
        assert self.seeding is not None
        if self.seeding.running or self._seeding_now:
            raise SeedingFailed("a seeding is already running")
        self._seed_task = asyncio.create_task(self._seed(peer, url), name="seeding")
        await asyncio.sleep(0)  # running from here on
        return dict(self.seeding.progress or {})

    async def _seed(self, peer: str, url: str, retry_s: float = 0.0) -> None:
        """Peering stops (writes are refused: "peering is starting"), the data centre is
        seeded, peering starts again from the seeded floor. ``retry_s``: ask again after
        that long until it works (the first start of a joining data centre); 0: once."""
        assert self.seeding is not None and self.agreement is not None
        if self.driver is not None:
            if self.ordering is not None:
                self.ordering.submit_to = None
            await self.driver.stop()
            self.driver = None
        while True:
            try:
                await self.seeding.run(peer, url)
                failed = False
                break
            except SeedingFailed:
                failed = True
                if not retry_s:
                    break
                await asyncio.sleep(retry_s)
        # A data centre that never peered does not start at its own state: it has none
        # that its peers agreed on (docs/design/sync-protocol.md#seeding-a-data-centre).
        if self.agreement.enabled:
            await self._start_driver()
            if failed:  # still needing seeding then: ask again later (_needs_seeding)
                asyncio.get_running_loop().call_later(SEED_RETRY_S + 1, self._retry_seeding)
        if not failed:
            self.seeding.done()

    def _retry_seeding(self) -> None:
        if self.driver is not None and self.driver.health.needs_seeding:
            self._needs_seeding()
