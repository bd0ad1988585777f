"""Status routes: ``/``, ``/health``, ``/api/version``, ``/api/ps``, ``/metrics``."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from .. import __version__
from ..engine.types import EngineStats
from ..hardware.memory import ModelGeometry
from ..jsontypes import JSONObject, JSONValue
from ..modelkind import ModelKind, kind_detail
from ..runtime.scheduler import ResidentModel, Scheduler
from . import remote
from .http import iso, json_reply
from .keys import METRICS, PULLS, SCHEDULER, SERVICE, STARTED_AT

log = logging.getLogger(__name__)

_QUANTS = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
           12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
           19: "IQ2_XXS", 20: "IQ2_XS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 28: "IQ4_XS", 32: "BF16"}


def details(geometry: ModelGeometry | None) -> JSONObject:
    """Ollama's ``details`` object from GGUF metadata."""
    if geometry is None:
        return {"format": "gguf"}
    return {
        "parent_model": "",
        "format": "gguf",
        "family": geometry.architecture,
        "families": [geometry.architecture],
        "parameter_size": geometry.size_label or "",
        "quantization_level": _QUANTS.get(geometry.file_type, "unknown") if geometry.file_type is not None
        else "unknown",
        **({"base_model": True} if geometry.base_model else {}),
        **kind_detail(geometry.kind),
    }


async def root(request: web.Request) -> web.Response:
    return web.Response(text="localrun is running")


async def version(request: web.Request) -> web.Response:
    return json_reply({"version": __version__})


async def health(request: web.Request) -> web.Response:
    scheduler = request.app[SCHEDULER]
    return json_reply({
        "status": "ok",
        "version": __version__,
        "models_loaded": len(scheduler.models),
        "queue_depth": scheduler.queue_depth,
        "uptime_seconds": round(asyncio.get_running_loop().time() - request.app[STARTED_AT], 3),
    })


def threads_entry(stats: EngineStats | None) -> JSONObject | None:
    """What a runner's kernels run on now (engine/threads.py), or None when it did not say."""
    if stats is None or not stats.threads_decode:
        return None
    return {"decode": stats.threads_decode, "prefill": stats.threads_prefill, "cores": stats.threads_cores,
            "pinned": bool(stats.threads_pinned), "other_load": stats.other_load_pct / 100}


async def _stats(model: ResidentModel, timeout: float = 1.0) -> EngineStats | None:
    try:
        return await asyncio.wait_for(model.backend.stats(), timeout=timeout)
    except Exception as exc:  # a busy or dying runner costs the column, never the listing
        log.debug("stats for %s unavailable: %s", model.name, exc)
        return None


def ps_entry(scheduler: Scheduler, model: ResidentModel, stats: EngineStats | None = None) -> JSONObject:
    from ..hardware.memory import read_geometry

    try:
        geometry: ModelGeometry | None = read_geometry(model.spec.model_path)
    except Exception:
        geometry = None
    p, info = model.placement, model.backend.info
    return {
        "name": model.name,
        "model": model.name,
        "size": p.size,
        "digest": (model.spec.digest or "").removeprefix("sha256:"),  # bare hex, as /api/tags and Ollama
        "details": details(geometry),
        "expires_at": iso(scheduler.expires_at(model)),
        "size_vram": p.vram,
        "context_length": info.num_ctx if info else model.spec.options.num_ctx,  # the most one request holds
        # localrun extras (ignored by Ollama clients):
        # None for an embedding model or a reranker: no pool, one pooled context (engine/pooled.py)
        "context_pool": None if info and info.kind is not ModelKind.GENERATION
        else info.context_pool if info and info.context_pool else model.spec.options.pool,
        "processor": p.processor(),
        "gpu_layers": p.gpu_layers,
        "num_parallel": model.slots,
        "active": model.active,
        "queued": model.queued,
        "loaded_at": iso(model.loaded_at),
        "load_reason": model.reason,
        "pid": model.backend.pid,
        # where llama.cpp put the weights, per buffer (``RPC0[host:port]`` for an RPC worker)
        "split": [{"device": name, "bytes": size} for name, size in (info.buffer_bytes if info else {}).items()],
        "rpc_servers": list(info.rpc_servers if info else ()),
        "threads": threads_entry(stats),
    }


async def ps(request: web.Request) -> web.Response:
    scheduler = request.app[SCHEDULER]
    models = sorted(scheduler.models.values(), key=lambda m: m.name)
    # a localrun extension (a list[JSONValue], as JSONObject's values are)
    pulls: list[JSONValue] = [p for p in sorted(request.app[PULLS].values(), key=lambda p: str(p["model"]))]
    stats = await asyncio.gather(*(_stats(m) for m in models))
    out: JSONObject = {"models": [ps_entry(scheduler, m, st) for m, st in zip(models, stats, strict=True)],
                       "pulls": pulls}
    upstreams = request.app[SERVICE].upstreams
    if upstreams is not None:  # a localrun extension: each upstream member's state
        out["upstreams"] = [remote.ps_row(s) for s in upstreams.snapshot()]
    return json_reply(out)


async def metrics(request: web.Request) -> web.Response:
    scheduler = request.app[SCHEDULER]
    m = request.app[METRICS]
    m.clear_model_gauges()
    m.queue_depth.set(scheduler.queue_depth)
    m.loaded_models.set(len(scheduler.models))
    for model in list(scheduler.models.values()):
        m.model_memory.labels(model.name, "ram").set(model.placement.ram)
        m.model_memory.labels(model.name, "vram").set(model.placement.vram)
        m.active.labels(model.name).set(model.active)
        stats = await _stats(model, timeout=2.0)
        if stats is None:  # a busy or dying runner must not break the scrape
            continue
        m.kv_used.labels(model.name).set(stats.kv_cells_used)
        m.kv_total.labels(model.name).set(stats.kv_cells_total)
        m.host_cache_tokens.labels(model.name).set(stats.host_cache_tokens)
        m.host_cache_bytes.labels(model.name).set(stats.host_cache_bytes)
        m.draft_tokens.labels(model.name).set(stats.draft_tokens)
        m.accepted_tokens.labels(model.name).set(stats.accepted_tokens)
        m.preemptions.labels(model.name).set(stats.preemptions)
        m.image_tokens.labels(model.name).set(stats.image_tokens)
        if stats.threads_decode:
            m.threads.labels(model.name, "decode").set(stats.threads_decode)
            m.threads.labels(model.name, "prefill").set(stats.threads_prefill)
    return web.Response(body=m.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", root)  # GET also answers HEAD
    app.router.add_get("/health", health)
    app.router.add_get("/api/version", version)
    app.router.add_get("/api/ps", ps)
    app.router.add_get("/metrics", metrics)
