"""The native request: what every API's adapter turns its request into, before one service runs it.

Ollama's ``/api/chat`` and ``/api/generate``, OpenAI's chat and completions, the Responses API
and Anthropic's Messages each convert their body into a :class:`NativeCall` (pure functions in
their ``*_compat`` modules); :mod:`.chat` runs it on a local model and :mod:`.remote` on an
upstream one. It names no API: a field here means the same thing whichever API filled it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..chat.think import Think
from ..engine.types import OutputFormat
from ..jsontypes import JSONObject, JSONValue
from ..runtime.resident import KeepAlive
from .http import get

EXTRA_OPTIONS = ("num_ctx", "top_k", "min_p", "typical_p", "repeat_penalty", "repeat_last_n", "num_batch",
                 "num_gpu", "num_thread", "num_keep", "use_mmap", "cache_reuse")
"""Ollama options any API's request may also carry as top-level fields (localrun's extras)."""


@dataclass(slots=True)
class NativeCall:
    """One request in native terms: a chat (``messages``) or raw completions (``prompts``)."""

    model: object  # the request's raw "model" (Service.target checks it)
    options: JSONObject  # Ollama options, each checked against the one range table
    keep_alive: KeepAlive
    stream: bool = False
    include_usage: bool = False
    n: int = 1
    logprobs: bool = False
    top_logprobs: int = 0
    format: OutputFormat = None
    messages: list[JSONObject] = field(default_factory=list)
    tools: list[JSONObject] | None = None
    tool_choice: JSONValue = None  # as the request has it: checked where the turn is prepared
    think: Think | None = None  # Ollama's think; or reasoning_effort / chat_template_kwargs.enable_thinking
    prompts: list[str] = field(default_factory=list)
    suffix: str = ""  # fill in the middle: the text after the gap each of ``prompts`` precedes
    echo: bool = False
    ignore_eos: bool = False  # vLLM's extras: end-of-generation tokens do not end the output
    min_tokens: int = 0       # ... until this many tokens were generated


def extra_options(body: JSONObject, names: tuple[str, ...] = EXTRA_OPTIONS) -> JSONObject:
    """The Ollama options a request of any API carries besides its own fields: a whole ``options``
    object, with the top-level fields ``names`` over it. Values are checked later, in one place
    (:func:`.options.check_option`)."""
    options: JSONObject = dict(get(body, "options", dict, {}))
    options.update((name, body[name]) for name in names if body.get(name) is not None)
    return options
