"""Ollama's JSON shapes for parsed chat output (pure functions over :mod:`.chatparse` events).

``/api/chat`` chunks carry ``message`` (``content``, ``thinking``, ``tool_calls``); ``/api/generate``
chunks carry ``response`` and ``thinking``. :data:`CHAT` and :data:`GENERATE` give, for one event,
the fields of its streamed chunk, and for the end, the fields of the final chunk (with the whole
reply when the response is not streamed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...chat.events import ChatEvent, ContentDelta, Reply, ThinkingDelta, ToolCall
from ...engine.types import DoneEvent
from ...jsontypes import JSONObject


def tool_call_json(call: ToolCall) -> JSONObject:
    """One call as Ollama writes it: ``{"id", "function": {"index", "name", "arguments": {...}}}``."""
    return {"id": call.id, "function": {"index": call.index, "name": call.name, "arguments": call.arguments}}


def message(content: str, thinking: str = "", calls: Sequence[ToolCall] = ()) -> JSONObject:
    out: JSONObject = {"role": "assistant", "content": content}
    if thinking:
        out["thinking"] = thinking
    if calls:
        out["tool_calls"] = [tool_call_json(c) for c in calls]
    return out


def _event_message(event: ChatEvent) -> JSONObject:
    if isinstance(event, ContentDelta):
        return message(event.text)
    if isinstance(event, ThinkingDelta):
        return message("", event.text)
    return message("", "", [event])


@dataclass(frozen=True, slots=True)
class Shape:
    """How one native endpoint writes parsed output (see the module docstring)."""

    chat: bool

    def piece(self, event: ChatEvent) -> JSONObject:
        """The fields of the streamed chunk for ``event``."""
        if self.chat:
            return {"message": _event_message(event)}
        if isinstance(event, ThinkingDelta):
            return {"response": "", "thinking": event.text}
        return {"response": event.text if isinstance(event, ContentDelta) else ""}

    def final(self, done: DoneEvent | None, reply: Reply | None) -> JSONObject:
        """The fields of the last chunk; ``reply`` is the whole reply (None when it was streamed)."""
        if self.chat:
            if reply is None:
                return {"message": message("")}
            return {"message": message(reply.content, reply.thinking, reply.tool_calls)}
        out: JSONObject = {"response": reply.content if reply else ""}
        if reply is not None and reply.thinking:
            out["thinking"] = reply.thinking
        out["context"] = list(done.context) if done is not None else []
        return out


CHAT = Shape(chat=True)
GENERATE = Shape(chat=False)
