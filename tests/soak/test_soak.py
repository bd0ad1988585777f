"""A bounded soak of a real daemon on loopback: 32 clients, mixed traffic, two models, nothing lost.

``LOCALRUN_SOAK_SECONDS`` sets how long the clients run (default 100, plus ~30 s to drain the queue
and warm up: CI runs the default and stays under 2.5 minutes). Each client loops over a random mix of: Ollama chat and
generate (streamed or not), OpenAI chat completions (streamed), embeddings on both APIs, a stream
cancelled after its first chunks, a request with ``keep_alive: 0`` (unload right after), each on
one of two tiny models, so the daemon keeps loading, switching and unloading models
(``LOCALRUN_MAX_LOADED_MODELS=1``) while a small queue (``LOCALRUN_MAX_QUEUE``) overflows now and then.

Every request must end in one of: a complete answer (final chunk / ``[DONE]``), an error the
client can read (a JSON error, or an error line/event in the stream), a documented 503 with
Retry-After, or a cancel we asked for. Anything else (a 5xx other than 503, a connection dropped
without a message, a stream that stops without its final chunk, a timeout) counts as lost, and
nothing may be lost. Afterwards the models are unloaded: their runner processes must be gone, the
daemon's RSS back near its warmed-up baseline and its open file descriptors no more than before.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from hardening_helpers import LiveDaemon, add_model, engine_kind, record_figures, runners_of, template_workers_of

SOAK_SECONDS = float(os.environ.get("LOCALRUN_SOAK_SECONDS", "100"))
CLIENTS = int(os.environ.get("LOCALRUN_SOAK_CLIENTS", "32"))
MODELS = ("tiny", "tiny-b")
REQUEST_TIMEOUT = 90.0
RSS_TOLERANCE = 64 * 1024 * 1024  # bytes the daemon may keep above its warmed-up baseline (allocator slack)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(SOAK_SECONDS) + 150)]


@pytest.fixture
def daemon(tmp_path: Path, tiny_gguf: Path, tiny_gguf_b: Path) -> Iterator[LiveDaemon]:
    models = tmp_path / "models"
    add_model(models, "tiny", tiny_gguf, "PARAMETER num_predict 24\n")
    add_model(models, "tiny-b", tiny_gguf_b, "PARAMETER num_predict 24\n")
    live = LiveDaemon(models, tmp_path / "daemon.log", env={
        "LOCALRUN_MAX_LOADED_MODELS": "1", "LOCALRUN_NUM_PARALLEL": "4", "LOCALRUN_MAX_QUEUE": "26",
        "LOCALRUN_KEEP_ALIVE": "30s",
    })
    live.start()
    yield live
    live.stop()


class Outcomes:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()
        self.lost: list[str] = []

    def lose(self, what: str) -> None:
        self.counts["lost"] += 1
        self.lost.append(what)


def _error_message(body: Any) -> str | None:
    if isinstance(body, dict) and "error" in body:
        error = body["error"]
        message = error.get("message") if isinstance(error, dict) else error
        return message if isinstance(message, str) and message else None
    return None


async def _plain(client: httpx.AsyncClient, out: Outcomes, kind: str, url: str, body: dict[str, Any]) -> None:
    r = await client.post(url, json=body)
    if r.status_code == 200:
        data = r.json()
        ok = data.get("done") is True or "choices" in data or "embeddings" in data or "data" in data
        out.counts["ok" if ok else "lost"] += 1
        if not ok:
            out.lost.append(f"{kind}: 200 without a result: {r.text[:200]}")
        return
    _judge_error(out, kind, r.status_code, r.headers, r.content)


def _judge_error(out: Outcomes, kind: str, status: int, headers: Any, content: bytes) -> None:
    try:
        message = _error_message(json.loads(content))
    except ValueError:
        message = None
    if status == 503 and message and headers.get("Retry-After"):
        out.counts["busy_503"] += 1
    elif 400 <= status < 500 and message:
        out.counts["error_4xx"] += 1
    elif status == 502 and message:  # a runner died: documented, but should not happen here
        out.lose(f"{kind}: 502 {message}")
    else:
        out.lose(f"{kind}: {status} {content[:200]!r}")


async def _stream(client: httpx.AsyncClient, out: Outcomes, kind: str, url: str, body: dict[str, Any],
                  cancel_after: int | None = None) -> None:
    sse = url.startswith("/v1")
    async with client.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            _judge_error(out, kind, r.status_code, r.headers, await r.aread())
            return
        lines = 0
        last = ""
        async for line in r.aiter_lines():
            if not line.strip():
                continue
            lines += 1
            last = line
            if cancel_after is not None and lines >= cancel_after:
                out.counts["cancelled"] += 1
                return  # leaving the block closes the connection mid-stream
    if sse:
        if last == "data: [DONE]":
            out.counts["ok"] += 1
        else:
            out.lose(f"{kind}: SSE stream ended without [DONE]: {last[:200]}")
        return
    final = json.loads(last) if last else {}
    if final.get("done") is True:
        out.counts["ok"] += 1
    elif _error_message(final):
        out.counts["error_in_stream"] += 1
    else:
        out.lose(f"{kind}: NDJSON stream ended without a final chunk: {last[:200]}")


async def _one(client: httpx.AsyncClient, out: Outcomes, rng: random.Random) -> None:
    model = rng.choice(MODELS)
    words = " ".join(rng.choice(["hello", "world", "model", "cache", "token", "local", "run"]) for _ in range(
        rng.randint(2, 40)))
    msgs = [{"role": "user", "content": words}]
    kind = rng.choices(["chat", "generate", "openai_stream", "embed", "openai_embed", "cancel", "keep_alive_0"],
                       weights=[4, 3, 3, 2, 1, 2, 1])[0]
    out.kinds[kind] += 1
    n = rng.randint(4, 24)
    if kind == "chat":
        body = {"model": model, "messages": msgs, "options": {"num_predict": n}, "stream": rng.random() < 0.5}
        if body["stream"]:
            await _stream(client, out, kind, "/api/chat", body)
        else:
            await _plain(client, out, kind, "/api/chat", body)
    elif kind == "generate":
        body = {"model": model, "prompt": words, "options": {"num_predict": n}, "stream": rng.random() < 0.5}
        if body["stream"]:
            await _stream(client, out, kind, "/api/generate", body)
        else:
            await _plain(client, out, kind, "/api/generate", body)
    elif kind == "openai_stream":
        await _stream(client, out, kind, "/v1/chat/completions",
                      {"model": model, "messages": msgs, "max_tokens": n, "stream": True,
                       "stream_options": {"include_usage": True}})
    elif kind == "embed":
        await _plain(client, out, kind, "/api/embed", {"model": model, "input": [words, words[::-1]]})
    elif kind == "openai_embed":
        await _plain(client, out, kind, "/v1/embeddings", {"model": model, "input": words})
    elif kind == "cancel":
        await _stream(client, out, kind, "/api/generate",
                      {"model": model, "prompt": words, "options": {"num_predict": 2000}}, cancel_after=2)
    else:
        await _plain(client, out, kind, "/api/generate",
                     {"model": model, "prompt": words, "stream": False, "keep_alive": 0,
                      "options": {"num_predict": n}})


async def _client(url: str, out: Outcomes, seed: int, until: float) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT) as client:
        while time.monotonic() < until:
            busy = out.counts["busy_503"]
            try:
                await _one(client, out, rng)
            except httpx.HTTPError as exc:
                out.lose(f"{type(exc).__name__}: {exc}")
            if out.counts["busy_503"] > busy:  # as a polite client does with Retry-After (about 1 s)
                await asyncio.sleep(rng.uniform(0.5, 1.5))


def _unload_all(daemon: LiveDaemon) -> None:
    for model in MODELS:
        r = httpx.post(daemon.url + "/api/generate", json={"model": model, "keep_alive": 0}, timeout=60)
        assert r.status_code == 200, r.text


def _wait_unloaded(daemon: LiveDaemon, timeout: float = 30.0) -> None:
    assert daemon.proc is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        loaded = httpx.get(daemon.url + "/api/ps", timeout=10).json()["models"]
        if not loaded and not runners_of(daemon.proc.pid):
            return
        time.sleep(0.2)
    raise AssertionError(f"models still loaded or runner processes alive: {runners_of(daemon.proc.pid)}")


@pytest.mark.allow_5xx(reason="503 busy: 32 clients overfill the queue on purpose (the test fails any other 5xx)")
def test_soak_mixed_traffic_loses_nothing_and_leaks_nothing(daemon: LiveDaemon) -> None:
    assert daemon.proc is not None
    proc = psutil.Process(daemon.proc.pid)
    # Warm up (imports, first loads of both models), unload, then take the baseline.
    for model in MODELS:
        r = httpx.post(daemon.url + "/api/chat", timeout=120, json={
            "model": model, "messages": [{"role": "user", "content": "warm up"}], "stream": False})
        assert r.status_code == 200, r.text
        httpx.post(daemon.url + "/api/embed", json={"model": model, "input": "warm up"}, timeout=60)
    _unload_all(daemon)
    _wait_unloaded(daemon)
    rss_before, fds_before = proc.memory_info().rss, proc.num_fds()
    workers_before = len(template_workers_of(daemon.proc.pid))

    out = Outcomes()
    started = time.monotonic()

    async def main() -> None:
        until = time.monotonic() + SOAK_SECONDS
        await asyncio.gather(*(_client(daemon.url, out, seed, until) for seed in range(CLIENTS)))

    asyncio.run(main())
    elapsed = time.monotonic() - started
    assert daemon.proc.poll() is None, "the daemon died during the soak"
    assert httpx.get(daemon.url + "/health", timeout=10).status_code == 200

    _unload_all(daemon)
    _wait_unloaded(daemon)
    time.sleep(1.0)  # let aiohttp close the last keep-alive sockets
    rss_after, fds_after = proc.memory_info().rss, proc.num_fds()
    workers_after = len(template_workers_of(daemon.proc.pid))
    total = sum(out.counts.values())
    record_figures("soak", engine=engine_kind(), seconds=round(elapsed, 1), clients=CLIENTS, requests=total,
                   outcomes=dict(out.counts), kinds=dict(out.kinds), lost=out.counts["lost"],
                   rss_before_mb=round(rss_before / 2**20, 1), rss_after_mb=round(rss_after / 2**20, 1),
                   fds_before=fds_before, fds_after=fds_after)
    assert not out.lost, f"{len(out.lost)} of {total} requests lost: {out.lost[:10]}"
    assert out.counts["ok"] >= CLIENTS, out.counts  # work got done, not only 503s
    assert rss_after <= rss_before + RSS_TOLERANCE, f"daemon RSS {rss_before} -> {rss_after} bytes"
    # The template pool may have grown to its bound during the burst (2 pipes per worker); every
    # other descriptor must be back.
    assert workers_after <= max(4, workers_before), f"template workers {workers_before} -> {workers_after}"
    extra_pipes = 2 * (workers_after - workers_before)
    assert fds_after <= fds_before + extra_pipes, (
        f"file descriptors {fds_before} -> {fds_after} ({extra_pipes} template pipes)")
    log = daemon.log_text()
    assert "Traceback" not in log, log[log.index("Traceback") - 500:][:4000]
