"""The ``cache_reuse`` option: llama-server's ``--cache-reuse`` on every API, opt-in per model or request.

A conversation resent with a part taken out (an old tool result dropped, a file removed from an
assistant's context), or with other text in its place (a new session's first words before what an
agent sends after them every time), has the same text after it at other positions: exact prefix
caching reads all of it again, shifted reuse takes it from the cache (kvcache.py, "Shifted reuse").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from localrun.config import models_dir

pytestmark = pytest.mark.timeout(300)
GREEDY = {"temperature": 0, "repeat_penalty": 1.0}
# A tool result the second request leaves out, and what follows it (~200 tokens of the tiny model's vocabulary)
DROPPED = "Tool result: " + " ".join(f"line {i} of a log" for i in range(20))
TAIL = " ".join(f"agent{i} reviews code" for i in range(50))


@pytest.fixture
def store(tiny_gguf: Path) -> Any:
    from localrun.store import ModelStore

    s = ModelStore(models_dir())
    s.create("exact", f"FROM {tiny_gguf}\nPARAMETER num_ctx 4096\n")
    s.create("reuser", f"FROM {tiny_gguf}\nPARAMETER num_ctx 4096\nPARAMETER cache_reuse 32\n")
    return s


def _conversation(dropped: bool) -> list[dict[str, str]]:
    middle = "" if dropped else f"{DROPPED}\n\n"
    return [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": f"Fix the failing test.\n\n{middle}{TAIL}"}]


async def _chat(client: Any, model: str, dropped: bool, **extra: Any) -> dict[str, Any]:
    body = {"model": model, "messages": _conversation(dropped), "max_tokens": 2, **GREEDY, **extra}
    reply = await client.post("/v1/chat/completions", json=body)
    assert reply.status == 200, await reply.text()
    return await reply.json()  # type: ignore[no-any-return]


async def test_a_modelfile_parameter_turns_it_on_for_the_openai_api(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    for model in ("exact", "reuser"):
        await _chat(client, model, dropped=False)
    exact = (await _chat(client, "exact", dropped=True))["usage"]
    reused = (await _chat(client, "reuser", dropped=True))["usage"]
    assert exact["prompt_tokens"] == reused["prompt_tokens"]
    # exact: only what comes before the cut is cached
    cut = exact["prompt_tokens_details"]["cached_tokens"]
    assert cut < exact["prompt_tokens"] // 2
    # shifted reuse: the ~200 tokens after it too
    assert reused["prompt_tokens_details"]["cached_tokens"] > exact["prompt_tokens_details"]["cached_tokens"] + 150


async def test_a_new_sessions_first_words_are_read_and_what_follows_them_is_reused(serve_app: Any,
                                                                                  store: Any) -> None:
    client = await serve_app(store)

    async def session(model: str, words: str) -> dict[str, Any]:
        messages = [{"role": "system", "content": "You are a coding agent."},
                    {"role": "user", "content": words}, {"role": "user", "content": TAIL}]
        reply = await client.post("/v1/chat/completions", json={"model": model, "messages": messages,
                                                                 "max_tokens": 2, **GREEDY})
        return (await reply.json())["usage"]  # type: ignore[no-any-return]

    for model in ("exact", "reuser"):
        await session(model, "Fix the failing test in tests/unit.")
    exact = await session("exact", "Rename the helper.")
    reused = await session("reuser", "Rename the helper.")
    assert exact["prompt_tokens"] == reused["prompt_tokens"]
    assert exact["prompt_tokens_details"]["cached_tokens"] < 40
    assert reused["prompt_tokens_details"]["cached_tokens"] > exact["prompt_tokens_details"]["cached_tokens"] + 150


async def test_a_request_option_turns_it_on_or_off(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)

    def read(usage: dict[str, Any]) -> int:
        return int(usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"])

    # /v1 takes it as a top-level field, as the other Ollama options localrun accepts there
    await _chat(client, "exact", dropped=False)
    asked = (await _chat(client, "exact", dropped=True, cache_reuse=32))["usage"]
    assert read(asked) < 10  # the tail came from the cache: the turn's end is read
    await _chat(client, "reuser", dropped=False)
    refused = (await _chat(client, "reuser", dropped=True, cache_reuse=0))["usage"]  # the request wins
    assert read(refused) > 150
    # Anthropic's too (Claude Code's requests through a proxy that adds it)
    messages = {"model": "exact", "max_tokens": 2, "system": "You are a coding agent.", **GREEDY}
    for dropped in (False, True):
        reply = await client.post("/v1/messages", json={**messages, "cache_reuse": 32,
                                                        "messages": _conversation(dropped)[1:]})
        assert reply.status == 200, await reply.text()
    assert (await reply.json())["usage"]["input_tokens"] < 10
    # Ollama's API takes it in ``options``
    body = {"model": "exact", "messages": _conversation(True), "stream": False,
            "options": {"num_predict": 2, "cache_reuse": 32, **GREEDY}}
    reply = await client.post("/api/chat", json=body)
    assert reply.status == 200 and (await reply.json())["done"]


async def test_a_bad_value_is_a_400_naming_the_option(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    for value in (-1, 1.5, "256"):
        body = {"model": "exact", "messages": _conversation(False), "stream": False, "options": {"cache_reuse": value}}
        reply = await client.post("/api/chat", json=body)
        assert reply.status == 400
        assert "cache_reuse" in (await reply.json())["error"]
