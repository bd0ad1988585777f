"""One chat turn made ready for the engine, the same for every API.

A handler turns its API's request into native messages (Ollama's shape), then::

    turn = await chatturn.prepare(target, messages, tools=tools, tool_choice=choice, think=think)
    gen = await service.generate(target, turn.request(sampling, fmt, cut), endpoint,
                                 system_prefix=turn.system_prefix)
    parser = turn.parser()         # model text -> ContentDelta / ThinkingDelta / ToolCall (chatparse)

:func:`prepare` checks what the model can do (400 "MODEL does not support tools / thinking"),
renders the prompt with the model's template (its BOS/EOS texts, ``think``), and decides how the
reply is parsed: which tools count, whether reasoning is split, whether the prompt left a
reasoning block open, and the grammar that forces a call (``tool_choice`` required or named) or
holds the calls the model opens to their strict tools' schemas (``auto``: :func:`.tools.strict_calls`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..chat import images as chat_images
from ..chat.format import ChatFormat, describe, require_tools, resolve_think
from ..chat.parse import ChatStreamParser
from ..chat.prompt import TemplateInputs, with_defaults
from ..chat.think import Think
from ..chat.tools import ForcedCall, StrictCalls, check_tool_choice, forced_call, strict_calls, tool_names
from ..engine.types import GenerateRequest, OutputFormat, SamplingOptions, Truncation
from ..errors import UnsupportedCapability
from ..jsontypes import JSONObject, JSONValue
from . import rendering
from .service import Target


@dataclass(frozen=True, slots=True)
class ChatTurn:
    """A rendered prompt and how to read the reply to it."""

    prompt: str
    system_prefix: str | None
    format: ChatFormat
    tools: frozenset[str] | None   # names of the offered tools; None: replies are not parsed for calls
    think: bool                    # split reasoning from the answer
    in_thinking: bool              # the prompt ends inside an open reasoning block
    forced: ForcedCall | None      # the grammar-forced call (tool_choice required / named)
    strict: StrictCalls | None     # auto: the grammar holding opened calls to strict tools' schemas
    images: tuple[bytes, ...] = () # the messages' images in prompt order, one marker each (chat/images.py)

    def parser(self) -> ChatStreamParser:
        """A fresh parser for one reply to this turn (one per generation)."""
        return ChatStreamParser(self.format, tools=self.tools, think=self.think, in_thinking=self.in_thinking)

    def request(self, sampling: SamplingOptions, format: OutputFormat = None,
                truncation: Truncation = Truncation.FRONT) -> GenerateRequest:
        """The engine request; a forced call's grammar replaces ``format``, strict calls' grammar
        applies only without one (a reply that must be that JSON is no call)."""
        return replace(self._request(sampling, format, truncation), images=self.images)

    def _request(self, sampling: SamplingOptions, format: OutputFormat, truncation: Truncation) -> GenerateRequest:
        if self.forced is not None:
            return GenerateRequest(prompt=self.prompt, sampling=sampling, format=self.forced.schema,
                                   format_frame=self.forced.frame, truncation=truncation)
        if self.strict is not None and format in (None, ""):
            return GenerateRequest(prompt=self.prompt, sampling=sampling, format=self.strict.schema,
                                   grammar=self.strict.grammar, truncation=truncation)
        return GenerateRequest(prompt=self.prompt, sampling=sampling, format=format, truncation=truncation)


def require_vision(target: Target, images: Sequence[bytes]) -> None:
    """A 400 before any work when ``images`` go to a model without a vision projector."""
    if images and not target.spec.options.projector:
        raise UnsupportedCapability(f"model {target.name!r} does not support images (it has no vision projector)")


def template_inputs(target: Target, think: Think | None) -> TemplateInputs:
    """The model's BOS/EOS texts (and whether its tokenizer adds BOS) plus ``think`` for its template."""
    facts = target.geometry.tokenizer
    return TemplateInputs(bos_token=facts.bos, eos_token=facts.eos, strip_bos=facts.add_bos, think=think)


async def prepare(target: Target, messages: list[JSONObject], *, tools: list[JSONObject] | None = None,
                  tool_choice: JSONValue = None, think: Think | None = None) -> ChatTurn:
    """Check, render and plan one turn; ``messages`` are native (see :func:`~localrun.chat.prompt.check_messages`).

    ``tool_choice`` "none" drops the tools (they are not rendered; nothing is parsed as a call).
    Raises UnsupportedCapability, InvalidRequest or TemplateError (all 400) before any generation.
    """
    fmt = describe(target.template)
    images = chat_images.of_messages(messages)
    require_vision(target, images)
    check_tool_choice(tool_choice, tools)
    if tool_choice == "none":
        tools = None
    if tools:
        require_tools(fmt, target.name)
    split = resolve_think(fmt, think, target.name)
    forced = forced_call(tools, tool_choice, fmt.tools) if tools else None
    strict = strict_calls(tools, tool_choice, fmt.tools) if tools else None
    if forced is not None and fmt.thinking is not None and fmt.thinking.toggle:
        think, split = False, False  # the grammar starts at the first token: no room for a reasoning block
    full = with_defaults(messages, target.system, target.messages)
    if images:  # the template sees each image's marker in the text; the bytes need not cross to its worker
        full = [{k: v for k, v in m.items() if k != "images"} for m in full]
    prompt, prefix = await rendering.render_async(target.template, full, tools,
                                                inputs=template_inputs(target, think if fmt.thinking else None),
                                                num_ctx=target.spec.options.num_ctx)
    return ChatTurn(prompt=prompt, system_prefix=prefix, format=fmt, tools=tool_names(tools), think=split,
                    in_thinking=split and fmt.starts_in_thinking(prompt), forced=forced, strict=strict,
                    images=images)
