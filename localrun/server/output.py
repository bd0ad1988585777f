"""One reply as every route reads it: typed pieces, then the final DoneEvent.

A route never asks where a reply comes from. :class:`LocalOutput` reads a local
:class:`~.service.Generation` through the turn's :class:`~.chatparse.ChatStreamParser` (or, for
a raw prompt, takes its text as is); ``remote.UpstreamOutput`` reads an upstream's reply, whose
server already split text, reasoning and tool calls. Both yield :class:`Piece` s::

    async for piece in output.pieces():   # piece.events: ContentDelta | ThinkingDelta | ToolCall
        ...                                # piece.text: the raw text (completions); piece.logprobs
    output.done                            # the DoneEvent once pieces() ended (None if it failed)
    await output.close()                   # always (try/finally): cancels, releases, logs
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..chat.events import ChatEvent, ContentDelta
from ..chat.parse import ChatStreamParser
from ..engine.types import DoneEvent, DoneReason, TokenLogprob
from .service import Generation


@dataclass(frozen=True, slots=True)
class Piece:
    """What one step of a reply adds: its events in output order, the raw text behind them and
    the logprobs of its tokens (local models only)."""

    events: tuple[ChatEvent, ...]
    text: str = ""
    logprobs: tuple[TokenLogprob, ...] = ()


class Output(Protocol):
    """One reply under way (see the module docstring). ``status`` ("ok", "error", "cancelled") is
    what the request's log line says; a route sets "error" when it ends a stream with one."""

    status: str

    @property
    def model(self) -> str: ...

    @property
    def done(self) -> DoneEvent | None: ...

    @property
    def load_duration_ns(self) -> int: ...

    @property
    def total_duration_ns(self) -> int: ...

    def pieces(self) -> AsyncIterator[Piece]: ...

    async def close(self) -> None: ...


class LocalOutput:
    """A local generation read through ``parser`` (None: raw text, each piece one ContentDelta)."""

    def __init__(self, gen: Generation, parser: ChatStreamParser | None) -> None:
        self.gen = gen
        self._parser = parser

    @property
    def status(self) -> str:
        return self.gen.status

    @status.setter
    def status(self, value: str) -> None:
        self.gen.status = value

    @property
    def model(self) -> str:
        return self.gen.target.name

    @property
    def done(self) -> DoneEvent | None:
        return self.gen.done

    @property
    def load_duration_ns(self) -> int:
        return self.gen.load_duration_ns

    @property
    def total_duration_ns(self) -> int:
        return self.gen.total_duration_ns

    async def pieces(self) -> AsyncIterator[Piece]:
        """The reply's pieces; a call the token limit cut short is left out (``finish(truncated=)``)."""
        parser = self._parser
        async for event in self.gen.events():
            events = parser.feed(event.text) if parser is not None else [ContentDelta(event.text)]
            yield Piece(tuple(events), event.text, event.logprobs)
        if parser is not None:
            done = self.gen.done
            tail = parser.finish(truncated=done is not None and done.done_reason is DoneReason.LENGTH)
            if tail:
                yield Piece(tuple(tail))

    async def close(self) -> None:
        await self.gen.close()


async def merged(outputs: Sequence[Output]) -> AsyncIterator[tuple[int, Piece | None]]:
    """Pieces of several replies as they come: (index, piece), then (index, None) at its end."""
    if len(outputs) == 1:
        async for piece in outputs[0].pieces():
            yield 0, piece
        yield 0, None
        return
    queue: asyncio.Queue[tuple[int, Piece | None, BaseException | None]] = asyncio.Queue()

    async def pump(i: int, out: Output) -> None:
        try:
            async for piece in out.pieces():
                await queue.put((i, piece, None))
            await queue.put((i, None, None))
        except Exception as exc:
            await queue.put((i, None, exc))

    tasks = [asyncio.create_task(pump(i, o)) for i, o in enumerate(outputs)]
    try:
        remaining = len(outputs)
        while remaining:
            i, item, exc = await queue.get()
            if exc is not None:
                raise exc
            if item is None:
                remaining -= 1
            yield i, item
    finally:
        for t in tasks:
            t.cancel()
