"""Deeply nested templates are a 400 naming the nesting, never a 500 (issue #26, point 2).

``{{((((((...`` (forty parentheses) and two hundred nested ``{% if %}``/``{{ if }}`` blocks reached
Python's recursion limit (or its compiler's: 100 levels of indentation, 20 nested loops) in the
parser, and the RecursionError / IndentationError that came out was an "internal error". Now the
nesting is counted before anything recurses, and everything a template can raise while it is
compiled, inspected or rendered is a TemplateError.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localrun.chat import format as chatformat
from localrun.chat import prompt as prompts
from localrun.chat.template import ChatTemplate
from localrun.chat.template_nesting import MAX_NESTING, MAX_TREE_DEPTH
from localrun.errors import TemplateError, TemplateLimit

MESSAGES = [{"role": "user", "content": "hi"}]
N = MAX_NESTING
DEEP = {
    "issue #26's parentheses": "{{" + "(" * 40,
    "closed parentheses": "{{ " + "(" * 80 + "1" + ")" * 80 + " }}",
    "brackets": "{{ " + "[" * 300 + "1" + "]" * 300 + " }}",
    "dicts": "{{ " + "{'a': " * 300 + "1" + "}" * 300 + " }}",
    "{% if %} x200": "{% if true %}" * 200 + "x" + "{% endif %}" * 200,
    "{% if %} x200 unclosed": "{% if true %}" * 200,
    "{% for %} x25": "{% for i in [1] %}" * 25 + "x" + "{% endfor %}" * 25,
    "{% macro %} x120": "{% macro m() %}" * 120 + "{% endmacro %}" * 120,
    "not x1000": "{{ " + "not " * 1000 + "x }}",
    "minus x1000": "{{ " + "-" * 1000 + "1 }}",
    "inline ifs": "{{ 1 " + "if x else 2 " * 1000 + "}}",
    "a chain of +": "{{ 1" + "+1" * 1000 + " }}",
    "a chain of attributes": "{{ x" + ".a" * 1000 + " }}",
    "a chain of filters": "{{ x" + "|e" * 1000 + " }}",
    "a chain of calls": "{{ x" + "()" * 1000 + " }}",
    "Go {{ if }} x200": "{{ if .System }}" * 200 + "x" + "{{ end }}" * 200,
    "Go {{ if }} x600": "{{ if .System }}" * 600 + "x" + "{{ end }}" * 600,
    "Go {{ range }} x30": "{{ range .Messages }}" * 30 + "{{ .Content }}" + "{{ end }}" * 30,
    "Go parentheses": "{{ .System }}{{ " + "(" * 40 + "len .Messages" + ")" * 40 + " }}",
    "Go parentheses x2000": "{{ .System }}{{ " + "(" * 2000 + ".Prompt" + ")" * 2000 + " }}",
}


@pytest.mark.parametrize("shape", list(DEEP))
def test_deep_nesting_is_a_template_limit_that_names_it(shape: str) -> None:
    with pytest.raises(TemplateLimit, match="nests too deeply at line 1"):
        ChatTemplate.from_source(DEEP[shape])
    with pytest.raises(TemplateLimit, match="nests too deeply"):  # what a request's template answers: a 400
        prompts.render(DEEP[shape], MESSAGES)
    assert chatformat.describe(DEEP[shape]) == chatformat.PLAIN  # /api/show and chat's first look: no 500


def test_the_error_names_the_line_and_the_construct() -> None:
    jinja = "hello\n{% for m in messages %}\n" + "{% if m %}\n" * N + "x"
    with pytest.raises(TemplateLimit, match=rf"at line {N + 2}: more than {N} blocks .*\{{% if %\}}"):
        ChatTemplate.from_source(jinja)
    go = "{{ .System }}\n\n" + "{{ with .System }}\n" * (N + 1)
    with pytest.raises(TemplateLimit, match=rf"at line {N + 3}: more than {N} blocks .*\{{\{{ with \}}\}}"):
        ChatTemplate.from_source(go)


ALLOWED = {
    "nested loops at the bound, each with parentheses at the bound":
        ("{% for i in [1] %}" * N + "{{ " + "(" * N + "i" + ")" * N + " }}" + "{% endfor %}" * N, "1"),
    "every kind of block": (
        "{% macro m() %}{{ caller() }}{% endmacro %}" + "{% for i in [1] %}{% call m() %}{% with a=1 %}"
        "{% filter upper %}{% set v %}" * (N // 5) + "x" + "{% endset %}{{ v }}{% endfilter %}{% endwith %}"
        "{% endcall %}{% endfor %}" * (N // 5), "X"),
    "a chain of + inside nested loops": (
        "{% for i in [1] %}" * N + "{{ 1" + "+1" * (MAX_TREE_DEPTH - N - 5) + " }}" + "{% endfor %}" * N,
        str(MAX_TREE_DEPTH - N - 4)),
    "long elif chains are not nesting": ("{% if false %}" + "{% elif false %}" * 500 + "{% else %}y{% endif %}", "y"),
    "long ~ concatenations are not nesting": ("{{ 'a'" + " ~ 'a'" * 999 + " }}", "a" * 1000),
    "subtraction is not a unary minus": ("{% set x = -1 %}{{ (5) - 1 - -x }}{{ [1][0] - 1 }}{{ x - 1 }}", "30-2"),
    "Go blocks at the bound": ("{{ range $.Messages }}" * N + "{{ .Content }}" + "{{ end }}" * N, "hi"),
    "Go parentheses at the bound": ("{{ .Messages }}{{ " + "(" * N + "len .Messages" + ")" * N + " }}",
                                    '[{"role": "user", "content": "hi"}]1'),
}


@pytest.mark.parametrize("shape", list(ALLOWED))
def test_nesting_within_the_bounds_renders(shape: str) -> None:
    source, expected = ALLOWED[shape]
    assert ChatTemplate.from_source(source).render(MESSAGES, add_generation_prompt=False) == expected


@pytest.mark.parametrize("source", [
    "{{ " + "9" * 5000 + " }}",                          # past Python's int conversion limit (ValueError)
    "{{ .System }}{{ " + "9" * 5000 + " }}",
    '{{ .System }}{{ "\\q" }}',                          # no JSON escape (JSONDecodeError)
    "{{ 1" + "0" * 400 + ".5e999 }}",                    # Jinja writes inf into its code (NameError)
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",  # RecursionError while rendering
    "{{ range 5 }}x{{ end }}{{ .Messages }}",            # TypeError while rendering
])
def test_whatever_a_template_raises_is_a_template_error(source: str) -> None:
    with pytest.raises(TemplateError):
        ChatTemplate.from_source(source).render(MESSAGES)
    chatformat.describe(source)  # never raises


FRAGMENTS = ["{{", "}}", "{%", "%}", "{{-", "-}}", "(", ")", "[", "]", "{", "}", "if ", "else ", "elif ",
             "for x in y ", "endif", "endfor", "macro m()", "endmacro", "set v", "endset", "not ", "-", "+",
             "1", "9" * 40, "x", ".a", "|e", "~", "'", '"', "$", ".Messages", ".System", "range ", "end ",
             "with ", "len ", " ", "\n", "==", ",", ":", "=", ":=", "m()"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=400).map("".join))
def test_any_template_text_is_a_template_or_a_template_error(source: str) -> None:
    try:
        template = ChatTemplate.from_source(source)
        template.render(MESSAGES, tools=[{"name": "f"}])
        template.uses("tools")
    except TemplateError:
        pass
    chatformat.describe(source)
