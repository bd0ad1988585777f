"""``jsontypes.loads``: the one reader of JSON from outside (bodies, tool call arguments, model output)."""

from __future__ import annotations

import json

import pytest

from localrun.jsontypes import NESTING_LIMIT, TooDeep, loads


def _nested(depth: int, shape: str) -> str:
    return "[" * depth + "]" * depth if shape == "array" else '{"a":' * depth + "1" + "}" * depth


@pytest.mark.parametrize("shape", ["array", "object"])
def test_nesting_up_to_the_limit_reads_and_one_more_level_is_too_deep(shape: str) -> None:
    assert loads(_nested(NESTING_LIMIT, shape)) == json.loads(_nested(NESTING_LIMIT, shape))
    with pytest.raises(TooDeep, match=f"deeper than {NESTING_LIMIT} levels"):
        loads(_nested(NESTING_LIMIT + 1, shape))


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_what_would_break_the_parser_is_too_deep_not_a_recursion_error(depth: int) -> None:
    with pytest.raises(TooDeep):
        loads(_nested(depth, "array"))


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"code": "[" * 1000 + "{" * 1000})
    assert loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ["NaN", '{"x": Infinity}', "[-Infinity]", "{", "", "nope"])
def test_what_is_not_json_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError) as info:
        loads(text)
    assert not isinstance(info.value, TooDeep)
