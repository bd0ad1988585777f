"""Chat templates: turning a list of messages into one prompt string.

:meth:`ChatTemplate.from_source` takes a GGUF ``tokenizer.chat_template`` (Jinja2, as on the
Hugging Face hub) or a Modelfile ``TEMPLATE`` (Jinja2 or Ollama's Go-template syntax; detected
from the source) or None (no template: the messages' contents joined, a bare prompt as is).

Jinja2 templates run in an ``ImmutableSandboxedEnvironment`` bounded by :mod:`.template_limits`:
a hostile template cannot read attributes like ``__class__``/``__globals__``, call methods that
mutate, import, or open files;
any such attempt is a :class:`~localrun.errors.TemplateError`. Pure Python, no llama_cpp.

The contract of this module's boundary: compiling, inspecting or rendering a template raises
:class:`~localrun.errors.TemplateError` (a 400) for every problem of the template, whatever the
engine underneath raised (a syntax error, a nesting or size bound, a RecursionError, a
MemoryError, an exception of Jinja's generated code); never anything a server would call an
internal error.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import meta
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import TemplateError, TemplateLimit
from ..jsontypes import loads
from .gotemplate import GoTemplate
from .template_limits import BoundedSandbox
from .think import Think, template_variables

_GO_HINT = re.compile(r"\{\{-?\s*(\.[A-Z]|\$|if\s+[.$(]|range\s|end\s*-?\}\}|with\s|else\s*-?\}\}|/\*)")
MAX_TEMPLATE_OUTPUT = 4_000_000


def _raise_exception(message: str) -> None:
    raise TemplateError(f"chat template: {message}")


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False,
            separators: Any = None) -> str:
    """HF's tojson: no HTML escaping (Jinja's built-in escapes < > & ')."""
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys,
                      separators=tuple(separators) if separators else None)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _StrictSandbox(BoundedSandbox):
    """Reaching for an unsafe attribute is an error, not a silently empty value."""

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} is not allowed")


def _environment() -> ImmutableSandboxedEnvironment:
    env = _StrictSandbox(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _environment()


def is_go_template(source: str) -> bool:
    """True when ``source`` looks like Go template syntax rather than Jinja2."""
    if "{%" in source:
        return False
    return bool(_GO_HINT.search(source))


class ChatTemplate:
    """A compiled chat template (Jinja2, Go, or none). Immutable and thread-safe to render."""

    def __init__(self, source: str | None, kind: str, compiled: jinja2.Template | GoTemplate | None) -> None:
        self.source = source
        self.kind = kind            # "jinja" | "go" | "none"
        self._compiled = compiled
        self._names: frozenset[str] | None = None  # Jinja2 variables the source reads, parsed on first use

    @classmethod
    def from_source(cls, source: str | None) -> ChatTemplate:
        """Compile ``source``; TemplateError (TemplateLimit for a bound) for any problem in it."""
        if source is None or not source.strip():
            return cls(None, "none", None)
        try:
            if is_go_template(source):
                return cls(source, "go", GoTemplate(source))
            return cls(source, "jinja", _ENV.from_string(source))
        except TemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise TemplateError(f"chat template does not compile: {exc}") from exc
        except (RecursionError, MemoryError, SyntaxError) as exc:  # the parser's or Python's compiler's limits
            raise TemplateLimit(f"chat template is too complex to compile: {_describe(exc)}") from None
        except Exception as exc:  # a stranger's text must never be a 500: e.g. int() of 5,000 digits
            raise TemplateError(f"chat template does not compile: {_describe(exc)}") from None

    def uses(self, name: str) -> bool:
        """Whether the template reads the variable ``name`` (``tools``, ``enable_thinking``...).

        Static: Jinja2's undeclared variables, a Go template's ``.Name`` fields (``tools`` is
        looked for as ``.Tools``). Nothing is rendered, so a hostile template cannot stall it.
        """
        if self.kind == "jinja":
            return name in self._variables()
        if self.kind == "go" and self.source is not None:
            field = "".join(part.capitalize() for part in name.split("_"))
            return re.search(rf"\.{field}\b", self.source) is not None
        return False

    def _variables(self) -> frozenset[str]:
        if self._names is None:
            assert self.source is not None
            try:
                self._names = frozenset(meta.find_undeclared_variables(_ENV.parse(self.source)))
            except (jinja2.TemplateError, TemplateError, RecursionError):  # it compiled, so not expected
                self._names = frozenset()
        return self._names

    def render(self, messages: Sequence[Mapping[str, object]], *, tools: Sequence[Mapping[str, object]] | None = None,
               add_generation_prompt: bool = True, bos_token: str = "", eos_token: str = "",
               think: Think | None = None, **extra: object) -> str:
        """The prompt for ``messages``, as the Hugging Face reference renders it.

        ``messages`` are dicts with role, content and optionally images, ``tool_calls`` (a list of
        ``{"function": {"name", "arguments"}}``, arguments a dict or JSON text) and, on tool
        results, ``tool_call_id`` / ``tool_name``; they reach the template in HF's shape (calls
        with ``type`` and ``id``, arguments as a dict, results with ``name``). ``tools`` go to
        templates that use them. ``think`` (when set) reaches the template as
        :func:`.think.template_variables` says (``enable_thinking`` / ``reasoning_effort``, ``.Think``).
        """
        shaped = [hf_message(m, i) for i, m in enumerate(messages)]
        compiled = self._compiled
        try:
            if compiled is None:  # kind "none"
                return _plain(shaped)
            if isinstance(compiled, GoTemplate):
                extra = {**extra, **template_variables(think, go=True)}
                return _render_go(compiled, shaped, tools, add_generation_prompt, extra)
            extra = {**extra, **template_variables(think, go=False)}
            text = compiled.render(messages=shaped, tools=tools or None,
                                         add_generation_prompt=add_generation_prompt,
                                         bos_token=bos_token, eos_token=eos_token, **extra)
        except TemplateError:
            raise
        except SecurityError as exc:
            raise TemplateError(f"chat template tried an unsafe operation: {exc}") from exc
        except RecursionError:  # a macro calling itself
            raise TemplateLimit("chat template recursed too deeply (a macro that calls itself?)") from None
        except MemoryError:
            raise TemplateLimit("chat template needed more memory than it may use") from None
        except Exception as exc:  # whatever a template's code raises is its own problem, a 400
            raise TemplateError(f"chat template failed to render: {_describe(exc)}") from exc
        if len(text) > MAX_TEMPLATE_OUTPUT:
            raise TemplateError("chat template output is too large")
        return str(text)


def _describe(exc: BaseException) -> str:
    """``exc`` for an error message: its text, or its type when it has none."""
    return str(exc) or type(exc).__name__


def hf_message(message: Mapping[str, object], position: int) -> dict[str, object]:
    """``message`` in the shape Hugging Face chat templates expect (a new dict; see ``render``)."""
    out = dict(message)
    if out.get("content") is None:
        out["content"] = ""
    calls = out.get("tool_calls")
    if calls and isinstance(calls, (list, tuple)):
        out["tool_calls"] = [_hf_call(call, f"call_{position}_{i}") for i, call in enumerate(calls)]
    if out.get("role") == "tool" and out.get("tool_name") and not out.get("name"):
        out["name"] = out["tool_name"]
    if out.get("thinking") and not out.get("reasoning_content"):
        out["reasoning_content"] = out["thinking"]  # what Qwen3-style templates read
    return out


def _hf_call(call: object, default_id: str) -> object:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    fn = dict(call["function"])
    arguments = fn.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # not JSON: a template shows it as the text it is
            fn["arguments"] = loads(arguments) if arguments.strip() else {}
    elif arguments is None:
        fn["arguments"] = {}
    return {**call, "id": call.get("id") or default_id, "type": call.get("type") or "function", "function": fn}


def _plain(messages: Sequence[Mapping[str, object]]) -> str:
    return "\n\n".join(str(m.get("content") or "") for m in messages if m.get("content"))


def _render_go(template: GoTemplate, messages: Sequence[Mapping[str, object]],
               tools: Sequence[Mapping[str, object]] | None, add_generation_prompt: bool,
               extra: Mapping[str, object]) -> str:
    system = "\n\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
    if template.uses_messages:
        values = {"System": system, "Messages": messages, "Tools": tools or [], "Prompt": "",
                  "Response": "", **extra}
        return template.execute(values)
    return _render_legacy(template, messages, add_generation_prompt)


def _render_legacy(template: GoTemplate, messages: Sequence[Mapping[str, object]],
                   add_generation_prompt: bool) -> str:
    """Ollama's rendering of .System/.Prompt/.Response templates: one execution per turn,
    the last one cut after ``{{ .Response }}`` so generation continues from there."""
    out: list[str] = []
    turn = {"System": "", "Prompt": "", "Response": ""}

    def flush(last: bool) -> None:
        out.append(template.execute(dict(turn), cut_at_response=last and add_generation_prompt))
        turn.update(System="", Prompt="", Response="")

    for message in messages:
        role, content = message.get("role"), str(message.get("content") or "")
        if role == "system":
            if turn["Prompt"] or turn["Response"]:
                flush(False)
            turn["System"] = content
        elif role in ("user", "tool"):
            if turn["Response"]:
                flush(False)
            turn["Prompt"] = content
        elif role == "assistant":
            turn["Response"] = content
    if any(turn.values()) or not out:
        flush(True)
    return "".join(out)
