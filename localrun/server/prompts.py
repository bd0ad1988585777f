"""Turning chat messages into a prompt with the model's template.

The templates themselves (Jinja2 in a sandbox, Ollama's Go-template subset) are the engine's
(:mod:`localrun.engine.template`, pure Python, no llama_cpp); this module only decides which
template applies and what goes into it: the Modelfile's MESSAGEs and SYSTEM, the request's
messages and tools. A model with no template gets the prompt as is (messages joined).
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

from ..errors import InvalidRequest, TemplateError

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant", "tool")
RENDER_TIMEOUT = 10.0  # seconds; templates are user-supplied code (Modelfile TEMPLATE, request template)


async def render_async(source: str | None, messages: list[dict[str, Any]],
                       tools: list[dict[str, Any]] | None = None) -> tuple[str, str | None]:
    """Render the prompt and the system prefix in a bounded worker process (:mod:`.templating`).

    A hostile or buggy template (huge arithmetic, nested loops, huge output) must not freeze or
    exhaust the daemon that serves every other client: it gets a TemplateError (400) within
    RENDER_TIMEOUT. Returns (prompt, system prefix or None).
    """
    from . import templating

    if not source:  # no template code to run: the messages joined
        prompt, prefix = render_pair(source, messages, tools)
    else:
        prompt, prefix = await templating.run(render_pair, source, messages, tools)
    return str(prompt), prefix if prefix is None else str(prefix)


def render_pair(source: str | None, messages: list[dict[str, Any]],
                tools: list[dict[str, Any]] | None = None) -> list[str | None]:
    """Worker side of :func:`render_async`: [prompt, system prefix or None] (JSON-friendly)."""
    return [render(source, messages, tools), system_prefix(source, messages)]


@lru_cache(maxsize=32)
def _compile(source: str) -> Any:
    try:
        from ..engine.template import ChatTemplate
    except ImportError:  # engine templates not installed: plain sandboxed Jinja2
        return _JinjaTemplate(source)
    return ChatTemplate.from_source(source)


class _JinjaTemplate:
    """Fallback renderer: the Jinja2 subset HF chat templates use, in the immutable sandbox."""

    def __init__(self, source: str) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self._template = env.from_string(source)

    def render(self, messages: list[dict[str, Any]], tools: Any = None, add_generation_prompt: bool = True) -> str:
        return str(self._template.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                         bos_token="", eos_token=""))


def render(source: str | None, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
           add_generation_prompt: bool = True) -> str:
    """Render ``messages`` with the template ``source`` (None: plain concatenation)."""
    if not source:
        return "\n\n".join(str(m.get("content") or "") for m in messages if m.get("content"))
    try:
        template = _compile(source)
        return str(template.render(messages, tools=tools, add_generation_prompt=add_generation_prompt))
    except (TemplateError, InvalidRequest):
        raise
    except Exception as exc:  # a template bug must be a clear 400, never a 500
        raise TemplateError(f"the model's chat template failed to render: {exc}") from exc


def check_messages(messages: Any) -> list[dict[str, Any]]:
    """Validate a messages list (Ollama shape); returns normalised copies."""
    if messages is None:
        return []
    if not isinstance(messages, list):
        raise InvalidRequest("'messages' must be a list of {role, content} objects")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"messages[{i}] must be an object with 'role' and 'content'")
        role = message.get("role")
        if role not in ROLES:
            raise InvalidRequest(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}")
        content = message.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise InvalidRequest(f"messages[{i}].content must be a string")
        if message.get("images"):
            raise InvalidRequest("this model does not support images (messages[%d].images)" % i)
        item = {"role": role, "content": content}
        if message.get("tool_calls"):
            item["tool_calls"] = message["tool_calls"]
        for key in ("tool_name", "name", "tool_call_id"):
            if message.get(key):
                item[key] = message[key]
        out.append(item)
    return out


def with_defaults(messages: list[dict[str, Any]], system: str | None,
                  model_messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prepend the Modelfile's MESSAGEs and SYSTEM (when the request brings no system message)."""
    full = list(model_messages) + list(messages)
    if system and not any(m["role"] == "system" for m in full):
        full.insert(0, {"role": "system", "content": system})
    return full


def system_prefix(source: str | None, messages: list[dict[str, Any]]) -> str | None:
    """The rendered system message alone, so truncation can keep it (None if there is none)."""
    if not messages or messages[0]["role"] != "system" or not source:
        return None
    try:
        return render(source, messages[:1], add_generation_prompt=False) or None
    except InvalidRequest:
        return None
