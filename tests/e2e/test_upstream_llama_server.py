"""llama-cpp-python's own server (``python -m llama_cpp.server``, OpenAI's ``/v1`` only) behind the daemon.

The server runs the tests' tiny model (random weights: the text is noise, so the tests check the shapes a
client relies on, not words) through benchmarks/launch_llama_cpp_server.py, which only adds the AMX workaround.
The front daemon learns it from ``localrun upstream add``; the official ollama, openai and anthropic
clients talk to the front, so the Ollama and Anthropic APIs are translated to ``/v1``, streaming included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx
import ollama
import openai
import pytest
from clirun import localrun
from ports import free_port
from servedaemon import Daemon

from localrun import config

pytest.importorskip("uvicorn", reason="needs llama-cpp-python[server]")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LAUNCHER = Path(__file__).parents[2] / "benchmarks" / "launch_llama_cpp_server.py"


@pytest.fixture
def front(tmp_path: Path, tiny_gguf: Path, isolated_env: Path) -> Iterator[str]:
    """The llama-cpp-python server as upstream ``llcpp`` (model ``tiny``) of a daemon at LOCALRUN_HOST."""
    port = free_port()
    log = (tmp_path / "llama_server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, str(LAUNCHER), "--model", str(tiny_gguf), "--model_alias", "tiny", "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "1024", "--n_threads", "1", "--n_threads_batch", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    daemon: Daemon | None = None
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            try:
                if httpx.get(url + "/v1/models", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail(f"llama_cpp.server did not start: {(tmp_path / 'llama_server.log').read_text()[-2000:]}")
        added = localrun("upstream", "add", "llcpp", url + "/v1")
        assert added.returncode == 0, added.stderr
        assert "llcpp/tiny" in added.stdout and "speaks openai" in added.stdout
        home = tmp_path / "front"
        home.mkdir()
        daemon = Daemon(home, config.host().port, {"LOCALRUN_MODELS": os.environ["LOCALRUN_MODELS"],
                                                   "XDG_CONFIG_HOME": os.environ["XDG_CONFIG_HOME"]})
        yield daemon.url
    finally:
        if daemon is not None:
            daemon.kill(signal.SIGTERM)
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)


def test_the_v1_only_server_is_listed_and_served_through_every_client(front: str) -> None:
    assert "llcpp/tiny" in localrun("list").stdout
    assert "llcpp/tiny" in [m["name"] for m in httpx.get(front + "/api/tags").json()["models"]]
    oai = openai.OpenAI(base_url=front + "/v1", api_key="unused", max_retries=0)
    assert "llcpp/tiny" in [m.id for m in oai.models.list()]
    out = oai.chat.completions.create(model="llcpp/tiny", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert out.model == "llcpp/tiny" and out.choices[0].finish_reason in ("stop", "length")
    assert out.usage is not None and 0 < out.usage.completion_tokens <= 8

    oll = ollama.Client(host=front, timeout=60)
    chunks = list(oll.chat(model="llcpp/tiny", stream=True, options={"num_predict": 8},
                           messages=[{"role": "user", "content": "hi"}]))
    assert chunks[-1].done and chunks[-1].done_reason in ("stop", "length")
    assert chunks[-1].eval_count and chunks[-1].eval_count <= 8
    generated = oll.generate(model="llcpp/tiny", prompt="Once upon", options={"num_predict": 6})
    assert generated.done and generated.done_reason in ("stop", "length")

    claude = anthropic.Anthropic(base_url=front, api_key="unused", max_retries=0)
    with claude.messages.stream(model="llcpp/tiny", max_tokens=8,
                                messages=[{"role": "user", "content": "hi"}]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason in ("end_turn", "max_tokens") and final.usage.output_tokens <= 8

    members = httpx.get(front + "/api/ps").json()["upstreams"]
    assert [(m["upstream"], m["state"]) for m in members] == [("llcpp", "healthy")]
    assert members[0]["requests"] >= 4 and members[0]["errors"] == 0
