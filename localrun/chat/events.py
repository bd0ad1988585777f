"""A model's chat reply as typed events, shared by the daemon's parser and the upstream clients.

:mod:`localrun.chat.parse` turns a local model's output text into these events, and
:mod:`localrun.upstream` decodes another server's stream into the same ones, so every API
adapter maps one vocabulary onto its wire shape. Pure: no localrun imports but :mod:`localrun.jsontypes`.

- :class:`ContentDelta` / :class:`ThinkingDelta`  answer text / reasoning text, in output order
- :class:`ToolCall`  one call, with an ``id`` (``call_<hex>``) made once: stream and final message agree
- :class:`Reply`     a whole reply (:func:`collect` joins events into one)
- :func:`new_id`     the random ids API objects carry (``chatcmpl-<hex>``, ``msg_<hex>``, ``call_<hex>``)
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field

from ..jsontypes import JSONObject


def new_id(prefix: str, sep: str = "_") -> str:
    """A fresh id such as ``msg_<24 hex>`` (OpenAI's chat and completion ids use ``sep="-"``)."""
    return f"{prefix}{sep}{secrets.token_hex(12)}"


def new_call_id() -> str:
    return new_id("call")


@dataclass(frozen=True, slots=True)
class ContentDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model made; ``id`` is stable for the life of the reply."""

    name: str
    arguments: JSONObject  # the model's arguments, parsed
    index: int = 0
    id: str = field(default_factory=new_call_id)

    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


ChatEvent = ContentDelta | ThinkingDelta | ToolCall


@dataclass(frozen=True, slots=True)
class Reply:
    """A whole reply, parsed (see :func:`localrun.chat.parse.parse_reply` and :func:`collect`)."""

    content: str
    thinking: str
    tool_calls: tuple[ToolCall, ...]


def collect(events: list[ChatEvent]) -> Reply:
    """Join events into one :class:`Reply` (what a non-streaming response returns)."""
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    thinking = "".join(e.text for e in events if isinstance(e, ThinkingDelta))
    return Reply(content, thinking, tuple(e for e in events if isinstance(e, ToolCall)))
