"""Model management through the daemon with the real store: tags, show, create, blobs, copy, delete, pull."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from localrun.config import models_dir

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def store() -> Any:
    from localrun.store.model_store import ModelStore

    return ModelStore(models_dir())


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_create_from_a_modelfile_then_list_show_copy_delete(
    serve_app: Any, store: Any, fake_runners: Any, tiny_gguf: Path, tmp_path: Path
) -> None:
    client = await serve_app(store, load_fn=fake_runners)
    digest = "sha256:" + hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    assert (await client.post(f"/api/blobs/{digest}", data=tiny_gguf.read_bytes())).status == 201
    modelfile = f"FROM {digest}\nPARAMETER temperature 0.3\nPARAMETER stop <end>\nSYSTEM You are terse.\n"
    r = await client.post("/api/create", json={"model": "mine", "modelfile": modelfile})
    assert r.status == 200
    assert _lines(await r.text())[-1] == {"status": "success"}
    tags = (await (await client.get("/api/tags")).json())["models"]
    entry = next(m for m in tags if m["name"] == "mine:latest")
    assert entry["size"] > 0 and len(entry["digest"]) == 64 and entry["details"]["family"] == "llama"
    shown = await (await client.post("/api/show", json={"model": "mine"})).json()
    assert "temperature" in shown["parameters"] and shown["system"] == "You are terse."
    assert "FROM" in shown["modelfile"] and "completion" in shown["capabilities"]
    # what a request gets: the tiny model's whole trained context, in a pool every slot shares
    assert shown["defaults"]["num_ctx"] == 2048 and shown["defaults"]["context_pool"] >= 2048
    assert (await client.post("/api/copy", json={"source": "mine", "destination": "yours"})).status == 200
    models = (await (await client.get("/v1/models")).json())["data"]
    assert {"mine:latest", "yours:latest"} <= {m["id"] for m in models}
    mine = next(m for m in models if m["id"] == "mine:latest")
    assert mine["context_length"] == 2048 and mine["context_pool"] >= 2048  # what a request may hold
    assert (await client.get("/v1/models/yours:latest")).status == 200
    r = await client.post("/api/generate", json={"model": "yours", "prompt": "x", "stream": False})
    assert r.status == 200
    assert (await client.delete("/api/delete", json={"model": "yours"})).status == 200
    assert "yours:latest" not in {m["name"] for m in (await (await client.get("/api/ps")).json())["models"]}
    r = await client.delete("/api/delete", json={"model": "yours"})
    assert r.status == 404
    r = await client.post("/api/show", json={"model": "yours"})
    assert r.status == 404


async def test_anthropic_clients_get_anthropic_model_objects_and_pages(
    serve_app: Any, store: Any, fake_runners: Any, tiny_gguf: Path
) -> None:
    """GET /v1/models with ``anthropic-version`` (what Anthropic's SDKs send) answers in Anthropic's
    shape and pages as it does; without the header the same path stays OpenAI's."""
    client = await serve_app(store, load_fn=fake_runners)
    digest = "sha256:" + hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    assert (await client.post(f"/api/blobs/{digest}", data=tiny_gguf.read_bytes())).status == 201
    for name in ("a1", "a2", "a3"):
        r = await client.post("/api/create", json={"model": name, "modelfile": f"FROM {digest}"})
        assert r.status == 200 and _lines(await r.text())[-1] == {"status": "success"}
    anthropic = {"anthropic-version": "2023-06-01"}
    page = await (await client.get("/v1/models", headers=anthropic)).json()
    assert [m["id"] for m in page["data"]] == ["a3:latest", "a2:latest", "a1:latest"]  # newest first
    first = page["data"][0]
    assert first["type"] == "model" and first["display_name"] == "a3:latest"
    assert first["created_at"].endswith("Z") and first["max_input_tokens"] == 2048 and first["lifecycle"] == "active"
    assert page["has_more"] is False and (page["first_id"], page["last_id"]) == ("a3:latest", "a1:latest")
    page = await (await client.get("/v1/models?limit=2", headers=anthropic)).json()
    assert [m["id"] for m in page["data"]] == ["a3:latest", "a2:latest"] and page["has_more"] is True
    page = await (await client.get("/v1/models?limit=2&after_id=a2:latest", headers=anthropic)).json()
    assert [m["id"] for m in page["data"]] == ["a1:latest"] and page["has_more"] is False
    page = await (await client.get("/v1/models?limit=1&before_id=a1:latest", headers=anthropic)).json()
    assert [m["id"] for m in page["data"]] == ["a2:latest"] and page["has_more"] is True
    one = await (await client.get("/v1/models/a2", headers=anthropic)).json()
    assert one["type"] == "model" and one["id"] == "a2:latest" and "object" not in one
    for query in ("limit=0", "limit=1001", "limit=x", "after_id=nope", "after_id=a3:latest&before_id=a1:latest"):
        r = await client.get(f"/v1/models?{query}", headers=anthropic)
        assert r.status == 400, query
        assert (await r.json())["error"]["type"] == "invalid_request_error"
    r = await client.get("/v1/models/nope", headers=anthropic)
    assert r.status == 404 and (await r.json()) == {
        "type": "error", "error": {"type": "not_found_error", "message": (await r.json())["error"]["message"]}}
    r = await client.get("/v1/environments", headers=anthropic)  # an Anthropic route this server lacks
    assert r.status == 404 and (await r.json())["error"]["type"] == "not_found_error"
    openai = await (await client.get("/v1/models?limit=1")).json()  # OpenAI's list is never paged
    assert openai["object"] == "list" and len(openai["data"]) == 3 and openai["data"][0]["object"] == "model"


async def test_create_from_uploaded_blobs_as_the_ollama_client_does(
    serve_app: Any, store: Any, tiny_gguf: Path
) -> None:
    client = await serve_app(store)
    data = tiny_gguf.read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert (await client.head(f"/api/blobs/{digest}")).status == 404
    r = await client.post(f"/api/blobs/{digest}", data=b"not these bytes")
    assert r.status == 400 and "do not match" in (await r.json())["error"]
    assert (await client.head(f"/api/blobs/{digest}")).status == 404
    assert (await client.post(f"/api/blobs/{digest}", data=data)).status == 201
    assert (await client.head(f"/api/blobs/{digest}")).status == 200
    r = await client.post("/api/create", json={
        "model": "uploaded", "files": {"tiny.gguf": digest}, "parameters": {"num_ctx": 256, "stop": ["a", "b"]},
        "template": "{{ .Prompt }}", "stream": False})
    assert r.status == 200 and (await r.json()) == {"status": "success"}
    shown = await (await client.post("/api/show", json={"model": "uploaded"})).json()
    assert shown["template"] == "{{ .Prompt }}" and "num_ctx" in shown["parameters"]
    r = await client.post("/api/create", json={"model": "bad", "files": {"x.gguf": "sha256:" + "0" * 64}})
    assert r.status == 400 and "not in the store" in (await r.json())["error"]
    r = await client.head("/api/blobs/not-a-digest")
    assert r.status == 400


async def test_bad_creates_get_clear_errors_and_change_nothing(
    serve_app: Any, store: Any, tmp_path: Path
) -> None:
    client = await serve_app(store)
    r = await client.post("/api/create", json={"model": "x", "modelfile": "FROMM nothing\n", "stream": False})
    assert r.status == 400 and "line 1" in (await r.json())["error"]
    junk = b"not a gguf at all"
    digest = "sha256:" + hashlib.sha256(junk).hexdigest()
    assert (await client.post(f"/api/blobs/{digest}", data=junk)).status == 201
    r = await client.post("/api/create", json={"model": "x", "modelfile": f"FROM {digest}\n"})
    lines = _lines(await r.text()) if r.status == 200 else [await r.json()]
    assert lines[-1]["error"].startswith(f"FROM {digest} is not a GGUF file")
    assert (await (await client.get("/api/tags")).json())["models"] == []
    r = await client.post("/api/create", json={"model": "../evil", "modelfile": f"FROM {digest}\n"})
    assert r.status == 400


@pytest.mark.starter
@pytest.mark.slow
@pytest.mark.allow_5xx(reason="a 502: pulls hf.co/nobody/nothing, a hub that cannot be reached, on purpose")
async def test_pull_the_starter_streams_progress(serve_app: Any, store: Any, gemma_gguf: Path) -> None:
    client = await serve_app(store)
    r = await client.post("/api/pull", json={"model": "gemma3:270m"})
    lines = _lines(await r.text())
    assert lines[-1]["status"] == "success" and len(lines) > 1
    assert "gemma3:270m" in {m["name"] for m in (await (await client.get("/api/tags")).json())["models"]}
    r = await client.post("/api/pull", json={"model": "hf.co/nobody/nothing", "stream": False})
    assert r.status >= 400 and "error" in await r.json()


async def test_ps_lists_pulls_under_way_for_every_client(
    serve_app: Any, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull started by one client (the CLI, say) shows in /api/ps for another (the dashboard)."""
    import asyncio
    import importlib
    import threading

    from localrun.store.progress import Progress

    pull_module = importlib.import_module("localrun.store.pull")  # the package re-exports pull() over it

    halfway, finish = threading.Event(), threading.Event()

    def slow_pull(_store: Any, name: str, progress: Any = None) -> None:
        progress(Progress(status="pulling 0123456789ab", digest="sha256:0123", total=1000, completed=400))
        halfway.set()
        finish.wait(30)

    monkeypatch.setattr(pull_module, "pull", slow_pull)
    client = await serve_app(store)
    pulling = asyncio.ensure_future(client.post("/api/pull", json={"model": "hf.co/org/repo:Q4_K_M"}))
    await asyncio.to_thread(halfway.wait, 30)
    ps = await (await client.get("/api/ps")).json()
    assert ps["pulls"] == [{"model": "hf.co/org/repo:Q4_K_M", "status": "pulling 0123456789ab",
                            "completed": 400, "total": 1000}]
    finish.set()
    await (await pulling).text()
    assert (await (await client.get("/api/ps")).json())["pulls"] == []
