"""``think`` as each API says it and as each kind of template reads it: on, off, or an effort level
(gpt-oss's ``reasoning_effort``, Ollama's ``.ThinkLevel``)."""

from __future__ import annotations

from typing import Any

import pytest

from localrun.chat.template import ChatTemplate
from localrun.chat.think import from_effort, parse_think, template_variables
from localrun.errors import InvalidRequest

# gpt-oss's template reads its effort this way (medium unless told)
EFFORT_TEMPLATE = ("{% if reasoning_effort is not defined %}{% set reasoning_effort = 'medium' %}{% endif %}"
                   "Reasoning: {{ reasoning_effort }}|{% for m in messages %}{{ m.content }}{% endfor %}")
GO_TEMPLATE = ("{{ if .IsThinkSet }}think={{ .Think }} level={{ .ThinkLevel }}|{{ end }}"
               "{{ range .Messages }}{{ .Content }}{{ end }}")


@pytest.mark.parametrize(("value", "think"), [
    (None, None), (True, True), (False, False), ("low", "low"), ("medium", "medium"), ("high", "high")])
def test_ollamas_think_field(value: Any, think: Any) -> None:
    assert parse_think(value) == think


@pytest.mark.parametrize("value", ["max", "HIGH", 1, 0, [], "true"])
def test_a_think_that_is_none_of_those_is_a_400(value: Any) -> None:
    with pytest.raises(InvalidRequest, match="'think' must be true, false"):
        parse_think(value)


@pytest.mark.parametrize(("effort", "think"), [
    (None, None), ("none", False), ("minimal", False), ("low", "low"), ("medium", "medium"), ("high", "high"),
    ("xhigh", "high")])
def test_openais_efforts(effort: Any, think: Any) -> None:
    assert from_effort(effort, "reasoning_effort") == think


def test_an_unknown_effort_names_its_field() -> None:
    with pytest.raises(InvalidRequest, match=r"'reasoning\.effort' must be one of none, minimal"):
        from_effort("max", "reasoning.effort")


@pytest.mark.parametrize(("think", "shown"), [
    (None, "Reasoning: medium|hi"), (True, "Reasoning: medium|hi"), ("high", "Reasoning: high|hi"),
    ("low", "Reasoning: low|hi")])
def test_a_level_reaches_a_jinja_template_as_reasoning_effort(think: Any, shown: str) -> None:
    assert ChatTemplate.from_source(EFFORT_TEMPLATE).render([{"role": "user", "content": "hi"}], think=think) == shown


@pytest.mark.parametrize(("think", "shown"), [
    (None, "hi"), (True, "think=true level=|hi"), (False, "think=false level=|hi"),
    ("high", "think=true level=high|hi")])
def test_a_level_reaches_a_go_template_as_think_level(think: Any, shown: str) -> None:
    assert ChatTemplate.from_source(GO_TEMPLATE).render([{"role": "user", "content": "hi"}], think=think) == shown


def test_the_variables_each_kind_of_template_gets() -> None:
    assert template_variables(None, go=False) == {} == template_variables(None, go=True)
    assert template_variables("high", go=False) == {"enable_thinking": True, "reasoning_effort": "high"}
    assert template_variables(False, go=False) == {"enable_thinking": False}
