"""Turning chat messages into a prompt with the model's template.

The templates themselves (Jinja2 in a sandbox, Ollama's Go-template subset) are
:mod:`localrun.chat.template`; this module checks a conversation's messages and decides what goes
into the template: the Modelfile's MESSAGEs and SYSTEM, the request's messages and tools. A model
with no template gets the prompt as is (messages joined). Pure and synchronous: the daemon runs
:func:`render_pair` in a bounded worker (:mod:`localrun.server.rendering`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache

from ..errors import InvalidRequest, TemplateError
from ..jsontypes import JSONObject, JSONValue
from . import images
from .template import ChatTemplate
from .think import Think, as_level

log = logging.getLogger(__name__)

ROLES = ("system", "user", "assistant", "tool")
"""A native message's roles: the one list every API's messages are checked against."""
TURN_ROLES = ROLES[:3]
"""The roles of APIs that carry tool results in their own items (Responses, Anthropic Messages)."""
ROLE_ALIASES = {"developer": "system"}  # OpenAI's newer name for the system role (chat completions, Responses)


def native_role(role: object, allowed: tuple[str, ...] = ROLES) -> str | None:
    """``role`` as a native role (an alias such as ``developer`` resolved) when it is in ``allowed``, else None."""
    if not isinstance(role, str):
        return None
    role = ROLE_ALIASES.get(role, role)
    return role if role in allowed else None


def role_names(allowed: tuple[str, ...] = ROLES, *, aliases: bool = True) -> str:
    """``allowed`` (and the aliases of its roles) for an error message: "system, developer, user or assistant"."""
    names = [n for r in allowed for n in (r, *(a for a, t in ROLE_ALIASES.items() if aliases and t == r))]
    return ", ".join(names[:-1]) + " or " + names[-1]


_SAMPLE: list[JSONObject] = [{"role": "user", "content": "Hello"}]


@dataclass(frozen=True, slots=True)
class TemplateInputs:
    """What a template gets besides messages and tools (from the model's GGUF and the request).

    ``strip_bos``: the tokenizer adds BOS to every prompt, so a BOS the template writes itself is
    dropped (llama.cpp does the same; two BOS tokens derail a model). ``think`` is passed to the
    template when set (``enable_thinking`` / ``.Think``).
    """

    bos_token: str = ""
    eos_token: str = ""
    strip_bos: bool = False
    think: Think | None = None

    @classmethod
    def from_json(cls, obj: JSONObject) -> TemplateInputs:
        """The inputs from their JSON form (``dataclasses.asdict``, as the pipe to a worker carries them)."""
        bos, eos, think = obj.get("bos_token"), obj.get("eos_token"), obj.get("think")
        return cls(bos_token=bos if isinstance(bos, str) else "", eos_token=eos if isinstance(eos, str) else "",
                   strip_bos=obj.get("strip_bos") is True,
                   think=think if isinstance(think, bool) else as_level(think))


NO_INPUTS = TemplateInputs()


def render_sample(source: str) -> str:
    """Render one user message with ``source``: what vetting a GGUF's template runs in a bounded worker
    (:func:`localrun.server.rendering.vet_template`)."""
    return render(source, list(_SAMPLE))


def render_pair(source: str | None, messages: list[JSONObject], tools: list[JSONObject] | None = None,
                inputs: JSONObject | None = None, num_ctx: int | None = None) -> list[str | None]:
    """What :func:`localrun.server.rendering.render_async` runs in a bounded worker: [prompt, system
    prefix or None] (JSON-friendly, as the pipe to the worker carries JSON: ``inputs`` is a
    TemplateInputs as a dict). The prefix is rendered only when ``num_ctx`` is None or the prompt
    might not fit it."""
    given = TemplateInputs.from_json(inputs) if inputs else NO_INPUTS
    prompt = render(source, messages, tools, inputs=given)
    if num_ctx is not None and not might_overflow(prompt, num_ctx):
        return [prompt, None]
    return [prompt, system_prefix(source, messages, tools, given)]


def might_overflow(prompt: str, num_ctx: int) -> bool:
    """Whether ``prompt`` could be too long for ``num_ctx``: every token covers at least one UTF-8
    byte, except the few special tokens a tokenizer adds (BOS, EOS), so a prompt of fewer bytes
    always fits and needs no ``num_keep`` (the tokenize round trip to the runner is skipped)."""
    return len(prompt.encode("utf-8", "replace")) + 8 >= num_ctx


@lru_cache(maxsize=32)
def _compile(source: str) -> ChatTemplate:
    return ChatTemplate.from_source(source)


def render(source: str | None, messages: list[JSONObject], tools: list[JSONObject] | None = None,
           add_generation_prompt: bool = True, *, inputs: TemplateInputs = NO_INPUTS) -> str:
    """Render ``messages`` with the template ``source`` (None: plain concatenation).

    A last assistant message (with no tool calls) is continued, not closed: the prompt is the
    rest rendered with the generation prompt, then that message's text (as llama.cpp's server
    and Ollama do, so a client can put words in the model's mouth).
    """
    if not source:
        return "\n\n".join(str(m.get("content") or "") for m in messages if m.get("content"))
    prefill = ""
    if add_generation_prompt and len(messages) > 1 and messages[-1].get("role") == "assistant" \
            and not messages[-1].get("tool_calls"):
        prefill, messages = str(messages[-1].get("content") or ""), messages[:-1]
    try:
        text = _compile(source).render(messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                       bos_token=inputs.bos_token, eos_token=inputs.eos_token, think=inputs.think)
    except (TemplateError, InvalidRequest):
        raise
    except Exception as exc:  # a template bug must be a clear 400, never a 500
        raise TemplateError(f"the model's chat template failed to render: {exc}") from exc
    if inputs.strip_bos and inputs.bos_token and text.startswith(inputs.bos_token):
        text = text[len(inputs.bos_token):]
    return text + prefill


def check_messages(messages: JSONValue) -> list[JSONObject]:
    """Validate a messages list (Ollama shape); returns normalised copies."""
    if messages is None:
        return []
    if not isinstance(messages, list):
        raise InvalidRequest("'messages' must be a list of {role, content} objects")
    out: list[JSONObject] = []
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
        checked = images.from_list(message.get("images"), f"messages[{i}].images")
        item: JSONObject = {"role": role, **images.attach(content, checked, f"messages[{i}].content")}
        if message.get("tool_calls"):
            item["tool_calls"] = _check_calls(message["tool_calls"], f"messages[{i}].tool_calls")
        for key in ("tool_name", "name", "tool_call_id", "thinking"):
            if isinstance(message.get(key), str) and message[key]:
                item[key] = message[key]
        out.append(item)
    return out


def _check_calls(calls: JSONValue, where: str) -> list[JSONValue]:
    """An assistant message's tool calls: a list of ``{"function": {"name", "arguments"}}``."""
    if not isinstance(calls, list):
        raise InvalidRequest(f"{where} must be a list of {{function: {{name, arguments}}}} objects")
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidRequest(f"{where}[{j}] must be {{function: {{name, arguments}}}}")
        if not isinstance(fn.get("arguments", {}), (dict, str, type(None))):
            raise InvalidRequest(f"{where}[{j}].function.arguments must be an object")
    return calls


def with_defaults(messages: list[JSONObject], system: str | None,
                  model_messages: list[JSONObject]) -> list[JSONObject]:
    """Prepend the Modelfile's MESSAGEs and SYSTEM (when the request brings no system message)."""
    full = list(model_messages) + list(messages)
    if system and not any(m["role"] == "system" for m in full):
        full.insert(0, {"role": "system", "content": system})
    return full


def system_prefix(source: str | None, messages: list[JSONObject], tools: list[JSONObject] | None = None,
                  inputs: TemplateInputs = NO_INPUTS) -> str | None:
    """The rendered system message alone, so truncation can keep it (None if there is none)."""
    if not messages or messages[0]["role"] != "system" or not source:
        return None
    try:
        return render(source, messages[:1], tools, add_generation_prompt=False, inputs=inputs) or None
    except InvalidRequest:
        return None
