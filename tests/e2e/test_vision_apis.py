"""A vision model through every API of a real daemon (issue #28 point 2), with the official ollama,
openai and anthropic clients: the tiny random-weight model of tests/tinyvision.py (its text is
noise, so the checks are what a client relies on: the same greedy answer on every API, usage that
counts the image, the follow-up served from the cache, clear 400s)."""

from __future__ import annotations

import base64
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest
from ports import free_port
from servedaemon import Daemon
from tinyvision import IMAGE_TOKENS, tiny_png_bytes, write_tiny_vision

from localrun.store import ModelStore

pytestmark = [pytest.mark.timeout(300)]

PNG = tiny_png_bytes(40, 30, 1)
B64 = base64.b64encode(PNG).decode()
URL = "data:image/png;base64," + B64


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path) -> Path:
    home = tmp_path_factory.mktemp("vision-models")
    model, mmproj = write_tiny_vision(home / "files")
    store = ModelStore(home / "models")
    store.create("tiny-vl", f"FROM {model}\nFROM {mmproj}\n", base_dir=home)
    store.create("text-only", f"FROM {tiny_gguf}\n", base_dir=home)
    return home / "models"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, models: Path) -> Iterator[str]:
    d = Daemon(tmp_path_factory.mktemp("vision-daemon"), free_port(), {"LOCALRUN_MODELS": str(models)})
    try:
        yield d.url
    finally:
        d.stop()


@pytest.fixture(scope="module")
def fetching_daemon(tmp_path_factory: pytest.TempPathFactory, models: Path) -> Iterator[str]:
    """A daemon whose user opted in to fetching images named by URL (LOCALRUN_FETCH_IMAGES=1)."""
    d = Daemon(tmp_path_factory.mktemp("fetching-daemon"), free_port(),
               {"LOCALRUN_MODELS": str(models), "LOCALRUN_FETCH_IMAGES": "1"})
    try:
        yield d.url
    finally:
        d.stop()


@pytest.fixture(scope="module")
def pictures() -> Iterator[str]:
    """Images on a web server of 127.0.0.1 (the test's own; nothing leaves the machine)."""
    files = {"/cat.png": PNG, "/notes.txt": b"hello, I am text"}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = files.get(self.path)
            self.send_response(200 if data is not None else 404)
            self.send_header("Content-Length", str(len(data or b"")))
            self.end_headers()
            self.wfile.write(data or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


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


def test_with_the_opt_in_an_image_named_by_url_is_fetched(daemon: str, fetching_daemon: str, pictures: str) -> None:
    def ask(base: str, url: str) -> str:
        oai = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
        reply = oai.chat.completions.create(model="tiny-vl", temperature=0, max_tokens=6, messages=[{
            "role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                        {"type": "text", "text": "what is this?"}]}])
        return reply.choices[0].message.content or ""

    assert ask(fetching_daemon, pictures + "/cat.png") == ask(daemon, URL)  # the same image, fetched
    claude = anthropic.Anthropic(base_url=fetching_daemon, api_key="unused", max_retries=0)
    counted = claude.messages.count_tokens(model="tiny-vl", messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": pictures + "/cat.png"}},
        {"type": "text", "text": "what is this?"}]}])
    assert counted.input_tokens > IMAGE_TOKENS
    for path, says in (("/notes.txt", "not an image"), ("/missing.png", "HTTP 404")):
        with pytest.raises(openai.BadRequestError) as err:
            ask(fetching_daemon, pictures + path)
        assert says in str(err.value)
    with pytest.raises(openai.BadRequestError) as refused:
        ask(daemon, pictures + "/cat.png")
    assert "does not fetch images" in str(refused.value)  # without the opt-in, nothing is fetched


@pytest.mark.allow_5xx(reason="the runner is killed on purpose: a request that meets its death gets 502")
def test_a_runner_that_dies_on_an_image_takes_only_itself_down(daemon: str) -> None:
    """A crash in the image decoder kills the model's runner process (native code), never the daemon:
    a request that meets the dead runner gets a clear 502 saying the next request loads the model
    again, and the next one does."""
    import psutil

    oll = ollama.Client(host=daemon, timeout=120)
    oll.chat(model="tiny-vl", messages=[{"role": "user", "content": "x", "images": [PNG]}], options={"num_predict": 1})
    port = daemon.rsplit(":", 1)[1]
    runners = [p for p in psutil.process_iter(["cmdline"]) if "localrun.runtime.runner" in " ".join(
        p.info["cmdline"] or []) and p.parent().environ().get("LOCALRUN_HOST", "").endswith(":" + port)]
    assert runners, "the vision model's runner process"
    for runner in runners:
        runner.kill()  # what a segfault in libmtmd's decoder would do
    ask = {"model": "tiny-vl", "messages": [{"role": "user", "content": "what is this?", "images": [PNG]}],
           "options": {"temperature": 0, "num_predict": 4}}
    try:
        again = oll.chat(**ask)  # type: ignore[arg-type]
    except ollama.ResponseError as met_the_dead_runner:
        assert met_the_dead_runner.status_code == 502 and "loads it again" in met_the_dead_runner.error
        again = oll.chat(**ask)  # type: ignore[arg-type]
    assert again.message.content and httpx.get(daemon + "/health").status_code == 200
