"""The one service both APIs call: resolve a model, hold it, run a request, account for it.

Handlers parse their API's JSON into a :class:`Target` (model + options) and a GenerateRequest,
then call :meth:`Service.generate`, which returns a :class:`Generation`: an async iterator of
TokenEvents whose ``done`` holds the final DoneEvent. ``Generation.close()`` must run (handlers
use ``try/finally``): it cancels the engine request if the client left (freeing its slot at the
next engine step), releases the model lease (starting keep-alive), records metrics and writes
the one log line per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

from .. import errors, trace
from ..chat.prompt import might_overflow
from ..engine.types import (
    DoneEvent,
    EmbedInput,
    EmbedResult,
    ErrorEvent,
    GenerateRequest,
    LoadOptions,
    RerankResult,
    SamplingOptions,
    TokenEvent,
)
from ..fmt import human_bytes
from ..hardware import memory, repack
from ..hardware.memory import ContextPlan, ModelGeometry
from ..jsontypes import JSONObject
from ..modelkind import ModelKind, kind_refusal
from ..runtime.resident import Backend, EventStream, Phase, ProbeFn
from ..runtime.scheduler import DEFAULT, KeepAlive, Lease, LoadSpec, Scheduler
from ..store.records import ResolvedModel
from ..upstream.router import Upstreams
from .executors import Executors, run_in
from .http import interactive_hint
from .metrics import Metrics
from .options import merge_options
from .rendering import vet_template

log = logging.getLogger("localrun.requests")
T = TypeVar("T")
RUNNER_EXIT_WAIT = 5.0  # seconds to let a runner that vanished under a request be noticed before a retry


class ModelSource(Protocol):
    """The part of the store the service needs (``localrun.store.ModelStore``)."""

    def resolve(self, name: str) -> ResolvedModel: ...

    def resolve_unchanged(self, name: str) -> ResolvedModel | None: ...


@dataclass(frozen=True, slots=True)
class Target:
    """A resolved model with the options of one request."""

    name: str
    resolved: ResolvedModel
    geometry: ModelGeometry
    spec: LoadSpec
    sampling: SamplingOptions
    num_keep: int | None
    keep_alive: KeepAlive
    cache_reuse: int | None = None  # the Modelfile's or the request's option (GenerateRequest.cache_reuse)
    template_override: str | None = None  # a request's own template (/api/generate ``template``)

    def require(self, asked: ModelKind) -> None:
        """UnsupportedCapability (400) unless this model can serve a request for ``asked`` (its GGUF's
        kind: :func:`~localrun.engine.types.kind_refusal`), before it is loaded."""
        refusal = kind_refusal(self.geometry.kind, asked, self.name)
        if refusal is not None:
            raise errors.UnsupportedCapability(refusal)

    def infill(self, prefix: str, suffix: str) -> str:
        """The fill-in-the-middle prompt (prefix, suffix, then the middle token) in this model's FIM
        tokens, as raw text; UnsupportedCapability (400) when its vocabulary has none (Ollama's
        "does not support insert")."""
        fim = self.geometry.fim
        if fim is None:
            raise errors.UnsupportedCapability(f"{self.name} does not support insert")
        return f"{fim[0]}{prefix}{fim[1]}{suffix}{fim[2]}"

    @property
    def template(self) -> str | None:
        """The chat template source: the request's, else the Modelfile TEMPLATE, else the GGUF's own."""
        return self.template_override or self.resolved.template or self.geometry.chat_template

    @property
    def system(self) -> str | None:
        return self.resolved.system

    @property
    def messages(self) -> list[JSONObject]:
        return [dict(m) if isinstance(m, Mapping) else {"role": m.role, "content": m.content}
                for m in self.resolved.messages]


@dataclass(slots=True)
class Generation:
    """One running completion. Iterate for TokenEvents; ``done`` is set at the end."""

    service: Service
    target: Target
    endpoint: str
    lease: Lease
    stream: EventStream
    started_ns: int
    done: DoneEvent | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    status: str = "ok"
    _closed: bool = field(default=False)

    @property
    def load_duration_ns(self) -> int:
        return int(self.lease.load_duration_ns)

    @property
    def total_duration_ns(self) -> int:
        return time.perf_counter_ns() - self.started_ns

    async def events(self) -> AsyncIterator[TokenEvent]:
        metrics = self.service.metrics
        token_latency = metrics.token_latency.labels(self.target.name)  # once, not at every token
        async for event in self.stream:
            if isinstance(event, TokenEvent):
                now = time.perf_counter_ns()
                if self.first_token_ns is None:
                    trace.mark_request("first_event")
                    self.first_token_ns = now
                    metrics.ttft.labels(self.target.name).observe((now - self.started_ns) / 1e9)
                elif self.last_token_ns is not None:
                    token_latency.observe((now - self.last_token_ns) / 1e9)
                self.last_token_ns = now
                yield event
            elif isinstance(event, DoneEvent):
                self.done = event
                return
            elif isinstance(event, ErrorEvent):
                self.status = "error"
                raise event.error
        raise errors.RunnerCrashed(f"the stream for {self.target.name} ended without a final event")

    async def stop(self) -> None:
        """End the generation early (a route's own limit): the engine frees its sequence and the
        events still end with a DoneEvent (``CANCELLED``), so keep reading them for its counts."""
        await self.stream.cancel()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.stream.finished:
            self.status = "cancelled" if self.status == "ok" else self.status
            await self.stream.cancel()
        self.lease.release()
        done, name, m = self.done, self.target.name, self.service.metrics
        if done is not None:
            m.prompt_tokens.labels(name).inc(done.prompt_eval_count)
            m.generated_tokens.labels(name).inc(done.eval_count)
            m.cached_tokens.labels(name).inc(done.cached_tokens)
        ttft = (self.first_token_ns - self.started_ns) / 1e6 if self.first_token_ns else None
        log.info(
            "request endpoint=%s model=%s status=%s prompt_tokens=%s cached_tokens=%s eval_tokens=%s "
            "done_reason=%s load_ms=%.0f ttft_ms=%s total_ms=%.0f",
            self.endpoint, name, self.status,
            done.prompt_eval_count if done else "-", done.cached_tokens if done else "-",
            done.eval_count if done else "-", done.done_reason.value if done else "-",
            self.load_duration_ns / 1e6, f"{ttft:.0f}" if ttft is not None else "-", self.total_duration_ns / 1e6,
        )


class Service:
    def __init__(
        self,
        store: ModelSource,
        scheduler: Scheduler,
        metrics: Metrics,
        *,
        num_parallel: int | None,
        context_length: int | None = None,
        geometry: Callable[[str], ModelGeometry],
        probe: ProbeFn | None = None,
        load_defaults: LoadOptions | None = None,
        executors: Executors | None = None,
        upstreams: Upstreams | None = None,
    ) -> None:
        """``num_parallel`` None: slots sized per model from free memory (``probe``, see :meth:`context_plan`);
        ``context_length``: LOCALRUN_CONTEXT_LENGTH (None: each model's trained context, as memory allows);
        ``load_defaults``: the daemon's batch_invariant and kv_cache_type settings; ``upstreams``: the
        configured upstream servers (``NAME/model`` names), routed by ``.chat``."""
        self.store = store
        self.upstreams = upstreams
        self.scheduler = scheduler
        self.metrics = metrics
        self.num_parallel = num_parallel
        self.context_length = context_length
        self._geometry = geometry
        self._probe = probe
        self._load_defaults = load_defaults or LoadOptions()
        # Context plans per (model file, other load options, explicit num_ctx), kept so that requests
        # arriving while the model loads, or after free memory moved a little, ask for the same options.
        self._plans: dict[tuple[str, LoadOptions, int | None], ContextPlan] = {}
        self._geometries: dict[str, tuple[ResolvedModel, ModelGeometry]] = {}  # by name: _resolved_now
        pools = executors or Executors()
        self._store_pool = pools.store
        self._probe_pool = pools.probe
        self._repack: bool | None = None  # hardware/repack.py's answer, asked at the first load
        self._warming: asyncio.Task[None] | None = None  # warm()'s task
        self._repack_lock = asyncio.Lock()

    async def target(self, name: object, options: object = None, keep_alive: KeepAlive = DEFAULT) -> Target:
        """Resolve ``name`` in the store and merge its parameters with the request's options.

        The store call runs in a thread (it may hash changed weights or import the starter model),
        unless the store says none of the files of this name's last answer changed.
        """
        if not isinstance(name, str) or not name.strip():
            raise errors.InvalidRequest("'model' is required and must be a model name")
        known = self._resolved_now(name.strip())
        resolved, geometry = known if known is not None else await run_in(self._store_pool, self._resolve, name.strip())
        if not resolved.template and geometry.chat_template \
                and not await vet_template(resolved.name, geometry.chat_template):
            geometry = dataclasses.replace(geometry, chat_template=None)  # refused: plain prompt, warned once
        params = resolved.parameters or {}
        load, sampling, extras = merge_options(params, options, n_ctx_train=geometry.n_ctx_train,
                                               base=self._load_defaults)
        load = replace(load, repack=await self.repack_allowed())
        if resolved.projector_path:  # before the memory plan: the projector's bytes count in it
            load = replace(load, projector=str(resolved.projector_path))
        plan = await self.context_plan(str(resolved.model_path), load, geometry, extras["num_ctx"])
        load = replace(load, num_ctx=plan.num_ctx, context_pool=plan.context_pool, num_parallel=plan.num_parallel,
                       num_batch=min(load.num_batch, plan.context_pool))
        adapter = resolved.adapter_path
        if adapter:
            load = replace(load, adapter=str(adapter))
        spec = LoadSpec(
            name=resolved.name,
            model_path=str(resolved.model_path),
            options=load,
            digest=resolved.digest,
        )
        trace.mark_request("target")
        return Target(
            name=spec.name, resolved=resolved, geometry=geometry, spec=spec, sampling=sampling,
            num_keep=extras.get("num_keep"), keep_alive=keep_alive, cache_reuse=extras.get("cache_reuse"),
        )

    def _resolve(self, name: str) -> tuple[ResolvedModel, ModelGeometry]:
        """The store's model and its file's geometry, in one trip to a store thread (each trip
        costs the first token of every request a thread hand-off)."""
        resolved = self.store.resolve(name)
        geometry = self._geometry(str(resolved.model_path))
        if self.store.resolve_unchanged(name) is resolved:  # names the store remembers, so a client's
            self._geometries[name] = resolved, geometry     # spellings of one model cannot grow this
        return resolved, geometry

    def _resolved_now(self, name: str) -> tuple[ResolvedModel, ModelGeometry] | None:
        """:meth:`_resolve`'s last answer for ``name`` when the store says none of its files changed
        (a few stat calls, on the event loop); None: ask the store thread. Saves a hot model's
        requests the thread hand-off (~0.6 ms of a tiny model's first token on 2 busy cores)."""
        known = self._geometries.get(name)
        if known is None or self.store.resolve_unchanged(name) is not known[0]:
            return None
        return known

    def warm(self) -> None:
        """Start in the background what the first request for a model would otherwise wait for: the
        device probe (a child process: 0.46 s on a 2-vCPU EPYC) and the repacking answer. A request
        that comes sooner waits only for what is left of them."""
        async def warm() -> None:
            probed = self._probe() if self._probe is not None else None
            try:
                await asyncio.gather(self.repack_allowed(), *([probed] if inspect.isawaitable(probed) else []))
            except Exception as exc:  # the request that needs it will meet the problem and report it
                log.debug("warming up: %s", exc)

        self._warming = asyncio.get_running_loop().create_task(warm(), name="warm")

    def stop_warming(self) -> None:
        """Cancel what :meth:`warm` started, if it still runs (the daemon is stopping)."""
        if self._warming is not None:
            self._warming.cancel()

    async def repack_allowed(self) -> bool:
        """Whether models load with llama.cpp's repacked CPU weights (hardware/repack.py): probed in a
        child process the first time this CPU is seen, then remembered (the daemon asks once)."""
        if self._repack is None:
            async with self._repack_lock:
                if self._repack is None:
                    self._repack = await run_in(self._probe_pool, repack.allowed)
        return self._repack

    async def context_plan(self, model_path: str, load: LoadOptions, geometry: ModelGeometry,
                           num_ctx: int | None) -> ContextPlan:
        """The context a model loaded with ``load`` gets (:func:`~localrun.hardware.memory.plan_context`):
        ``num_ctx`` when the Modelfile or request set it, else LOCALRUN_CONTEXT_LENGTH (capped at the
        trained context), else as much of the trained context as the memory free when first asked
        holds. Kept for the daemon's life per model and options, so a resident model's options never
        move with free memory (which would reload it). OptionError when ``num_ctx`` cannot fit.
        """
        if num_ctx is None and self.context_length is not None:
            num_ctx = min(self.context_length, geometry.n_ctx_train or self.context_length)
        key = (model_path, replace(load, num_ctx=num_ctx or 0), num_ctx)
        known = self._plans.get(key)
        if known is None:
            if self._probe is None:
                free_ram, gpus = memory.system_devices()
            else:
                probed = self._probe()
                free_ram, gpus = await probed if inspect.isawaitable(probed) else probed
            known = self._plans.setdefault(key, memory.plan_context(
                geometry, load, free_ram + self._held_ram(model_path), gpus, num_ctx=num_ctx,
                num_parallel=self.num_parallel))
            log.info("%s: up to %d tokens a request, a pool of %d tokens for %d parallel requests "
                     "(%s of KV cache per token, %s free)", model_path, known.num_ctx, known.context_pool,
                     known.num_parallel, human_bytes(memory.kv_bytes_per_token(geometry)), human_bytes(free_ram))
        return known

    async def context_of(self, name: str) -> ContextPlan:
        """The context a request without options gets on model ``name`` (what ``/v1/models`` and
        ``/api/show`` report): the most one request may hold, the pool, the slots."""
        options = (await self.target(name)).spec.options
        return ContextPlan(num_ctx=options.num_ctx, context_pool=options.pool, num_parallel=options.num_parallel)

    def _held_ram(self, model_path: str) -> int:
        """RAM a resident copy of ``model_path`` holds: a reload with new options gets it back."""
        return sum(m.placement.ram for m in self.scheduler.models.values() if m.spec.model_path == model_path)

    async def generate(
        self, target: Target, request: GenerateRequest, endpoint: str, *, context: list[int] | None = None,
        system_prefix: str | None = None,
    ) -> Generation:
        """Hold the model and submit ``request``; raises before streaming on any request error."""
        started = time.perf_counter_ns()
        if request.interactive is None:
            request.interactive = interactive_hint.get()
        try:
            return await self._submit(target, request, endpoint, started, context, system_prefix)
        except errors.RunnerGone as gone:  # died before it got the request (a crash just before): a new one
            log.warning("%s; sending the request to a new runner", gone)
            return await self._submit(target, request, endpoint, started, context, system_prefix)

    async def _submit(self, target: Target, request: GenerateRequest, endpoint: str, started: int,
                      context: list[int] | None, system_prefix: str | None) -> Generation:
        """One attempt of :meth:`generate`; RunnerGone once the dead runner is forgotten (its
        ``exited`` resolved, so the scheduler loads a new one for the next acquire)."""
        lease = await self.scheduler.acquire(target.spec, target.keep_alive)
        trace.mark_request("leased")
        try:
            backend = lease.backend
            if context and isinstance(request.prompt, str):
                request.prompt = list(context) + await backend.tokenize(request.prompt, add_special=False)
            if request.cache_reuse is None:
                request.cache_reuse = target.cache_reuse
            if target.num_keep is not None:
                request.num_keep = target.num_keep
            elif (system_prefix and isinstance(request.prompt, str) and request.prompt.startswith(system_prefix)
                  and might_overflow(request.prompt, target.spec.options.num_ctx)):
                request.num_keep = len(await backend.tokenize(system_prefix, add_special=request.add_special))
                trace.mark_request("num_keep")
            stream = await backend.generate(request)
            trace.mark_request("accepted")
        except errors.RunnerGone:
            lease.release()
            with contextlib.suppress(asyncio.TimeoutError):  # the read loop sees the exit within milliseconds
                await asyncio.wait_for(asyncio.shield(lease.backend.exited), RUNNER_EXIT_WAIT)
            raise
        except BaseException:
            lease.release()
            raise
        return Generation(self, target, endpoint, lease, stream, started)

    async def embed(self, target: Target, inputs: Sequence[EmbedInput],
                    truncate: bool) -> tuple[EmbedResult, int, int]:
        """Embed ``inputs`` (texts or token-id lists); returns (result, load_duration_ns, total_duration_ns)."""
        started = time.perf_counter_ns()
        lease = await self.scheduler.acquire(target.spec, target.keep_alive)
        try:
            result: EmbedResult = await lease.backend.embed(list(inputs), truncate)
        finally:
            lease.release()
        self.metrics.prompt_tokens.labels(target.name).inc(result.prompt_eval_count)
        total = time.perf_counter_ns() - started
        log.info(
            "request endpoint=embed model=%s inputs=%d prompt_tokens=%d total_ms=%.0f",
            target.name, len(inputs), result.prompt_eval_count, total / 1e6,
        )
        return result, int(lease.load_duration_ns), total

    async def rerank(self, target: Target, query: str, documents: Sequence[str],
                     truncate: bool) -> tuple[RerankResult, int, int]:
        """Score ``documents`` against ``query``; returns (result, load_duration_ns, total_duration_ns)."""
        started = time.perf_counter_ns()
        lease = await self.scheduler.acquire(target.spec, target.keep_alive)
        try:
            result: RerankResult = await lease.backend.rerank(query, list(documents), truncate)
        finally:
            lease.release()
        self.metrics.prompt_tokens.labels(target.name).inc(result.prompt_eval_count)
        total = time.perf_counter_ns() - started
        log.info("request endpoint=rerank model=%s documents=%d prompt_tokens=%d total_ms=%.0f",
                 target.name, len(documents), result.prompt_eval_count, total / 1e6)
        return result, int(lease.load_duration_ns), total

    async def tokenize(self, target: Target, text: str, add_special: bool, images: tuple[bytes, ...] = ()) -> list[int]:
        """``text`` as the model's token ids (``add_special``: with the BOS it adds to prompts); with
        ``images`` (one marker each in ``text``), their positions included (the engine's stand-ins)."""
        if images:
            return await self._with_vocab(target, lambda b: b.tokenize(text, add_special=add_special, images=images))
        return await self._with_vocab(target, lambda b: b.tokenize(text, add_special=add_special))

    async def detokenize(self, target: Target, tokens: list[int]) -> str:
        """Token ids as text (special tokens print nothing).

        An id outside the vocabulary is an InvalidRequest from the runner (it knows the size).
        """
        return await self._with_vocab(target, lambda b: b.detokenize(tokens))

    async def _with_vocab(self, target: Target, call: Callable[[Backend], Awaitable[T]]) -> T:
        """Await ``call(backend)`` while holding the model (see :meth:`_hold_for_vocab`)."""
        lease = await self._hold_for_vocab(target)
        try:
            return await call(lease.backend)
        finally:
            lease.release()

    async def _hold_for_vocab(self, target: Target) -> Lease:
        """Hold the model for a tokenizer call: an instance loaded with other options will do.

        The vocabulary depends on the model file alone, so tokenizing must not reload a model
        that a request loaded with, say, another num_ctx.
        """
        spec = target.spec
        loaded = self.scheduler.models.get(spec.name)
        if loaded is not None and loaded.phase is Phase.READY and loaded.spec.model_path == spec.model_path:
            spec = loaded.spec  # a DRAINING one is about to be replaced: ask for the request's own
        return await self.scheduler.acquire(spec, target.keep_alive)

    async def load_only(self, target: Target) -> int:
        """Load (or keep) the model without generating; returns load_duration_ns."""
        lease = await self.scheduler.acquire(target.spec, target.keep_alive)
        lease.release()
        return int(lease.load_duration_ns)

    async def unload(self, name: str) -> bool:
        resolved_name = name
        with contextlib.suppress(errors.LocalrunError):
            resolved_name = (await run_in(self._store_pool, self.store.resolve, name)).name
        return await self.scheduler.unload(resolved_name)
