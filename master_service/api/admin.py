"""Admin JSON API of a master (OpenAPI at /docs): status, workers, backup, restore, mode,
parameters, initial bulk load. Changes take effect at once and persist to
cluster.properties."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from fastapi import APIRouter, HTTPException, Path, Request
from pydantic import BaseModel, Field

from master_service.api.client import ClientAuth
from master_service.cluster.core import Cluster
from master_service.cluster.worker_client import WorkerRefused, WorkerUnavailable
from master_service.errors import BulkLoadRefused, NoWorkerAvailable
from txcluster.properties import ConfigError


class WorkerIn(BaseModel):
    url: str = Field(description="base URL of the worker, e.g. http://10.0.0.5:7300")
    readable: bool = Field(True, description="whether reads may be routed to it")


class ReadableIn(BaseModel):
    url: str = Field(description="base URL of the worker, as in GET /admin/status")
    readable: bool = Field(description="false: drain it (no new reads, not the probe; "
                           "it stays in sync); true: back in read rotation")


class BackupIn(BaseModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class BulkLoadIn(BaseModel):
    worker: str = Field(description="the worker holding the staged parts")
    fingerprint: str = Field(pattern=r"^[0-9a-fA-F]{32}$",
                             description="fingerprint of the data (32 hex digits)")
    quads: int = Field(ge=0, description="number of distinct quads")


LOAD_ID = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


class ModeIn(BaseModel):
    mode: str | None = Field(None, description="NORMAL or MUTE")
    read_only: bool | None = None


class ParametersIn(BaseModel):
    net_speed_bits_per_sec: int | None = Field(None, gt=0)
    full_replication_time_factor: float | None = Field(None, gt=0)
    min_time_to_consider_full_replication_s: int | None = Field(None, ge=0)
    log_max_size: int | None = Field(None, ge=1)
    log_max_depth: int | None = Field(None, ge=1, description="hours")
    protect_single_worker: bool | None = None


def status_of(cluster: Cluster) -> dict:
    c = cluster.counters
    return {
        "node_id": cluster.node_id,
        "status": cluster.status_code(),
        "writable": cluster.writable_reason() is None,
        "not_writable_because": cluster.writable_reason(),
        "mode": cluster.mode,
        "read_only": cluster.read_only,
        "head": {"seq": cluster.head_seq, "fingerprint": cluster.head_fingerprint,
                 "quads": cluster.head_quads},
        "probe": cluster.probe,
        "workers": [
            {
                "url": w.url, "status": str(w.status), "readable": w.readable, "seq": w.seq,
                "fingerprint": w.fingerprint, "quads": w.quads, "size_bytes": w.size_bytes,
                "running_reads": cluster.router.stats[w.url].running
                if w.url in cluster.router.stats else 0,
                "completed_tasks": w.completed_tasks, "failed_tasks": w.failed_tasks,
                "average_task_time_s": round(w.average_task_time_s, 6),
                "pending_forwards": len(w.queue), "last_error": w.last_error,
            }
            for w in cluster.workers.values()
        ],
        "counters": {
            "completed_reads": c.completed_reads, "failed_reads": c.failed_reads,
            "completed_writes": c.completed_writes, "failed_writes": c.failed_writes,
            "running_reads": c.running_reads, "running_writes": c.running_writes,
            "pending_writes": cluster.pending_writes,
            "write_groups": c.write_groups,
            "average_read_time_s": c.read_time_s / c.completed_reads if c.completed_reads
            else 0.0,
        },
        "parameters": {
            "net_speed_bits_per_sec": cluster.params.net_speed_bits_per_sec,
            "full_replication_time_factor": cluster.params.full_replication_time_factor,
            "min_time_to_consider_full_replication_s":
                cluster.params.min_time_to_consider_full_replication_s,
            "log_max_size": cluster.log_max_size, "log_max_depth": cluster.log_max_depth_h,
            "protect_single_worker": cluster.protect_single_worker,
        },
        "events": [{"time": t, "message": m} for t, m in cluster.events[-20:]],
    }


def admin_router(cluster_provider: Callable[[], Cluster], auth: ClientAuth,
                 persist: Callable[[dict[str, str | None]], None],
                 config_provider: Callable[[], object]) -> APIRouter:
    router = APIRouter(prefix="/admin", tags=["admin"])

    def guard(request: Request, write: bool) -> Cluster:
        denied = auth.problem(request, need_write=write)
        if denied is not None:
            # The challenge header too: a 401 without WWW-Authenticate (RFC 9110 11.6.1)
            # leaves browsers and curl --anyauth without a way to ask for credentials.
            challenge = {k: v for k, v in denied.headers.items()
                         if k.lower() == "www-authenticate"}
            raise HTTPException(denied.status_code, denied.body.decode(),
                                headers=challenge or None)
        return cluster_provider()

    def save(changes: dict[str, str | None]) -> None:
        try:
            persist(changes)
        except ConfigError as exc:
            raise HTTPException(400, str(exc)) from None

    @router.get("/status", summary="Cluster status: head of the log, every worker, counters")
    async def get_status(request: Request) -> dict:
        return status_of(guard(request, write=False))

    @router.post("/workers", summary="Add a worker (addClusterNode): synchronised or "
                 "replicated automatically")
    async def add_worker(body: WorkerIn, request: Request) -> dict:
        cluster = guard(request, write=True)
        config = config_provider()
        url = body.url.rstrip("/")
        if url in cluster.workers:
            raise HTTPException(409, f"worker {url} is already part of the cluster")
        save(config.add_worker_changes(url))
        await cluster.add_worker(url, body.readable)
        return status_of(cluster)

    @router.delete("/workers", summary="Remove a worker (removeClusterNode)")
    async def remove_worker(url: str, request: Request) -> dict:
        cluster = guard(request, write=True)
        url = url.rstrip("/")
        if url not in cluster.workers:
            raise HTTPException(404, f"unknown worker {url}")
        save(config_provider().remove_worker_changes(url))
        await cluster.remove_worker(url)
        return status_of(cluster)

    @router.put("/workers/readable", summary="Take a worker out of read rotation or put "
                "it back (drain for maintenance; not persisted)")
    async def set_worker_readable(body: ReadableIn, request: Request) -> dict:
        cluster = guard(request, write=True)
        try:
            cluster.set_readable(body.url, body.readable)
        except KeyError:
            raise HTTPException(404, f"unknown worker {body.url}") from None
        return status_of(cluster)

    @router.post("/backup", summary="Named backup by an up-to-date worker")
    async def backup(body: BackupIn, request: Request) -> dict:
        cluster = guard(request, write=True)
        try:
            return await cluster.backup(body.name)
        except NoWorkerAvailable as exc:
            raise HTTPException(503, str(exc)) from None
        except (WorkerUnavailable, WorkerRefused) as exc:
            raise HTTPException(502, f"backup failed: {exc}") from None

    @router.post("/restore", summary="Restore every worker from a named image, then replay")
    async def restore(body: BackupIn, request: Request) -> dict:
        cluster = guard(request, write=True)
        try:
            return await cluster.restore(body.name)
        except KeyError as exc:
            raise HTTPException(404, str(exc.args[0])) from None

    @router.get("/backups", summary="Named backups known to this master")
    async def backups(request: Request) -> list[dict]:
        cluster = guard(request, write=False)
        return [dataclasses.asdict(b) for b in await cluster.db(cluster.txlog.backups)]

    # ---- initial bulk load (txcluster load --initial; worker_service/bulk_load.py) ----

    def bulk_worker(cluster: Cluster, url: str):
        w = cluster.workers.get(url.rstrip("/"))
        if w is None:
            raise HTTPException(404, f"unknown worker {url}")
        return w

    async def on_worker(call):
        """A worker's refusal goes to the caller with its status; no answer is a 502."""
        try:
            return await call
        except WorkerRefused as exc:
            raise HTTPException(exc.status, str(exc)) from None
        except WorkerUnavailable as exc:
            raise HTTPException(502, f"worker unavailable: {exc}") from None

    @router.put("/bulk-load/{load_id}/parts/{part}",
                summary="Initial bulk load: stage one part (N-Quads) on a worker")
    async def bulk_load_part(request: Request, worker: str,
                             load_id: str = Path(pattern=LOAD_ID),
                             part: int = Path(ge=0)) -> dict:
        cluster = guard(request, write=True)
        if problem := cluster.bulk_load_problem():
            raise HTTPException(409, problem)
        w = bulk_worker(cluster, worker)
        return await on_worker(w.client.bulk_load_part(load_id, part, await request.body()))

    @router.post("/bulk-load/{load_id}", summary="Initial bulk load: commit the staged "
                 "parts; the log adopts the worker's state, the others are replicated")
    async def bulk_load_commit(body: BulkLoadIn, request: Request,
                               load_id: str = Path(pattern=LOAD_ID)) -> dict:
        cluster = guard(request, write=True)
        bulk_worker(cluster, body.worker)
        try:
            return await on_worker(cluster.commit_bulk_load(
                body.worker, load_id, body.fingerprint.lower(), body.quads))
        except BulkLoadRefused as exc:
            raise HTTPException(409, str(exc)) from None

    @router.delete("/bulk-load/{load_id}", summary="Initial bulk load: abort, dropping "
                   "the staged parts")
    async def bulk_load_abort(request: Request, worker: str,
                              load_id: str = Path(pattern=LOAD_ID)) -> dict:
        cluster = guard(request, write=True)
        return await on_worker(bulk_worker(cluster, worker).client.bulk_load_abort(load_id))

    @router.put("/mode", summary="Mode (NORMAL or MUTE) and read-only flag")
    async def set_mode(body: ModeIn, request: Request) -> dict:
        cluster = guard(request, write=True)
        changes: dict[str, str | None] = {}
        if body.mode is not None:
            if body.mode.upper() not in ("NORMAL", "MUTE"):
                raise HTTPException(400, f"mode must be NORMAL or MUTE, got '{body.mode}'")
            changes["mode"] = body.mode.upper()
        if body.read_only is not None:
            changes["read-only"] = str(body.read_only).lower()
        save(changes)
        if body.mode is not None:
            cluster.mode = body.mode.upper()
        if body.read_only is not None:
            cluster.read_only = body.read_only
        return status_of(cluster)

    @router.put("/parameters", summary="Smart-replication and log parameters")
    async def set_parameters(body: ParametersIn, request: Request) -> dict:
        cluster = guard(request, write=True)
        values = body.model_dump(exclude_none=True)
        keys = {"net_speed_bits_per_sec": "net-speed-bits-per-sec",
                "full_replication_time_factor": "full-replication-time-factor",
                "min_time_to_consider_full_replication_s":
                    "min-time-to-consider-full-replication-s",
                "log_max_size": "log-max-size", "log_max_depth": "log-max-depth",
                "protect_single_worker": "protect-single-worker"}
        save({keys[k]: str(v).lower() if isinstance(v, bool) else str(v)
              for k, v in values.items()})
        p = cluster.params
        cluster.params = dataclasses.replace(p, **{
            k: v for k, v in values.items() if hasattr(p, k)})
        cluster.log_max_size = values.get("log_max_size", cluster.log_max_size)
        cluster.log_max_depth_h = values.get("log_max_depth", cluster.log_max_depth_h)
        cluster.protect_single_worker = values.get("protect_single_worker",
                                                   cluster.protect_single_worker)
        return status_of(cluster)

    return router
