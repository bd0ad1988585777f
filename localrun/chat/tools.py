"""Tools in requests: validation, and holding calls to a grammar in the model's own format.

:func:`validate_tools` checks a request's ``tools`` (OpenAI/Ollama shape). :func:`forced_call`
turns ``tool_choice`` ``required`` or a named function into a :class:`ForcedCall`: the JSON
schema of one valid call (arguments matching the function's parameters) and the text the model's
format puts around it (``<tool_call>\n`` ... ``\n</tool_call>`` for Qwen/Hermes), so the grammar
keeps the model writing the way it was trained to.

Under ``tool_choice`` ``auto``, a tool marked ``strict: true`` (OpenAI's flag) holds its schema
too, from the moment the model opens a call: :func:`strict_calls` gives a :class:`StrictCalls`,
a grammar of free text in which every call the model opens must be a call to an offered tool,
with the arguments of a strict one matching its parameters: after ``<tool_call>`` (then closed by
``</tool_call>``), or written bare at the start of the reply or after a call
(``{"name": "<tool>", ...}``, in a ```` ```json ```` fence too, as Qwen2.5-Coder does). Text
before, between and after calls is free, so an answer without calls comes out as it would
without the grammar. This needs a call opener that is text, which only the Hermes format has
(Qwen2.5/3); for the others, and with a ``format`` (the reply must be that JSON), auto calls are
not held. A grammar costs the request llama.cpp's grammar checks (and greedy requests their
speculative decoding), so requests without a strict tool do not get one. A strict tool whose
schema no grammar can hold is a 400 before generation, as under ``required``. Parsing calls out
of replies is :mod:`.chatparse`'s job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest
from ..jsontypes import JSONObject, JSONValue, as_object
from .format import ToolFormat

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

    schema: JSONObject
    prefix: str
    suffix: str

    @property
    def frame(self) -> tuple[str, str]:
        return self.prefix, self.suffix


@dataclass(frozen=True, slots=True)
class StrictCalls:
    """Auto mode with strict tools: ``grammar`` (GBNF) is free text in which each opened call is a
    JSON value matching ``schema``, which the engine adds as the rule ``format-value``
    (``engine/grammar.py``: a request's ``grammar`` plus its ``format``)."""

    schema: JSONObject
    grammar: str


def tool_names(tools: list[JSONObject] | None) -> frozenset[str] | None:
    """The offered tools' names (None without tools: replies are not parsed for calls)."""
    if not tools:
        return None
    return frozenset(_name(fn) for fn in _functions(tools))


def _functions(tools: list[JSONObject]) -> list[JSONObject]:
    """The ``function`` objects of tools that passed :func:`validate_tools`."""
    return [as_object(tool.get("function")) for tool in tools]


def _name(function: JSONObject) -> str:
    name = function.get("name")
    return name if isinstance(name, str) else ""


def validate_tools(tools: JSONValue) -> list[JSONObject] | None:
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
        if fn.get("strict") not in (None, True, False):
            raise InvalidRequest(f"tools[{i}].function.strict must be true or false")
    return [tool for tool in tools if isinstance(tool, dict)] or None


def check_tool_choice(choice: JSONValue, tools: list[JSONObject] | None) -> None:
    """Refuse a ``tool_choice`` that is malformed or forces a call without tools (400)."""
    if choice in (None, "auto", "none"):
        return
    if not tools:
        raise InvalidRequest("'tool_choice' needs 'tools'")
    if choice == "required":
        return
    fn = choice.get("function") if isinstance(choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str):
        raise InvalidRequest("tool_choice must be 'auto', 'none', 'required' or {type: 'function', function: {name}}")
    if name not in (tool_names(tools) or ()):
        raise InvalidRequest(f"tool_choice names function {name!r}, which is not in 'tools'")


def forced_call(tools: list[JSONObject], choice: JSONValue, fmt: ToolFormat) -> ForcedCall | None:
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


def forced_call_schema(tools: list[JSONObject], choice: JSONValue,
                       arguments_key: str = "arguments") -> JSONObject | None:
    """The JSON schema one forced call object must match; None when ``choice`` forces nothing."""
    if choice in (None, "auto", "none"):
        return None
    wanted: list[JSONObject]
    if choice == "required":
        wanted = _functions(tools)
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        name = as_object(choice.get("function")).get("name")
        wanted = [fn for fn in _functions(tools) if _name(fn) == name]
        if not wanted:
            raise InvalidRequest(f"tool_choice names function {name!r}, which is not in 'tools'")
    else:
        raise InvalidRequest("tool_choice must be 'auto', 'none', 'required' or {type: 'function', function: {name}}")
    return _any_call(wanted, arguments_key, strict_only=False)


def strict_calls(tools: list[JSONObject], choice: JSONValue, fmt: ToolFormat) -> StrictCalls | None:
    """The grammar that holds the calls the model opens under ``tool_choice`` auto (the module
    docstring); None when no offered tool is strict, ``choice`` is not auto, or ``fmt`` has no
    call opener in text."""
    opener, closer = (part.strip() for part in _FRAMES.get(fmt, ("", "")))
    functions = _functions(tools)
    if choice not in (None, "auto") or not opener or not any(fn.get("strict") is True for fn in functions):
        return None
    return StrictCalls(_any_call(functions, fmt.arguments_key, strict_only=True),
                       _calls_grammar(opener, closer, [_name(fn) for fn in functions]))


def _any_call(functions: list[JSONObject], arguments_key: str, *, strict_only: bool) -> JSONObject:
    """The schema of one call to any of ``functions``: the name, and arguments matching the
    function's parameters (with ``strict_only``, only a strict function's; the others' are any object).

    A function's parameters may refer to their own parts (``"$ref": "#/$defs/Table"``, as pydantic
    writes nested models and enums): ``#`` meant the parameters, and here they sit inside the call,
    so such parameters move to the call schema's ``$defs`` and their references follow them.
    """
    variants: list[JSONValue] = []
    defs: JSONObject = {}
    for i, fn in enumerate(functions):
        arguments = (enforceable(fn.get("parameters") or {"type": "object"})
                     if fn.get("strict") is True or not strict_only else {"type": "object"})
        key = f"call-{i}-arguments"
        rebased = _rebased(arguments, f"#/$defs/{key}")
        if rebased != arguments:  # it refers to its own parts
            defs[key], arguments = rebased, {"$ref": f"#/$defs/{key}"}
        variants.append({
            "type": "object",
            "properties": {"name": {"const": fn["name"]}, arguments_key: arguments},
            "required": ["name", arguments_key],
            "additionalProperties": False,
        })
    first = variants[0]
    schema: JSONObject = first if len(variants) == 1 and isinstance(first, dict) else {"anyOf": variants}
    return {**schema, "$defs": defs} if defs else schema


_LITERALS = ("const", "enum", "default", "examples")  # values, not schemas: a "$ref" in them is data
_NAMED = ("properties", "patternProperties", "$defs", "definitions")  # names -> schemas


def _rebased(schema: Any, base: str) -> Any:
    """``schema`` with each local reference (``"$ref": "#..."``) pointing below ``base`` instead of
    the document's root."""
    if isinstance(schema, list):
        return [_rebased(s, base) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: JSONObject = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and value.startswith("#"):
            out[key] = base + value[1:]
        elif key in _NAMED and isinstance(value, dict):
            out[key] = {name: _rebased(sub, base) for name, sub in value.items()}
        else:
            out[key] = value if key in _LITERALS else _rebased(value, base)
    return out


_WS = " \t\r\n"


def _calls_grammar(opener: str, closer: str, names: list[str]) -> str:
    """GBNF of a reply whose calls are held to the rule ``format-value``, its text left free.

    A call is either opened by ``opener`` anywhere in the text and closed by ``closer``, or, at
    the start of the reply or right after another call, written bare as ``{"name": "<tool>", ...}``,
    perhaps in a ```` ```json ```` fence (as Qwen2.5-Coder often calls; :mod:`.chatparse` reads
    both). Two automata spell out, a character at a time, text that is not a call yet, and refuse
    only the character that would make it one, which only the call's own path may take:
    ``call-start-*`` the opening of a reply on its way to a bare call (:func:`_bare_call_dfa`),
    ``call-text-*`` free text on its way to ``opener`` (KMP). Characters going to one state share
    one alternative: llama.cpp checks each candidate token against every grammar stack, so a
    full-vocabulary pass (at the end of a reply) costs in proportion.
    """
    first = (opener[0], f"call-text-{_next_state(opener, 0, opener[0])}")
    rules = ["root ::= call-next", "call-next ::= call-start-s | call-lead",
             'call-lead ::= [ \\t\\r\\n]* ("```" "json"? "\\n" [ \\t\\r\\n]* format-value [ \\t\\r\\n]* "```" '
             "| format-value) call-next",
             f"call-opened ::= call-space format-value call-space {_literal(closer)} call-next",
             "call-space ::= [ \\t\\r\\n]{0,4}"]
    for state, moves in _bare_call_dfa([n for n in names if opener[0] not in n]).items():
        assert all(opener[0] not in chars for chars, _ in moves)
        named = [(chars, None if to is None else f"call-start-{to}") for chars, to in moves]
        rules.append(_state_rule(f"call-start-{state}", [*named, first]))
    for i in range(len(opener)):
        targets: dict[int, str] = {}
        for c in sorted(set(opener)):
            targets[_next_state(opener, i, c)] = targets.get(_next_state(opener, i, c), "") + c
        rules.append(_state_rule(f"call-text-{i}", [
            (chars, "call-opened" if j == len(opener) else f"call-text-{j}") for j, chars in targets.items() if j]))
    return "\n".join(rules) + "\n"


def _state_rule(name: str, moves: list[tuple[str, str | None]]) -> str:
    """``name ::= (the end) | [chars] target ... | [^every char named] call-text-0``; a move to None
    names characters this path refuses (another path of the grammar may take them)."""
    alternatives = ["", f"[^{_chars(''.join(chars for chars, _ in moves))}] call-text-0"]
    alternatives += [f"[{_chars(chars)}] {to}" for chars, to in moves if to is not None]
    return f"{name} ::= " + " | ".join(alternatives)


def _bare_call_dfa(names: list[str]) -> dict[str, list[tuple[str, str | None]]]:
    """The states of a reply's opening on its way to ``{"name": "<one of names>"`` (after
    whitespace or a ```` ```json ```` fence), with the spaces a ``format-value`` allows between
    JSON tokens (none, one, or a newline and indentation: ``engine/grammar.py``): state -> moves
    (characters, next state); a move to None is the closing quote of a tool's name."""
    dfa: dict[str, list[tuple[str, str | None]]] = {
        "s": [(_WS, "s"), ("{", "b"), ("`", "t1")], "t1": [("`", "t2")], "t2": [("`", "f")],
        "f": [("j", "f1"), ("\n", "w")], "f1": [("s", "f2")], "f2": [("o", "f3")], "f3": [("n", "f4")],
        "f4": [("\n", "w")], "w": [(_WS, "w"), ("{", "b")]}
    quoted = sorted({n for n in names if json.dumps(n)[1:-1] == n and '"' not in n})
    prefixes = sorted({q[:i] for q in quoted for i in range(len(q) + 1)})
    ids = {prefix: f"n{i}" for i, prefix in enumerate(prefixes)}
    _spaced(dfa, "b", '"', "k1")
    dfa.update({f"k{i}": [(c, f"k{i + 1}")] for i, c in enumerate('name"', 1)})
    _spaced(dfa, "k6", ":", "v")
    _spaced(dfa, "v", '"', ids.get("", "n0"))
    dfa.setdefault("n0", [])
    for prefix in prefixes:
        following = sorted({q[len(prefix)] for q in quoted if q.startswith(prefix) and len(q) > len(prefix)})
        dfa[ids[prefix]] = [(c, ids[prefix + c]) for c in following] + ([('"', None)] if prefix in quoted else [])
    return dfa


def _spaced(dfa: dict[str, list[tuple[str, str | None]]], state: str, char: str, to: str) -> None:
    """``state`` goes to ``to`` on ``char``, after no space, one space, or a newline and indentation."""
    dfa[state] = [(char, to), (" ", f"{state}-sp"), ("\n", f"{state}-nl")]
    dfa[f"{state}-sp"] = [(char, to)]
    dfa[f"{state}-nl"] = [(" \t", f"{state}-nl"), (char, to)]


def _chars(chars: str) -> str:
    """Characters for a GBNF character class, each escaped (``]``, ``^``, ``-`` mean nothing then)."""
    return "".join(f"\\u{ord(c):04X}" for c in chars)


def _next_state(opener: str, matched: int, char: str) -> int:
    """How much of ``opener`` is matched after reading ``char`` with ``matched`` characters matched."""
    text = opener[:matched] + char
    return next(n for n in range(len(text), -1, -1) if opener.startswith(text[len(text) - n:]))


def _literal(text: str) -> str:
    """A GBNF string literal (JSON's escapes are GBNF's)."""
    return json.dumps(text, ensure_ascii=False)


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
    out: JSONObject = {}
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {k: enforceable(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf", "prefixItems"):
            out[key] = enforceable(value)
        elif (key == "format" and value in _GRAMMAR_FORMATS) or key in _KEEP:
            out[key] = value
    return out
