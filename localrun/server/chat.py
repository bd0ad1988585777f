"""One generation path for every API: /api/chat, /api/generate, /v1/chat/completions, /v1/completions,
/v1/responses, /v1/messages.

Each API's adapter converts its request into a :class:`~.native_call.NativeCall` (messages,
tools and ``tool_choice`` in the chat-completions shape, ``think``, Ollama options) with pure
functions; :func:`start_chat` then does what all of them share. For a model named
``UPSTREAM/model`` (a configured upstream, :mod:`.remote`) the call goes to the upstream, which
applies its own template; otherwise it resolves the local model, prepares the turn
(:func:`.chatturn.prepare`: capability checks, the prompt, a forced call's grammar) and submits
``n`` generations. Either way the adapter gets a :class:`ChatRun` of :class:`~.output.Output` s,
reads each through ``pieces()`` (or :func:`output_events`), writes them in its own shape and
must ``close()`` the run. :func:`start_completions` does the same for raw prompts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from .. import errors
from ..chat.events import ChatEvent
from ..engine.types import DoneEvent, DoneReason, GenerateRequest, OutputFormat, Truncation
from ..modelkind import ModelKind
from ..upstream.router import Route
from . import chatturn, remote
from .chatturn import ChatTurn
from .native_call import NativeCall
from .output import LocalOutput, Output
from .service import Generation, Service, Target

T = TypeVar("T")
log = logging.getLogger("localrun.requests")  # beside the request lines (service.py)


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Token counts of one generation: ``cached`` of the ``prompt`` tokens came from the prefix cache."""

    prompt: int
    cached: int
    output: int

    @classmethod
    def of(cls, done: DoneEvent | None) -> TokenUsage:
        if done is None:
            return cls(0, 0, 0)
        return cls(done.prompt_eval_count, done.cached_tokens, done.eval_count)


@dataclass(slots=True)
class ChatRun:
    """The replies of one request (``n`` of them, or n per prompt for completions), started and
    not yet closed. ``model`` is the name replies carry; ``prompt_tokens()`` the prompt's size
    before anything is generated (0 for an upstream, which counts it in the final usage)."""

    model: str
    outputs: list[Output]
    prompt_tokens: Callable[[], Awaitable[int]]

    async def close(self) -> None:
        """Close every reply (cancels unfinished ones, releases the model, logs: see :func:`close_reply`)."""
        for out in self.outputs:
            await close_reply(out)


async def close_reply(output: Output) -> None:
    """Close one reply; a prompt that was cut to fit the context is never cut silently: a WARNING says
    how much (the reply itself says it in its API's words: ``prompt_truncated_count``)."""
    done = output.done
    if done is not None and done.truncated_tokens:
        log.warning("prompt cut to fit the context: model=%s prompt_tokens=%d kept=%d dropped=%d", output.model,
                    done.prompt_eval_count + done.truncated_tokens, done.prompt_eval_count, done.truncated_tokens)
    await output.close()


def upstream_route(service: Service, model: object) -> Route | None:
    """The upstream ``model`` names (``NAME/model`` with NAME configured), else None: a local model
    (always, for a request another localrun daemon sent: :func:`.remote.upstreams_for`)."""
    upstreams = remote.upstreams_for(service.upstreams)
    return upstreams.route(model) if upstreams is not None else None


async def _no_count() -> int:
    return 0


async def prepare_chat(service: Service, call: NativeCall) -> tuple[Target, ChatTurn]:
    """Resolve the model and prepare the turn (raises 400/404 before anything is generated)."""
    target = await service.target(call.model, call.options, call.keep_alive)
    target.require(ModelKind.GENERATION)
    turn = await chatturn.prepare(target, call.messages, tools=call.tools, tool_choice=call.tool_choice,
                                  think=call.think)
    return target, turn


async def start_chat(service: Service, call: NativeCall, endpoint: str,
                     cut: Truncation = Truncation.FRONT) -> ChatRun:
    """Prepare ``call`` and start its ``n`` replies (on the upstream it names, or here)."""
    route = upstream_route(service, call.model)
    if route is not None and service.upstreams is not None:
        outputs = await remote.chat_outputs(service.upstreams, service.metrics, route, call, endpoint)
        return ChatRun(route.name, outputs, _no_count)
    target, turn = await prepare_chat(service, call)
    sampling = replace(target.sampling, logprobs=call.logprobs, top_logprobs=call.top_logprobs,
                       ignore_eos=call.ignore_eos, min_tokens=call.min_tokens)
    gens = await start_generations(service, target, turn.request(sampling, call.format, cut), call.n, endpoint,
                                   turn.system_prefix)

    async def prompt_tokens() -> int:
        return len(await service.tokenize(target, turn.prompt, add_special=True, images=turn.images))

    return ChatRun(target.name, [LocalOutput(g, turn.parser()) for g in gens], prompt_tokens)


async def start_completions(service: Service, call: NativeCall, fmt: OutputFormat, endpoint: str,
                            cut: Truncation = Truncation.FRONT) -> ChatRun:
    """Start ``call.n`` completions of each of ``call.prompts`` (prompt-major order), as raw text.

    With ``call.suffix`` each prompt is the text before a gap and the model fills it in: a local
    model gets its FIM prompt (:meth:`Target.infill`, a 400 when it has no FIM tokens), an
    upstream the suffix as its own API takes it.
    """
    route = upstream_route(service, call.model)
    if route is not None and service.upstreams is not None:
        outputs = await remote.completion_outputs(service.upstreams, service.metrics, route, call, fmt, endpoint)
        return ChatRun(route.name, outputs, _no_count)
    target = await service.target(call.model, call.options, call.keep_alive)
    target.require(ModelKind.GENERATION)
    sampling = replace(target.sampling, logprobs=call.logprobs, top_logprobs=call.top_logprobs,
                       ignore_eos=call.ignore_eos, min_tokens=call.min_tokens)
    gens: list[Generation] = []
    try:
        for p in call.prompts:
            text = target.infill(p, call.suffix) if call.suffix else p
            req = GenerateRequest(prompt=text, sampling=sampling, format=fmt, truncation=cut)
            gens.extend(await start_generations(service, target, req, call.n, endpoint))
    except BaseException:
        for g in gens:
            await g.close()
        raise
    return ChatRun(target.name, [LocalOutput(g, None) for g in gens], _no_count)


async def start_generations(service: Service, target: Target, request: GenerateRequest, n: int, endpoint: str,
                            system_prefix: str | None = None) -> list[Generation]:
    """Submit ``request`` ``n`` times; with a seed, generation i uses seed + i.

    All or nothing: when one fails to start, those already started are closed and the error raised.
    """
    gens: list[Generation] = []
    try:
        for i in range(n):
            seed = request.sampling.seed
            sampling = request.sampling if i == 0 or seed is None else replace(request.sampling, seed=seed + i)
            gens.append(await service.generate(target, replace(request, sampling=sampling), endpoint,
                                               system_prefix=system_prefix))
    except BaseException:
        for g in gens:
            await g.close()
        raise
    return gens


async def count_prompt_tokens(service: Service, call: NativeCall) -> int:
    """How many tokens the rendered prompt of ``call`` is, as a generation would count them."""
    if upstream_route(service, call.model) is not None:
        raise errors.UnsupportedCapability("counting tokens is not available for upstream models "
                                           "(their own server renders and tokenizes the prompt)")
    target, turn = await prepare_chat(service, call)
    return len(await service.tokenize(target, turn.prompt, add_special=True, images=turn.images))


async def output_events(output: Output) -> AsyncIterator[ChatEvent]:
    """One reply as parsed chat events (answer text, reasoning, tool calls), in output order.

    ``output.done`` is set once this ends.
    """
    async for piece in output.pieces():
        for event in piece.events:
            yield event


def hit_length_limit(done: DoneEvent | None) -> bool:
    """Whether the output was cut by the token limit (or the context end) rather than ended by the model."""
    return done is not None and done.done_reason is DoneReason.LENGTH


async def with_heartbeat(source: AsyncIterator[T], interval: float) -> AsyncIterator[T | None]:
    """``source``'s items, and None whenever ``interval`` seconds pass without one.

    Lets a stream send keep-alive events while a long prompt is still being read: the pending
    ``__anext__`` keeps running across heartbeats (it is never cancelled, only awaited again).
    """
    pending: asyncio.Task[T] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(source.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield None
                continue
            task, pending = pending, None
            try:
                item = task.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
