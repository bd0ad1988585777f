"""Collecting a request's events in engine tests."""

from __future__ import annotations

from dataclasses import dataclass

from localrun.engine.sequence import RequestHandle
from localrun.engine.types import DoneEvent, ErrorEvent, Event, TokenEvent


@dataclass
class Result:
    text: str
    tokens: list[TokenEvent]
    done: DoneEvent

    @property
    def generated(self) -> list[int]:
        return list(self.done.context[self.done.prompt_eval_count:])


def collect(handle: RequestHandle, timeout: float = 120.0) -> Result:
    events: list[Event] = []
    while True:
        event = handle.get(timeout=timeout)
        assert event is not None, "no event within the timeout"
        events.append(event)
        if isinstance(event, ErrorEvent):
            raise event.error
        if isinstance(event, DoneEvent):
            tokens = [e for e in events if isinstance(e, TokenEvent)]
            return Result("".join(t.text for t in tokens), tokens, event)


