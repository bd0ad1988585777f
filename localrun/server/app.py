"""The daemon's aiohttp application and how to run it.

:func:`create_app` wires settings, the model store, the scheduler (with runner processes as
its backends) and the routes; tests pass their own ``store`` and ``load_fn``.
:func:`serve` runs it in the foreground until SIGINT/SIGTERM, with handler cancellation on,
so a client that disconnects cancels its handler and the engine request with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from aiohttp import web

from .. import __version__, config, trace
from ..config import Settings
from ..engine.types import LoadOptions, PrefixCacheLocation
from ..hardware import memory
from ..hardware.devices import Device
from ..hardware.placement import Placement
from ..runtime.process import RunnerProcess
from ..runtime.scheduler import Backend, LoadFn, LoadSpec, ProbeFn, ResidentModel, Scheduler
from ..store.model_store import ModelStore
from ..upstream.router import Upstreams
from . import control, llamacpp, model_list, remote, rendering, rerank, status
from .anthropic import routes as anthropic_routes
from .executors import Executors, run_in
from .http import JSON_BODY_LIMIT
from .keys import (
    BACKGROUND,
    DAEMON,
    EXECUTORS,
    METRICS,
    PULLS,
    RESPONSES,
    SCHEDULER,
    SERVICE,
    SETTINGS,
    SHUTDOWN,
    STARTED_AT,
    STORE,
)
from .lifecycle import DaemonInfo, Shutdown, drain
from .metrics import Metrics
from .middleware import MIDDLEWARES, add_cors_headers
from .ollama import routes as ollama_routes
from .ollama import tokens as ollama_tokens
from .openai import routes as openai_routes
from .responses import routes as responses_routes
from .responses.background import BackgroundRuns
from .responses.store import ResponseStore
from .service import Service

log = logging.getLogger(__name__)


def runner_load_fn(factory: str | None = None, env: Mapping[str, str] | None = None,
                   prefix_cache_dir: Path | None = None, rpc_servers: tuple[str, ...] = ()) -> LoadFn:
    """A scheduler ``load_fn`` that starts one runner process per model.

    ``factory`` ("module:callable") replaces the engine class inside the runner (tests).
    ``prefix_cache_dir``: where models with a store digest keep their prefix cache between loads.
    ``rpc_servers`` (LOCALRUN_RPC_SERVERS) go with every load; with them, and no ``num_gpu`` asked
    for, every layer is offloaded: llama.cpp spreads them over the RPC workers (and local GPUs).
    """

    async def load(spec: LoadSpec, placement: Placement) -> Backend:
        from dataclasses import replace

        options = spec.options
        if rpc_servers:
            options = replace(options, rpc_servers=rpc_servers)
            if options.num_gpu is None:
                options = replace(options, num_gpu=placement.total_layers)
        if options.num_gpu is None:
            options = replace(options, num_gpu=placement.gpu_layers)
        cache = PrefixCacheLocation(str(prefix_cache_dir), spec.digest) if prefix_cache_dir and spec.digest else None
        return await RunnerProcess.start(
            spec.name, spec.model_path, options, factory=factory, env=env,
            prefix_cache=cache,
        )

    return load


def _probe_devices(executors: Executors) -> ProbeFn:
    async def probe() -> tuple[int, list[Device]]:
        # May start a probe process: off the loop, on its own thread so a slow probe delays no store call.
        return await run_in(executors.probe, memory.system_devices)

    return probe


async def _remove_orphans(store: ModelStore, executors: Executors) -> None:
    """Delete temp files a killed create or pull left in the store (they can be gigabytes)."""
    if isinstance(store, ModelStore):  # not a test's stand-in
        try:
            freed = await run_in(executors.store, store.remove_orphans)
        except OSError as exc:
            log.warning("could not clean up temporary files in the store: %s", exc)
            return
        if freed:
            log.info("removed %d bytes of temporary files left by interrupted creates", freed)


def default_store(settings: Settings) -> ModelStore:
    return ModelStore(settings.models_dir)


def create_app(
    settings: Settings,
    *,
    store: ModelStore | None = None,
    load_fn: LoadFn | None = None,
    scheduler: Scheduler | None = None,
    daemon: DaemonInfo | None = None,
    upstreams: Upstreams | None = None,
) -> web.Application:
    """The daemon's application; ``daemon`` describes the process serving it (default: this one, no log file);
    ``upstreams`` (default: LOCALRUN_UPSTREAMS and the upstreams file) the servers behind ``NAME/model``."""
    app = web.Application(middlewares=[*MIDDLEWARES, remote.peer_middleware], client_max_size=JSON_BODY_LIMIT)
    metrics = Metrics()
    executors = Executors()
    if store is None:
        store = default_store(settings)
    if scheduler is None:
        scheduler = Scheduler(
            # LOCALRUN_RUNNER_FACTORY ("module:callable") swaps the engine inside runners: a test seam.
            load_fn or runner_load_fn(os.environ.get("LOCALRUN_RUNNER_FACTORY") or None,
                                      prefix_cache_dir=settings.prefix_cache_dir,
                                      rpc_servers=settings.rpc_servers),
            probe=_probe_devices(executors),
            geometry=memory.read_geometry,
            max_loaded=settings.max_loaded_models,
            max_queue=settings.max_queue,
            default_keep_alive=settings.keep_alive,
        )

    def on_event(kind: str, model: ResidentModel, reason: str) -> None:
        metrics.loads.labels(kind).inc()
        memory.devices_changed()

    scheduler.on_event = on_event
    app[SETTINGS] = settings
    app[STORE] = store
    app[EXECUTORS] = executors
    app[PULLS] = {}
    app[RESPONSES] = ResponseStore()
    app[BACKGROUND] = BackgroundRuns()
    app[SCHEDULER] = scheduler
    app[METRICS] = metrics
    upstreams = upstreams if upstreams is not None else Upstreams(settings.upstreams, config.upstreams_file(),
                                                                  api_key=config.upstream_api_key)
    metrics.watch_upstreams(upstreams.snapshot)
    app[SERVICE] = Service(store, scheduler, metrics, num_parallel=settings.num_parallel,
                           context_length=settings.context_length,
                           geometry=memory.read_geometry, probe=_probe_devices(executors),
                           load_defaults=LoadOptions(batch_invariant=settings.batch_invariant,
                                                     kv_cache_type=settings.kv_cache_type,
                                                     prefix_cache_ram=settings.prefix_cache_ram,
                                                     speculative=settings.speculative,
                                                     backend_sampling=settings.backend_sampling,
                                                     num_thread=settings.num_thread),
                           executors=executors, upstreams=upstreams)
    app[STARTED_AT] = 0.0
    app[DAEMON] = daemon or DaemonInfo(pid=os.getpid(), started_at=time.time())
    app[SHUTDOWN] = Shutdown()
    app.on_response_prepare.append(add_cors_headers)
    status.add_routes(app)
    control.add_routes(app)
    ollama_routes.add_routes(app)
    ollama_tokens.add_routes(app)
    openai_routes.add_routes(app)
    model_list.add_routes(app)
    responses_routes.add_routes(app)
    rerank.add_routes(app)
    llamacpp.add_routes(app)
    anthropic_routes.add_routes(app)
    try:
        from .ollama import models as ollama_models
    except ImportError as exc:  # the store is not importable: generation still works
        log.warning("model management routes unavailable: %s", exc)
    else:
        ollama_models.add_routes(app)

    async def on_startup(app: web.Application) -> None:
        loop = asyncio.get_running_loop()
        app[STARTED_AT] = loop.time()
        executors.install(loop)
        rendering.renderer().warm()
        app[SERVICE].warm()
        await _remove_orphans(app[STORE], executors)
        app[SCHEDULER].start()
        upstreams.start()

    async def on_cleanup(app: web.Application) -> None:
        app[SERVICE].stop_warming()
        await app[BACKGROUND].close()
        await upstreams.close()
        await app[SCHEDULER].close()
        rendering.close()
        executors.shutdown()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


async def start_site(app: web.Application, settings: Settings) -> web.AppRunner:
    # Handler cancellation: a client that disconnects cancels its handler, and so its engine request.
    # On shutdown, streams still running get a few seconds to end before they are cut.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    site = web.TCPSite(runner, settings.host.host, settings.host.port)
    await site.start()
    return runner


async def serve(settings: Settings, *, store: ModelStore | None = None, daemon: DaemonInfo | None = None) -> None:
    """Run the daemon until SIGINT, SIGTERM or ``POST /api/shutdown``, then end it gracefully (lifecycle.drain)."""
    trace.configure(config.trace_dir())
    app = create_app(settings, store=store, daemon=daemon)
    runner = await start_site(app, settings)
    log.info("localrun %s daemon (pid %d) listening on %s (models in %s)", __version__, app[DAEMON].pid,
             settings.host.url, settings.models_dir)
    if not settings.host.is_loopback and not settings.api_key:
        log.warning("listening on %s without LOCALRUN_API_KEY: anyone on the network can use it", settings.host.url)
    shutdown = app[SHUTDOWN]
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # Windows
            loop.add_signal_handler(sig, shutdown.request)
    try:
        await shutdown.wait()
    finally:
        log.info("shutting down: refusing new requests")
        await drain(runner, app[SCHEDULER], shutdown)
