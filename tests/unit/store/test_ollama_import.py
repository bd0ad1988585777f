"""import-ollama adopts a fake Ollama store the test builds: names, layers, hard links, no copies."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from localrun.errors import NotFound
from localrun.store import ImportStatus, ModelStore, import_ollama
from localrun.store import manifest as mt


def _blob(root: Path, data: bytes) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / digest.replace(":", "-")).write_bytes(data)
    return {"digest": digest, "size": len(data)}


def make_ollama_store(root: Path, weights: bytes) -> None:
    """An Ollama store with gemma-ish model 'tiny:1b', an hf.co model sharing its weights, and junk."""
    w = _blob(root, weights)
    layers = [
        {"mediaType": mt.MODEL, **w},
        {"mediaType": mt.TEMPLATE, **_blob(root, b"{{ .Prompt }}")},
        {"mediaType": mt.SYSTEM, **_blob(root, b"You are an imported model.")},
        {"mediaType": mt.PARAMS, **_blob(root, json.dumps({"stop": ["<end>"], "temperature": 0.3,
                                                             "mirostat_eta": 0.1}).encode())},
    ]
    config = {"mediaType": mt.CONFIG_MEDIA_TYPE, **_blob(root, b'{"model_format":"gguf","model_family":"llama"}')}
    manifest = {"schemaVersion": 2, "mediaType": mt.MANIFEST_MEDIA_TYPE, "config": config, "layers": layers}
    path = root / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "1b"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest))
    hf = root / "manifests" / "hf.co" / "someone" / "tiny-GGUF" / "Q4_K_M"
    hf.parent.mkdir(parents=True)
    hf.write_text(json.dumps({**manifest, "layers": layers[:1]}))
    bad = root / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    missing = root / "manifests" / "registry.ollama.ai" / "library" / "gone" / "latest"
    missing.parent.mkdir(parents=True)
    missing.write_text(json.dumps({**manifest, "layers": [{"mediaType": mt.MODEL, "digest": "sha256:" + "0" * 64,
                                                           "size": 1}]}))


def test_import_keeps_names_and_layers_by_hard_link(tmp_path: Path, tiny_gguf: Path) -> None:
    src = tmp_path / "ollama"
    make_ollama_store(src, tiny_gguf.read_bytes())
    store = ModelStore(tmp_path / "models")
    results = {r.name: r for r in import_ollama(store, src)}
    assert results["tiny:1b"].status is ImportStatus.IMPORTED
    assert results["hf.co/someone/tiny-GGUF:Q4_K_M"].status is ImportStatus.IMPORTED
    assert results["gone:latest"].status is ImportStatus.SKIPPED and "missing" in results["gone:latest"].detail
    assert any(r.status is ImportStatus.SKIPPED and "JSON" in r.detail for r in results.values())

    r = store.resolve("tiny:1b")
    assert r.template == "{{ .Prompt }}" and r.system == "You are an imported model."
    assert r.parameters["stop"] == ["<end>"] and r.parameters["temperature"] == 0.3
    src_weights = next(p for p in (src / "blobs").iterdir() if p.stat().st_size == tiny_gguf.stat().st_size)
    assert r.model_path.stat().st_ino == src_weights.stat().st_ino  # a hard link, not a copy
    assert "PARAMETER temperature 0.3" in store.show("tiny:1b").modelfile

    again = {r.name: r.status for r in import_ollama(store, src)}
    assert again["tiny:1b"] is ImportStatus.UNCHANGED


def test_name_conflict_is_skipped_unless_forced(tmp_path: Path, tiny_gguf: Path) -> None:
    src = tmp_path / "ollama"
    make_ollama_store(src, tiny_gguf.read_bytes())
    store = ModelStore(tmp_path / "models")
    store.create("tiny:1b", f"FROM {tiny_gguf}\nSYSTEM mine\n")
    results = {r.name: r.status for r in import_ollama(store, src)}
    assert results["tiny:1b"] is ImportStatus.SKIPPED
    assert store.resolve("tiny:1b").system == "mine"
    import_ollama(store, src, force=True)
    assert store.resolve("tiny:1b").system == "You are an imported model."


def test_ollama_models_env_and_missing_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_gguf: Path) -> None:
    store = ModelStore(tmp_path / "models")
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "nowhere"))
    with pytest.raises(NotFound, match="no Ollama models found"):
        import_ollama(store)
    make_ollama_store(tmp_path / "elsewhere", tiny_gguf.read_bytes())
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "elsewhere"))
    assert any(r.name == "tiny:1b" for r in import_ollama(store))
