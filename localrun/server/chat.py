"""One chat generation for every chat-shaped API: /v1/chat/completions, /v1/responses, /v1/messages.

Each API's adapter converts its request into a :class:`~.openai_compat.NativeCall` (messages,
tools and ``tool_choice`` in the chat-completions shape, Ollama options) with pure functions;
:func:`start_chat` then does what all of them share: resolve the model, drop the tools when
``tool_choice`` is ``none``, force a call with a grammar when it is ``required`` or names one,
render the prompt with the model's template and submit ``n`` generations. The adapter streams
the events back in its own shape and must ``close()`` every generation (``ChatRun.close``).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from .. import errors
from ..engine.types import DoneEvent, DoneReason, GenerateRequest, SamplingOptions, Truncation
from . import prompts
from .openai_compat import NativeCall
from .service import Generation, Service, Target
from .tools import ToolStreamFilter, forced_call_schema, tool_names

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TextDelta:
    """Answer text, in order."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One complete tool call the model made; ``call_id`` is unique within the server's lifetime."""

    call_id: str
    name: str
    arguments: dict[str, Any]


OutputEvent = TextDelta | ToolUse


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


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    """A chat request rendered for one model: the prompt text and what constrains the output."""

    target: Target
    prompt: str
    tools: list[dict[str, Any]] | None       # the tools the prompt offers (None: none, or tool_choice none)
    format: str | dict[str, Any] | None      # the forced-call schema, else the request's format

    @property
    def tool_names(self) -> set[str] | None:
        """Names a tool call may use; None when the request offers no tools (no parsing at all)."""
        return tool_names(self.tools) if self.tools else None


@dataclass(slots=True)
class ChatRun:
    """The generations of one chat request (``n`` of them), started and not yet closed."""

    chat: ChatPrompt
    gens: list[Generation]

    @property
    def target(self) -> Target:
        return self.chat.target

    async def close(self) -> None:
        """Close every generation (cancels unfinished ones, releases the model, logs)."""
        for gen in self.gens:
            await gen.close()


async def output_events(gen: Generation, names: set[str] | None, id_prefix: str) -> AsyncIterator[OutputEvent]:
    """The model's output as typed events: text as it streams, tool calls once complete.

    ``names`` are the offered tools (None: the output is all text). Text that may be a call is
    held back until it is decided. ``gen.done`` is set once this ends; tool call ids are
    ``{id_prefix}{random hex}`` (``call_`` for OpenAI, ``toolu_`` for Anthropic).
    """
    tool_filter = ToolStreamFilter(names) if names is not None else None
    async for event in gen.events():
        text = tool_filter.feed(event.text) if tool_filter is not None else event.text
        if text:
            yield TextDelta(text)
    if tool_filter is not None:
        rest, calls = tool_filter.finish()
        if rest:
            yield TextDelta(rest)
        for call in calls:
            yield ToolUse(f"{id_prefix}{secrets.token_hex(12)}", call.name, call.arguments)


def hit_length_limit(done: DoneEvent | None) -> bool:
    """Whether the output was cut by the token limit (or the context end) rather than ended by the model."""
    return done is not None and done.done_reason is DoneReason.LENGTH


async def render_chat(service: Service, call: NativeCall) -> ChatPrompt:
    """Resolve the model and render the request's messages (and tools) with its template."""
    target = await service.target(call.model, call.options, call.keep_alive)
    tools = call.tools if call.tool_choice != "none" else None
    if call.tool_choice not in (None, "auto", "none") and not tools:
        raise errors.InvalidRequest("'tool_choice' needs 'tools'")
    forced = forced_call_schema(tools, call.tool_choice) if tools else None
    full = prompts.with_defaults(call.messages, target.system, target.messages)
    prompt, _ = await prompts.render_async(target.template, full, tools)
    return ChatPrompt(target, prompt, tools, forced or call.format)


async def start_chat(service: Service, call: NativeCall, endpoint: str,
                     cut: Truncation = Truncation.FRONT) -> ChatRun:
    """Render ``call`` and start its ``n`` generations (raises before any output on a request error)."""
    chat = await render_chat(service, call)
    sampling = replace(chat.target.sampling, logprobs=call.logprobs, top_logprobs=call.top_logprobs,
                       ignore_eos=call.ignore_eos, min_tokens=call.min_tokens)
    gens = await start_generations(service, chat.target, chat.prompt, sampling, chat.format, call.n, endpoint, cut)
    return ChatRun(chat, gens)


async def count_prompt_tokens(service: Service, call: NativeCall) -> int:
    """How many tokens the rendered prompt of ``call`` is, as a generation would count them."""
    chat = await render_chat(service, call)
    return len(await service.tokenize(chat.target, chat.prompt, add_special=True))


async def start_generations(service: Service, target: Target, prompt: str, sampling: SamplingOptions,
                            fmt: str | dict[str, Any] | None, n: int, endpoint: str,
                            cut: Truncation = Truncation.FRONT) -> list[Generation]:
    """Submit ``n`` generations of one prompt; with a seed, generation i uses seed + i.

    All or nothing: when one fails to start, those already started are closed and the error raised.
    """
    gens: list[Generation] = []
    try:
        for i in range(n):
            s = sampling if i == 0 or sampling.seed is None else replace(sampling, seed=sampling.seed + i)
            request = GenerateRequest(prompt=prompt, sampling=s, format=fmt, truncation=cut)
            gens.append(await service.generate(target, request, endpoint))
    except BaseException:
        for g in gens:
            await g.close()
        raise
    return gens


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
