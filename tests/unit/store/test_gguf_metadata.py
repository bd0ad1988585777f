"""Hostile GGUF metadata in a normal-looking model: one clear InvalidModelFile, read once, never a 500.

Each case is a shape that broke the daemon before the metadata was validated (issue #13): a
``block_count`` of 2^31 in a 0.6 MB file drove it to 21.9 GB, ``context_length`` -1 wedged the
scheduler, a float ``inf``/``NaN`` head count made ``/api/tags`` answer 500, an array nested 5,000
deep was a RecursionError. The same reader backs the fit check (``hardware.memory.read_geometry``).
"""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from gguf import GGUFValueType
from tinymodel import write_tiny_gguf

from localrun.errors import InvalidModelFile
from localrun.hardware.memory import read_geometry
from localrun.store.gguf_file import read_gguf

U32, I32, F32, STR, BOOL, U64 = (GGUFValueType.UINT32, GGUFValueType.INT32, GGUFValueType.FLOAT32,
                                 GGUFValueType.STRING, GGUFValueType.BOOL, GGUFValueType.UINT64)

HOSTILE: dict[str, tuple[dict[str, tuple[Any, GGUFValueType]], str]] = {
    "block_count 2^31": ({"llama.block_count": (2**31, U32)}, "llama.block_count"),
    "block_count 2^64-1": ({"llama.block_count": (2**64 - 1, U64)}, "llama.block_count"),
    "context_length -1": ({"llama.context_length": (-1, I32)}, "llama.context_length"),
    "context_length 0": ({"llama.context_length": (0, U32)}, "llama.context_length"),
    "head_count inf": ({"llama.attention.head_count": (float("inf"), F32)}, "llama.attention.head_count"),
    "head_count NaN": ({"llama.attention.head_count": (float("nan"), F32)}, "llama.attention.head_count"),
    "head_count a string": ({"llama.attention.head_count": ("abc", STR)}, "llama.attention.head_count"),
    "head_count_kv bool": ({"llama.attention.head_count_kv": (True, BOOL)}, "head_count_kv"),
    "embedding_length 0": ({"llama.embedding_length": (0, U32)}, "llama.embedding_length"),
    "embedding_length 2^31": ({"llama.embedding_length": (2**31, U32)}, "llama.embedding_length"),
    "per-layer head counts too large": ({"llama.attention.head_count_kv": ([4, 2**30], GGUFValueType.ARRAY)},
                                        "head_count_kv"),
    "architecture not a string": ({"general.architecture": (7, U32)}, "general.architecture"),
    "alignment 2^30": ({"general.alignment": (2**30, U32)}, "alignment"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_out_of_range_metadata_is_a_clear_error(tmp_path: Path, case: str) -> None:
    overrides, key = HOSTILE[case]
    path = write_tiny_gguf(tmp_path / "hostile.gguf", metadata=overrides)
    with pytest.raises(InvalidModelFile, match=key.replace(".", r"\.")):
        read_gguf(path)
    with pytest.raises(InvalidModelFile):  # the fit check reads the same record: no second walker
        read_geometry(path)


def test_a_huge_claimed_layer_count_allocates_nothing_in_proportion(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "layers.gguf", metadata={"llama.block_count": (2**31, U32)})
    tracemalloc.start()
    try:
        with pytest.raises(InvalidModelFile):
            read_geometry(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 1024 * 1024, peak  # was 21.9 GB in per-layer lists


def _raw_gguf(path: Path, kvs: list[bytes]) -> Path:
    """A GGUF with no tensors and the given raw key/value records."""
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs))
    return path


def _key(name: str) -> bytes:
    raw = name.encode()
    return struct.pack("<Q", len(raw)) + raw


def _string_kv(name: str, value: str) -> bytes:
    raw = value.encode()
    return _key(name) + struct.pack("<IQ", GGUFValueType.STRING, len(raw)) + raw


def test_arrays_nested_thousands_deep_are_refused(tmp_path: Path) -> None:
    depth = 5000
    nested = struct.pack("<I", GGUFValueType.ARRAY)  # the value's type
    nested += struct.pack("<IQ", GGUFValueType.ARRAY, 1) * (depth - 1) + struct.pack("<IQB", GGUFValueType.UINT8, 1, 7)
    path = _raw_gguf(tmp_path / "nested.gguf", [_string_kv("general.architecture", "llama"), _key("x.deep") + nested])
    with pytest.raises(InvalidModelFile, match="nests arrays deeper"):
        read_gguf(path)


def test_an_array_claiming_more_elements_than_the_file_holds_is_refused(tmp_path: Path) -> None:
    kv = _key("tokenizer.ggml.tokens") + struct.pack("<IIQ", GGUFValueType.ARRAY, GGUFValueType.STRING, 2**40)
    path = _raw_gguf(tmp_path / "claims.gguf", [_string_kv("general.architecture", "llama"), kv])
    with pytest.raises(InvalidModelFile, match="truncated"):
        read_gguf(path)


def test_a_valid_model_reads_the_same_geometry_everywhere(tiny_gguf: Path) -> None:
    info = read_gguf(tiny_gguf)
    assert read_geometry(tiny_gguf) == info.geometry
    g = info.geometry
    assert (g.n_layer, g.n_embd, g.n_head, g.n_head_kv, g.n_ctx_train) == (2, 64, 4, 2, 2048)
    assert g.n_vocab > 256 and g.chat_template == info.chat_template


def test_per_layer_arrays_count_their_largest_value(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "layers.gguf",
                           metadata={"llama.attention.head_count_kv": ([1, 2], GGUFValueType.ARRAY)})
    assert read_gguf(path).geometry.n_head_kv == 2


def test_non_finite_floats_elsewhere_are_shown_as_null(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "nan.gguf", metadata={"llama.rope.freq_base": (float("nan"), F32)})
    assert read_gguf(path).metadata["llama.rope.freq_base"] is None


def test_a_sysfs_file_is_a_clear_error_not_a_crash() -> None:
    candidates = [p for p in (Path("/sys/kernel/mm/transparent_hugepage/enabled"), Path("/sys/power/state"),
                              Path("/proc/self/stat")) if p.is_file()]
    if not candidates:
        pytest.skip("no /sys or /proc file on this system")
    for path in candidates:
        with pytest.raises(InvalidModelFile):
            read_gguf(path)
