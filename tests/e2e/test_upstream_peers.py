"""Two localrun daemons as peers behind a third, all real processes on 127.0.0.1.

The peers run the fake engine (``SAY:`` prompts answer a scripted line, ``SLOW`` ones stream a
token every 20 ms) with one sequence slot each, so a second request waits in a peer before its
first byte. The front daemon learns its upstreams from ``localrun upstream add``; the user's
CLI, the official ollama / openai / anthropic clients and raw HTTP streams talk to it. The
llama-cpp-python server as a ``/v1``-only upstream is in test_upstream_llama_server.py.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
from clirun import localrun
from servedaemon import Daemon, free_port

from localrun import config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FAKES = Path(__file__).parents[1] / "integration" / "server"
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}]


def _peer(tmp: Path, tiny_gguf: Path) -> Daemon:
    from localrun.store import ModelStore

    models = tmp / "models"
    ModelStore(models).create("tiny", f"FROM {tiny_gguf}\n")
    return Daemon(tmp, free_port(), {
        "LOCALRUN_MODELS": str(models), "LOCALRUN_NUM_PARALLEL": "1", "XDG_CONFIG_HOME": str(tmp / "config"),
        "LOCALRUN_RUNNER_FACTORY": "fake_engine:FakeEngine",
        "PYTHONPATH": os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]),
    })


@pytest.fixture
def cluster(tmp_path: Path, tiny_gguf: Path, isolated_env: Path) -> Iterator[tuple[Daemon, Daemon, Daemon]]:
    """Peers A and B, and the front daemon at this test's LOCALRUN_HOST with both as upstream ``peers``."""
    started: list[Daemon] = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            started.append(_peer(tmp_path / name, tiny_gguf))
        for peer in started:
            out = localrun("upstream", "add", "peers", peer.url)
            assert out.returncode == 0, out.stderr
            assert "peers/tiny:latest" in out.stdout
        front_home = tmp_path / "front"
        front_home.mkdir()
        front = Daemon(front_home, config.host().port, {
            "LOCALRUN_MODELS": os.environ["LOCALRUN_MODELS"], "XDG_CONFIG_HOME": os.environ["XDG_CONFIG_HOME"]})
        started.append(front)
        yield started[0], started[1], front
    finally:
        for d in started:
            d.kill(signal.SIGTERM)


def test_the_cli_lists_runs_and_shows_the_pool(cluster: tuple[Daemon, Daemon, Daemon]) -> None:
    listed = localrun("list")
    assert "peers/tiny:latest" in listed.stdout and "upstream: http://127.0.0.1" in listed.stdout
    answer = localrun("run", "peers/tiny", "SAY:bonjour tout le monde")
    assert answer.returncode == 0, answer.stderr
    assert "bonjour tout le monde" in answer.stdout
    ps = localrun("ps")
    assert ps.returncode == 0
    assert ps.stdout.count("peers ") == 2 and "healthy" in ps.stdout
    assert "UPSTREAM" in ps.stdout and "IN FLIGHT" in ps.stdout
    shown = httpx.post(cluster[2].url + "/api/show", json={"model": "peers/tiny"}).json()
    assert shown["upstream"] == "peers" and len(shown["upstream_hosts"]) == 2


def test_official_clients_through_the_front(cluster: tuple[Daemon, Daemon, Daemon]) -> None:
    url = cluster[2].url
    oll = ollama.Client(host=url, timeout=60)
    reply = oll.chat(model="peers/tiny", messages=[{"role": "user", "content": f"SAY:{CALL}"}], tools=TOOLS)
    assert reply.message.tool_calls and reply.message.tool_calls[0].function.arguments == {"city": "Paris"}
    streamed = "".join(c.message.content for c in oll.chat(model="peers/tiny", stream=True,
                                                           messages=[{"role": "user", "content": "SAY:hi there"}]))
    assert streamed == "hi there"
    oai = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    out = oai.chat.completions.create(model="peers/tiny", tools=TOOLS,  # type: ignore[arg-type]
                                      messages=[{"role": "user", "content": f"SAY:{CALL}"}])
    call = out.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert out.choices[0].finish_reason == "tool_calls" and json.loads(call.function.arguments) == {"city": "Paris"}
    claude = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
    msg = claude.messages.create(model="peers/tiny", max_tokens=50,
                                 messages=[{"role": "user", "content": "SAY:from the peers"}])
    assert msg.content[0].text == "from the peers"  # type: ignore[union-attr]


def _stream(url: str, i: int) -> dict[str, Any]:
    """One streamed /api/chat; what the client saw: content pieces, an error line, the done line."""
    seen: dict[str, Any] = {"content": "", "error": None, "done": False}
    body = {"model": "peers/tiny", "messages": [{"role": "user", "content": f"SLOW request {i}"}],
            "options": {"num_predict": 40}}
    with httpx.stream("POST", url + "/api/chat", json=body, timeout=120) as resp:
        if resp.status_code != 200:
            seen["error"] = f"HTTP {resp.status_code}: {resp.read().decode()}"
            return seen
        for line in resp.iter_lines():
            chunk = json.loads(line)
            if "error" in chunk:
                seen["error"] = chunk["error"]
            elif chunk.get("done"):
                seen["done"] = True
            else:
                seen["content"] += chunk["message"]["content"]
    return seen


def test_killing_a_member_loses_no_request_that_had_not_started_streaming(
        cluster: tuple[Daemon, Daemon, Daemon]) -> None:
    a, b, front = cluster
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(_stream, front.url, i) for i in range(6)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # each peer streams one request and holds two before their first byte
            members = httpx.get(front.url + "/api/ps").json()["upstreams"]
            if sorted(m["in_flight"] for m in members) == [3, 3]:
                break
            time.sleep(0.05)
        time.sleep(0.3)
        b.kill()
        results = [f.result() for f in futures]
    print("results:", [(bool(r["content"]), r["done"], (r["error"] or "")[:60]) for r in results])
    failed = [r for r in results if not r["done"]]
    for r in failed:  # a request lost with the member had streamed part of its answer already
        assert r["content"], r
        assert "failed mid-reply" in r["error"]
    assert len(failed) <= 1
    assert sum(r["done"] for r in results) >= 5
    members = {m["url"]: m for m in httpx.get(front.url + "/api/ps").json()["upstreams"]}
    assert members[b.url]["errors"] >= 1 and members[b.url]["state"] == "cooling"
    assert members[a.url]["requests"] >= 5  # the two waiting in B moved to A
    after = _stream(front.url, 99)  # new requests go to the living member
    assert after["done"] and after["error"] is None
    metrics = httpx.get(front.url + "/metrics").text
    assert f'localrun_upstream_healthy{{member="{b.url}",upstream="peers"}} 0.0' in metrics
