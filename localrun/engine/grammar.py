"""Constrained output: ``format: "json"`` and JSON Schemas turned into GBNF grammars.

llama-cpp-python ships llama.cpp's JSON-Schema-to-GBNF converter; it silently ignores keywords
it cannot enforce, which would give JSON that parses but does not validate. So the schema is
checked first against the keywords the converter honours, and anything else is a
:class:`~localrun.errors.GrammarError` before generation starts, naming the keyword and where it is.

A raw ``grammar`` may hold a ``format`` inside it: given both, the format's rules join the raw
grammar with its root renamed ``format-value``, so the raw grammar places a schema-checked JSON
value wherever it says (a tool call the model opens in free text: ``chat/tools.py``). The
schema is converted here, beside llama.cpp's converter, so the daemon never needs it. Between
the tokens of such a value the model may write a newline and indentation as well as a space
(``_JOINED_SPACE``, as newer llama.cpp converters allow; also before an object's or array's
closing bracket, which the converter allows only after strings and numbers): it was not asked
for JSON, so it writes the call the way it was trained to, often pretty-printed.
"""

from __future__ import annotations

import json
import re

from llama_cpp.llama_grammar import JSON_GBNF, json_schema_to_gbnf

from ..errors import GrammarError
from ..jsontypes import JSONObject, JSONValue, TooDeep, loads
from .regex_bounds import check_pattern
from .types import OutputFormat

# Keywords that only annotate a schema: nothing to enforce.
_ANNOTATIONS = {
    "$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", "contentMediaType", "contentEncoding",
}
# Keywords the converter enforces (with the constraints checked in ``_check``).
_ENFORCED = {
    "type", "properties", "required", "additionalProperties", "items", "prefixItems", "minItems",
    "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "pattern", "format",
    "minLength", "maxLength",
}
_FORMATS = {"date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5"}
_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}
# A grammar grows with repetition counts and nesting: a hostile schema ("minItems": 10**9) must be
# an error, not gigabytes of grammar rules.
MAX_REPEAT = 4096
MAX_DEPTH = 48
MAX_GRAMMAR_CHARS = 200_000
_REPEAT_RE = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def grammar_for(format: OutputFormat, grammar: str | None,
                frame: tuple[str, str] | None = None) -> str | None:
    """The GBNF text for a request, or None when output is free.

    ``grammar`` (raw GBNF) is the root; with a ``format`` too, the format is its rule
    ``format-value`` (module docstring). ``frame`` (prefix, suffix), without a raw grammar:
    literal text required before and after the JSON value.
    """
    if grammar is not None:
        if not isinstance(grammar, str) or not grammar.strip():
            raise GrammarError("grammar must be a non-empty GBNF string")
        if format is None or format == "":
            return check_gbnf(grammar)
        return _joined(grammar, grammar_for(format, None))
    if format is None or format == "":
        return None
    if format == "json":
        return JSON_GBNF
    schema: JSONValue = format
    if isinstance(format, str):
        try:
            schema = loads(format)
        except TooDeep as exc:
            raise GrammarError(f"format is not accepted: {exc}") from None
        except ValueError:
            raise GrammarError(f"format must be \"json\" or a JSON Schema object, got {format!r}") from None
    if not isinstance(schema, dict):
        raise GrammarError("format must be \"json\" or a JSON Schema object")
    gbnf = schema_to_gbnf(schema)
    return _framed(gbnf, frame) if frame is not None else gbnf


def _framed(gbnf: str, frame: tuple[str, str]) -> str:
    """``gbnf`` with its root wrapped in literal text: ``root ::= "prefix" value "suffix"``."""
    body = re.sub(r"(?m)^root ::=", "framed-value ::=", gbnf, count=1)
    parts = [json.dumps(text, ensure_ascii=False) for text in frame if text]
    prefix, suffix = (parts[0] if frame[0] else ""), (parts[-1] if frame[1] else "")
    return check_gbnf(f"root ::= {prefix} framed-value {suffix}\n{body}")


_RULE_RE = re.compile(r"(?m)^\s*([a-zA-Z0-9-]+)\s*::=")
_SPACE_RULE = 'space ::= " "?'
_JOINED_SPACE = 'space ::= | " " | "\\n" [ \\t]{0,20}'
# an object or array rule of the converter, one line: NAME ::= "{" space ... "}" space
_CLOSING_RE = re.compile(r'(?m)^(\S+ ::= "([{[])" space .*) ("[}\]]" space)$')


def _joined(grammar: str, value: str | None) -> str:
    """Raw ``grammar`` plus the rules of ``value`` (a format's GBNF), its root named ``format-value``."""
    assert value is not None
    body = re.sub(r"(?m)^root\s*::=", "format-value ::=", value, count=1).replace(_SPACE_RULE, _JOINED_SPACE)
    body = _CLOSING_RE.sub(r"\1 space \3", body)
    clash = set(_RULE_RE.findall(grammar)) & set(_RULE_RE.findall(body))
    if clash:
        raise GrammarError(f"the grammar and the format both define the rule(s) {', '.join(sorted(clash))}")
    return check_gbnf(f"{grammar.rstrip()}\n{body}")


def check_gbnf(grammar: str) -> str:
    """Refuse grammars too large to build (long text or huge ``{m,n}`` repetitions)."""
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise GrammarError(f"grammar is too large ({len(grammar)} characters, at most {MAX_GRAMMAR_CHARS})")
    for low, high in _REPEAT_RE.findall(grammar):
        if int(low) > MAX_REPEAT or (high and int(high) > MAX_REPEAT):
            raise GrammarError(f"grammar repetition {{{low},{high}}} is too large (at most {MAX_REPEAT})")
    return grammar


def schema_to_gbnf(schema: JSONObject) -> str:
    """Convert a JSON Schema; GrammarError for any feature the output could not be held to."""
    _check(schema, "#", schema)
    try:
        gbnf = str(json_schema_to_gbnf(json.dumps(schema)))
    except (AssertionError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise GrammarError(f"JSON schema cannot be enforced: {exc}") from exc
    # The converter's string character class admits raw control characters, which JSON forbids
    # (a string holding byte 0x15 does not parse); exclude them as its JSON_GBNF does.
    return check_gbnf(gbnf.replace(_LOOSE_CHAR, _JSON_CHAR))


_LOOSE_CHAR = r'char ::= [^"\\] |'
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] |'


def _check(node: object, where: str, root: JSONObject, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise GrammarError(f"JSON schema nests deeper than {MAX_DEPTH} levels (at {where[:200]})")
    if isinstance(node, bool):
        if node is True:
            return
        raise GrammarError(f"JSON schema at {where}: 'false' schemas are not supported")
    if not isinstance(node, dict):
        raise GrammarError(f"JSON schema at {where}: expected an object, got {type(node).__name__}")
    for key in node:
        if key not in _ENFORCED and key not in _ANNOTATIONS:
            raise GrammarError(f"JSON schema keyword {key!r} at {where} is not supported "
                               "(it could not be enforced during generation)")
    for key in ("minItems", "maxItems", "minLength", "maxLength"):
        if key in node:
            value = node[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPEAT:
                raise GrammarError(f"JSON schema {key} at {where} must be a whole number from 0 to {MAX_REPEAT}")
    kinds = node.get("type")
    for kind in kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []:
        if kind not in _TYPES:
            raise GrammarError(f"JSON schema at {where}: unknown type {kind!r}")
    if "format" in node and node["format"] not in _FORMATS:
        raise GrammarError(f"JSON schema string format {node['format']!r} at {where} is not supported "
                           f"(supported: {', '.join(sorted(_FORMATS))})")
    if ("minLength" in node or "maxLength" in node) and ("pattern" in node or "format" in node
                                                         or node.get("type") != "string"):
        raise GrammarError(f"JSON schema at {where}: minLength/maxLength need type \"string\" "
                           "and no pattern or format")
    if "pattern" in node:
        pattern = node["pattern"]
        if not (isinstance(pattern, str) and pattern.startswith("^") and pattern.endswith("$")) or len(pattern) > 2000:
            raise GrammarError(f"JSON schema pattern at {where} must be anchored with ^...$ (at most 2000 characters)")
        check_pattern(pattern)  # repetition, ambiguity and size bounds (regex_bounds)
    if "allOf" in node:
        for i, part in enumerate(node["allOf"]):
            if not isinstance(part, dict) or set(part) - _ANNOTATIONS - {"properties", "required", "type",
                                                                          "$ref", "anyOf"}:
                raise GrammarError(f"JSON schema allOf at {where}/allOf/{i}: only object schemas "
                                   "with properties can be combined")
    if "$ref" in node:
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise GrammarError(f"JSON schema $ref {ref!r} at {where}: only local references (#/...) are supported")
    for key in ("properties", "$defs", "definitions"):
        for name, sub in (node.get(key) or {}).items():
            _check(sub, f"{where}/{key}/{name}", root, depth + 1)
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, sub in enumerate(node.get(key) or []):
            _check(sub, f"{where}/{key}/{i}", root, depth + 1)
    items = node.get("items")
    if isinstance(items, list):
        for i, sub in enumerate(items):
            _check(sub, f"{where}/items/{i}", root, depth + 1)
    elif items is not None:
        _check(items, f"{where}/items", root, depth + 1)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        _check(extra, f"{where}/additionalProperties", root, depth + 1)
