"""A vision model through every API of a real daemon (issue #28 point 2), with the official ollama,
openai and anthropic clients: the tiny random-weight model of tests/tinyvision.py (its text is
noise, so the checks are what a client relies on: the same greedy answer on every API, usage that
counts the image, the follow-up served from the cache, clear 400s)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest
from servedaemon import Daemon, free_port
from tinyvision import IMAGE_TOKENS, tiny_png_bytes, write_tiny_vision

from localrun.store import ModelStore

pytestmark = [pytest.mark.timeout(300)]

PNG = tiny_png_bytes(40, 30, 1)
B64 = base64.b64encode(PNG).decode()
URL = "data:image/png;base64," + B64


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path) -> Iterator[str]:
    home = tmp_path_factory.mktemp("vision-daemon")
    model, mmproj = write_tiny_vision(home / "files")
    store = ModelStore(home / "models")
    store.create("tiny-vl", f"FROM {model}\nFROM {mmproj}\n", base_dir=home)
    store.create("text-only", f"FROM {tiny_gguf}\n", base_dir=home)
    d = Daemon(home, free_port(), {"LOCALRUN_MODELS": str(home / "models")})
    try:
        yield d.url
    finally:
        d.stop()


def test_every_api_gives_the_same_greedy_answer_and_counts_the_image(daemon: str) -> None:
    question = "what is this?"
    oll = ollama.Client(host=daemon, timeout=120)
    native = oll.chat(model="tiny-vl", messages=[{"role": "user", "content": question, "images": [PNG]}],
                      options={"temperature": 0, "num_predict": 8})
    generated = oll.generate(model="tiny-vl", prompt=question, images=[PNG], options={"temperature": 0,
                                                                                      "num_predict": 8})
    oai = openai.OpenAI(base_url=daemon + "/v1", api_key="unused", max_retries=0)
    chat = oai.chat.completions.create(model="tiny-vl", temperature=0, max_tokens=8, messages=[{
        "role": "user", "content": [{"type": "image_url", "image_url": {"url": URL}},
                                    {"type": "text", "text": question}]}])
    responses = oai.responses.create(model="tiny-vl", temperature=0, max_output_tokens=8, input=[{
        "role": "user", "content": [{"type": "input_image", "image_url": URL},
                                    {"type": "input_text", "text": question}]}])
    claude = anthropic.Anthropic(base_url=daemon, api_key="unused", max_retries=0)
    blocks: list[anthropic.types.ContentBlockParam] = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}},
        {"type": "text", "text": question}]
    message = claude.messages.create(model="tiny-vl", max_tokens=8, extra_body={"temperature": 0},
                                     messages=[{"role": "user", "content": blocks}])
    answer = native.message.content
    assert answer and generated.response == chat.choices[0].message.content == responses.output_text == answer
    assert "".join(b.text for b in message.content if b.type == "text") == answer
    assert native.prompt_eval_count is not None and native.prompt_eval_count > IMAGE_TOKENS
    assert chat.usage is not None and chat.usage.prompt_tokens == native.prompt_eval_count
    assert claude.messages.count_tokens(model="tiny-vl", messages=[{"role": "user", "content": blocks}]
                                        ).input_tokens == native.prompt_eval_count
    assert "vision" in (oll.show("tiny-vl").capabilities or [])
    assert "vision" not in (oll.show("text-only").capabilities or [])


def test_the_follow_up_about_the_same_image_comes_from_the_cache(daemon: str) -> None:
    first = [{"role": "user", "content": "describe", "images": [B64]}]
    body = {"model": "tiny-vl", "stream": False, "options": {"temperature": 0, "num_predict": 6}}
    reply = httpx.post(daemon + "/api/chat", json={**body, "messages": first}, timeout=120).json()
    follow = [*first, reply["message"], {"role": "user", "content": "and the colours?"}]
    again = httpx.post(daemon + "/api/chat", json={**body, "messages": follow}, timeout=120).json()
    assert again["prompt_eval_cached_count"] >= reply["prompt_eval_count"] - 1


@pytest.mark.parametrize(("model", "content", "says"), [
    ("text-only", [{"type": "image_url", "image_url": {"url": URL}}, {"type": "text", "text": "x"}],
     "does not support images"),
    ("tiny-vl", [{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}],
     "does not fetch images"),
    ("tiny-vl", [{"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGFuIGltYWdl"}}],
     "not an image"),
    ("tiny-vl", [{"type": "image_url", "image_url": {"url": URL}}] * 17, "at most 16"),
])
def test_images_that_cannot_be_read_get_a_clear_400(daemon: str, model: str, content: list[object],
                                                    says: str) -> None:
    oai = openai.OpenAI(base_url=daemon + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(model=model, max_tokens=4, messages=[{"role": "user",
                                                                          "content": content}])  # type: ignore[misc]
    assert says in str(err.value)
