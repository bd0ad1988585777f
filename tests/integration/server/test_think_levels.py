"""An effort level reaches the model's template through every API (gpt-oss reads ``reasoning_effort``):
Ollama's ``think``, OpenAI's ``reasoning_effort``, the Responses API's ``reasoning.effort``.

The template below writes ``SAY:effort=LEVEL`` (or ``unset``) at the end of the prompt, and the fake
engine answers what follows the last ``SAY:``, so the reply says which level the template saw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import DictStore
from tinymodel import write_tiny_gguf

pytestmark = pytest.mark.timeout(120)

EFFORT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% else %}<think>\n"
    "{% endif %}SAY:effort={{ reasoning_effort if reasoning_effort is defined else 'unset' }}\n{% endif %}"
)


@pytest.fixture
async def app(serve_app: Any, fake_runners: Any, tmp_path: Path) -> Any:
    model = write_tiny_gguf(tmp_path / "effort.gguf", chat_template=EFFORT_TEMPLATE, name="tiny-effort")
    return await serve_app(DictStore({"effort": model}), load_fn=fake_runners)


async def _said(app: Any, path: str, body: dict[str, Any]) -> str:
    r = await app.post(path, json={"model": "effort", "stream": False, **body})
    assert r.status == 200, await r.text()
    reply = await r.json()
    if path == "/api/chat":
        return str(reply["message"].get("thinking") or reply["message"]["content"])
    if path == "/v1/chat/completions":
        message = reply["choices"][0]["message"]
        return str(message.get("reasoning_content") or message["content"])
    return "".join(part["text"] for item in reply["output"] for part in item.get("content") or [])


@pytest.mark.parametrize(("path", "ask", "seen"), [
    ("/api/chat", {"think": "high"}, "effort=high"),
    ("/api/chat", {"think": True}, "effort=unset"),
    ("/v1/chat/completions", {"reasoning_effort": "low"}, "effort=low"),
    ("/v1/chat/completions", {"reasoning_effort": "xhigh"}, "effort=high"),
    ("/v1/responses", {"reasoning": {"effort": "medium"}}, "effort=medium"),
])
async def test_the_level_reaches_the_template(app: Any, path: str, ask: dict[str, Any], seen: str) -> None:
    messages = {"input": "hi"} if path == "/v1/responses" else {"messages": [{"role": "user", "content": "hi"}]}
    assert await _said(app, path, {**messages, **ask}) == seen


async def test_a_level_on_a_model_that_cannot_think_is_a_400(serve_app: Any, fake_runners: Any,
                                                            tiny_gguf: Path) -> None:
    app = await serve_app(DictStore({"tiny": tiny_gguf}), load_fn=fake_runners)
    r = await app.post("/api/chat", json={"model": "tiny", "think": "high", "stream": False,
                                          "messages": [{"role": "user", "content": "hi"}]})
    assert r.status == 400 and "does not support thinking" in (await r.json())["error"]
