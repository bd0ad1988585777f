"""A vision model in the store (issue #28 point 1): the language model plus its projector (mmproj),
from a Modelfile's second FROM (Ollama's convention), an hf.co pull that brings the repo's mmproj
along, and an Ollama store's projector layer."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakehub import FakeHub
from tinyvision import write_tiny_vision

from localrun.errors import ModelfileError
from localrun.store import ModelStore, import_ollama, pull
from localrun.store import manifest as mt

REPO = "test-org/Tiny-VL-GGUF"


@pytest.fixture(scope="module")
def vision_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_tiny_vision(tmp_path_factory.mktemp("vision"))


def test_a_second_from_is_the_projector(store: ModelStore, vision_files: tuple[Path, Path], tmp_path: Path) -> None:
    model, mmproj = vision_files
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text(f"FROM {model}\nFROM {mmproj}\n")
    store.create("tiny-vl", modelfile.read_text(), base_dir=tmp_path)
    resolved = store.resolve("tiny-vl")
    assert resolved.projector_path is not None and resolved.projector_path.read_bytes() == mmproj.read_bytes()
    shown = store.show("tiny-vl").modelfile
    assert shown.count("\nFROM ") == 2  # show --modelfile prints both, and creating from it keeps the projector
    store.create("tiny-vl-copy", shown, base_dir=tmp_path)
    assert store.resolve("tiny-vl-copy").projector_path == resolved.projector_path
    store.create("tiny-vl-derived", "FROM tiny-vl\nSYSTEM be brief\n", base_dir=tmp_path)
    assert store.resolve("tiny-vl-derived").projector_path == resolved.projector_path  # inherited from FROM


def test_a_second_from_that_is_not_a_projector_is_refused(store: ModelStore, vision_files: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    model, _ = vision_files
    with pytest.raises(ModelfileError, match=r"must be a vision projector .* this one is 'llama'"):
        store.create("bad-vl", f"FROM {model}\nFROM {model}\n", base_dir=tmp_path)


@pytest.fixture
def hub(vision_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    model, mmproj = vision_files
    with FakeHub() as h:
        h.add_file(REPO, "tiny-vl-Q4_K_M.gguf", model.read_bytes())
        h.add_file(REPO, "mmproj-tiny-vl-F16.gguf", mmproj.read_bytes())
        h.add_file(REPO, "mmproj-tiny-vl-F32.gguf", b"not chosen: F16 comes first")
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


def test_pulling_an_hf_repo_brings_its_projector(store: ModelStore, hub: FakeHub,
                                                 vision_files: tuple[Path, Path]) -> None:
    entry = pull(store, f"hf.co/{REPO}")
    resolved = store.resolve(entry.name)
    assert resolved.model_path.read_bytes() == vision_files[0].read_bytes()
    assert resolved.projector_path is not None and resolved.projector_path.read_bytes() == vision_files[1].read_bytes()
    assert hub.downloads("mmproj-tiny-vl-F32.gguf") == []


def test_import_ollama_adopts_the_projector_layer(tmp_path: Path, vision_files: tuple[Path, Path]) -> None:
    root = tmp_path / "ollama"

    def blob(data: bytes) -> dict[str, object]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (root / "blobs").mkdir(parents=True, exist_ok=True)
        (root / "blobs" / digest.replace(":", "-")).write_bytes(data)
        return {"digest": digest, "size": len(data)}

    layers = [{"mediaType": mt.MODEL, **blob(vision_files[0].read_bytes())},
              {"mediaType": "application/vnd.ollama.image.projector", **blob(vision_files[1].read_bytes())}]
    config = {"mediaType": mt.CONFIG_MEDIA_TYPE, **blob(b'{"model_format":"gguf","model_family":"llama"}')}
    path = root / "manifests" / "registry.ollama.ai" / "library" / "tiny-vl" / "latest"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schemaVersion": 2, "mediaType": mt.MANIFEST_MEDIA_TYPE, "config": config,
                                "layers": layers}))
    store = ModelStore(tmp_path / "store")
    import_ollama(store, root)
    resolved = store.resolve("tiny-vl")
    assert resolved.projector_path is not None and resolved.projector_path.read_bytes() == vision_files[1].read_bytes()
