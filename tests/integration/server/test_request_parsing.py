"""One request-parsing layer: every API refuses the same out-of-range values with the same 400 before a
runner sees them, and every chat API keeps the system prompt when it cuts a long conversation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import DictStore

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def store(tiny_gguf: Path) -> DictStore:
    return DictStore({"a": tiny_gguf})


def _message(body: dict[str, Any]) -> str:
    error = body["error"]
    return str(error["message"] if isinstance(error, dict) else error)


_USER = [{"role": "user", "content": "hi"}]
_HOT = {
    "/api/generate": {"model": "a", "prompt": "hi", "stream": False, "options": {"temperature": 150}},
    "/api/chat": {"model": "a", "messages": _USER, "stream": False, "options": {"temperature": 150}},
    "/v1/chat/completions": {"model": "a", "messages": _USER, "temperature": 150},
    "/v1/completions": {"model": "a", "prompt": "hi", "temperature": 150},
    "/v1/responses": {"model": "a", "input": "hi", "temperature": 150},
    "/v1/messages": {"model": "a", "max_tokens": 4, "messages": _USER, "temperature": 150},
}


@pytest.mark.parametrize("path", list(_HOT))
async def test_a_temperature_of_150_is_a_400_from_the_server_on_every_api(
    serve_app: Any, store: DictStore, fake_runners: Any, path: str
) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    r = await client.post(path, json=_HOT[path])
    message = _message(await r.json())
    assert r.status == 400 and "temperature" in message
    assert "absurd" not in message  # the fake engine's own refusal: the runner never saw the request
    ps = await (await client.get("/api/ps")).json()
    assert ps["models"] == [] or path == "/v1/messages"  # refused before a model was loaded for it


@pytest.mark.parametrize("path", ["/api/chat", "/v1/chat/completions"])
async def test_top_logprobs_over_20_is_the_same_error_on_both_apis(
    serve_app: Any, store: DictStore, fake_runners: Any, path: str
) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    body = {"model": "a", "messages": _USER, "stream": False, "logprobs": True, "top_logprobs": 21}
    r = await client.post(path, json=body)
    payload = await r.json()
    code = payload["code"] if path.startswith("/api") else payload["error"]["code"]
    assert r.status == 400 and code == "invalid_option" and "top_logprobs" in _message(payload)


async def test_both_chat_apis_keep_the_system_prompt_when_truncating(
    serve_app: Any, store: DictStore, fake_runners: Any
) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "KEEP? " + "word " * 2000}]  # longer than the context
    api = await (await client.post("/api/chat", json={"model": "a", "messages": messages, "stream": False})).json()
    v1 = await (await client.post("/v1/chat/completions", json={"model": "a", "messages": messages,
                                                                "truncate": True})).json()  # asks for the cut
    kept_api = re.fullmatch(r"num_keep=(\d+)", api["message"]["content"])
    kept_v1 = re.fullmatch(r"num_keep=(\d+)", v1["choices"][0]["message"]["content"])
    assert kept_api and kept_v1
    assert int(kept_api[1]) > 0 and kept_api[1] == kept_v1[1]
