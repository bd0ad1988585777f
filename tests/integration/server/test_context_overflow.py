"""A prompt longer than the request's context, on every API, through the real app, runner and llama.cpp.

Never cut silently: /v1 and Anthropic refuse with a 400 naming both counts in their clients' words
(checked with the official SDKs), unless the client asks for a cut, which the reply then reports;
/v1/responses ``truncation: "auto"`` drops whole input items; /api cuts the front as Ollama does and
says how many tokens went, in the reply and in a WARNING. The tiny model runs with num_ctx 256.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from localrun.config import models_dir

pytestmark = pytest.mark.timeout(300)

NUM_CTX = 256
LONG = "hello world " * 200  # about 400 tokens: over the context
OPENAI_WORDS = re.compile(rf"This model's maximum context length is {NUM_CTX} tokens\. However, your (messages|prompt) "
                          r"resulted in (\d+) tokens\.")
ANTHROPIC_WORDS = re.compile(rf"prompt is too long: (\d+) tokens > {NUM_CTX} maximum")
CUT = re.compile(r"prompt cut to fit the context: model=tiny:latest prompt_tokens=(\d+) kept=(\d+) dropped=(\d+)")


@pytest.fixture
def store(tiny_gguf: Path) -> Any:
    from localrun.store import ModelStore

    s = ModelStore(models_dir())
    s.create("tiny", f"FROM {tiny_gguf}\nPARAMETER temperature 0\nPARAMETER num_ctx {NUM_CTX}\n")
    return s


@pytest.fixture
async def app(serve_app: Any, store: Any) -> Any:
    return await serve_app(store, num_parallel=1)


@pytest.fixture
async def oai(app: Any) -> AsyncIterator[openai.AsyncOpenAI]:
    # closed here, in the test's loop: left to the garbage collector, its aclose() was scheduled on a
    # later test's loop and logged "Event loop is closed" tracebacks there
    async with openai.AsyncOpenAI(base_url=str(app.make_url("/v1")), api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture
async def claude(app: Any) -> AsyncIterator[anthropic.AsyncAnthropic]:
    url = str(app.make_url("")).rstrip("/")
    async with anthropic.AsyncAnthropic(base_url=url, api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture
def cut_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.WARNING, logger="localrun.requests")
    return caplog


def _user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def _sse(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def _cuts(caplog: pytest.LogCaptureFixture) -> list[tuple[int, int, int]]:
    found = [CUT.search(r.getMessage()) for r in caplog.records if r.levelno == logging.WARNING]
    return [(int(m[1]), int(m[2]), int(m[3])) for m in found if m]


# --- OpenAI chat completions and completions ---------------------------------------------------


async def test_v1_chat_refuses_a_long_prompt_naming_both_counts(oai: openai.AsyncOpenAI) -> None:
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as caught:
            await oai.chat.completions.create(model="tiny", messages=_user(LONG), stream=stream)  # type: ignore[call-overload]
        error = caught.value
        assert error.code == "context_length_exceeded" and error.type == "invalid_request_error"
        words = OPENAI_WORDS.search(error.message)
        assert words and words[1] == "messages" and int(words[2]) > NUM_CTX


async def test_v1_completions_refuses_a_long_prompt_naming_both_counts(oai: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.completions.create(model="tiny", prompt=LONG, max_tokens=2)
    words = OPENAI_WORDS.search(caught.value.message)
    assert caught.value.code == "context_length_exceeded" and words and words[1] == "prompt" and int(words[2]) > NUM_CTX


async def test_v1_truncate_true_cuts_and_the_reply_says_so(oai: openai.AsyncOpenAI,
                                                           cut_log: pytest.LogCaptureFixture) -> None:
    r = await oai.chat.completions.create(model="tiny", messages=[{"role": "system", "content": "Be brief."},
                                                                   *_user(LONG)],
                                          max_tokens=2, extra_body={"truncate": True})
    usage = r.usage
    assert usage is not None and usage.prompt_tokens < NUM_CTX
    dropped = (usage.model_extra or {})["prompt_truncated_count"]
    assert dropped > 0
    (total, kept, logged), = _cuts(cut_log)
    assert (kept, logged) == (usage.prompt_tokens, dropped) and total == kept + dropped
    text = await oai.completions.create(model="tiny", prompt=LONG, max_tokens=2, extra_body={"truncate": True})
    assert text.usage is not None and (text.usage.model_extra or {})["prompt_truncated_count"] > 0


async def test_v1_streamed_cut_reply_says_so_with_or_without_usage(app: Any) -> None:
    body = {"model": "tiny", "messages": _user(LONG), "max_tokens": 2, "stream": True, "truncate": True}
    chunks = _sse(await (await app.post("/v1/chat/completions", json=body)).text())
    last = next(c for c in reversed(chunks) if c["choices"] and c["choices"][0]["finish_reason"])
    assert last["prompt_truncated_count"] > 0
    with_usage = _sse(await (await app.post("/v1/chat/completions", json={
        **body, "stream_options": {"include_usage": True}})).text())
    assert with_usage[-1]["usage"]["prompt_truncated_count"] == last["prompt_truncated_count"]
    text = _sse(await (await app.post("/v1/completions", json={
        "model": "tiny", "prompt": LONG, "max_tokens": 2, "stream": True, "truncate": True})).text())
    assert text[-1]["choices"][0]["finish_reason"] and text[-1]["prompt_truncated_count"] > 0


# --- Anthropic Messages --------------------------------------------------------------------------


async def test_anthropic_says_prompt_is_too_long_as_claude_code_expects(claude: anthropic.AsyncAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        await claude.messages.create(model="tiny", max_tokens=8, system="Be brief.", messages=_user(LONG))
    error = caught.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    words = ANTHROPIC_WORDS.fullmatch(error["message"])
    assert words and int(words[1]) > NUM_CTX
    with pytest.raises(anthropic.BadRequestError) as streamed:
        async with claude.messages.stream(model="tiny", max_tokens=8, messages=_user(LONG)) as stream:
            await stream.get_final_message()
    assert ANTHROPIC_WORDS.fullmatch(streamed.value.body["error"]["message"])  # type: ignore[index]


async def test_anthropic_count_tokens_is_the_prompt_a_reply_reads(claude: anthropic.AsyncAnthropic) -> None:
    """The whole rendered prompt, system and tools included, counted by the model's own tokenizer."""
    tool = {"name": "get_weather", "description": "Weather in a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
    ask: dict[str, Any] = {"model": "tiny", "system": "Be brief.", "tools": [tool], "messages": _user("the cat")}
    counted = (await claude.messages.count_tokens(**ask)).input_tokens
    reply = await claude.messages.create(max_tokens=1, **ask)
    assert counted == reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0)
    bare = (await claude.messages.count_tokens(model="tiny", messages=_user("the cat"))).input_tokens
    no_tools = (await claude.messages.count_tokens(model="tiny", system="Be brief.",
                                                   messages=_user("the cat"))).input_tokens
    assert bare < no_tools < counted
    long = (await claude.messages.count_tokens(model="tiny", messages=_user(LONG))).input_tokens
    assert long > NUM_CTX  # counts what does not fit, too: the number the 400 names


# --- OpenAI Responses ----------------------------------------------------------------------------


def _conversation(turns: int) -> list[dict[str, Any]]:
    """A developer message, then ``turns`` question/answer pairs with a call and its result in the middle."""
    items: list[dict[str, Any]] = [{"role": "developer", "content": "Answer briefly."}]
    for i in range(turns):
        items.append({"role": "user", "content": f"question {i}: " + "the cat and the dog " * 6})
        if i == 1:
            items.append({"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"})
            items.append({"type": "function_call_output", "call_id": "c1", "output": "found " * 10})
        items.append({"role": "assistant", "content": "answer " * 10})
    items.append({"role": "user", "content": "and now?"})
    return items


async def test_responses_refuse_by_default_naming_both_counts(oai: openai.AsyncOpenAI) -> None:
    for truncation in (openai.omit, "disabled"):
        with pytest.raises(openai.BadRequestError) as caught:
            await oai.responses.create(model="tiny", input=LONG, truncation=truncation)  # type: ignore[arg-type]
        words = re.search(rf"(\d+) tokens > {NUM_CTX} maximum", caught.value.message)
        assert caught.value.code == "context_length_exceeded" and words and int(words[1]) > NUM_CTX


async def test_responses_auto_drops_the_oldest_items_and_says_what_went(oai: openai.AsyncOpenAI,
                                                                        cut_log: pytest.LogCaptureFixture) -> None:
    items = _conversation(8)
    full = (await oai.responses.input_tokens.count(model="tiny", input=items)).input_tokens  # type: ignore[arg-type]
    assert full > NUM_CTX
    r = await oai.responses.create(model="tiny", input=items, truncation="auto", max_output_tokens=4,  # type: ignore[arg-type]
                                   instructions="Be kind.")
    details = (r.model_extra or {})["truncation_details"]
    assert r.status in ("completed", "incomplete") and r.usage is not None
    assert 0 < details["dropped_items"] < len(items) - 1 and details["dropped_tokens"] > 0
    assert r.usage.input_tokens <= NUM_CTX - 4  # room was left for the output
    assert r.truncation == "auto" and any("input items dropped to fit the context" in m for m in cut_log.messages)
    assert not _cuts(cut_log)  # items were dropped; no prompt was cut by tokens
    stream = await oai.responses.create(model="tiny", input=items, truncation="auto", max_output_tokens=4,  # type: ignore[arg-type]
                                        instructions="Be kind.", stream=True)
    events = [e async for e in stream]
    assert events[0].type == "response.created"
    assert (events[0].response.model_extra or {})["truncation_details"] == details


async def test_responses_auto_with_nothing_left_to_drop_is_a_400(oai: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.responses.create(model="tiny", input=LONG, truncation="auto")
    assert caught.value.code == "context_length_exceeded"


async def test_responses_input_tokens_counts_what_a_response_reads(oai: openai.AsyncOpenAI, app: Any) -> None:
    ask: dict[str, Any] = {"model": "tiny", "instructions": "Be brief.", "input": "the cat and the dog"}
    counted = await oai.responses.input_tokens.count(**ask)
    assert counted.object == "response.input_tokens" and counted.input_tokens > 0
    reply = await oai.responses.create(max_output_tokens=1, **ask)
    assert reply.usage is not None and counted.input_tokens == reply.usage.input_tokens
    for bad in ({"input": "x"}, {"model": "tiny"}, {"model": "tiny", "input": [1]},
                {"model": "tiny", "input": "x", "previous_response_id": "resp_1"}):
        r = await app.post("/v1/responses/input_tokens", json=bad)
        assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_request_error"


# --- Ollama /api ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/chat", "/api/generate"])
async def test_api_cuts_the_front_and_says_how_much_in_both_reply_forms(app: Any, path: str,
                                                                        cut_log: pytest.LogCaptureFixture) -> None:
    ask = {"model": "tiny", "options": {"num_predict": 2}, "system": "Be brief.", "prompt": LONG,
           "messages": [{"role": "system", "content": "Be brief."}, *_user(LONG)]}
    whole = await (await app.post(path, json={**ask, "stream": False})).json()
    lines = [json.loads(x) for x in (await (await app.post(path, json=ask)).text()).splitlines() if x.strip()]
    for final in (whole, lines[-1]):
        assert final["done"] and final["prompt_truncated_count"] > 0 and final["prompt_eval_count"] < NUM_CTX
    assert lines[-1]["prompt_truncated_count"] == whole["prompt_truncated_count"]
    cuts = _cuts(cut_log)
    assert len(cuts) == 2 and all(total == kept + dropped and dropped == whole["prompt_truncated_count"]
                                  for total, kept, dropped in cuts)
    refused = await app.post(path, json={**ask, "truncate": False})
    error = await refused.json()
    assert refused.status == 400 and error["code"] == "context_length_exceeded"
    assert re.search(rf"\d+ tokens; a request to this model holds at most {NUM_CTX}", error["error"])
