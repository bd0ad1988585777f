"""The Responses API's reply: the ``response`` object and the typed stream events that build it.

:class:`ResponsesEncoder` is pure state (no I/O). The route feeds it what the model produced, in
order (``text`` deltas, ``tool_call``s), then ``finish`` (or ``fail``); each call returns the
events to send, each ``(event name, data)`` with its ``sequence_number`` counting from 0:

    response.created, response.in_progress
    response.output_item.added (reasoning), response.content_part.added (reasoning_text),
    response.reasoning_text.delta ..., response.reasoning_text.done, response.content_part.done,
    response.output_item.done                                                 (when the model thinks)
    response.output_item.added (message), response.content_part.added (output_text)
    response.output_text.delta ...
    response.output_text.done, response.content_part.done, response.output_item.done
    response.output_item.added (function_call), response.function_call_arguments.delta,
    response.function_call_arguments.done, response.output_item.done          (per call)
    response.completed | response.incomplete (max_output_tokens) | error + response.failed

A non-streamed reply is the same encoder's final :attr:`ResponsesEncoder.response`, so both
modes give the same object.
"""

from __future__ import annotations

import copy
import time

from ...chat.events import new_id
from ...jsontypes import JSONObject, JSONValue
from ..chat import TokenUsage
from ..http import NamedEvent


class ResponsesEncoder:
    """Builds one ``response`` object and its stream events. Not thread-safe; one per request."""

    def __init__(self, model: str, echo: JSONObject) -> None:
        now = int(time.time())
        self._output: list[JSONValue] = []  # the response's output items, each an object
        self.response: JSONObject = {
            "id": new_id("resp"), "object": "response", "created_at": now, "status": "in_progress",
            "completed_at": None, "error": None, "incomplete_details": None, "model": model, "output": self._output,
            "previous_response_id": None, "reasoning": {"effort": None, "summary": None}, "store": False,
            "usage": None, **echo,
        }
        self._seq = 0
        self._open: JSONObject | None = None  # the message or reasoning item being written, if any
        self._text: list[str] = []

    def _event(self, kind: str, **fields: JSONValue) -> NamedEvent:
        data: JSONObject = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return kind, data

    def _snapshot(self, kind: str) -> NamedEvent:
        """The response as it stands, for an event written later. Only the output items change in
        place (the rest is set by assignment), so only they are copied: the request's echoed
        tools, schema and metadata are never walked (a hostile 600-deep metadata made a deep copy
        of the whole response overflow Python's stack: a 500)."""
        return self._event(kind, response={**self.response, "output": copy.deepcopy(self._output)})

    def start(self) -> list[NamedEvent]:
        """``response.created`` (its status as it stands: ``queued`` for a background response), then
        ``response.in_progress``."""
        created = self._snapshot("response.created")
        self.response["status"] = "in_progress"
        return [created, self._snapshot("response.in_progress")]

    def current(self) -> JSONObject:
        """The response as it stands, the text of an item still being written included (a background
        response read while it runs)."""
        output = copy.deepcopy(self._output)
        if self._open is not None:
            item = output[self._output.index(self._open)]
            assert isinstance(item, dict)
            item["content"] = [_part(str(self._open["type"]), "".join(self._text))]
        return {**self.response, "output": output}

    def text(self, delta: str) -> list[NamedEvent]:
        """Output text; the first piece opens the message item and its output_text part."""
        return self._stream(delta, "message", "response.output_text")

    def reasoning(self, delta: str) -> list[NamedEvent]:
        """The model's reasoning, as a ``reasoning`` item with one ``reasoning_text`` part."""
        return self._stream(delta, "reasoning", "response.reasoning_text")

    def _stream(self, delta: str, kind: str, event_prefix: str) -> list[NamedEvent]:
        if not delta:
            return []
        events = []
        if self._open is not None and self._open["type"] != kind:
            events += self._close("completed")
        if self._open is None:
            item: JSONObject
            if kind == "message":
                item = {"id": new_id("msg"), "type": "message", "status": "in_progress", "role": "assistant",
                        "content": []}
            else:
                item = {"id": new_id("rs"), "type": "reasoning", "status": "in_progress", "summary": [],
                        "content": []}
            self._open = item
            self._output.append(item)
            index = len(self._output) - 1
            events.append(self._event("response.output_item.added", output_index=index, item=copy.deepcopy(item)))
            events.append(self._event("response.content_part.added", output_index=index, item_id=item["id"],
                                      content_index=0, part=_part(kind, "")))
        self._text.append(delta)
        fields: JSONObject = {"logprobs": []} if kind == "message" else {}
        events.append(self._event(f"{event_prefix}.delta", output_index=len(self._output) - 1,
                                  item_id=self._open["id"], content_index=0, delta=delta, **fields))
        return events

    def _close(self, status: str) -> list[NamedEvent]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = self._output.index(item)
        text, self._text = "".join(self._text), []
        is_message = item["type"] == "message"
        part = _part("message" if is_message else "reasoning", text)
        item["content"] = [part]
        item["status"] = status
        if is_message:
            done = self._event("response.output_text.done", output_index=index, item_id=item["id"], content_index=0,
                               text=text, logprobs=[])
        else:
            done = self._event("response.reasoning_text.done", output_index=index, item_id=item["id"],
                               content_index=0, text=text)
        return [
            done,
            self._event("response.content_part.done", output_index=index, item_id=item["id"], content_index=0,
                        part=copy.deepcopy(part)),
            self._event("response.output_item.done", output_index=index, item=copy.deepcopy(item)),
        ]

    def tool_call(self, call_id: str, name: str, arguments: str, namespace: str | None = None) -> list[NamedEvent]:
        """One complete function call (``arguments`` is its JSON text); closes open message text first."""
        events = self._close("completed")
        item: JSONObject = {"id": new_id("fc"), "type": "function_call", "status": "in_progress", "call_id": call_id,
                            "name": name, "arguments": ""}
        if namespace is not None:
            item["namespace"] = namespace
        self._output.append(item)
        index = len(self._output) - 1
        events.append(self._event("response.output_item.added", output_index=index, item=copy.deepcopy(item)))
        events.append(self._event("response.function_call_arguments.delta", output_index=index, item_id=item["id"],
                                  delta=arguments))
        item["arguments"], item["status"] = arguments, "completed"
        events.append(self._event("response.function_call_arguments.done", output_index=index, item_id=item["id"],
                                  name=name, arguments=arguments))
        events.append(self._event("response.output_item.done", output_index=index, item=copy.deepcopy(item)))
        return events

    def finish(self, usage: TokenUsage, hit_limit: bool) -> list[NamedEvent]:
        """The last events: ``response.incomplete`` when ``max_output_tokens`` cut the output, else completed."""
        events = self._close("incomplete" if hit_limit else "completed")
        self.response["usage"] = {
            "input_tokens": usage.prompt, "input_tokens_details": {"cached_tokens": usage.cached},
            "output_tokens": usage.output, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.prompt + usage.output,
        }
        self.response["completed_at"] = int(time.time())
        if hit_limit:
            self.response["status"] = "incomplete"
            self.response["incomplete_details"] = {"reason": "max_output_tokens"}
            return [*events, self._snapshot("response.incomplete")]
        self.response["status"] = "completed"
        return [*events, self._snapshot("response.completed")]

    def cancel(self) -> list[NamedEvent]:
        """A background response cancelled while it ran: the item being written closes as incomplete,
        the status is ``cancelled``, and no terminal event follows (the stream ends)."""
        events = self._close("incomplete")
        self.response["status"] = "cancelled"
        return events

    def fail(self, code: str, message: str) -> list[NamedEvent]:
        """The stream broke after it started: an ``error`` event, then ``response.failed``."""
        self.response["status"] = "failed"
        self.response["error"] = {"code": code, "message": message}
        return [self._event("error", code=code, message=message, param=None), self._snapshot("response.failed")]


def _part(kind: str, text: str) -> JSONObject:
    """The content part of a message (``output_text``) or of a reasoning item (``reasoning_text``)."""
    if kind == "message":
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {"type": "reasoning_text", "text": text}
