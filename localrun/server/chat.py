"""One chat generation for every chat-shaped API: /v1/chat/completions, /v1/responses, /v1/messages.

Each API's adapter converts its request into a :class:`~.openai_compat.NativeCall` (messages,
tools and ``tool_choice`` in the chat-completions shape, ``think``, Ollama options) with pure
functions; :func:`start_chat` then does what all of them share: resolve the model, prepare the
turn (:func:`.chatturn.prepare`: capability checks, the prompt, a forced call's grammar) and
submit ``n`` generations. The adapter reads each reply through :func:`output_events` (the
API-neutral :mod:`.chatparse` events), writes them in its own shape and must ``close()`` the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import TypeVar

from ..engine.types import DoneEvent, DoneReason, GenerateRequest, Truncation
from . import chatturn
from .chatparse import ChatEvent
from .chatturn import ChatTurn
from .openai_compat import NativeCall
from .service import Generation, Service, Target

T = TypeVar("T")


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
    """The generations of one chat request (``n`` of them), started and not yet closed."""

    target: Target
    turn: ChatTurn
    gens: list[Generation]

    async def close(self) -> None:
        """Close every generation (cancels unfinished ones, releases the model, logs)."""
        for gen in self.gens:
            await gen.close()


async def prepare_chat(service: Service, call: NativeCall) -> tuple[Target, ChatTurn]:
    """Resolve the model and prepare the turn (raises 400/404 before anything is generated)."""
    target = await service.target(call.model, call.options, call.keep_alive)
    turn = await chatturn.prepare(target, call.messages, tools=call.tools, tool_choice=call.tool_choice,
                                  think=call.think)
    return target, turn


async def start_chat(service: Service, call: NativeCall, endpoint: str,
                     cut: Truncation = Truncation.FRONT) -> ChatRun:
    """Prepare ``call`` and start its ``n`` generations."""
    target, turn = await prepare_chat(service, call)
    sampling = replace(target.sampling, logprobs=call.logprobs, top_logprobs=call.top_logprobs,
                       ignore_eos=call.ignore_eos, min_tokens=call.min_tokens)
    gens = await start_generations(service, target, turn.request(sampling, call.format, cut), call.n, endpoint,
                                   turn.system_prefix)
    return ChatRun(target, turn, gens)


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
    target, turn = await prepare_chat(service, call)
    return len(await service.tokenize(target, turn.prompt, add_special=True))


async def output_events(gen: Generation, turn: ChatTurn) -> AsyncIterator[ChatEvent]:
    """One reply as parsed chat events (answer text, reasoning, tool calls), in output order.

    ``gen.done`` is set once this ends.
    """
    parser = turn.parser()
    async for event in gen.events():
        for parsed in parser.feed(event.text):
            yield parsed
    for parsed in parser.finish():
        yield parsed


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
