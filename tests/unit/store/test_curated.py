"""Curated Modelfiles: every one parses, points at an hf.co GGUF, and the starter is there."""

from __future__ import annotations

import pytest

from localrun.store.curated import curated_modelfile, curated_names, modelfiles_dir
from localrun.store.modelfile import parse
from localrun.store.names import ModelName


def test_curated_names_cover_the_popular_small_models() -> None:
    names = {str(n) for n in curated_names()}
    assert {"qwen2.5-coder:0.5b", "gemma3:270m", "qwen2.5:0.5b", "llama3.2:1b", "smollm2:360m", "gemma3:1b"} <= names
    assert modelfiles_dir() is not None


@pytest.mark.parametrize("name", [str(n) for n in curated_names()])
def test_each_curated_modelfile_is_valid(name: str) -> None:
    text = curated_modelfile(ModelName.parse(name))
    assert text is not None
    mf = parse(text)
    assert ModelName.parse(mf.from_).is_hf
    if mf.template is not None:  # a Go TEMPLATE of its own (else the GGUF's Jinja template is used)
        assert ".Messages" in mf.template
        assert mf.parameters.get("stop"), "a Go template's turns need stop tokens"
    assert mf.licenses


def test_the_starter_uses_its_ggufs_own_template_and_qwens_sampling() -> None:
    mf = parse(curated_modelfile(ModelName.parse("qwen2.5-coder:0.5b")) or "")
    assert mf.template is None and mf.system is None  # the template's own default system prompt applies
    assert mf.parameters == {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repeat_penalty": 1.05}


def test_gemma_modelfile_has_gemma_turns_and_parameters() -> None:
    mf = parse(curated_modelfile(ModelName.parse("gemma3:270m")) or "")
    assert "<start_of_turn>" in (mf.template or "")
    assert mf.parameters == {"stop": ["<end_of_turn>"], "temperature": 1.0, "top_k": 64, "top_p": 0.95}


def test_lookup_is_case_insensitive_and_default_host_only() -> None:
    assert curated_modelfile(ModelName.parse("Qwen2.5:0.5B")) is not None
    assert curated_modelfile(ModelName.parse("someone/qwen2.5:0.5b")) is None
    assert curated_modelfile(ModelName.parse("qwen2.5:999b")) is None


@pytest.mark.parametrize("typed, meant", [
    ("llama3.2", "llama3.2:1b"),          # one curated tag: that one
    ("llama3.2:latest", "llama3.2:1b"),   # Ollama: untagged means :latest
    ("gemma3", "gemma3:1b"),              # several tags: the family's declared default (latest.txt)
    ("qwen2.5", "qwen2.5:1.5b"),
    ("Gemma3:270M", "gemma3:270m"),       # an exact curated name stays itself, in its own case
    ("someone/llama3.2", None),
    ("nothing-curated", None),
])
def test_untagged_names_mean_the_familys_default_tag(typed: str, meant: str | None) -> None:
    from localrun.store.curated import curated_name

    found = curated_name(ModelName.parse(typed))
    assert (str(found) if found else None) == meant
    if meant:
        assert curated_modelfile(ModelName.parse(typed)) == curated_modelfile(ModelName.parse(meant))


def test_every_family_with_several_tags_declares_its_default() -> None:
    from localrun.store.curated import curated_name

    families = {n.model for n in curated_names()}
    for family in families:
        assert curated_name(ModelName.parse(family)) is not None, family
