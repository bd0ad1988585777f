"""The data-type tables the header reader uses agree with llama.cpp's own ``gguf`` package, and a
number the tables do not know yet is looked up there."""

from __future__ import annotations

import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

from localrun.store import ggml_types


def test_block_sizes_agree_with_the_gguf_package() -> None:
    theirs = {int(t): GGML_QUANT_SIZES[t] for t in GGMLQuantizationType if t in GGML_QUANT_SIZES}
    both = theirs.keys() & ggml_types.BLOCK_SIZES.keys()
    assert {t: ggml_types.BLOCK_SIZES[t] for t in both} == {t: theirs[t] for t in both}
    assert {0, 1, 2, 8, 12, 14, 30} <= both  # F32 F16 Q4_0 Q8_0 Q4_K Q6_K BF16: compared, not just listed


def test_file_type_names_agree_with_the_gguf_package() -> None:
    theirs = {int(f): f.name.removeprefix("MOSTLY_").removeprefix("ALL_") for f in LlamaFileType}
    both = theirs.keys() & ggml_types.FILE_TYPES.keys()
    assert {f: ggml_types.FILE_TYPES[f] for f in both} == {f: theirs[f] for f in both}
    assert ggml_types.file_type_name(15) == "Q4_K_M"


def test_a_type_missing_from_the_table_comes_from_the_gguf_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(ggml_types.BLOCK_SIZES, 12)  # Q4_K, as if the table predated it
    monkeypatch.delitem(ggml_types.FILE_TYPES, 15)
    assert ggml_types.block_size(12) == (256, 144)
    assert ggml_types.file_type_name(15) == "Q4_K_M"


def test_a_number_nobody_knows() -> None:
    assert ggml_types.block_size(9999) is None
    assert ggml_types.file_type_name(9999) == "9999"
