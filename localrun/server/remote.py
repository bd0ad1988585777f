"""The server's one seam to upstreams (``localrun.upstream``): ``NAME/model`` requests go out here.

The API adapters convert every request into a :class:`~.native_call.NativeCall` (or prompts,
or embedding inputs) the same way for local and upstream models; :mod:`.chat` asks
:meth:`Upstreams.route` whether the model names an upstream and, if so, calls
:func:`chat_outputs` / :func:`completion_outputs` here instead of the local engine. Replies come
back as :class:`UpstreamOutput`, read by the routes exactly like a local :class:`.output.LocalOutput`.
Each reply is asked for with the call's ``stream``: the router fails over to another member until
the client could have received something (the first event of a stream, the end of anything
else), so only a stream already under way can fail, and its route ends it with its error event.
Embeddings and reranking are asked for whole (:func:`embed`, :func:`rerank`). The rest serves the
model list (``/api/tags``, ``/v1/models``), ``/api/show`` and ``/api/ps``.

What an upstream gets is built from the call alone: no header of the client's request (its
``Authorization``, ``x-api-key``, cookies) is ever forwarded. What a local model has and an
upstream cannot do is refused with a 400 before anything is sent: token logprobs, Ollama's
``context`` and a request's own ``template``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import replace

from aiohttp import web

from .. import errors
from ..chat.events import ContentDelta
from ..chat.tools import check_tool_choice
from ..engine.types import DoneEvent, EmbedInput, EmbedResult, RerankResult
from ..jsontypes import JSONMapping, JSONObject, JSONValue
from ..upstream.pool import prefix_keys, text_segments
from ..upstream.reply import UpstreamReply
from ..upstream.requests import (
    ChatRequest,
    CompletionRequest,
    EmbedRequest,
    Format,
    RerankRequest,
    Sampling,
    sampling_from_options,
)
from ..upstream.router import MemberSnapshot, Route, Upstreams
from ..upstream.transport import PEER_HEADER
from .metrics import Metrics
from .middleware import Handler
from .native_call import NativeCall
from .options import check_option
from .output import Output, Piece

log = logging.getLogger("localrun.requests")

# Whether the request being handled came from another localrun daemon (transport.PEER_HEADER): then
# this daemon's own upstreams are neither listed nor used (no loops between daemons listing each other).
_from_peer: ContextVar[bool] = ContextVar("localrun_from_peer", default=False)


@web.middleware
async def peer_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Mark a request that another localrun daemon sent as one (see ``_from_peer``)."""
    if request.headers.get(PEER_HEADER):
        _from_peer.set(True)
    return await handler(request)


def upstreams_for(upstreams: Upstreams | None) -> Upstreams | None:
    """``upstreams``, or None while handling a request another daemon sent."""
    return None if _from_peer.get() else upstreams


class UpstreamOutput:
    """An upstream's reply as an :class:`~.output.Output` (metrics and the request's log line on close)."""

    def __init__(self, reply: UpstreamReply, route: Route, endpoint: str, metrics: Metrics, started_ns: int) -> None:
        self._reply, self._route, self._endpoint, self._metrics = reply, route, endpoint, metrics
        self._started_ns = started_ns
        self.status = "ok"
        self._finished = False
        self._closed = False

    @property
    def model(self) -> str:
        return self._route.name

    @property
    def done(self) -> DoneEvent | None:
        return self._reply.done

    @property
    def load_duration_ns(self) -> int:
        return 0

    @property
    def total_duration_ns(self) -> int:
        return time.perf_counter_ns() - self._started_ns

    async def pieces(self) -> AsyncIterator[Piece]:
        try:
            async for event in self._reply.events():
                yield Piece((event,), event.text if isinstance(event, ContentDelta) else "")
        except errors.LocalrunError:
            self.status = "error"
            raise
        self._finished = True

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._finished and self.status == "ok":
            self.status = "cancelled"
        await self._reply.close()
        done, name = self._reply.done, self._route.name
        if done is not None:
            self._metrics.prompt_tokens.labels(name).inc(done.prompt_eval_count)
            self._metrics.generated_tokens.labels(name).inc(done.eval_count)
        log.info("request endpoint=%s model=%s upstream=%s status=%s prompt_tokens=%s eval_tokens=%s total_ms=%.0f",
                 self._endpoint, name, self._reply.member.url, self.status,
                 done.prompt_eval_count if done else "-", done.eval_count if done else "-",
                 self.total_duration_ns / 1e6)


def _refuse_local_only(call: NativeCall) -> None:
    if call.logprobs or call.top_logprobs:
        raise errors.UnsupportedCapability("token logprobs are not available for upstream models")


async def _open_all(n: int, start: Callable[[], Awaitable[UpstreamReply]]) -> list[UpstreamReply]:
    """``n`` replies started together, all or nothing: when one fails to start (or this is
    cancelled), the others are cancelled or closed and the first error is raised.

    Together, because a reply that is not streamed is handed over only once it is read whole
    (:mod:`localrun.upstream.router`): one after the other, ``n`` of them would take ``n`` times as long.
    """
    tasks = [asyncio.ensure_future(start()) for _ in range(n)]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in tasks:
            if not task.cancelled() and task.exception() is None:
                await task.result().close()
        raise


def _sampling(options: JSONMapping | None) -> Sampling:
    """The upstream sampling fields of ``options``, each option first checked against the one range
    table (:func:`.options.check_option`), as a local model's are: the same 400 for the same value."""
    for name, value in (options or {}).items():
        check_option(name, value)
    return sampling_from_options(options)


def _segments(route: Route, call: NativeCall) -> list[str]:
    """The prefix-affinity segments of a chat: one per message, the tools (rendered into the prompt's
    start) and the model joined to the first, so only a real shared prefix (a system prompt, an
    earlier turn) sends a request where another one went."""
    texts = [json.dumps(m, sort_keys=True, default=str) for m in call.messages] or [""]
    texts[0] = json.dumps([route.model, call.tools], sort_keys=True, default=str) + texts[0]
    return texts


async def chat_outputs(upstreams: Upstreams, metrics: Metrics, route: Route, call: NativeCall,
                       endpoint: str) -> list[Output]:
    """Start ``call.n`` chat replies on the upstream pool of ``route``."""
    _refuse_local_only(call)
    check_tool_choice(call.tool_choice, call.tools)
    choice = call.tool_choice if isinstance(call.tool_choice, (str, dict)) else None  # checked: a name, an object
    sampling = replace(_sampling(call.options), ignore_eos=call.ignore_eos, min_tokens=call.min_tokens)
    req = ChatRequest(model=route.model, messages=call.messages, tools=call.tools, tool_choice=choice,
                      format=call.format, think=call.think, sampling=sampling)
    keys = prefix_keys(_segments(route, call))
    started = time.perf_counter_ns()
    replies = await _open_all(call.n, lambda: upstreams.chat(route, req, keys, stream=call.stream))
    return [UpstreamOutput(r, route, endpoint, metrics, started) for r in replies]


async def completion_outputs(upstreams: Upstreams, metrics: Metrics, route: Route, call: NativeCall, fmt: Format,
                             endpoint: str) -> list[Output]:
    """``call.n`` completions of each of ``call.prompts`` (prompt-major order, as /v1/completions)."""
    _refuse_local_only(call)

    sampling = replace(_sampling(call.options), ignore_eos=call.ignore_eos, min_tokens=call.min_tokens)
    started = time.perf_counter_ns()
    outputs: list[Output] = []
    try:
        for prompt in call.prompts:
            req = CompletionRequest(model=route.model, prompt=prompt, suffix=call.suffix or None, format=fmt,
                                    sampling=sampling)
            pieces = text_segments(prompt)
            keys = prefix_keys([route.model + pieces[0], *pieces[1:]])
            replies = await _open_all(call.n, functools.partial(upstreams.complete, route, req, keys,
                                                                stream=call.stream))
            outputs.extend(UpstreamOutput(r, route, endpoint, metrics, started) for r in replies)
    except BaseException:
        for out in outputs:
            await out.close()
        raise
    return outputs


async def embed(upstreams: Upstreams, route: Route, inputs: Sequence[EmbedInput], truncate: bool) -> EmbedResult:
    texts = [i for i in inputs if isinstance(i, str)]
    if len(texts) != len(inputs):
        raise errors.UnsupportedCapability("token-id inputs are not available for upstream models: send text")
    return await upstreams.embed(route, EmbedRequest(model=route.model, inputs=texts, truncate=truncate))


async def rerank(upstreams: Upstreams, route: Route, query: str, documents: Sequence[str],
                 truncate: bool) -> RerankResult:
    return await upstreams.rerank(route, RerankRequest(model=route.model, query=query, documents=documents,
                                                       truncate=truncate))


async def check_served(upstreams: Upstreams, route: Route) -> None:
    """Raise ModelNotFound unless a member of the pool serves ``route.model`` (a load request)."""
    await upstreams.refresh()
    pool = upstreams.pools.get(route.upstream)
    if pool is None or not pool.serving(route.model):
        raise errors.ModelNotFound(f"model {route.model!r} is not served by upstream {route.upstream}")


_UPSTREAM_DETAILS: JSONObject = {"parent_model": "", "format": "", "family": "", "families": [], "parameter_size": "",
                     "quantization_level": ""}


async def tag_entries(upstreams: Upstreams) -> list[JSONObject]:
    """``/api/tags`` rows for upstream models (Ollama's ``remote_model`` / ``remote_host`` fields)."""
    await upstreams.refresh()
    return [{"name": m.name, "model": m.name, "modified_at": "1970-01-01T00:00:00Z", "size": 0, "digest": "",
             "details": dict(_UPSTREAM_DETAILS), "remote_model": m.model, "remote_host": m.hosts[0] if m.hosts else "",
             "upstream": m.upstream}
            for m in upstreams.listed()]


async def show(upstreams: Upstreams, route: Route) -> JSONObject:
    """``/api/show`` for an upstream model: where it is served, never how (no key, no key variable).
    Its capabilities and details are an Ollama-API member's own (``vision``, ``thinking``...: what
    clients enable features by); a ``/v1`` server does not say, so they are assumed as
    ``completion`` and ``tools``."""
    await check_served(upstreams, route)
    pool = upstreams.pools[route.upstream]
    hosts: list[JSONValue] = [m.url for m in pool.serving(route.model)]
    capabilities: list[JSONValue] = ["completion", "tools"]
    details: JSONObject = dict(_UPSTREAM_DETAILS)
    try:
        shown = await upstreams.shown(route)
    except errors.LocalrunError as exc:  # the model's answers still work: say what is known
        log.info("upstream %s: /api/show of %s failed (%s); its capabilities are assumed", route.upstream,
                 route.model, exc)
        shown = None
    if shown is not None:
        capabilities, details = list(shown.capabilities), {**details, **shown.details}
    return {"modelfile": "", "parameters": "", "template": "", "system": "", "license": "",
            "details": details, "model_info": {}, "capabilities": capabilities,
            "remote_model": route.model, "remote_host": hosts[0] if hosts else "", "upstream": route.upstream,
            "upstream_hosts": hosts, "modified_at": "1970-01-01T00:00:00Z"}


def ps_row(s: MemberSnapshot) -> JSONObject:
    return {"upstream": s.upstream, "url": s.url, "api": s.api, "state": s.state, "in_flight": s.in_flight,
            "requests": s.requests, "errors": s.failures,
            "latency_ms": round(s.latency_ms, 1) if s.latency_ms is not None else None,
            "cooling_s": round(s.cooling_s, 1), "last_error": s.last_error, "models": len(s.models)}

