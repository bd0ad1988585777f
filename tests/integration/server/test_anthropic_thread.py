"""Anthropic message threads against a server that keeps no conversation: the official SDK's way.

The 2.x Python SDK's tool runner (and Claude Code) open a server-side thread: the first request
carries ``thread: {"type": "create"}`` with the whole conversation, later ones ``{"type":
"continue", "previous_message_id"}`` with only the new messages and no ``system`` or ``tools``.
Answering such a delta would answer it alone, so the daemon refuses every ``thread`` with the 400
whose ``error.details.error_code`` is ``thread_unsupported_request``; the SDK then sends the turn
again, whole and without ``thread``, and stops threading. The runners host the fake engine, whose
``SAY:`` prompts answer a scripted line (the last ``SAY:`` in the prompt wins).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic import beta_async_tool
from daemon_helpers import DictStore

pytestmark = pytest.mark.timeout(120)

CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


@pytest.fixture
def store(tiny_gguf: Path) -> DictStore:
    return DictStore({"fake": tiny_gguf})


@pytest.fixture
async def app(serve_app: Any, store: DictStore, fake_runners: Any) -> Any:
    return await serve_app(store, load_fn=fake_runners)


class Recorder:
    """The JSON bodies the SDK sent to /v1/messages, and the statuses it got back, in order."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.statuses: list[int] = []

    async def request(self, request: Any) -> None:
        if request.url.path == "/v1/messages":
            self.bodies.append(json.loads(request.content))

    async def response(self, response: Any) -> None:
        if response.request.url.path == "/v1/messages":
            self.statuses.append(response.status_code)


def _client(app: Any, recorder: Recorder | None = None) -> anthropic.AsyncAnthropic:
    hooks = {"request": [recorder.request], "response": [recorder.response]} if recorder else {}
    return anthropic.AsyncAnthropic(base_url=str(app.make_url("")).rstrip("/"), api_key="unused", max_retries=0,
                                    http_client=anthropic.DefaultAsyncHttpxClient(event_hooks=hooks))


@pytest.mark.parametrize("thread", [{"type": "continue", "previous_message_id": "msg_0123"}, {"type": "create"}])
async def test_a_thread_is_refused_with_the_error_code_the_sdk_resends_on(app: Any, thread: dict[str, Any]) -> None:
    body = {"model": "fake", "max_tokens": 20, "thread": thread, "messages": [{"role": "user", "content": "SAY:hi"}]}
    r = await app.post("/v1/messages", json=body, headers={"anthropic-beta": "message-threads-2026-08-12"})
    error = (await r.json())["error"]
    assert r.status == 400 and error["type"] == "invalid_request_error"
    assert error["details"] == {"error_code": "thread_unsupported_request"} and "whole conversation" in error["message"]
    async with _client(app) as client:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await client.beta.messages.create(model="fake", max_tokens=20, thread=thread,  # type: ignore[arg-type]
                                              messages=[{"role": "user", "content": "SAY:hi"}])
    assert caught.value.error_code == "thread_unsupported_request"
    ps = await (await app.get("/api/ps")).json()
    assert ps["models"] == []  # refused before any model was loaded for it


@pytest.mark.parametrize("thread", [{"type": "pause"}, "continue", ["create"]])
async def test_a_malformed_thread_is_a_400_not_a_500(app: Any, thread: Any) -> None:
    body = {"model": "fake", "max_tokens": 20, "thread": thread, "messages": [{"role": "user", "content": "hi"}]}
    r = await app.post("/v1/messages", json=body)
    assert r.status == 400 and "thread" in (await r.json())["error"]["message"]


async def test_count_tokens_ignores_a_thread(app: Any) -> None:
    body = {"model": "fake", "messages": [{"role": "user", "content": "hi there"}]}
    plain = await (await app.post("/v1/messages/count_tokens", json=body)).json()
    threaded = await app.post("/v1/messages/count_tokens", json={**body, "thread": {"type": "create"}})
    assert threaded.status == 200 and (await threaded.json()) == plain


async def test_the_sdk_tool_runner_runs_a_tool_loop_on_whole_conversations(app: Any) -> None:
    """The real tool runner: refused once, it goes on without a thread, every request whole."""
    recorder = Recorder()
    calls: list[str] = []

    @beta_async_tool
    async def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"SAY:It is sunny in {city}."

    async with _client(app, recorder) as client:  # closed in this loop, not by the garbage collector in a later one
        runner = client.beta.messages.tool_runner(
            model="fake", max_tokens=100, system="You answer with tools.", tools=[get_weather],
            messages=[{"role": "user", "content": f"SAY:{CALL}"}])
        final = await runner.until_done()
    assert calls == ["Paris"]
    assert final.stop_reason == "end_turn" and final.content[0].text == "It is sunny in Paris."  # type: ignore[union-attr]
    assert recorder.statuses == [400, 200, 200]  # the create refused once, then two whole turns
    assert recorder.bodies[0]["thread"] == {"type": "create"}
    for body in recorder.bodies[1:]:
        assert "thread" not in body and body["system"] == "You answer with tools." and body["tools"]
    last = recorder.bodies[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user"]  # the question, the call, its result
    assert last[2]["content"][0]["type"] == "tool_result"
