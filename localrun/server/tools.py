"""Tool calling: parse calls out of model output, and force them with a JSON schema.

Models write tool calls in a few shapes; we accept the common ones:
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Qwen, Hermes), a bare JSON object
``{"name": ..., "arguments"|"parameters": {...}}`` or a list of them (Llama 3.x), optionally in a
```json fence. Only names of tools the request offered count as calls.

:func:`forced_call_schema` builds the JSON schema used as a grammar when ``tool_choice`` is
``required`` or names a function: the output is then one valid call whose arguments match the
function's parameters. :class:`ToolStreamFilter` holds back streamed text that may be a call.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest

_TAG_OPEN = "<tool_call>"
_TAG_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
_FENCE_RE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


def tool_names(tools: list[dict[str, Any]] | None) -> set[str]:
    names: set[str] = set()
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return names


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


def _as_call(obj: Any, names: set[str]) -> ToolCall | None:
    if not isinstance(obj, dict):
        return None
    inner = obj.get("function")
    fn: dict[str, Any] = inner if isinstance(inner, dict) else obj
    name = fn.get("name")
    args = fn.get("arguments", fn.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(name, str) or not isinstance(args, dict):
        return None
    if names and name not in names:
        return None
    return ToolCall(name, args)


def _calls_from_json(text: str, names: set[str]) -> list[ToolCall] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = [_as_call(item, names) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def parse_tool_calls(text: str, names: set[str]) -> tuple[str, list[ToolCall]]:
    """Split model output into (remaining content, tool calls). No calls: (text, [])."""
    if _TAG_OPEN in text:
        calls: list[ToolCall] = []
        for body in _TAG_RE.findall(text):
            found = _calls_from_json(body, names)
            if found is None:
                return text, []
            calls.extend(found)
        if calls:
            return _TAG_RE.sub("", text).strip(), calls
    stripped = text.strip()
    fence = _FENCE_RE.match(stripped)
    if fence:
        stripped = fence.group(1)
    if stripped[:1] in ("{", "["):
        found = _calls_from_json(stripped, names)
        if found:
            return "", found
    return text, []


def forced_call_schema(tools: list[dict[str, Any]], choice: Any) -> dict[str, Any] | None:
    """The JSON schema a forced tool call must match; None when ``choice`` forces nothing.

    ``choice`` is OpenAI's tool_choice: "auto" / "none" / "required" /
    ``{"type": "function", "function": {"name": ...}}``.
    """
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
                "arguments": enforceable(fn.get("parameters") or {"type": "object"}),
            },
            "required": ["name", "arguments"],
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
        elif key == "format" and value in _GRAMMAR_FORMATS:
            out[key] = value
        elif key in _KEEP:
            out[key] = value
    return out


class ToolStreamFilter:
    """Streams content while holding back anything that may turn out to be a tool call.

    ``feed`` returns text safe to show now; ``finish`` returns (remaining content, calls).
    """

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self._buf = ""
        self._holding = False  # True once the output looks like a call
        self._decided = False  # True once the start was plain text

    def feed(self, text: str) -> str:
        self._buf += text
        if self._holding:
            return ""
        if not self._decided:
            head = self._buf.lstrip()
            if not head:
                return ""
            if head[0] in "{[" or head.startswith(_TAG_OPEN) or head.startswith("```"):
                self._holding = True
                return ""
            if _TAG_OPEN.startswith(head) or "```".startswith(head):
                return ""  # too short to tell yet
            self._decided = True
        idx = self._buf.find(_TAG_OPEN)
        if idx >= 0:
            out, self._buf, self._holding = self._buf[:idx], self._buf[idx:], True
            return out
        # Keep a possible partial "<tool_call>" at the end.
        keep = 0
        for n in range(min(len(_TAG_OPEN) - 1, len(self._buf)), 0, -1):
            if _TAG_OPEN.startswith(self._buf[-n:]):
                keep = n
                break
        out = self._buf[: len(self._buf) - keep]
        self._buf = self._buf[len(self._buf) - keep :]
        return out

    def finish(self) -> tuple[str, list[ToolCall]]:
        text, self._buf = self._buf, ""
        if not text:
            return "", []
        return parse_tool_calls(text, self.names)
