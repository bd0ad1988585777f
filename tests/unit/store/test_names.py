"""Model names: what users type parses to the expected parts; nothing can escape the store."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localrun.errors import InvalidName
from localrun.store.names import ModelName


@pytest.mark.parametrize(
    ("text", "host", "namespace", "model", "tag", "shown"),
    [
        ("gemma3:270m", "localrun", "library", "gemma3", "270m", "gemma3:270m"),
        ("gemma3", "localrun", "library", "gemma3", "latest", "gemma3:latest"),
        ("me/mymodel:v1", "localrun", "me", "mymodel", "v1", "me/mymodel:v1"),
        ("registry.ollama.ai/library/llama3.2:1b", "localrun", "library", "llama3.2", "1b", "llama3.2:1b"),
        ("hf.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M", "hf.co", "Qwen", "Qwen2.5-0.5B-Instruct-GGUF", "Q4_K_M",
         "hf.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M"),
        ("huggingface.co/bartowski/x-GGUF", "hf.co", "bartowski", "x-GGUF", "latest", "hf.co/bartowski/x-GGUF:latest"),
        ("https://hf.co/a/b:q8_0", "hf.co", "a", "b", "q8_0", "hf.co/a/b:q8_0"),
        ("  qwen2.5:0.5b  ", "localrun", "library", "qwen2.5", "0.5b", "qwen2.5:0.5b"),
    ],
)
def test_valid_names(text: str, host: str, namespace: str, model: str, tag: str, shown: str) -> None:
    name = ModelName.parse(text)
    assert (name.host, name.namespace, name.model, name.tag) == (host, namespace, model, tag)
    assert str(name) == shown
    assert ModelName.parse(str(name)) == name


def test_hf_name_properties() -> None:
    name = ModelName.parse("hf.co/Qwen/Repo-GGUF:q4_k_m")
    assert name.is_hf and name.hf_repo == "Qwen/Repo-GGUF" and name.quant == "q4_k_m"
    assert ModelName.parse("hf.co/Qwen/Repo-GGUF").quant is None
    assert not ModelName.parse("gemma3:270m").is_hf


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "required"),
        ("   ", "required"),
        ("../etc/passwd", "may hold only"),
        ("a/../b", "may hold only"),
        ("..", "may hold only"),
        ("/etc/passwd", "not a path"),
        ("C:/models/x", "not a path"),
        ("a\\b", "not a path"),
        ("model\x00:tag", "control character"),
        ("model\n", "may hold only"),  # strip() removes the newline... so test an inner one below
        ("mo\ndel", "control character"),
        ("model:", "empty tag"),
        ("a/b/c/d", "expected [host/]"),
        ("x" * 500, "longer than"),
        ("m" * 129 + ":t", "longer than 128"),
        ("model:../../x", "may hold only"),
        (".hidden", "may hold only"),
        ("my model", "may hold only"),
        ("ns//model", "empty"),
    ],
)
def test_invalid_names(text: str, fragment: str) -> None:
    if text == "model\n":
        assert str(ModelName.parse(text)) == "model:latest"  # surrounding whitespace is trimmed
        return
    with pytest.raises(InvalidName) as exc:
        ModelName.parse(text)
    assert fragment in str(exc.value)


def test_casefold_key_matches_different_case() -> None:
    assert ModelName.parse("Gemma3:270M").casefold_key() == ModelName.parse("gemma3:270m").casefold_key()


@given(st.text(max_size=60))
def test_no_name_reaches_outside_the_store(text: str) -> None:
    """Whatever the input, a parsed name's manifest path has 4 plain components."""
    try:
        name = ModelName.parse(text)
    except InvalidName:
        return
    parts = name.relpath.parts
    assert len(parts) == 4
    for part in parts:
        assert part not in ("", ".", "..")
        assert "/" not in part and "\\" not in part and "\x00" not in part
        assert not part.startswith(".")


@pytest.mark.parametrize("typed, expected", [
    ("lama3.2", ["llama3.2:1b"]),
    ("gemma3:27m", ["gemma3:270m"]),
    ("qwen2.5:0.5", ["qwen2.5:0.5b"]),
    ("mistral", []),
])
def test_near_names_suggest_what_the_user_meant(typed: str, expected: list[str]) -> None:
    from localrun.store.names import near_names

    known = ["llama3.2:1b", "gemma3:270m", "gemma3:1b", "qwen2.5:0.5b", "qwen2.5:1.5b", "smollm2:360m"]
    assert near_names(typed, known)[:1] == expected
