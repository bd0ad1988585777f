"""``create --quantize``: llama.cpp's own quantizer writes the weights, the store keeps them like any model,
and what cannot be quantized is refused with the store unchanged."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFValueType
from tinymodel import write_tiny_gguf

from localrun.errors import InvalidModelFile, InvalidRequest
from localrun.store import ModelStore
from localrun.store.gguf_file import read_gguf
from localrun.store.quantize import TYPES, quant_type

LLAMA_BIN = Path(os.environ.get("LOCALRUN_LLAMA_BIN", "/tmp/llama-server/llama_cpp_python-0.3.36/vendor/llama.cpp/"
                                "build/bin"))


def _weights(store: ModelStore, name: str) -> Path:
    return store.resolve(name).model_path


@pytest.mark.parametrize("kind", ["q8_0", "Q4_K_M"])
def test_an_f32_model_is_stored_quantized(store: ModelStore, tiny_gguf: Path, kind: str) -> None:
    seen: list[Any] = []
    entry = store.create("tiny-q", f"FROM {tiny_gguf}\nPARAMETER temperature 0\n", quantize=kind, progress=seen.append)
    weights = _weights(store, "tiny-q")
    info = read_gguf(weights)
    assert info.file_type == kind.upper() and info.parameter_count == read_gguf(tiny_gguf).parameter_count
    assert store.resolve("tiny-q").metadata["file_type"] == kind.upper()  # what /api/show and `list` report
    assert entry.size < tiny_gguf.stat().st_size
    assert weights.stat().st_size < tiny_gguf.stat().st_size
    steps = [p for p in seen if p.status == f"quantizing F32 model to {kind.upper()}"]
    assert steps and steps[-1].completed == steps[-1].total == tiny_gguf.stat().st_size
    assert [p.status for p in seen][-1] == "success"
    assert not [p for p in store.blobs.dir.iterdir() if not p.name.startswith("sha256-")]  # no temp file left
    assert store.check_integrity() == []  # the unquantized weights, which no model uses, are not kept
    assert not any(p.status.startswith("importing") for p in seen)  # quantized where it lies: never copied in


def test_weights_another_model_uses_stay(store: ModelStore, tiny_gguf: Path) -> None:
    store.create("tiny", f"FROM {tiny_gguf}\n")
    source = store.resolve("tiny").model_path
    store.create("tiny-q", "FROM tiny\n", quantize="q8_0")
    assert source.exists() and store.resolve("tiny").model_path == source and store.check_integrity() == []


def test_already_quantized_weights_and_unknown_types_are_refused(store: ModelStore, tiny_gguf: Path,
                                                                 snap: Any) -> None:
    store.create("tiny-q", f"FROM {tiny_gguf}\n", quantize="q8_0")
    before = snap(store.root)
    with pytest.raises(InvalidRequest, match="cannot quantize a Q8_0 model to Q4_K_M: quantizing needs unquantized"):
        store.create("again", "FROM tiny-q\n", quantize="q4_K_M")
    with pytest.raises(InvalidRequest, match="unsupported quantization type 'IQ2_XXS'"):
        store.create("again", f"FROM {tiny_gguf}\n", quantize="IQ2_XXS")
    assert snap(store.root) == before


def test_a_file_llama_cpp_cannot_quantize_is_an_error_and_leaves_the_store_as_it_was(
        store: ModelStore, tmp_path: Path, snap: Any) -> None:
    odd = write_tiny_gguf(tmp_path / "odd.gguf", metadata={
        "general.architecture": ("not-an-architecture", GGUFValueType.STRING)})
    before = snap(store.root)
    with pytest.raises(InvalidModelFile, match=r"llama\.cpp could not quantize this model to Q8_0"):
        store.create("odd", f"FROM {odd}\n", quantize="q8_0")
    assert snap(store.root) == before


def test_type_names_are_llama_cpps_in_any_case() -> None:
    assert quant_type("q4_k_m") == "Q4_K_M" and quant_type(" Q8_0 ") == "Q8_0"
    for bad in ("q9", "", 5, None, "F16"):
        with pytest.raises(InvalidRequest, match="use one of Q4_0"):
            quant_type(bad)
    assert "Q4_K_M" in TYPES and "Q8_0" in TYPES


@pytest.mark.skipif(not (LLAMA_BIN / "llama-quantize").exists(), reason="llama.cpp's llama-quantize is not built "
                    "(../shared/bench/build_llama_server.sh, then cmake --build build --target llama-quantize)")
@pytest.mark.parametrize("kind", ["Q8_0", "Q4_K_M", "Q6_K"])
def test_the_bytes_are_llama_quantizes(store: ModelStore, tiny_gguf: Path, tmp_path: Path, kind: str) -> None:
    reference = tmp_path / f"ref-{kind}.gguf"
    subprocess.run([str(LLAMA_BIN / "llama-quantize"), str(tiny_gguf), str(reference), kind], check=True,
                   capture_output=True, env={**os.environ, "LD_LIBRARY_PATH": str(LLAMA_BIN)})
    store.create("tiny-q", f"FROM {tiny_gguf}\n", quantize=kind)
    assert _weights(store, "tiny-q").read_bytes() == reference.read_bytes()
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_client_that_leaves_stops_the_quantizer_and_leaves_no_file(store: ModelStore, tiny_gguf: Path,
                                                                     snap: Any) -> None:
    from localrun.errors import Cancelled

    def leave(progress: Any) -> None:
        if progress.status.startswith("quantizing") and progress.completed is not None:
            raise Cancelled("the client went away")  # what the API's progress callback raises then

    before = snap(store.root)
    with pytest.raises(Cancelled):
        store.create("tiny-q", f"FROM {tiny_gguf}\n", quantize="q8_0", progress=leave)
    assert snap(store.root) == before
