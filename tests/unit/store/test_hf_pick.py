"""Choosing the GGUF file for an hf.co name's quant tag."""

from __future__ import annotations

import pytest

from localrun.errors import ModelNotFound, PullError
from localrun.store.hf import HubFile, pick, quant_of


@pytest.mark.parametrize(
    ("filename", "quant"),
    [
        ("qwen2.5-0.5b-instruct-q4_k_m.gguf", "Q4_K_M"),
        ("Llama-3.2-1B-Instruct-Q8_0.gguf", "Q8_0"),
        ("model.Q5_K_S.gguf", "Q5_K_S"),
        ("google_gemma-3-1b-it-IQ4_XS.gguf", "IQ4_XS"),
        ("SmolLM2-360M-Instruct-f16.gguf", "F16"),
        ("Qwen3-0.6B-UD-Q4_K_XL.gguf", "Q4_K_XL"),
        ("tokenizer.gguf", None),
    ],
)
def test_quant_of(filename: str, quant: str | None) -> None:
    assert quant_of(filename) == quant


def _files(*names: str) -> list[HubFile]:
    return [HubFile("u/r", n, 10, "0" * 64, "main") for n in names]


def test_default_is_q4_k_m_case_insensitive() -> None:
    files = _files("m-Q8_0.gguf", "m-q4_k_m.gguf", "m-Q4_K_S.gguf")
    assert pick(files, None, "u/r").filename == "m-q4_k_m.gguf"
    assert pick(files, "q8_0", "u/r").filename == "m-Q8_0.gguf"
    assert pick(files, "Q4_K_S", "u/r").filename == "m-Q4_K_S.gguf"


def test_only_gguf_is_the_default() -> None:
    assert pick(_files("only-Q6_K.gguf"), None, "u/r").filename == "only-Q6_K.gguf"


def test_missing_quant_lists_what_is_available() -> None:
    with pytest.raises(ModelNotFound) as exc:
        pick(_files("m-Q8_0.gguf", "m-Q6_K.gguf"), "Q2_K", "u/r")
    assert "Q6_K, Q8_0" in str(exc.value) and "Q2_K" in str(exc.value)
    with pytest.raises(ModelNotFound, match="default quant Q4_K_M; available: Q6_K, Q8_0"):
        pick(_files("m-Q8_0.gguf", "m-Q6_K.gguf"), None, "u/r")
    with pytest.raises(ModelNotFound, match="no GGUF files"):
        pick([], None, "u/r")


def test_split_files_are_refused_clearly() -> None:
    with pytest.raises(PullError, match="split"):
        pick(_files("big-Q4_K_M-00001-of-00002.gguf"), None, "u/r")
