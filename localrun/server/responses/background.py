"""Background responses (``"background": true`` on ``/v1/responses``), as OpenAI's API has them.

The reply is written by a task of its own, so it goes on when the client that asked leaves, and is
read back by its id: ``GET /v1/responses/{id}`` gives the response as it stands (``queued``, then
``in_progress`` with the text so far, then its end), ``GET /v1/responses/{id}?stream=true&
starting_after=N`` streams its events after sequence number ``N`` (those already written at once,
then the rest as they come: a client that lost its stream resumes it), and ``POST
/v1/responses/{id}/cancel`` stops it (``cancelled``; cancelling again, or a response that ended,
changes nothing). A background response is always stored (:mod:`.store`) once it ends.

:class:`BackgroundRuns` keeps each run's events while it runs and, after it ends, for the last
:data:`MAX_ENDED` runs to end (so a late client can still stream one again); a run still going
is never dropped. A daemon shutting down cancels the runs still going. Owned by the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Coroutine
from typing import Any, Protocol

from ...jsontypes import JSONObject
from ..http import NamedEvent

log = logging.getLogger(__name__)

MAX_ENDED = 64  # ended runs whose events are kept for streaming again


class Writer(Protocol):
    """What builds the response (:class:`.stream.ResponsesEncoder`)."""

    response: JSONObject  # as it stands; its final form once the run has ended

    def current(self) -> JSONObject:
        """The response as it stands, with the text of an item still being written."""
        ...


class BackgroundRun:
    """One background response: what writes it and every event it has sent so far (an event's
    ``sequence_number`` is its index here)."""

    def __init__(self, encoder: Writer) -> None:
        self.encoder = encoder
        self.events: list[NamedEvent] = []
        self.ended = False
        self.task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    @property
    def id(self) -> str:
        return str(self.encoder.response["id"])

    def add(self, events: list[NamedEvent]) -> None:
        self.events.extend(events)
        self._wake()

    def end(self) -> None:
        self.ended = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()  # readers waiting hold the one just set

    async def tail(self, after: int = -1) -> AsyncIterator[NamedEvent]:
        """The events after sequence number ``after``, then each new one as it comes, until the run ends."""
        at = max(after + 1, 0)
        while True:
            while at < len(self.events):
                yield self.events[at]
                at += 1
            if self.ended:
                return
            await self._changed.wait()


class BackgroundRuns:
    def __init__(self, max_ended: int = MAX_ENDED) -> None:
        self.max_ended = max_ended
        self._runs: OrderedDict[str, BackgroundRun] = OrderedDict()  # running, and ended in the order they ended

    def get(self, response_id: str) -> BackgroundRun | None:
        return self._runs.get(response_id)

    def start(self, run: BackgroundRun, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` (which writes ``run``'s events and ends it) as a task of its own; when it is
        done, the oldest ended runs past :attr:`max_ended` are dropped."""
        run.task = asyncio.create_task(self._then_trim(run.id, work), name=f"background response {run.id}")
        self._runs[run.id] = run

    async def _then_trim(self, response_id: str, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        finally:
            if response_id in self._runs:
                self._runs.move_to_end(response_id)  # ended runs stand in the order they ended
            ended = [key for key, r in self._runs.items() if r.ended]
            for key in ended[:max(0, len(ended) - self.max_ended)]:
                del self._runs[key]

    async def cancel(self, run: BackgroundRun) -> None:
        """Stop ``run`` if it is still going and wait until it has ended (its work records the cancel)."""
        if run.task is not None and not run.task.done():
            run.task.cancel()
            await asyncio.wait([run.task])

    def forget(self, response_id: str) -> None:
        self._runs.pop(response_id, None)

    async def close(self) -> None:
        """Cancel every run still going (the daemon is stopping)."""
        going = [r for r in self._runs.values() if r.task is not None and not r.task.done()]
        if going:
            log.info("cancelling %d background response(s)", len(going))
        for run in going:
            await self.cancel(run)
