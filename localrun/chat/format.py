"""What a model's chat template says about its replies: the tool-call format and thinking tags.

:func:`describe` reads a template source once (cached by source) and returns a frozen
:class:`ChatFormat`, the per-model description every chat API uses:

- ``tools``: the :class:`ToolFormat` the model writes calls in, or ``ToolFormat.NONE`` when the
  template cannot render tools (it never reads ``tools`` / ``.Tools``). A request with tools for
  such a model is refused (:func:`require_tools`, 400 "MODEL does not support tools", as Ollama
  answers) instead of silently dropping the tools.
- ``thinking``: the :class:`ThinkingTags` when the template knows reasoning blocks (``<think>``),
  with ``toggle`` saying whether ``think: false`` reaches the template (Qwen3's
  ``enable_thinking``, Ollama's ``.Think``). :func:`resolve_think` turns a request's ``think``
  into what to do (400 "MODEL does not support thinking" when asked of a model that cannot).

:func:`capabilities` lists what ``/api/show`` reports, from this description and the GGUF header.
Detection is static (the source text and its variables), as Ollama's is: nothing is rendered, so
a hostile template cannot stall it. Pure Python: no aiohttp, no llama_cpp.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache

from ..errors import TemplateError, UnsupportedCapability
from ..modelkind import ModelKind
from .template import ChatTemplate
from .think import Think


class ToolFormat(enum.Enum):
    """How a model writes tool calls (what the parser looks for and the forced grammar emits)."""

    NONE = "none"          # the template cannot render tools
    HERMES = "hermes"      # <tool_call>{"name": ..., "arguments": {...}}</tool_call>: Qwen2.5/3, Hermes
    LLAMA3 = "llama3"      # {"name": ..., "parameters": {...}}, optionally after <|python_tag|>
    MISTRAL = "mistral"    # [TOOL_CALLS][{"name": ..., "arguments": {...}}]
    JSON = "json"          # renders tools but names no format: bare {"name": ..., "arguments": ...}

    @property
    def tags(self) -> tuple[str, ...]:
        """Text that opens a call in this format (a bare JSON object needs none)."""
        return _TAGS[self]

    @property
    def arguments_key(self) -> str:
        """The key the model writes the arguments under."""
        return "parameters" if self is ToolFormat.LLAMA3 else "arguments"


_TAGS = {
    ToolFormat.NONE: (),
    ToolFormat.HERMES: ("<tool_call>",),
    ToolFormat.LLAMA3: ("<|python_tag|>",),
    ToolFormat.MISTRAL: ("[TOOL_CALLS]",),
    ToolFormat.JSON: ("<tool_call>",),
}


@dataclass(frozen=True, slots=True)
class ThinkingTags:
    """The tags around a reasoning block, and whether the template can turn thinking off."""

    open: str = "<think>"
    close: str = "</think>"
    toggle: bool = False


@dataclass(frozen=True, slots=True)
class ChatFormat:
    """What one chat template implies for requests and replies (see the module docstring)."""

    tools: ToolFormat = ToolFormat.NONE
    thinking: ThinkingTags | None = None

    @property
    def renders_tools(self) -> bool:
        return self.tools is not ToolFormat.NONE

    def starts_in_thinking(self, prompt: str) -> bool:
        """True when ``prompt`` ends inside an open reasoning block (the template opened it)."""
        if self.thinking is None:
            return False
        tail = prompt.rstrip()
        return tail.endswith(self.thinking.open)


PLAIN = ChatFormat()


@lru_cache(maxsize=64)
def describe(source: str | None) -> ChatFormat:
    """The :class:`ChatFormat` of a template source (None or a broken template: no tools, no thinking)."""
    if not source:
        return PLAIN
    try:
        template = ChatTemplate.from_source(source)
    except TemplateError:
        return PLAIN
    return ChatFormat(tools=_tool_format(template, source), thinking=_thinking(template, source))


def _tool_format(template: ChatTemplate, source: str) -> ToolFormat:
    if not template.uses("tools"):
        return ToolFormat.NONE
    if "<tool_call>" in source:
        return ToolFormat.HERMES
    if "[TOOL_CALLS]" in source or "[AVAILABLE_TOOLS]" in source:
        return ToolFormat.MISTRAL
    if "<|python_tag|>" in source or "<|start_header_id|>" in source:
        return ToolFormat.LLAMA3
    return ToolFormat.JSON


def _thinking(template: ChatTemplate, source: str) -> ThinkingTags | None:
    toggle = template.uses("enable_thinking") or template.uses("think")
    if "<think>" in source or "</think>" in source:
        return ThinkingTags(toggle=toggle)
    if template.kind == "go" and (template.uses("thinking") or toggle):
        return ThinkingTags(toggle=toggle)
    return None


def require_tools(fmt: ChatFormat, model: str) -> None:
    """Raise UnsupportedCapability (400) when ``model``'s template cannot render tools."""
    if not fmt.renders_tools:
        raise UnsupportedCapability(f"{model} does not support tools")


def resolve_think(fmt: ChatFormat, think: Think | None, model: str) -> bool:
    """Whether to split reasoning from the answer for this request.

    Unset means yes for a thinking model (as Ollama does); ``think: true`` on a model that cannot
    think is UnsupportedCapability (400); ``think: false`` is passed to the template and the
    reply is not split (whatever the model writes stays in the content, as in Ollama).
    """
    if fmt.thinking is None:
        if think:
            raise UnsupportedCapability(f"{model} does not support thinking")
        return False
    return think is not False


def capabilities(fmt: ChatFormat, *, kind: ModelKind, fim: bool, vision: bool = False) -> list[str]:
    """What ``/api/show`` lists, in Ollama's order: completion or embedding, vision, tools, insert, thinking.

    ``kind``: an embedding model lists only ``embedding``, a reranker only ``rerank`` (neither can
    chat); ``fim``: the vocabulary has fill-in-the-middle tokens (``suffix`` works); ``vision``: a
    projector is there (images).
    """
    if kind is not ModelKind.GENERATION:
        return [str(kind)]
    out = ["completion", *(["vision"] if vision else [])]
    if fmt.renders_tools:
        out.append("tools")
    if fim:
        out.append("insert")
    if fmt.thinking is not None:
        out.append("thinking")
    return out
