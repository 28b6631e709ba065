"""Admin JSON API of a master (OpenAPI at /docs): status, workers, backup, restore, mode,
parameters, initial bulk load. Changes take effect at once and persist to
cluster.properties."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import APIRouter, HTTPException, Path, Request
from pydantic import BaseModel, Field

from master_service.api.guard import AdminGuard, refusal_as_http
from master_service.cluster.core import Cluster, Worker
from master_service.cluster.worker_client import WorkerRefused, WorkerUnavailable
from master_service.control import Control
from master_service.errors import BulkLoadRefused
from txinfra.properties import BACKUP_NAME, BACKUP_NAME_RULE


class WorkerIn(BaseModel):
    url: str = Field(description="base URL of the worker, e.g. http://10.0.0.5:7300")
    readable: bool = Field(True, description="whether reads may be routed to it")


class ReadableIn(BaseModel):
    url: str = Field(description="base URL of the worker, as in GET /admin/status")
    readable: bool = Field(description="false: drain it (no new reads, not the probe; "
                           "it stays in sync); true: back in read rotation")


class BackupIn(BaseModel):
    name: str = Field(pattern=f"^{BACKUP_NAME}$", description=BACKUP_NAME_RULE)


class BulkLoadIn(BaseModel):
    worker: str = Field(description="the worker holding the staged parts")
    fingerprint: str = Field(pattern=r"^[0-9a-fA-F]{32}$",
                             description="fingerprint of the data (32 hex digits)")
    quads: int = Field(ge=0, description="number of distinct quads")


T = TypeVar("T")
LOAD_ID = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
BULK_PARTS_AT_ONCE = 2  # an initial load's parts read and forwarded together


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
    replication_compression: bool | None = Field(
        None, description="replication.compression: snappy-framed images (true) or plain tar")


# A field of ParametersIn is its cluster.properties key with '_' for '-', but for these.
_PARAMETER_KEYS = {"replication_compression": "replication.compression"}


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


def admin_router(control: Control, guard: AdminGuard) -> APIRouter:
    """Routes over ``control`` (master_service/control.py): each checks the user, hands
    its input to the control plane and answers; a refusal is the ``ControlError``'s
    status and message."""
    router = APIRouter(prefix="/admin", tags=["admin"])

    def cluster() -> Cluster:
        with refusal_as_http():
            return control.cluster

    def status() -> dict:
        return status_of(cluster())

    async def run(request: Request, write: bool, action: Callable[[], Awaitable[T]]) -> T:
        """``action`` for a user who may look (``write``: change); a refusal is the
        ``ControlError``'s status and message."""
        guard.require(request, write)
        with refusal_as_http():
            return await action()

    async def change(request: Request, action: Callable[[], Awaitable[Any]]) -> dict:
        """What a change answers: the status after it."""
        await run(request, True, action)
        return status()

    @router.get("/status", summary="Cluster status: head of the log, every worker, counters")
    async def get_status(request: Request) -> dict:
        guard.require(request, write=False)
        return status()

    @router.post("/workers", summary="Add a worker (addClusterNode): synchronised or "
                 "replicated automatically")
    async def add_worker(body: WorkerIn, request: Request) -> dict:
        return await change(request, lambda: control.add_worker(body.url, body.readable))

    @router.put("/workers/readable", summary="Take a worker out of read rotation or put "
                "it back (drain for maintenance; not persisted)")
    async def set_worker_readable(body: ReadableIn, request: Request) -> dict:
        return await change(request, lambda: control.set_readable(body.url, body.readable))

    @router.delete("/workers", summary="Remove a worker (removeClusterNode)")
    async def remove_worker(url: str, request: Request) -> dict:
        return await change(request, lambda: control.remove_worker(url))

    @router.post("/backup", summary="Named backup by an up-to-date worker")
    async def backup(body: BackupIn, request: Request) -> dict:
        return await run(request, True, lambda: control.backup(body.name))

    @router.post("/restore", summary="Restore every worker from a named image, then replay")
    async def restore(body: BackupIn, request: Request) -> dict:
        return await run(request, True, lambda: control.restore(body.name))

    @router.get("/backups", summary="Named backups known to this master")
    async def backups(request: Request) -> list[dict]:
        return [dataclasses.asdict(b) for b in await run(request, False, control.backups)]

    # ---- initial bulk load (txcluster load --initial; worker_service/bulk_load.py) ----

    def bulk_worker(url: str) -> Worker:
        with refusal_as_http():
            return cluster().workers[control.worker_url(url)]

    async def on_worker(call):
        """A worker's refusal goes to the caller with its status; no answer is a 502."""
        try:
            return await call
        except WorkerRefused as exc:
            raise HTTPException(exc.status, str(exc)) from None
        except WorkerUnavailable as exc:
            raise HTTPException(502, f"worker unavailable: {exc}") from None

    # Parts read and forwarded at once: every Spark task sends its own (spark_pipeline/
    # part_push.py), and a large cluster's executors would otherwise have their bodies
    # (~10 MB each) in this process's memory together. The others wait unread (TCP
    # holds their senders), as the worker's route does (PARTS_AT_ONCE there).
    parts_at_once = asyncio.Semaphore(BULK_PARTS_AT_ONCE)

    @router.put("/bulk-load/{load_id}/parts/{part}",
                summary="Initial bulk load: stage one part (N-Quads) on a worker")
    async def bulk_load_part(request: Request, worker: str,
                             load_id: str = Path(pattern=LOAD_ID),
                             part: int = Path(ge=0)) -> dict:
        guard.require(request, write=True)
        if problem := cluster().bulk_load_problem():
            raise HTTPException(409, problem)
        w = bulk_worker(worker)
        async with parts_at_once:
            return await on_worker(w.client.bulk_load_part(load_id, part,
                                                           await request.body()))

    @router.post("/bulk-load/{load_id}/sent", summary="Initial bulk load: every part is "
                 "sent, the worker loads the waiting ones while the loader computes the "
                 "commit")
    async def bulk_load_sent(request: Request, worker: str,
                             load_id: str = Path(pattern=LOAD_ID)) -> dict:
        guard.require(request, write=True)
        return await on_worker(bulk_worker(worker).client.bulk_load_sent(load_id))

    @router.post("/bulk-load/{load_id}", summary="Initial bulk load: commit the staged "
                 "parts; the log adopts the worker's state, the others are replicated")
    async def bulk_load_commit(body: BulkLoadIn, request: Request,
                               load_id: str = Path(pattern=LOAD_ID)) -> dict:
        guard.require(request, write=True)
        bulk_worker(body.worker)
        try:
            return await on_worker(cluster().commit_bulk_load(
                body.worker, load_id, body.fingerprint.lower(), body.quads))
        except BulkLoadRefused as exc:
            raise HTTPException(409, str(exc)) from None

    @router.delete("/bulk-load/{load_id}", summary="Initial bulk load: abort, dropping "
                   "the staged parts")
    async def bulk_load_abort(request: Request, worker: str,
                              load_id: str = Path(pattern=LOAD_ID)) -> dict:
        guard.require(request, write=True)
        return await on_worker(bulk_worker(worker).client.bulk_load_abort(load_id))

    @router.put("/mode", summary="Mode (NORMAL or MUTE) and read-only flag")
    async def set_mode(body: ModeIn, request: Request) -> dict:
        values = {"mode": body.mode, "read-only": body.read_only}
        return await change(request, lambda: control.set(
            {k: v for k, v in values.items() if v is not None}))

    @router.put("/parameters", summary="Smart-replication and log parameters")
    async def set_parameters(body: ParametersIn, request: Request) -> dict:
        # The body's fields are the cluster.properties keys with '_' for '-'.
        return await change(request, lambda: control.set(
            {_PARAMETER_KEYS.get(k, k.replace("_", "-")): v
             for k, v in body.model_dump(exclude_none=True).items()}))

    return router
