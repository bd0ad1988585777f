"""One upstream reply under way, and the failure that sends a request on to the next member.

:class:`UpstreamReply` is what :meth:`localrun.upstream.router.Upstreams.chat` hands over: once
the reply's first events are in (a streamed request), or once all of it is (a request whose
client waits for the whole answer). :class:`Retry` is raised inside the router when a member
fails before that point (connection error, timeout, 5xx, 429, a reply that breaks), so the next
member is tried and nothing is lost. Whether to retry is the router's decision alone; a failure
after the handover is reported here (the member is cooled down, an UpstreamError raised).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import httpx

from .. import errors
from ..chat.events import ChatEvent
from ..engine.types import DoneEvent
from .pool import Member, Pool

log = logging.getLogger("localrun.upstream")


class Retry(Exception):
    """A member failed before its first event: try the next one (raised and caught inside the router)."""

    def __init__(self, reason: str, busy: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.busy = busy


class Decoder(Protocol):
    """What both APIs' stream decoders do (openai_api.StreamDecoder, ollama_api.StreamDecoder)."""

    def feed(self, data: str) -> list[ChatEvent]: ...
    def finish_events(self) -> list[ChatEvent]: ...
    def done(self, prompt_ns: int, eval_ns: int) -> DoneEvent: ...


class UpstreamReply:
    """A reply under way from one member; its first events (or all of them) are already read.

    Iterate :meth:`events` once; ``done`` is set when it ends (from the start for a reply read
    whole before the handover). :meth:`close` must run (it ends the member's in-flight count and
    closes the connection, which cancels the upstream's work).
    """

    def __init__(self, pool: Pool, member: Member, response: httpx.Response,
                 chunks: AsyncIterator[list[ChatEvent]], first: list[ChatEvent], decoder: Decoder,
                 started: float, first_at: float, *, clock: Callable[[], float],
                 describe: Callable[[Member, BaseException], str], done: DoneEvent | None = None) -> None:
        """``clock`` times the reply; ``describe`` words a failure with the member's key redacted;
        ``done`` is given when the reply was read to its end already (``first`` holds every event)."""
        self.pool, self.member = pool, member
        self._clock, self._describe = clock, describe
        self._response, self._chunks, self._first, self._decoder = response, chunks, first, decoder
        self._started, self._first_at = started, first_at
        self.done = done
        self._closed = False

    @property
    def first_at(self) -> float:
        """When the first events came in (the clock's time)."""
        return self._first_at

    @property
    def where(self) -> str:
        return f"{self.pool.name} ({self.member.url})"

    async def events(self) -> AsyncIterator[ChatEvent]:
        for event in self._first:
            yield event
        self._first = []
        if self.done is not None:  # read whole before the handover
            return
        try:
            async for batch in self._chunks:
                for event in batch:
                    yield event
            clock = self._clock
            self.done = self._decoder.done(int((self._first_at - self._started) * 1e9),
                                           int((clock() - self._first_at) * 1e9))
        except (httpx.HTTPError, errors.UpstreamError) as exc:
            reason = self._describe(self.member, exc)
            self.member.failed(self._clock(), reason)
            log.warning("upstream %s failed mid-reply: %s", self.where, reason)
            raise errors.UpstreamError(f"upstream {self.pool.name} failed mid-reply: {reason}") from None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.member.end()
        with contextlib.suppress(httpx.HTTPError):
            await self._response.aclose()


async def batches(source: AsyncIterator[str], decoder: Decoder) -> AsyncIterator[list[ChatEvent]]:
    """Each chunk of ``source`` decoded into events (a list per chunk), then what the decoder held back."""
    async for data in source:
        yield decoder.feed(data)
    yield decoder.finish_events()


async def empty() -> AsyncIterator[list[ChatEvent]]:
    """An async generator that yields nothing."""
    nothing: tuple[list[ChatEvent], ...] = ()
    for batch in nothing:
        yield batch
