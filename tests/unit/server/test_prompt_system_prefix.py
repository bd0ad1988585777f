"""The system prefix (a second template render, used only to keep the system prompt when a prompt
is cut) is rendered only when the prompt might not fit the context."""

from __future__ import annotations

from localrun.chat.prompt import render_pair

TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}"
MESSAGES = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hello " * 50}]


def test_a_prompt_that_fits_skips_the_system_prefix_render() -> None:
    prompt, prefix = render_pair(TEMPLATE, MESSAGES, None, None, 4096)
    assert prompt and prompt.startswith("<system>Be terse.</system>") and prefix is None


def test_a_prompt_that_might_overflow_gets_its_system_prefix() -> None:
    prompt, prefix = render_pair(TEMPLATE, MESSAGES, None, None, 64)
    assert prefix == "<system>Be terse.</system>" and prompt and prompt.startswith(prefix)
    assert render_pair(TEMPLATE, MESSAGES)[1] == prefix  # no context given: always rendered
