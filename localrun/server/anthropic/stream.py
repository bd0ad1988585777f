"""The Messages API's reply: the ``message`` object and Anthropic's stream events that build it.

:class:`MessageEncoder` is pure state (no I/O). The route calls ``start`` (``message_start`` and
a ``ping``), then ``text`` / ``tool_use`` in output order, then ``finish``; each returns the
events to send as ``(event name, data)``:

    message_start, ping
    content_block_start (thinking), content_block_delta (thinking_delta) ..., content_block_stop
    content_block_start (text), content_block_delta (text_delta) ..., content_block_stop
    content_block_start (tool_use, input {}), content_block_delta (input_json_delta),
    content_block_stop                                                        (per call)
    message_delta (stop_reason, stop_sequence, usage), message_stop

``stop_reason`` is ``max_tokens`` when the limit cut the output (even after a call: the model was
still writing, perhaps a second call), else ``tool_use`` when the model called a tool,
``stop_sequence`` when one of the request's ``stop_sequences`` ended it, else ``end_turn``.
Usage follows Anthropic's accounting: ``input_tokens`` are the prompt tokens read fresh,
``cache_read_input_tokens`` those served from the prefix cache (their sum is the prompt).
A non-streamed reply is the encoder's final :attr:`MessageEncoder.message`.
"""

from __future__ import annotations

import copy

from ...chat.events import new_id
from ...jsontypes import JSONObject, JSONValue
from ..chat import TokenUsage
from ..http import NamedEvent


def stop_reason(tool_calls: bool, hit_limit: bool, stop_string: str | None,
                stop_sequences: tuple[str, ...]) -> tuple[str, str | None]:
    """(``stop_reason``, ``stop_sequence``) for how the output ended (the module docstring)."""
    if hit_limit:
        return "max_tokens", None
    if tool_calls:
        return "tool_use", None
    if stop_string is not None and stop_string in stop_sequences:
        return "stop_sequence", stop_string
    return "end_turn", None


def usage_json(usage: TokenUsage) -> JSONObject:
    return {"input_tokens": usage.prompt - usage.cached, "output_tokens": usage.output,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": usage.cached}


class MessageEncoder:
    """Builds one ``message`` and its stream events. Not thread-safe; one per request."""

    def __init__(self, model: str) -> None:
        self._content: list[JSONValue] = []  # the message's content blocks, each an object
        self.message: JSONObject = {
            "id": new_id("msg"), "type": "message", "role": "assistant", "model": model, "content": self._content,
            "stop_reason": None, "stop_sequence": None,
            "usage": usage_json(TokenUsage(0, 0, 0)),
        }
        self._open: JSONObject | None = None  # the text or thinking block being written, if any
        self.tool_calls = 0

    @property
    def _index(self) -> int:
        return len(self._content) - 1

    def start(self, prompt_tokens: int) -> list[NamedEvent]:
        """``message_start`` (with the prompt's size as known before generation) and a ``ping``."""
        self.message["usage"] = usage_json(TokenUsage(prompt=prompt_tokens, cached=0, output=0))
        return [("message_start", {"type": "message_start", "message": copy.deepcopy(self.message)}),
                ping()]

    def text(self, delta: str) -> list[NamedEvent]:
        """Answer text; the first piece opens a text block (closing a thinking block before it)."""
        return self._stream(delta, "text", {"type": "text", "text": ""}, "text_delta")

    def thinking(self, delta: str) -> list[NamedEvent]:
        """Reasoning text, in a ``thinking`` block (its ``signature`` stays empty: nothing is signed here)."""
        return self._stream(delta, "thinking", {"type": "thinking", "thinking": "", "signature": ""}, "thinking_delta")

    def _stream(self, delta: str, field: str, empty: JSONObject, delta_type: str) -> list[NamedEvent]:
        if not delta:
            return []
        events: list[NamedEvent] = []
        if self._open is not None and self._open["type"] != empty["type"]:
            events += self._close_text()
        if self._open is None:
            self._open = dict(empty)
            self._content.append(self._open)
            events.append(_block_start(self._index, self._open))
        written = self._open[field]  # a string: empty holds one
        self._open[field] = (written if isinstance(written, str) else "") + delta
        events.append(("content_block_delta", {"type": "content_block_delta", "index": self._index,
                                               "delta": {"type": delta_type, field: delta}}))
        return events

    def _close_text(self) -> list[NamedEvent]:
        if self._open is None:
            return []
        self._open = None
        return [_block_stop(self._index)]

    def tool_use(self, call_id: str, name: str, input_json: str, arguments: JSONObject) -> list[NamedEvent]:
        """One complete tool call: its block, its input as one ``input_json_delta``, its stop."""
        events = self._close_text()
        block: JSONObject = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        self._content.append(block)
        index = self._index
        events.append(_block_start(index, block))
        block["input"] = arguments
        events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                               "delta": {"type": "input_json_delta", "partial_json": input_json}}))
        events.append(_block_stop(index))
        self.tool_calls += 1
        return events

    def finish(self, usage: TokenUsage, hit_limit: bool, stop_string: str | None,
               stop_sequences: tuple[str, ...]) -> list[NamedEvent]:
        events = self._close_text()
        reason, sequence = stop_reason(self.tool_calls > 0, hit_limit, stop_string, stop_sequences)
        self.message["stop_reason"], self.message["stop_sequence"] = reason, sequence
        usage_ = self.message["usage"] = usage_json(usage)
        events.append(("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                         "usage": dict(usage_)}))
        events.append(("message_stop", {"type": "message_stop"}))
        return events


def ping() -> NamedEvent:
    return "ping", {"type": "ping"}


def error_event(error_type: str, message: str) -> NamedEvent:
    """A stream that broke after it started ends with this (Anthropic's ``error`` event)."""
    return "error", {"type": "error", "error": {"type": error_type, "message": message}}


def _block_start(index: int, block: JSONObject) -> NamedEvent:
    return "content_block_start", {"type": "content_block_start", "index": index, "content_block": dict(block)}


def _block_stop(index: int) -> NamedEvent:
    return "content_block_stop", {"type": "content_block_stop", "index": index}
