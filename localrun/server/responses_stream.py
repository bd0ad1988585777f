"""The Responses API's reply: the ``response`` object and the typed stream events that build it.

:class:`ResponsesEncoder` is pure state (no I/O). The route feeds it what the model produced, in
order (``text`` deltas, ``tool_call``s), then ``finish`` (or ``fail``); each call returns the
events to send, each ``(event name, data)`` with its ``sequence_number`` counting from 0:

    response.created, response.in_progress
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
import secrets
import time
from typing import Any

from .chat import TokenUsage

Event = tuple[str, dict[str, Any]]


def new_id(prefix: str) -> str:
    """An id in OpenAI's style: ``resp_...``, ``msg_...``, ``fc_...``, ``call_...``."""
    return f"{prefix}_{secrets.token_hex(12)}"


class ResponsesEncoder:
    """Builds one ``response`` object and its stream events. Not thread-safe; one per request."""

    def __init__(self, model: str, echo: dict[str, Any]) -> None:
        now = int(time.time())
        self.response: dict[str, Any] = {
            "id": new_id("resp"), "object": "response", "created_at": now, "status": "in_progress",
            "completed_at": None, "error": None, "incomplete_details": None, "model": model, "output": [],
            "previous_response_id": None, "reasoning": {"effort": None, "summary": None}, "store": False,
            "usage": None, **echo,
        }
        self._seq = 0
        self._message: dict[str, Any] | None = None  # the output message being written, if any
        self._text: list[str] = []

    def _event(self, kind: str, **fields: Any) -> Event:
        data = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return kind, data

    def _snapshot(self, kind: str) -> Event:
        return self._event(kind, response=copy.deepcopy(self.response))

    def start(self) -> list[Event]:
        return [self._snapshot("response.created"), self._snapshot("response.in_progress")]

    def text(self, delta: str) -> list[Event]:
        """Output text; the first piece opens the message item and its output_text part."""
        if not delta:
            return []
        events = []
        if self._message is None:
            self._message = {"id": new_id("msg"), "type": "message", "status": "in_progress", "role": "assistant",
                             "content": []}
            self.response["output"].append(self._message)
            index = len(self.response["output"]) - 1
            events.append(self._event("response.output_item.added", output_index=index,
                                      item=copy.deepcopy(self._message)))
            events.append(self._event("response.content_part.added", output_index=index, item_id=self._message["id"],
                                      content_index=0, part=_text_part("")))
        self._text.append(delta)
        events.append(self._event("response.output_text.delta", output_index=len(self.response["output"]) - 1,
                                  item_id=self._message["id"], content_index=0, delta=delta, logprobs=[]))
        return events

    def _close_message(self, status: str) -> list[Event]:
        message, self._message = self._message, None
        if message is None:
            return []
        index = self.response["output"].index(message)
        text, self._text = "".join(self._text), []
        part = _text_part(text)
        message["content"] = [part]
        message["status"] = status
        return [
            self._event("response.output_text.done", output_index=index, item_id=message["id"], content_index=0,
                        text=text, logprobs=[]),
            self._event("response.content_part.done", output_index=index, item_id=message["id"], content_index=0,
                        part=copy.deepcopy(part)),
            self._event("response.output_item.done", output_index=index, item=copy.deepcopy(message)),
        ]

    def tool_call(self, call_id: str, name: str, arguments: str) -> list[Event]:
        """One complete function call (``arguments`` is its JSON text); closes open message text first."""
        events = self._close_message("completed")
        item = {"id": new_id("fc"), "type": "function_call", "status": "in_progress", "call_id": call_id,
                "name": name, "arguments": ""}
        self.response["output"].append(item)
        index = len(self.response["output"]) - 1
        events.append(self._event("response.output_item.added", output_index=index, item=copy.deepcopy(item)))
        events.append(self._event("response.function_call_arguments.delta", output_index=index, item_id=item["id"],
                                  delta=arguments))
        item["arguments"], item["status"] = arguments, "completed"
        events.append(self._event("response.function_call_arguments.done", output_index=index, item_id=item["id"],
                                  name=name, arguments=arguments))
        events.append(self._event("response.output_item.done", output_index=index, item=copy.deepcopy(item)))
        return events

    def finish(self, usage: TokenUsage, hit_limit: bool) -> list[Event]:
        """The last events: ``response.incomplete`` when ``max_output_tokens`` cut the output, else completed."""
        events = self._close_message("incomplete" if hit_limit else "completed")
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

    def fail(self, code: str, message: str) -> list[Event]:
        """The stream broke after it started: an ``error`` event, then ``response.failed``."""
        self.response["status"] = "failed"
        self.response["error"] = {"code": code, "message": message}
        return [self._event("error", code=code, message=message, param=None), self._snapshot("response.failed")]


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
