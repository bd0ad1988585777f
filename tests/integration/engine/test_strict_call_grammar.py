"""The grammar that holds strict tool calls under tool_choice auto, run by llama.cpp's own grammar engine.

Texts are fed one character token at a time through a grammar sampler on the tiny model's
vocabulary (the way sampling checks a token: apply to one candidate, then accept), so what is
checked is what generation enforces: free text passes untouched, and once the text holds
``<tool_call>`` the rest must be a call to an offered tool, arguments matching a strict tool's
schema, closed by ``</tool_call>``. A bare call at the start (``{"name": "<tool>", ...}``, in a
```json fence too, pretty-printed as Qwen2.5-Coder writes it) is held the same way, while JSON
that names no tool stays free. The output may end only outside a call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import llama_cpp as lc
import numpy as np
import pytest

from localrun.chat.format import ToolFormat
from localrun.chat.tools import forced_call, strict_calls
from localrun.engine.engine import Engine
from localrun.engine.grammar import grammar_for
from localrun.engine.native import Vocab
from localrun.engine.sampling import TokenData
from localrun.errors import GrammarError

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
SHELL = {"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}  # not strict
GOOD_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
BARE = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
PRETTY = ('```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris",\n    "unit": "celsius"\n  }\n}'
          '\n```')


class Checker:
    """Feeds text to a fresh grammar sampler one single-character token at a time."""

    def __init__(self, vocab: Vocab, gbnf: str) -> None:
        self.vocab, self.scratch = vocab, TokenData(vocab.n_vocab)
        self.grammar = lc.llama_sampler_init_grammar(vocab.ptr, gbnf.encode(), b"root")
        assert self.grammar, "llama.cpp could not parse the grammar"
        self.tokens = _char_tokens(vocab)

    def allows(self, token: int) -> bool:
        one = self.scratch.one
        one["id"][0], one["logit"][0] = token, 1.0
        self.scratch.one_array.size, self.scratch.one_array.selected = 1, -1
        self.scratch.one_array.sorted = False
        lc.llama_sampler_apply(self.grammar, self.scratch.one_ref)
        return bool(np.isfinite(one["logit"][0]))

    def feed(self, text: str) -> int | None:
        """How many characters were accepted before one was refused (None: all of them)."""
        for i, ch in enumerate(text):
            token = self.tokens[ch]
            if not self.allows(token):
                return i
            lc.llama_sampler_accept(self.grammar, token)
        return None

    def may_end(self) -> bool:
        return self.allows(self.vocab.eos)

    def free(self) -> None:
        lc.llama_sampler_free(self.grammar)


def _char_tokens(vocab: Vocab) -> dict[str, int]:
    """A token for each printable ASCII character, space and newline (the tiny vocabulary has them all)."""
    out: dict[str, int] = {}
    for token in range(vocab.n_vocab):
        piece = vocab.piece(token)
        if len(piece) == 1 and (piece == b"\n" or 32 <= piece[0] < 127):
            out.setdefault(piece.decode(), token)
    return out


@pytest.fixture
def checker(tiny_engine: Engine) -> Iterator[Any]:
    made: list[Checker] = []

    def make(tools: list[dict[str, Any]]) -> Checker:
        calls = strict_calls(tools, "auto", ToolFormat.HERMES)
        assert calls is not None
        gbnf = grammar_for(calls.schema, calls.grammar)
        assert gbnf is not None
        made.append(Checker(tiny_engine.vocab, gbnf))
        return made[-1]

    yield make
    for c in made:
        c.free()


@pytest.mark.parametrize("text", [
    "Sure! The weather in Paris is mild. <b>bold</b> <tool <tool_cal> <<tool_call",
    GOOD_CALL,
    f"Let me check.\n{GOOD_CALL}\nAnd London:\n{GOOD_CALL.replace('Paris', 'London')}\nDone.",
    '<tool_call>\n{"name": "shell", "arguments": {"anything": [1, 2]}}\n</tool_call>',  # a non-strict tool
    "",
    BARE, f"  {PRETTY}\nThat is the call.", f'{GOOD_CALL}\n{{"name": "shell", "arguments": {{}}}}',
    '{"isNewTopic": true, "title": "Paris"}', '{"name": "Alice", "age": 3}', '{"name": "get_weather_x"}',
    "```python\nprint(1)\n```", "```json\n[1, 2]\n```", 'He said {"name": "get_weather", "arguments": 1}',
])
def test_free_text_and_valid_calls_pass_and_may_end(checker: Any, text: str) -> None:
    c = checker([WEATHER, SHELL])
    assert c.feed(text) is None and c.may_end()


@pytest.mark.parametrize(("text", "refused_at"), [
    ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "kelvin', '"kelvin'),
    ('<tool_call>\n{"name": "get_weather", "arguments": {"town": ', '"town'),
    ('<tool_call>\n{"name": "rm_rf", ', '"rm_rf'),
    ('<tool_call>\nI would call get_weather', 'I would'),
    ('{"name": "get_weather", "arguments": {"town": ', '"town'),
    (PRETTY.replace('"city"', '"town"'), '"town'),
    ('\n{"name":"get_weather","arguments":{"city":"Paris","unit":"kelvin"}}', '"kelvin'),
])
def test_an_opened_call_must_follow_the_schema(checker: Any, text: str, refused_at: str) -> None:
    c = checker([WEATHER, SHELL])
    # the first refused character is inside the named word: the schema allows no other
    at = c.feed(text)
    start = text.index(refused_at)
    assert at is not None and start <= at < start + len(refused_at), (at, text[at:])


def test_an_opened_call_cannot_end_before_it_is_closed(checker: Any) -> None:
    c = checker([WEATHER])
    assert c.feed(GOOD_CALL[: -len("</tool_call>")]) is None and not c.may_end()
    assert c.feed("</tool_call>") is None and c.may_end()
    bare = checker([WEATHER])
    assert bare.feed('{"name": "get_weather"') is None and not bare.may_end()
    fenced = checker([WEATHER])
    assert fenced.feed(PRETTY[:-3]) is None and not fenced.may_end()


# What openai.pydantic_function_tool writes for nested models and enums: references into the
# parameters' own $defs ("#" is the parameters, which the call schema nests under "arguments").
QUERY = {"type": "function", "function": {"name": "query", "strict": True, "parameters": {
    "$defs": {"Table": {"enum": ["orders", "customers"], "type": "string"},
              "Condition": {"type": "object", "properties": {"column": {"type": "string"},
                                                             "op": {"$ref": "#/$defs/Op"}},
                            "required": ["column", "op"], "additionalProperties": False},
              "Op": {"enum": ["=", ">"], "type": "string"}},
    "type": "object", "properties": {"table": {"$ref": "#/$defs/Table"},
                                     "conditions": {"type": "array", "items": {"$ref": "#/$defs/Condition"}}},
    "required": ["table", "conditions"], "additionalProperties": False}}}
QUERY_CALL = ('<tool_call>\n{"name": "query", "arguments": {"table": "orders", "conditions": '
              '[{"column": "status", "op": ">"}]}}\n</tool_call>')


def test_a_tool_whose_parameters_refer_to_their_own_defs_is_held_to_them(checker: Any) -> None:
    c = checker([QUERY, WEATHER])
    assert c.feed(QUERY_CALL) is None and c.may_end()
    wrong = checker([QUERY, WEATHER])
    text = QUERY_CALL.replace('"op": ">"', '"op": "<"')
    assert wrong.feed(text) == text.index('"<"') + 1  # the enum of $defs/Op holds
    forced = forced_call([QUERY], "required", ToolFormat.HERMES)
    assert forced is not None and grammar_for(forced.schema, None) is not None


def test_a_format_rule_clash_is_a_grammar_error() -> None:
    with pytest.raises(GrammarError, match="string"):
        grammar_for({"type": "object", "properties": {"a": {"type": "string"}}}, 'root ::= string\nstring ::= "x"')
