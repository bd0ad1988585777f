"""GGUF validation: real metadata from a valid file, a clear error for anything else."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from tinymodel import write_tiny_gguf

from localrun.errors import InvalidModelFile
from localrun.store.gguf_file import read_gguf, read_gguf_cached


def test_reads_metadata_of_a_valid_model(tiny_gguf: Path) -> None:
    info = read_gguf(tiny_gguf)
    assert info.architecture == "llama"
    assert info.parameter_count > 0 and info.tensor_count > 0
    assert info.file_type == "F32"
    assert info.context_length and info.context_length > 0
    assert info.chat_template and "im_start" in info.chat_template
    assert info.summary()["model_family"] == "llama"


def test_a_remembered_record_follows_the_file(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "m.gguf", context_length=2048)
    first = read_gguf_cached(path)
    assert read_gguf_cached(path) is first  # unchanged: not read again
    write_tiny_gguf(tmp_path / "m.gguf", context_length=4096)  # replaced in place
    assert read_gguf_cached(path).context_length == 4096
    path.unlink()
    with pytest.raises(InvalidModelFile, match="cannot read model file"):
        read_gguf_cached(path)


def _copy(src: Path, dst: Path, data: bytes | None = None) -> Path:
    dst.write_bytes(src.read_bytes() if data is None else data)
    return dst


@pytest.mark.parametrize("keep", [0.999, 0.5, 0.01])
def test_truncated_files_are_rejected(tiny_gguf: Path, tmp_path: Path, keep: float) -> None:
    data = tiny_gguf.read_bytes()
    bad = _copy(tiny_gguf, tmp_path / "cut.gguf", data[: int(len(data) * keep)])
    with pytest.raises(InvalidModelFile, match=r"truncated|tensor"):
        read_gguf(bad)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "only 0 bytes"),
        (b"this is a text file, not a model at all\n" * 3, "magic"),
        (b"GGUF" + struct.pack("<I", 99) + b"\0" * 40, "version 99"),
        (b"GGUF" + struct.pack("<IQQ", 3, 2**40, 0) + b"\0" * 16, "impossible header counts"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**50), "truncated"),
    ],
)
def test_garbage_is_rejected(tmp_path: Path, content: bytes, fragment: str) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    with pytest.raises(InvalidModelFile, match=fragment):
        read_gguf(bad)


def _one_tensor_file(path: Path) -> tuple[bytearray, int]:
    """Write a GGUF holding one 4x4 F32 tensor at ``path``: its bytes, and where the tensor's dims begin."""
    import numpy as np
    from gguf import GGUFWriter

    w = GGUFWriter(str(path), "llama")
    w.add_tensor("t", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = bytearray(path.read_bytes())
    idx = data.find(struct.pack("<QQ", 4, 4))
    assert idx > 0
    return data, idx


def test_impossible_tensor_size_is_rejected(tiny_gguf: Path, tmp_path: Path) -> None:
    path = tmp_path / "huge.gguf"
    data, idx = _one_tensor_file(path)
    data[idx:idx + 16] = struct.pack("<QQ", 2**31, 2**31)
    path.write_bytes(bytes(data))
    with pytest.raises(InvalidModelFile, match="needs bytes up to"):
        read_gguf(path)


def test_a_tensor_type_nobody_knows_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "odd.gguf"
    data, idx = _one_tensor_file(path)
    assert data[idx + 16:idx + 20] == struct.pack("<I", 0)  # after the dims, the type: F32
    data[idx + 16:idx + 20] = struct.pack("<I", 9999)  # in neither ggml_types nor the gguf package
    path.write_bytes(bytes(data))
    with pytest.raises(InvalidModelFile, match="unknown data type 9999"):
        read_gguf(path)


def test_directory_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidModelFile, match="directory"):
        read_gguf(tmp_path)
    with pytest.raises(InvalidModelFile, match="cannot open"):
        read_gguf(tmp_path / "nope.gguf")


def _string_array_file(strings: list[bytes], lengths: dict[int, int] | None = None) -> tuple[bytes, list[int]]:
    """A GGUF header with one long string array (skipped, not kept: more than 64 entries); returns
    the bytes and where each element's length field starts."""
    key = b"tokenizer.ggml.merges"
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    data += struct.pack("<IIQ", 9, 8, len(strings))  # an array of strings
    starts = []
    for i, s in enumerate(strings):
        starts.append(len(data))
        data += struct.pack("<Q", (lengths or {}).get(i, len(s))) + s
    return data, starts


@pytest.mark.parametrize("cut", ["inside a length", "inside a string", "a length past the end"])
def test_a_long_string_array_that_ends_early_names_where(tmp_path: Path, cut: str) -> None:
    strings = [f"tok{i} en".encode() for i in range(100)]
    data, starts = _string_array_file(strings, {70: 2**40} if cut == "a length past the end" else None)
    if cut == "inside a length":
        data, at = data[:starts[70] + 3], starts[70]
    elif cut == "inside a string":
        data, at = data[:starts[70] + 10], starts[70] + 8
    else:
        at = starts[70] + 8
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(data)
    with pytest.raises(InvalidModelFile, match=rf"truncated: it ends inside the value of 'tokenizer.ggml.merges' "
                                               rf"\(at byte {at}\)"):
        read_gguf(bad)
