"""Which models are resident, and for how long (Ollama's scheduler, in asyncio).

One loop task owns all loading and unloading. It wakes on three kinds of events:

- *pending*: a request needs a model that is not resident (or is resident with other load-time
  options). The loop loads it, first evicting idle models least-recently-used first when the
  memory fit check or ``max_loaded`` says so; when only busy models stand in the way the request
  waits (a model with requests in flight is never evicted); when the model can never fit the
  request fails with ModelTooLarge saying how much it needs.
- *finished*: a lease is released; the model's refcount drops and, at zero, its keep-alive timer
  starts (``0`` = unload now, ``None`` = never).
- *expired*: a keep-alive timer fired, or the runner process died.

Requests for a resident model with matching options take a fast path that never waits for the
loop, except for models the head of the queue is waiting on (FIFO fairness: a waiting load is not
starved by a steady stream of requests for the busy model). The queue bound counts requests
waiting for a load plus requests waiting for a sequence slot of their model; past ``max_queue``
new ones get Busy (HTTP 503). Its vocabulary (LoadSpec, ResidentModel, Backend...) is in
:mod:`.resident`.

Seams for tests: ``load_fn`` (start a backend), ``probe`` (free RAM and GPUs), ``geometry``
(GGUF reader) and ``clock``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .. import errors, trace
from ..engine.types import LoadOptions
from ..fmt import human_bytes
from ..hardware.devices import Device
from ..hardware.memory import MemoryEstimate, ModelGeometry, estimate, place, reconcile
from ..hardware.placement import Placement
from .resident import (  # re-exported: the scheduler's public vocabulary
    DEFAULT,
    Backend,
    Clock,
    KeepAlive,
    LoadFn,
    LoadSpec,
    Phase,
    ProbeFn,
    ResidentModel,
    SystemClock,
)

__all__ = ["DEFAULT", "Backend", "Clock", "KeepAlive", "Lease", "LoadFn", "LoadSpec", "Phase", "ProbeFn",
           "ResidentModel", "Scheduler", "SystemClock"]

log = logging.getLogger(__name__)

class Lease:
    """A model held for one request; :meth:`release` exactly once (extra calls are ignored)."""

    def __init__(self, scheduler: Scheduler, model: ResidentModel, load_duration_ns: int) -> None:
        self._scheduler = scheduler
        self.model = model
        self.load_duration_ns = load_duration_ns
        self._released = False

    @property
    def backend(self) -> Backend:
        return self.model.backend

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._scheduler._release(self.model)


@dataclass(slots=True, eq=False)
class _Pending:
    spec: LoadSpec
    keep_alive: float | None
    future: asyncio.Future[Lease]
    enqueued: float


class Scheduler:
    def __init__(
        self,
        load_fn: LoadFn,
        *,
        probe: ProbeFn,
        geometry: Callable[[str], ModelGeometry],
        clock: Clock | None = None,
        max_loaded: int = 3,
        max_queue: int = 512,
        default_keep_alive: float | None = 300.0,
        load_timeout: float = 600.0,
    ) -> None:
        self._load_fn = load_fn
        self._probe = probe
        self._geometry = geometry
        self.clock: Clock = clock or SystemClock()
        self.max_loaded = max_loaded
        self.max_queue = max_queue
        self.default_keep_alive = default_keep_alive
        self.load_timeout = load_timeout  # a runner that never finishes loading is killed (as Ollama's 5 min)
        self.models: dict[str, ResidentModel] = {}
        self._pending: deque[_Pending] = deque()
        self._expired: deque[tuple[ResidentModel, str]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Busy models the head of the queue waits to evict: new requests for them queue behind it
        # instead of taking the fast path, so a waiting load is not starved by a steady stream.
        self._blocked_by: set[str] = set()
        self._unloading: set[asyncio.Task[None]] = set()  # unloads under way: close() waits for them
        self.on_event: Callable[[str, ResidentModel, str], None] | None = None  # (load|unload, model, reason)
        self._refusing = False  # set by refuse_new() when the daemon is shutting down

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="scheduler")

    async def close(self) -> None:
        """Stop the loop, fail waiting requests and unload every model."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while self._pending:
            p = self._pending.popleft()
            if not p.future.done():
                p.future.set_exception(errors.Busy("the server is shutting down"))
        for model in list(self.models.values()):
            await self._unload(model, "server shutting down")
        if self._unloading:
            await asyncio.gather(*self._unloading, return_exceptions=True)

    # --- requests ------------------------------------------------------------------------

    def refuse_new(self) -> None:
        """From now on, acquire() raises Busy: the daemon is shutting down. Requests already admitted go on."""
        self._refusing = True

    @property
    def in_flight(self) -> int:
        """Requests holding a model or waiting for one."""
        return sum(m.refcount for m in self.models.values()) + sum(1 for p in self._pending if not p.future.done())

    @property
    def queue_depth(self) -> int:
        return sum(1 for p in self._pending if not p.future.done()) + sum(m.queued for m in self.models.values())

    async def acquire(self, spec: LoadSpec, keep_alive: KeepAlive = DEFAULT) -> Lease:
        """Hold ``spec``'s model for one request, loading it if needed.

        ``keep_alive`` (seconds, None = forever) becomes the model's idle timeout; pass
        ``DEFAULT`` for the server default. Raises Busy past the queue bound,
        ModelTooLarge, or the load error (InvalidModelFile, RunnerCrashed, ...).
        """
        if self._refusing:
            raise errors.Busy("the daemon is shutting down", retry_after=5.0)
        ka = self.default_keep_alive if keep_alive is DEFAULT else keep_alive
        assert ka is None or isinstance(ka, (int, float))
        model = self.models.get(spec.name)
        if model is not None and self._usable(model, spec) and model.name not in self._blocked_by:
            if model.refcount >= model.slots and self.queue_depth >= self.max_queue:
                raise self._busy()
            return self._grant(model, ka, 0)
        if self.queue_depth >= self.max_queue:
            raise self._busy()
        self.start()
        pending = _Pending(spec, ka, asyncio.get_running_loop().create_future(), self.clock.monotonic())
        self._pending.append(pending)
        self._wake.set()
        try:
            return await asyncio.shield(pending.future)
        except asyncio.CancelledError:
            # The client went away while waiting: give back whatever we may have been granted.
            if pending.future.done() and not pending.future.cancelled() and pending.future.exception() is None:
                pending.future.result().release()
            else:
                pending.future.cancel()
            raise

    def _busy(self) -> errors.Busy:
        return errors.Busy(
            f"server busy: {self.queue_depth} requests already queued (LOCALRUN_MAX_QUEUE={self.max_queue}); "
            "retry shortly",
            retry_after=1.0,
        )

    def _usable(self, model: ResidentModel, spec: LoadSpec) -> bool:
        return model.phase is Phase.READY and model.backend.alive and _same_load(model.spec, spec)

    def _grant(self, model: ResidentModel, keep_alive: float | None, load_ns: int) -> Lease:
        model.refcount += 1
        model.keep_alive = keep_alive
        model.last_used = self.clock.monotonic()
        model.idle_deadline = None
        if model.timer is not None:
            model.timer.cancel()
            model.timer = None
        return Lease(self, model, load_ns)

    def _release(self, model: ResidentModel) -> None:
        model.refcount = max(0, model.refcount - 1)
        model.last_used = self.clock.monotonic()
        if model.refcount > 0 or self.models.get(model.name) is not model:
            self._wake.set()
            return
        if model.phase is Phase.DRAINING or model.keep_alive == 0:
            self._expired.append((model, "keep_alive 0" if model.keep_alive == 0 else "draining"))
        elif model.keep_alive is not None and model.keep_alive < 1e9:  # longer: forever (timers overflow)
            model.idle_deadline = self.clock.monotonic() + model.keep_alive
            model.timer = asyncio.create_task(self._expire_after(model, model.idle_deadline, model.keep_alive))
        self._wake.set()

    async def _expire_after(self, model: ResidentModel, deadline: float, seconds: float) -> None:
        # The deadline was fixed at release time; the task may start a little later.
        await self.clock.sleep(max(0.0, deadline - self.clock.monotonic()))
        model.timer = None
        self._expired.append((model, f"idle for {seconds:g}s (keep_alive)"))
        self._wake.set()

    async def unload(self, name: str) -> bool:
        """Unload ``name`` now if idle, else as soon as its requests finish. False if not loaded."""
        model = self.models.get(name)
        if model is None:
            return False
        model.phase = Phase.DRAINING
        model.keep_alive = 0
        if model.refcount == 0:
            await self._unload(model, "stop requested")
        return True

    # --- the loop ------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._process_expired()
                while self._pending:
                    head = self._pending[0]
                    if head.future.done():
                        self._pending.popleft()
                        continue
                    if not await self._schedule_or_fail(head):
                        self._serve_behind_head()
                        break  # waiting for a busy model to finish
                    self._blocked_by.clear()
                    self._pending.popleft()
                if not self._pending:
                    self._blocked_by.clear()
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the loop die: log and keep serving
                log.exception("scheduler step failed")

    def _serve_behind_head(self) -> None:
        """While the head waits, grant queued requests for resident models it is not waiting on."""
        for req in list(self._pending)[1:]:
            model = self.models.get(req.spec.name)
            if req.future.done():
                self._pending.remove(req)
            elif model is not None and self._usable(model, req.spec) and model.name not in self._blocked_by:
                self._pending.remove(req)
                req.future.set_result(self._grant(model, req.keep_alive, 0))

    async def _process_expired(self) -> None:
        while self._expired:
            model, reason = self._expired.popleft()
            if self.models.get(model.name) is model and model.refcount == 0:
                await self._unload(model, reason)

    async def _schedule_or_fail(self, req: _Pending) -> bool:
        """:meth:`_schedule`, but an unexpected error fails ``req`` instead of wedging the queue.

        Without this a request whose planning raised stayed at the head of the queue, retried and
        failing on every wake-up, and every load behind it waited for ever.
        """
        try:
            return await self._schedule(req)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("scheduling %s failed; failing that request", req.spec.name)
            if not req.future.done():
                req.future.set_exception(exc if isinstance(exc, errors.LocalrunError) else errors.EngineError(
                    f"cannot load {req.spec.name}: {type(exc).__name__}: {exc}"))
            return True

    async def _schedule(self, req: _Pending) -> bool:
        """Serve ``req`` or return False to wait; failures complete its future with the error."""
        spec = req.spec
        current = self.models.get(spec.name)
        if current is not None:
            if self._usable(current, spec):
                req.future.set_result(self._grant(current, req.keep_alive, 0))
                return True
            if current.phase is Phase.READY and current.backend.alive:
                current.phase = Phase.DRAINING
                log.info("reloading %s: %s", spec.name, _diff(current.spec.options, spec.options))
            if current.refcount > 0 and current.backend.alive:
                return False
            await self._unload(current, "reload with new options" if current.backend.alive else "runner exited")
        trace.mark("schedule", spec.name)
        try:
            geometry = self._geometry(spec.model_path)
        except errors.LocalrunError as exc:
            req.future.set_exception(exc)
            return True
        est = estimate(geometry, spec.options)
        probed = self._probe()
        free_ram, gpus = await probed if inspect.isawaitable(probed) else probed
        trace.mark("probed", spec.name)
        plan = self._plan(est, spec, free_ram, gpus)
        if isinstance(plan, errors.LocalrunError):
            req.future.set_exception(plan)
            return True
        if plan is None:
            self._blocked_by = {m.name for m in self.models.values() if m.refcount > 0}
            return False
        placement, victims = plan
        # Evicted for the model count (LOCALRUN_MAX_LOADED_MODELS), not for memory: the new runner
        # starts while the old ones save their caches and exit, which takes a model switch's
        # unload (0.2-0.4 s) off its first token. Evicted for memory: wait until they are gone.
        room_now = self._fits(est, spec, [], free_ram, gpus) is not None
        for victim in victims:
            reason_out = f"evicted to make room for {spec.name}"
            if room_now:
                self._start_unload(victim, reason_out)
            else:
                await self._unload(victim, reason_out)
        reason = f"reloaded ({_diff(current.spec.options, spec.options)})" if current is not None else "loaded"
        await self._load(req, est, placement, reason)
        return True

    def _plan(
        self, est: MemoryEstimate, spec: LoadSpec, free_ram: int, gpus: list[Device]
    ) -> tuple[Placement, list[ResidentModel]] | errors.LocalrunError | None:
        """Pick idle models to evict so ``est`` fits; None = wait for busy ones; error = never fits."""
        idle = sorted((m for m in self.models.values() if m.refcount == 0), key=lambda m: m.last_used)
        over = len(self.models) + 1 - self.max_loaded
        for k in range(max(0, over), len(idle) + 1):
            placement = self._fits(est, spec, idle[:k], free_ram, gpus)
            if placement is not None:
                return placement, idle[:k]
        if self.models and self._fits(est, spec, list(self.models.values()), free_ram, gpus) is not None:
            return None
        usable = free_ram + sum(m.placement.ram for m in self.models.values())
        return errors.ModelTooLarge(
            f"model {spec.name!r} needs about {human_bytes(est.total)} of memory "
            f"(weights {human_bytes(est.weights)}, KV cache {human_bytes(est.kv_cache)} for a pool of "
            f"{spec.options.pool} tokens, compute {human_bytes(est.compute)}) "
            f"but at most {human_bytes(usable)} can be freed for it; try a smaller num_ctx or "
            "LOCALRUN_CONTEXT_LENGTH"
        )

    def _fits(self, est: MemoryEstimate, spec: LoadSpec, evict: list[ResidentModel], free_ram: int,
              gpus: list[Device]) -> Placement | None:
        free_ram += sum(m.placement.ram for m in evict)
        freed_vram: dict[str, int] = {}
        for m in evict:
            for name, size in m.placement.vram_by_device:
                freed_vram[name] = freed_vram.get(name, 0) + size
        gpus = [dataclasses.replace(g, free_bytes=g.free_bytes + freed_vram.get(g.name, 0)) for g in gpus]
        placement = place(est, spec.options, gpus)
        if placement.ram > free_ram:
            return None
        if not placement.fits and spec.options.num_gpu is None:
            return None
        return placement

    async def _load(self, req: _Pending, est: MemoryEstimate, placement: Placement, reason: str) -> None:
        spec = req.spec
        started = time.perf_counter_ns()
        log.info(
            "loading %s: num_ctx=%d context_pool=%d num_parallel=%d size=%s processor=%s",
            spec.name, spec.options.num_ctx, spec.options.pool, spec.options.num_parallel, human_bytes(placement.size),
            placement.processor(),
        )
        trace.mark("load_start", spec.name)
        try:
            backend = await asyncio.wait_for(self._load_fn(spec, placement), self.load_timeout)
            trace.mark("load_done", spec.name)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            log.warning("loading %s took longer than %.0fs; gave up", spec.name, self.load_timeout)
            if not req.future.done():
                req.future.set_exception(errors.EngineError(
                    f"loading {spec.name} took longer than {self.load_timeout:.0f}s; is the disk or memory swamped?"))
            return
        except Exception as exc:
            log.warning("loading %s failed: %s", spec.name, exc)
            if not req.future.done():
                req.future.set_exception(exc if isinstance(exc, errors.LocalrunError) else errors.EngineError(str(exc)))
            return
        load_ns = time.perf_counter_ns() - started
        reported = reconcile(placement, backend.info)
        if reported != placement:
            log.warning("llama.cpp placed %d/%d layers of %s on GPUs where %d were planned; showing %s",
                        reported.gpu_layers, reported.total_layers, spec.name, placement.gpu_layers,
                        reported.processor())
            placement = reported
        model = ResidentModel(
            spec=spec, backend=backend, placement=placement, estimate=est, loaded_at=self.clock.time(),
            load_duration_ns=load_ns, reason=reason, last_used=self.clock.monotonic(),
        )
        self.models[spec.name] = model
        backend.exited.add_done_callback(functools.partial(self._on_exit, model))
        log.info("loaded %s in %.2fs (%s)", spec.name, load_ns / 1e9, reason)
        if self.on_event:
            self.on_event("load", model, reason)
        if req.future.done():  # the client left during the load: keep the model, start its timer
            model.keep_alive = req.keep_alive
            model.refcount = 1
            self._release(model)
        else:
            req.future.set_result(self._grant(model, req.keep_alive, load_ns))

    def _on_exit(self, model: ResidentModel, fut: asyncio.Future[str]) -> None:
        if self.models.get(model.name) is not model:
            return
        reason = fut.result() if not fut.cancelled() else "cancelled"
        log.warning("runner for %s exited (%s); its requests failed, the next one reloads it", model.name, reason)
        del self.models[model.name]
        if model.timer is not None:
            model.timer.cancel()
        if self.on_event:
            self.on_event("crash", model, reason)
        self._wake.set()

    async def _unload(self, model: ResidentModel, reason: str) -> None:
        """Forget ``model`` and wait until its runner has closed. Shielded: cancelling the caller
        (the scheduler's loop, when the daemon stops mid-unload) must not abandon a runner that was
        told to exit; :meth:`close` waits for it instead."""
        await asyncio.shield(self._start_unload(model, reason))

    def _start_unload(self, model: ResidentModel, reason: str) -> asyncio.Task[None]:
        """Forget ``model`` now and start closing its runner in a task :meth:`close` waits for."""
        if self.models.get(model.name) is model:
            del self.models[model.name]
        if model.timer is not None:
            model.timer.cancel()
            model.timer = None
        log.info("unloading %s: %s", model.name, reason)
        if self.on_event:
            self.on_event("unload", model, reason)
        closing = asyncio.create_task(self._close_backend(model), name=f"unload-{model.name}")
        self._unloading.add(closing)
        closing.add_done_callback(self._unloading.discard)
        return closing

    async def _close_backend(self, model: ResidentModel) -> None:
        try:
            await model.backend.close()
        except Exception:
            log.exception("closing the runner for %s failed", model.name)
        self._wake.set()

    def expires_at(self, model: ResidentModel) -> float | None:
        """Wall-clock time the model will be unloaded if nothing uses it; None = never."""
        if model.keep_alive is None:
            return None
        if model.idle_deadline is not None:
            return self.clock.time() + (model.idle_deadline - self.clock.monotonic())
        return self.clock.time() + model.keep_alive


def _same_load(a: LoadSpec, b: LoadSpec) -> bool:
    return a.model_path == b.model_path and a.options == b.options


def _diff(old: LoadOptions, new: LoadOptions) -> str:
    changes = [
        f"{f.name} {getattr(old, f.name)} -> {getattr(new, f.name)}"
        for f in dataclasses.fields(LoadOptions)
        if getattr(old, f.name) != getattr(new, f.name)
    ]
    return ", ".join(changes) or "model file changed"
