"""Residency, isolation, queueing and disconnects through the real app and real runner processes.

The runners host a fake engine here so timing is under test control (a SLOW prompt streams a
token every 20 ms until cancelled); the real-engine paths are in test_daemon_api.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from daemon_helpers import DictStore

from localrun.hardware.memory import MAX_AUTO_SLOTS
from localrun.server.keys import SCHEDULER, SETTINGS

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def store(tiny_gguf: Path, tiny_gguf_b: Path) -> DictStore:
    return DictStore({"a": tiny_gguf, "b": tiny_gguf_b})


async def ps(client: Any) -> dict[str, dict[str, Any]]:
    r = await client.get("/api/ps")
    assert r.status == 200
    return {m["name"]: m for m in (await r.json())["models"]}


async def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached")


async def first_line(response: Any) -> dict[str, Any]:
    return json.loads(await response.content.readline())


async def test_a_crashed_runner_fails_only_its_requests_and_the_next_request_reloads(
    serve_app: Any, store: DictStore, fake_runners: Any
) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    r = await client.post("/api/generate", json={"model": "b", "prompt": "hi", "stream": False})
    assert r.status == 200
    stream = await client.post("/api/generate", json={"model": "a", "prompt": "SLOW please"})
    assert (await first_line(stream))["done"] is False
    old_pid = (await ps(client))["a:latest"]["pid"]
    await client.app[SCHEDULER].models["a:latest"].backend.debug_abort()  # a native crash (SIGABRT)
    lines = [json.loads(line) for line in (await stream.text()).splitlines() if line.strip()]
    assert "error" in lines[-1] and "runner" in lines[-1]["error"] and "SIGABRT" in lines[-1]["error"]
    assert (await client.get("/health")).status == 200
    assert "a:latest" not in await ps(client)
    r = await client.post("/api/generate", json={"model": "b", "prompt": "still here", "stream": False})
    assert r.status == 200 and (await r.json())["eval_count"] == 5
    r = await client.post("/api/generate", json={"model": "a", "prompt": "again", "stream": False})
    assert r.status == 200
    assert (await ps(client))["a:latest"]["pid"] != old_pid


async def test_a_request_that_finds_its_runner_just_died_goes_to_a_new_runner(
    serve_app: Any, store: DictStore, fake_runners: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner dies (SIGKILL) just before the request reaches it, before the daemon noticed: the
    request never ran, so it is answered by a new runner instead of a 502."""
    client = await serve_app(store, load_fn=fake_runners)
    r = await client.post("/api/generate", json={"model": "a", "prompt": "hi", "stream": False})
    assert r.status == 200
    backend = client.app[SCHEDULER].models["a:latest"].backend
    send = backend._send

    async def die_first(message: Any) -> None:
        os.kill(backend.pid, signal.SIGKILL)
        await backend.exited  # gone before anything is written to it
        await send(message)

    monkeypatch.setattr(backend, "_send", die_first)
    r = await client.post("/api/generate", json={"model": "a", "prompt": "hi again", "stream": False})
    assert r.status == 200, await r.text()
    assert (await ps(client))["a:latest"]["pid"] != backend.pid


@pytest.mark.allow_5xx(reason="a 502: the runner is killed on purpose")
async def test_a_killed_runner_gives_a_clear_error_to_a_waiting_non_streaming_request(
    serve_app: Any, store: DictStore, fake_runners: Any
) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    task = asyncio.create_task(client.post("/api/generate", json={
        "model": "a", "prompt": "SLOW", "stream": False}))
    await wait_for(lambda: _active(client, "a:latest", 1))
    os.kill((await ps(client))["a:latest"]["pid"], signal.SIGKILL)
    r = await task
    assert r.status == 502
    body = await r.json()
    assert "SIGKILL" in body["error"] and "next request loads it again" in body["error"]


async def _active(client: Any, name: str, n: int) -> bool:
    models = await ps(client)
    return name in models and models[name]["active"] == n


@pytest.mark.allow_5xx(reason="503s: the queue is filled past its bound on purpose")
async def test_past_the_queue_bound_requests_get_503_with_retry_after(
    serve_app: Any, store: DictStore, fake_runners: Any
) -> None:
    client = await serve_app(store, load_fn=fake_runners, max_queue=1, num_parallel=1)
    first = await client.post("/api/generate", json={"model": "a", "prompt": "SLOW one"})
    await first_line(first)
    second = asyncio.create_task(client.post("/api/generate", json={"model": "a", "prompt": "SLOW two"}))

    async def queued() -> bool:
        models = await ps(client)
        return models["a:latest"]["queued"] == 1

    await wait_for(queued)
    r = await client.post("/api/generate", json={"model": "a", "prompt": "three"})
    assert r.status == 503 and int(r.headers["Retry-After"]) >= 1
    assert "busy" in (await r.json())["error"]
    r = await client.post("/v1/chat/completions", json={"model": "a", "messages": [{"role": "user", "content": "x"}]})
    assert r.status == 503 and (await r.json())["error"]["code"] == "server_busy"
    first.close()
    second_response = await second
    assert (await first_line(second_response))["done"] is False
    second_response.close()


async def test_a_client_that_disconnects_frees_its_slot(serve_app: Any, store: DictStore, fake_runners: Any) -> None:
    client = await serve_app(store, load_fn=fake_runners, num_parallel=1)
    stream = await client.post("/api/generate", json={"model": "a", "prompt": "SLOW forever"})
    await first_line(stream)
    stream.close()  # the client goes away mid-stream

    async def slot_free() -> bool:
        r = await client.get("/metrics")
        text = await r.text()
        return 'localrun_kv_cache_used_cells{model="a:latest"} 0.0' in text

    await wait_for(slot_free)
    # The only slot serves the next request at once.
    r = await client.post("/api/generate", json={"model": "a", "prompt": "next", "stream": False})
    assert r.status == 200 and (await r.json())["done_reason"] == "length"


async def test_a_non_streaming_client_that_disconnects_frees_its_slot(
    serve_app: Any, store: DictStore, fake_runners: Any
) -> None:
    client = await serve_app(store, load_fn=fake_runners, num_parallel=1)
    task = asyncio.create_task(client.post("/v1/chat/completions", json={
        "model": "a", "messages": [{"role": "user", "content": "SLOW"}]}))
    await wait_for(lambda: _active(client, "a:latest", 1))
    task.cancel()
    await wait_for(lambda: _active(client, "a:latest", 0))
    r = await client.post("/api/generate", json={"model": "a", "prompt": "next", "stream": False})
    assert r.status == 200


async def test_empty_prompt_loads_and_keep_alive_zero_unloads(
    serve_app: Any, store: DictStore, fake_runners: Any
) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    r = await client.post("/api/generate", json={"model": "a"})
    assert (await r.json())["done_reason"] == "load"
    pid = (await ps(client))["a:latest"]["pid"]
    r = await client.post("/api/chat", json={"model": "a", "messages": [], "keep_alive": 0})
    assert (await r.json())["done_reason"] == "unload"
    assert "a:latest" not in await ps(client)

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    await wait_for(lambda: asyncio.sleep(0, gone()))  # unloading ended the runner process


async def test_keep_alive_per_request_sets_expiry_and_zero_unloads_after_the_request(
    serve_app: Any, store: DictStore, fake_runners: Any
) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    r = await client.post("/api/generate", json={"model": "a", "prompt": "x", "stream": False, "keep_alive": "1h"})
    assert r.status == 200
    entry = (await ps(client))["a:latest"]
    assert entry["expires_at"] > "2000" and entry["processor"] == "100% CPU"
    r = await client.post("/api/generate", json={"model": "a", "prompt": "x", "stream": False, "keep_alive": -1})
    assert (await ps(client))["a:latest"]["expires_at"].startswith("2318")
    r = await client.post("/api/generate", json={"model": "a", "prompt": "x", "stream": False, "keep_alive": 0})
    assert r.status == 200
    await wait_for(lambda: _gone(client, "a:latest"))
    r = await client.post("/api/generate", json={"model": "a", "prompt": "x", "keep_alive": "soon"})
    assert r.status == 400 and "keep_alive" in (await r.json())["error"]


async def _gone(client: Any, name: str) -> bool:
    return name not in await ps(client)


async def test_max_loaded_models_evicts_the_idle_one(serve_app: Any, store: DictStore, fake_runners: Any) -> None:
    client = await serve_app(store, load_fn=fake_runners, max_loaded_models=1)
    for model in ("a", "b"):
        r = await client.post("/api/generate", json={"model": model, "prompt": "x", "stream": False})
        assert r.status == 200
    assert list(await ps(client)) == ["b:latest"]


async def test_other_load_options_reload_visibly(serve_app: Any, store: DictStore, fake_runners: Any) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    await client.post("/api/generate", json={"model": "a", "prompt": "x", "stream": False,
                                             "options": {"num_ctx": 512}})
    assert (await ps(client))["a:latest"]["context_length"] == 512
    r = await client.post("/v1/chat/completions", json={
        "model": "a", "messages": [{"role": "user", "content": "x"}], "num_ctx": 1024})
    assert r.status == 200
    entry = (await ps(client))["a:latest"]
    assert entry["context_length"] == 1024 and "num_ctx 512 -> 1024" in entry["load_reason"]


async def test_metrics_count_requests_tokens_and_loaded_models(
    serve_app: Any, store: DictStore, fake_runners: Any
) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    await client.post("/api/generate", json={"model": "a", "prompt": "x y", "stream": False})
    await client.post("/api/generate", json={"model": "nope", "prompt": "x"})
    text = await (await client.get("/metrics")).text()
    assert 'localrun_requests_total{endpoint="/api/generate",status="200"} 1.0' in text
    assert 'localrun_requests_total{endpoint="/api/generate",status="404"} 1.0' in text
    assert 'localrun_generated_tokens_total{model="a:latest"} 5.0' in text
    assert "localrun_loaded_models 1.0" in text
    assert 'localrun_time_to_first_token_seconds_count{model="a:latest"} 1.0' in text
    assert 'localrun_model_memory_bytes{kind="ram",model="a:latest"}' in text
    assert 'localrun_prefix_cache_host_bytes{model="a:latest"} 0.0' in text


async def test_many_concurrent_requests_with_cancellations_leak_no_slots(
    serve_app: Any, store: DictStore, fake_runners: Any
) -> None:
    client = await serve_app(store, load_fn=fake_runners, num_parallel=2, max_queue=100)

    async def one(i: int) -> None:
        body: dict[str, Any] = {"model": "a", "prompt": "SLOW" if i % 3 == 0 else "quick", "stream": i % 2 == 0,
                                "options": {"num_predict": 3 + i % 5}}
        path = "/api/generate" if i % 4 else "/v1/completions"
        if path == "/v1/completions":
            body = {"model": "a", "prompt": body["prompt"], "max_tokens": 3 + i % 5, "stream": i % 2 == 0}
        r = await client.post(path, json=body)
        assert r.status == 200
        await r.read()

    tasks = [asyncio.create_task(one(i)) for i in range(24)]
    await asyncio.sleep(0.3)
    for t in tasks[::5]:
        t.cancel()  # clients that give up, some while queued, some mid-stream
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(r is None or isinstance(r, asyncio.CancelledError) for r in results), results

    async def idle() -> bool:
        entry = (await ps(client))["a:latest"]
        return entry["active"] == 0 and entry["queued"] == 0

    await wait_for(idle)
    assert client.app[SCHEDULER].models["a:latest"].refcount == 0
    r = await client.post("/api/generate", json={"model": "a", "prompt": "after", "stream": False})
    assert r.status == 200


async def test_slots_are_sized_from_memory_and_shown_in_ps(serve_app: Any, store: DictStore) -> None:
    client = await serve_app(store)  # no LOCALRUN_NUM_PARALLEL
    r = await client.post("/api/generate", json={"model": "a", "prompt": "hi", "stream": False,
                                                 "options": {"num_predict": 2}})
    assert r.status == 200
    model = (await ps(client))["a:latest"]
    # the tiny model's KV cache takes a few KB per token: the most slots fit in this machine's free memory
    assert model["num_parallel"] == MAX_AUTO_SLOTS and model["active"] == 0


async def test_a_request_may_use_the_trained_context_by_default_and_ps_says_so(
        serve_app: Any, store: DictStore) -> None:
    """No fixed 4,096: the tiny model was trained on 2,048 tokens, and every request may use them
    all; the pool (the KV cache the running requests share) holds every slot at that size."""
    client = await serve_app(store)
    r = await client.post("/api/generate", json={"model": "a", "prompt": "hi", "stream": False,
                                                 "options": {"num_predict": 2}})
    assert r.status == 200
    model = (await ps(client))["a:latest"]
    assert model["context_length"] == 2048
    assert model["context_pool"] == MAX_AUTO_SLOTS * 2048


async def test_ps_says_how_many_threads_a_model_runs_on_and_num_thread_pins_them(
        serve_app: Any, store: DictStore) -> None:
    """The runner reports its thread counts (engine/threads.py): every usable core on a machine no
    other process loads much, or the count num_thread pins."""
    from localrun.engine.threads import usable_cores

    client = await serve_app(store)
    r = await client.post("/api/generate", json={"model": "a", "prompt": "hi", "stream": False,
                                                 "options": {"num_predict": 2}})
    assert r.status == 200
    threads = (await ps(client))["a:latest"]["threads"]
    assert threads["cores"] == len(usable_cores()) and not threads["pinned"]
    assert 1 <= threads["decode"] <= threads["cores"] and 1 <= threads["prefill"] <= threads["cores"]
    r = await client.post("/api/generate", json={"model": "b", "prompt": "hi", "stream": False,
                                                 "options": {"num_predict": 2, "num_thread": 1}})
    assert r.status == 200
    assert (await ps(client))["b:latest"]["threads"] == {"decode": 1, "prefill": 1, "cores": len(usable_cores()),
                                                         "pinned": True, "other_load": 0.0}
    metrics = await (await client.get("/metrics")).text()
    assert 'localrun_threads{kind="decode",model="b:latest"} 1.0' in metrics


async def test_num_ctx_above_the_trained_context_is_a_400_naming_both(serve_app: Any, store: DictStore) -> None:
    client = await serve_app(store)
    for path, extra in (("/api/generate", {"prompt": "hi"}), ("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}]})):
        r = await client.post(path, json={"model": "a", "stream": False, "options": {"num_ctx": 100000}, **extra})
        assert r.status == 400
        text = await r.text()
        assert "100000" in text and "2048" in text


async def test_localrun_context_length_sets_every_models_context(serve_app: Any, store: DictStore) -> None:
    client = await serve_app(store, context_length=512)
    r = await client.post("/api/generate", json={"model": "a", "prompt": "hi", "stream": False,
                                                 "options": {"num_predict": 2}})
    assert r.status == 200
    assert (await ps(client))["a:latest"]["context_length"] == 512
    big = await serve_app(store, context_length=1 << 20)  # above the trained context: that context, as Ollama
    await big.post("/api/generate", json={"model": "a", "prompt": "hi", "stream": False, "options": {"num_predict": 1}})
    assert (await ps(big))["a:latest"]["context_length"] == 2048


async def test_the_prefix_cache_survives_a_daemon_restart(serve_app: Any, store: DictStore) -> None:
    prompt = "The history of the printing press begins in " * 6
    body = {"model": "a", "prompt": prompt, "raw": True, "stream": False,
            "options": {"num_predict": 4, "temperature": 0}}
    first = await serve_app(store, num_parallel=2)
    r1 = await (await first.post("/api/generate", json=body)).json()
    assert r1["prompt_eval_cached_count"] == 0
    await first.close()  # unloads the model: its runner saves the prefix cache
    second = await serve_app(store, num_parallel=2)
    r2 = await (await second.post("/api/generate", json=body)).json()
    assert r2["prompt_eval_cached_count"] == r2["prompt_eval_count"] - 1
    assert r2["response"] == r1["response"]


async def test_a_runner_stopped_by_a_signal_still_saves_its_prefix_cache(serve_app: Any, store: DictStore) -> None:
    """`systemctl stop` signals the daemon's whole process group: the runner must not die mid-way."""
    client = await serve_app(store, num_parallel=2)
    body = {"model": "a", "prompt": "A signal arrives " * 8, "raw": True, "stream": False,
            "options": {"num_predict": 2}}
    assert (await client.post("/api/generate", json=body)).status == 200
    model = client.app[SCHEDULER].models["a:latest"]
    os.kill(model.backend.pid, signal.SIGTERM)
    assert "exit code 0" in await asyncio.wait_for(model.backend.exited, 30)
    saved = list(client.app[SETTINGS].prefix_cache_dir.glob("*.kvc"))
    assert len(saved) == 1 and saved[0].stat().st_size > 0


@pytest.mark.slow
async def test_fifty_long_requests_beyond_the_pool_all_queue_and_finish(serve_app: Any, store: DictStore) -> None:
    """50 concurrent prompts of ~1,500 tokens, a pool that holds two of them (the 20k-token agent case at
    the tiny model's scale): every one is answered whole, none is cut, refused, lost or a 5xx."""
    client = await serve_app(store, num_parallel=2)  # pool: 2 x the trained 2,048 tokens

    async def one(i: int) -> dict[str, Any]:
        words = " ".join(f"w{(i * 7 + k) % 97}" for k in range(700))
        r = await client.post("/v1/chat/completions", json={
            "model": "a", "messages": [{"role": "user", "content": words}], "max_tokens": 16, "temperature": 0})
        assert r.status == 200, await r.text()
        return dict(await r.json())

    replies = await asyncio.gather(*(one(i) for i in range(50)))
    assert all(r["usage"]["prompt_tokens"] > 1000 and "prompt_truncated_count" not in r["usage"] for r in replies)
    model = (await ps(client))["a:latest"]
    assert model["context_pool"] == 4096 and model["active"] == 0 and model["queued"] == 0
