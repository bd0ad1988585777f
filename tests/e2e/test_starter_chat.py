"""The real starter (qwen2.5-coder:0.5b) answers what a new user asks, through every door.

One ``localrun serve`` for the whole module (a subprocess with the starter imported once per
session, see ``starter_models``); the official ``ollama`` and ``openai`` clients, the chat UI on
Pilot and the ``localrun run`` command all talk to it. Temperature 0 throughout, so answers are
the model's greedy ones; the assertions are what a user would check by reading them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import ollama
import openai
import pytest
from ports import free_port
from servedaemon import Daemon
from tuiscreen import screen_lines

from localrun.tui.app import LocalrunApp
from localrun.tui.backend import ClientBackend
from localrun.tui.session import ChatSession
from localrun.tui.widgets import AssistantMessage, PromptInput

pytestmark = [pytest.mark.starter, pytest.mark.slow, pytest.mark.timeout(600)]
MODEL = "qwen2.5-coder:0.5b"
GREEDY = {"temperature": 0}
PARIS = [{"role": "user", "content": "What is the capital of France?"}]
HAIKU = [{"role": "user", "content": "Write a haiku about the sea."}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                   "required": ["city"]}}}]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, starter_models: Path) -> Iterator[dict[str, str]]:
    """The daemon's environment (LOCALRUN_HOST, LOCALRUN_MODELS...); its URL is ``env["URL"]``."""
    home = tmp_path_factory.mktemp("starter-daemon")
    live = Daemon(home, free_port(), {"LOCALRUN_MODELS": str(starter_models), "LOCALRUN_NUM_PARALLEL": "2"})
    try:
        yield {**live.env, "URL": live.url}
    finally:
        live.stop()


@pytest.fixture
def oll(daemon: dict[str, str]) -> ollama.Client:
    return ollama.Client(host=daemon["URL"], timeout=300)


@pytest.fixture
def oai(daemon: dict[str, str]) -> openai.OpenAI:
    return openai.OpenAI(base_url=daemon["URL"] + "/v1", api_key="unused", max_retries=0, timeout=300)


def test_the_capital_of_france_is_paris(oll: ollama.Client) -> None:
    reply = oll.chat(model=MODEL, messages=PARIS, options=GREEDY)
    assert "Paris" in reply.message.content
    shown = oll.show(MODEL)
    assert "tools" in (shown.capabilities or []) and "insert" in (shown.capabilities or [])


def test_a_system_prompt_is_obeyed(oll: ollama.Client) -> None:
    messages = [{"role": "system", "content": "You are a pirate. Start every answer with 'Arrr'."}, *PARIS]
    reply = oll.chat(model=MODEL, messages=messages, options=GREEDY).message.content
    assert reply.lower().startswith("arr") and "Paris" in reply


def test_a_second_turn_remembers_the_first(oll: ollama.Client) -> None:
    messages = [{"role": "user", "content": "My name is Alice and my favourite colour is green."},
                {"role": "assistant", "content": "Nice to meet you, Alice!"},
                {"role": "user", "content": "What is my favourite colour?"}]
    assert "green" in oll.chat(model=MODEL, messages=messages, options=GREEDY).message.content.lower()


def test_a_haiku_keeps_its_line_breaks_on_both_apis(oll: ollama.Client, oai: openai.OpenAI) -> None:
    """The three replies are compared with the prompt in one state, in the prefix cache: on some CPUs (an
    AVX-512 Intel Xeon here) a prompt read whole and the same prompt from the cache differ in the last bits,
    and this prompt meets a near-tie with them (README, LOCALRUN_BATCH_INVARIANT)."""
    oll.chat(model=MODEL, messages=HAIKU, options={**GREEDY, "num_predict": 1})
    native = oll.chat(model=MODEL, messages=HAIKU, options=GREEDY).message.content
    streamed = "".join(p.message.content or "" for p in oll.chat(model=MODEL, messages=HAIKU, options=GREEDY,
                                                                 stream=True))
    compat = oai.chat.completions.create(model=MODEL, messages=HAIKU, temperature=0).choices[0].message.content
    lines = [line for line in native.splitlines() if line.strip()]
    assert len(lines) == 3, native
    assert streamed == native and compat == native


def test_the_weather_question_becomes_a_get_weather_call(oll: ollama.Client, oai: openai.OpenAI) -> None:
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    message = oll.chat(model=MODEL, messages=ask, tools=TOOLS, options=GREEDY).message
    calls = message.tool_calls or []
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Paris"})]
    stream = oai.chat.completions.create(model=MODEL, messages=ask, tools=TOOLS, temperature=0, stream=True)  # type: ignore[arg-type]
    deltas = [d for chunk in stream if chunk.choices for d in (chunk.choices[0].delta.tool_calls or [])]
    assert len(deltas) == 1 and deltas[0].id and deltas[0].function is not None
    assert deltas[0].function.name == "get_weather"
    assert json.loads(deltas[0].function.arguments or "") == {"city": "Paris"}
    # Forced: even a greeting gets a call, in Qwen's own <tool_call> format (parsed away, not shown).
    forced = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hello!"}], tools=TOOLS,  # type: ignore[arg-type]
                                         tool_choice="required", temperature=0).choices[0]
    assert forced.finish_reason == "tool_calls" and forced.message.content is None
    assert forced.message.tool_calls and forced.message.tool_calls[0].function.name == "get_weather"


async def test_the_chat_ui_shows_the_haiku_on_three_lines(daemon: dict[str, str], tmp_path: Path) -> None:
    session = ChatSession.start(MODEL, options=dict(GREEDY))
    app = LocalrunApp(ClientBackend(base_url=daemon["URL"]), session=session, health_interval=0)
    async with app.run_test(size=(100, 40)) as pilot:
        prompt = app.screen.query_one(PromptInput)
        prompt.focus()
        prompt.insert(HAIKU[0]["content"])
        await pilot.press("enter")
        for _ in range(1200):
            await pilot.pause(0.1)
            if session.messages and not app.screen.streaming:
                break
        await pilot.pause(0.5)
        reply = session.messages[-1]["content"]
        shown = screen_lines(app.screen.query_one(AssistantMessage))
        assert shown[:3] == [line.strip() for line in reply.splitlines() if line.strip()]


def test_the_readme_first_command_answers_a_question(daemon: dict[str, str]) -> None:
    """``localrun run`` with no model name is the starter; asked as a new user would, it says Paris."""
    env = {k: v for k, v in daemon.items() if k != "URL"}
    result = subprocess.run([sys.executable, "-m", "localrun", "run", "-o", "temperature=0"],
                            input="What is the capital of France?\n", capture_output=True, text=True,
                            env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout and "base model" not in result.stderr


def test_a_coder_fills_in_the_middle(oll: ollama.Client) -> None:
    reply = oll.generate(model=MODEL, prompt="def add(a, b):\n    return ", suffix="\n\nprint(add(1, 2))\n",
                         options={**GREEDY, "num_predict": 16})
    assert reply.response.strip().startswith("a + b")


def test_a_coder_fills_in_the_middle_through_openai_completions(oai: openai.OpenAI) -> None:
    """``suffix`` on /v1/completions (as Ollama's OpenAI layer takes it, for editor plugins): the
    same FIM prompt, streamed or not."""
    args = {"model": MODEL, "prompt": "def add(a, b):\n    return ", "suffix": "\n\nprint(add(1, 2))\n",
            "max_tokens": 16, "temperature": 0}
    reply = oai.completions.create(**args)
    assert reply.choices[0].text.strip().startswith("a + b")
    streamed = "".join(c.choices[0].text for c in oai.completions.create(**args, stream=True) if c.choices)
    assert streamed == reply.choices[0].text
