"""Tools in requests: validation, and forcing a call with a grammar in the model's own format.

:func:`validate_tools` checks a request's ``tools`` (OpenAI/Ollama shape). :func:`forced_call`
turns ``tool_choice`` ``required`` or a named function into a :class:`ForcedCall`: the JSON
schema of one valid call (arguments matching the function's parameters) and the text the model's
format puts around it (``<tool_call>\n`` ... ``\n</tool_call>`` for Qwen/Hermes), so the grammar
keeps the model writing the way it was trained to. Parsing calls out of replies is
:mod:`.chatparse`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from .chatformat import ToolFormat

# The text around one forced call, per format (the key order of the JSON is the schema's).
_FRAMES = {
    ToolFormat.HERMES: ("<tool_call>\n", "\n</tool_call>"),
    ToolFormat.JSON: ("", ""),
    ToolFormat.LLAMA3: ("", ""),
    ToolFormat.MISTRAL: ("", ""),  # [TOOL_CALLS] is a control token: a grammar cannot emit it
}


@dataclass(frozen=True, slots=True)
class ForcedCall:
    """What a forced call must look like: ``prefix`` + JSON matching ``schema`` + ``suffix``."""

    schema: dict[str, Any]
    prefix: str
    suffix: str

    @property
    def frame(self) -> tuple[str, str]:
        return self.prefix, self.suffix


def tool_names(tools: list[dict[str, Any]] | None) -> frozenset[str] | None:
    """The offered tools' names (None without tools: replies are not parsed for calls)."""
    if not tools:
        return None
    return frozenset(t["function"]["name"] for t in tools)


def validate_tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise InvalidRequest("'tools' must be a list of {type: 'function', function: {...}} objects")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidRequest(f"tools[{i}] must be {{type: 'function', function: {{name, parameters}}}}")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise InvalidRequest(f"tools[{i}].function.parameters must be a JSON schema object")
    return tools or None


def check_tool_choice(choice: Any, tools: list[dict[str, Any]] | None) -> None:
    """Refuse a ``tool_choice`` that is malformed or forces a call without tools (400)."""
    if choice in (None, "auto", "none"):
        return
    if not tools:
        raise InvalidRequest("'tool_choice' needs 'tools'")
    if choice == "required":
        return
    fn = choice.get("function") if isinstance(choice, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise InvalidRequest("tool_choice must be 'auto', 'none', 'required' or {type: 'function', function: {name}}")
    if fn["name"] not in (tool_names(tools) or ()):
        raise InvalidRequest(f"tool_choice names function {fn['name']!r}, which is not in 'tools'")


def forced_call(tools: list[dict[str, Any]], choice: Any, fmt: ToolFormat) -> ForcedCall | None:
    """The call ``choice`` forces, in the model's format ``fmt``; None when it forces nothing.

    ``choice`` is OpenAI's tool_choice: "auto" / "none" / "required" /
    ``{"type": "function", "function": {"name": ...}}``. One call is forced (no parallel calls).
    """
    schema = forced_call_schema(tools, choice, fmt.arguments_key)
    if schema is None:
        return None
    if fmt is ToolFormat.MISTRAL:
        schema = {"type": "array", "items": schema, "minItems": 1, "maxItems": 1}
    prefix, suffix = _FRAMES.get(fmt, ("", ""))
    return ForcedCall(schema, prefix, suffix)


def forced_call_schema(tools: list[dict[str, Any]], choice: Any,
                       arguments_key: str = "arguments") -> dict[str, Any] | None:
    """The JSON schema one forced call object must match; None when ``choice`` forces nothing."""
    if choice in (None, "auto", "none"):
        return None
    wanted: list[dict[str, Any]]
    if choice == "required":
        wanted = [t["function"] for t in tools]
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        wanted = [t["function"] for t in tools if t["function"]["name"] == name]
        if not wanted:
            raise InvalidRequest(f"tool_choice names function {name!r}, which is not in 'tools'")
    else:
        raise InvalidRequest("tool_choice must be 'auto', 'none', 'required' or {type: 'function', function: {name}}")
    variants = [
        {
            "type": "object",
            "properties": {
                "name": {"const": fn["name"]},
                arguments_key: enforceable(fn.get("parameters") or {"type": "object"}),
            },
            "required": ["name", arguments_key],
            "additionalProperties": False,
        }
        for fn in wanted
    ]
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


_KEEP = {"type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
         "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "pattern", "minLength", "maxLength",
         "$defs", "definitions", "description", "title"}
_GRAMMAR_FORMATS = {"date", "time", "date-time", "uuid"}


def enforceable(schema: Any) -> Any:
    """A tool's parameter schema without the keywords a grammar cannot enforce (minimum, ...).

    Tool schemas are written for documentation as much as validation; forcing a call must not
    fail because one property says ``minimum: 0``. Structure (names, types, required) is kept.
    """
    if isinstance(schema, list):
        return [enforceable(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {k: enforceable(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf", "prefixItems"):
            out[key] = enforceable(value)
        elif (key == "format" and value in _GRAMMAR_FORMATS) or key in _KEEP:
            out[key] = value
    return out
