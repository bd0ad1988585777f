"""Incremental detokenisation, stop strings, schema checks and the engine's option invariants (no model)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localrun.engine.detok import TextStream
from localrun.engine.grammar import grammar_for, schema_to_gbnf
from localrun.engine.sampling import assert_valid, resolve_seed
from localrun.engine.types import SamplingOptions
from localrun.errors import GrammarError


def run(pieces: list[bytes], stop: tuple[str, ...] = ()) -> tuple[str, bool]:
    stream = TextStream(stop)
    out = "".join(stream.push(p) for p in pieces)
    return out + stream.flush(), stream.stopped


def test_multibyte_character_split_across_tokens_is_emitted_whole() -> None:
    data = "héllo 😀 日本".encode()
    stream = TextStream()
    outputs = [stream.push(data[i:i + 1]) for i in range(len(data))]
    assert "".join(outputs) == "héllo 😀 日本"
    assert all("\ufffd" not in o for o in outputs)
    assert outputs[data.index(b"\xf0")] == ""  # the first byte of the emoji alone prints nothing


def test_invalid_bytes_become_replacement_characters() -> None:
    assert run([b"ok", b"\xff", b"!"])[0] == "ok\ufffd!"


def test_stop_string_spanning_tokens_is_never_emitted() -> None:
    stream = TextStream(("</answer>",))
    emitted = [stream.push(p) for p in [b"42 </", b"ans", b"wer> tail"]]
    assert "".join(emitted) == "42 "
    assert stream.stopped and stream.flush() == ""
    assert emitted[1] == ""  # "</ans" is held back: it could be the stop string


def test_held_back_text_is_released_when_the_stop_does_not_complete() -> None:
    assert run([b"a <", b"/b", b"c"], ("</ans",)) == ("a </bc", False)
    assert run([b"end <", b"/an"], ("</answer>",)) == ("end </an", False)  # flushed at the end


@given(st.text(min_size=0, max_size=40), st.text(min_size=1, max_size=5), st.integers(1, 7))
def test_stop_matches_python_find_for_any_split(text: str, stop: str, size: int) -> None:
    data = text.encode()
    pieces = [data[i:i + size] for i in range(0, len(data), size)]
    out, stopped = run(pieces, (stop,))
    cut = text.find(stop)
    assert (out, stopped) == ((text[:cut], True) if cut >= 0 else (text, False))


def test_json_format_and_raw_grammar() -> None:
    assert grammar_for(None, None) is None
    assert "root" in (grammar_for("json", None) or "")
    assert grammar_for(None, 'root ::= "x"') == 'root ::= "x"'
    # a raw grammar holds the format as its rule format-value (strict tool calls under tool_choice auto)
    joined = grammar_for("json", 'root ::= "x" format-value') or ""
    assert joined.startswith('root ::= "x" format-value\n') and "format-value ::= object" in joined
    with pytest.raises(GrammarError):
        grammar_for("yaml", None)


def test_supported_schema_converts() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 10},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
            "when": {"type": "string", "format": "date"},
            "ref": {"$ref": "#/$defs/point"},
        },
        "required": ["name"],
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}}}},
    }
    assert "root ::=" in schema_to_gbnf(schema)


@pytest.mark.parametrize(
    ("schema", "word"),
    [
        ({"type": "integer", "minimum": 3}, "minimum"),
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems"),
        ({"type": "object", "properties": {"a": {"not": {"type": "null"}}}}, "not"),
        ({"type": "string", "format": "email"}, "email"),
        ({"$ref": "https://example.com/schema.json"}, "local"),
        ({"type": "object", "patternProperties": {"^x": {}}}, "patternProperties"),
        ({"type": "strange"}, "strange"),
    ],
)
def test_unsupported_schema_features_are_refused_before_generation(schema: dict, word: str) -> None:
    with pytest.raises(GrammarError, match=word):
        grammar_for(schema, None)


@pytest.mark.parametrize(
    "bad",
    [
        {"top_p": 2.0}, {"top_p": -0.1}, {"temperature": -1.0}, {"temperature": float("nan")},
        {"top_k": -5}, {"min_p": 1.5}, {"typical_p": 3}, {"repeat_penalty": -1.0},
        {"repeat_last_n": -2}, {"presence_penalty": 5.0}, {"frequency_penalty": -3.0},
        {"num_predict": -3}, {"top_logprobs": 21}, {"top_k": 1.5}, {"stop": ("a", 3)},
        {"stop": tuple(str(i) for i in range(17))}, {"temperature": True},
    ],
)
def test_impossible_options_fail_the_engines_assertion(bad: dict) -> None:
    """The server refuses these with a 400 (tests/unit/server/test_daemon_conversions.py); reaching the
    engine anyway is a caller's bug, which it asserts rather than validating a second time."""
    with pytest.raises(AssertionError):
        assert_valid(SamplingOptions(**bad))


def test_ollama_defaults_and_edge_values_are_accepted() -> None:
    assert_valid(SamplingOptions())
    assert_valid(SamplingOptions(temperature=0, top_k=0, top_p=1.0, repeat_last_n=-1, num_predict=-1, seed=-5))
    assert resolve_seed(7) == resolve_seed(7)
    assert 0 <= resolve_seed(None) < 0xFFFFFFFF


@pytest.mark.parametrize(
    "hostile",
    [
        {"type": "array", "items": {"type": "string"}, "minItems": 10**9},
        {"type": "string", "maxLength": 10**9},
        {"$ref": "#"},
        {"type": "string", "pattern": "(a+)+$" * 50},
    ],
)
def test_hostile_schemas_are_refused_not_built(hostile: dict) -> None:
    with pytest.raises(GrammarError):
        grammar_for(hostile, None)


def test_deep_schema_and_huge_raw_grammar_are_refused() -> None:
    schema: dict = {"type": "string"}
    for _ in range(300):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    with pytest.raises(GrammarError, match="deeper"):
        grammar_for(schema, None)
    with pytest.raises(GrammarError, match="too large"):
        grammar_for(None, 'root ::= "a"{0,1000000000}')


def test_long_stop_strings_fail_the_engines_assertion() -> None:
    with pytest.raises(AssertionError):
        assert_valid(SamplingOptions(stop=("x" * 100_000,)))
