"""Template bounds: hostile arithmetic, repetition and loops fail fast with a clear error; real templates
render exactly as the plain sandbox renders them.

The hostile shapes are issue #13's: ``{{ (9 ** 15000000) % 7 }}`` froze the daemon while Jinja folded it at
compile time, ``'a' * 1200000000`` added a gigabyte, nested ``range(100000)`` loops ran for hours.
"""

from __future__ import annotations

import threading
import time

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from localrun.chat.template import ChatTemplate
from localrun.chat.template_limits import MAX_STEPS, BoundedSandbox
from localrun.errors import TemplateError, TemplateLimit

HOSTILE = {
    "power": "{{ (9 ** 15000000) % 7 }}",
    "power in a set": "{% set x = 9 ** 15000000 %}{{ x % 7 }}",
    "string repetition": "{{ ('a' * 1200000000)|length }}",
    "list repetition": "{{ ([0] * 1200000000)|length }}",
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x",
    "doubling by ~": "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                     "{% endfor %}{{ ns.s|length }}",
    "doubling by +": "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}"
                     "{% endfor %}{{ ns.l|length }}",
    "squaring": "{% set ns = namespace(x=3) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}{% endfor %}"
                "{{ ns.x % 7 }}",
    "center filter": "{{ 'a'|center(1000000000) }}",
    "indent filter": "{{ ('\\n' * 100000)|indent(100000) }}",
    "batch filter": "{{ [1]|batch(1000000000, 0)|list|length }}",
    "format filter": "{{ '%1000000000s'|format('a') }}",
    "% formatting": "{{ '%1000000000s' % 'a' }}",
    "str.ljust": "{{ 'a'.ljust(1000000000) }}",
    "str.replace": "{% set s = 'a' * 1000000 %}{{ s.replace('', s)|length }}",
    "str.join": "{% set s = 'a' * 1000000 %}{{ s.join(['x'] * 1000000)|length }}",
    "exponential macros": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
}


@pytest.mark.parametrize("shape", list(HOSTILE))
def test_hostile_templates_fail_fast_with_a_clear_error(shape: str) -> None:
    started = time.perf_counter()
    with pytest.raises(TemplateLimit, match=r"limit|more than"):
        ChatTemplate.from_source(HOSTILE[shape]).render([{"role": "user", "content": "hi"}])
    assert time.perf_counter() - started < 30  # seconds, not hours (the step budget is ~1 s of Python)


def test_compiling_never_evaluates_the_template() -> None:
    # Was: Jinja's optimizer folded the power while compiling, holding the GIL for minutes.
    done = threading.Event()

    def compile_it() -> None:
        ChatTemplate.from_source("{{ (9 ** 15000000) % 7 }}{{ 'a'|center(1000000000) }}")
        done.set()

    thread = threading.Thread(target=compile_it, daemon=True)
    thread.start()
    assert done.wait(10), "compiling evaluated the expression"


def test_a_template_source_of_megabytes_is_refused() -> None:
    with pytest.raises(TemplateLimit, match="characters long"):
        ChatTemplate.from_source("x" * 2_000_000)


def test_the_step_budget_is_per_render() -> None:
    loops = "{% for i in range(100000) %}{% endfor %}" * (MAX_STEPS * 6 // 10 // 100000) + "ok"
    template = ChatTemplate.from_source(loops)
    assert template.render([]) == "ok" and template.render([]) == "ok"  # 60% of the budget, twice: no carry-over


REAL = {
    "chatml": (
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
    "llama3-like": (
        "{{- bos_token }}{%- set ns = namespace(system='') %}{%- for m in messages %}{%- if m.role == 'system' %}"
        "{%- set ns.system = m.content %}{%- endif %}{%- endfor %}"
        "{%- if ns.system %}<|start_header_id|>system<|end_header_id|>\n\n{{ ns.system | trim }}<|eot_id|>{%- endif %}"
        "{%- for m in messages if m.role != 'system' %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
        "{{ m.content | trim }}<|eot_id|>{%- if loop.last %}[last of {{ loop.length }}]{%- endif %}{%- endfor %}"
        "{%- if tools %}{%- for t in tools %}{{ t | tojson }}{{ ', ' if not loop.last }}{%- endfor %}{%- endif %}"
        "{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{%- endif %}"),
    "arithmetic and else": (
        "{% for m in messages %}{{ loop.index0 * 2 + 1 }}{{ '%d' % loop.index }}{{ m.content ~ '|' }}{% endfor %}"
        "{% for x in [] %}never{% else %}empty{% endfor %}{{ 'x' * 3 }}{{ 2 ** 10 }}{{ [1, 2] + [3] }}"
        "{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %}{{ 'ab'|center(6) }}{{ 'a\nb'|indent(2) }}"),
    "recursive": (
        "{% for m in messages recursive %}{{ m.role }}{% if m.children %}({{ loop(m.children) }}){% endif %}"
        "{% endfor %}"),
}
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi", "children": [{"role": "inner", "children": []}]},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Why is the sky blue?"},
]


@pytest.mark.parametrize("name", list(REAL))
def test_real_templates_render_exactly_as_the_plain_sandbox_does(name: str) -> None:
    kwargs = {"messages": MESSAGES, "tools": [{"name": "f"}], "add_generation_prompt": True, "bos_token": "<s>"}
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(REAL[name])
    bounded = BoundedSandbox(trim_blocks=True, lstrip_blocks=True).from_string(REAL[name])
    assert bounded.render(**kwargs) == plain.render(**kwargs)


def test_the_sandbox_still_refuses_escapes() -> None:
    with pytest.raises(TemplateError):
        ChatTemplate.from_source("{{ ''.__class__.__mro__[1].__subclasses__() }}").render([])
