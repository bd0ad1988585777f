"""The prefix cache survives an unload: saved by close(), restored by the next load of the same model."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import collect

from localrun.engine.engine import Engine
from localrun.engine.types import (
    GenerateRequest,
    LoadOptions,
    PrefixCacheLocation,
    SamplingOptions,
)

GREEDY = SamplingOptions(temperature=0, num_predict=16)
OPTIONS = LoadOptions(num_ctx=256, num_parallel=4, num_batch=64)
SYSTEM = [1] + [300 + (7 * i) % 400 for i in range(90)]  # a shared "system prompt"


def prompt(i: int) -> list[int]:
    return SYSTEM + [310 + (11 * i + k) % 300 for k in range(12)]


def run(engine: Engine, i: int):  # type: ignore[no-untyped-def]
    return collect(engine.submit(GenerateRequest(prompt(i), GREEDY)))


def test_a_reloaded_model_answers_cached_prompts_from_the_saved_cache(tiny_gguf: Path, tmp_path: Path) -> None:
    where = PrefixCacheLocation(str(tmp_path / "cache"), "sha256:tiny")
    with Engine(str(tiny_gguf), OPTIONS, prefix_cache=where) as first:
        before = [run(first, i) for i in range(3)]
        assert before[0].done.cached_tokens == 0 and before[1].done.cached_tokens >= len(SYSTEM)
    files = list((tmp_path / "cache").iterdir())
    assert len(files) == 1 and files[0].name.startswith("sha256-tiny.")
    with Engine(str(tiny_gguf), OPTIONS, prefix_cache=where) as second:
        assert second.batcher is not None
        second.batcher.kv.check_integrity()
        # The system prompt is stored once: three prompts and their answers, not three copies of it.
        assert second.batcher.kv.cached_cells <= len(SYSTEM) + 3 * (12 + 16)
        after = [run(second, i) for i in range(3)]
        second.batcher.kv.check_integrity()
    for b, a in zip(before, after, strict=False):
        assert a.done.cached_tokens == len(prompt(0)) - 1  # all but the last prompt token came from disk
        assert a.text == b.text


def test_a_cache_saved_for_another_digest_is_not_used(tiny_gguf: Path, tmp_path: Path) -> None:
    with Engine(str(tiny_gguf), OPTIONS, prefix_cache=PrefixCacheLocation(str(tmp_path), "sha256:a")) as e:
        run(e, 0)
    (tmp_path / "sha256-a.f16.kvc").rename(tmp_path / "sha256-b.f16.kvc")  # claims to be model b's
    with Engine(str(tiny_gguf), OPTIONS, prefix_cache=PrefixCacheLocation(str(tmp_path), "sha256:b")) as e:
        assert run(e, 0).done.cached_tokens == 0


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_cache_file_means_an_empty_cache_not_a_failed_load(tiny_gguf: Path, tmp_path: Path,
                                                                     damage: str) -> None:
    where = PrefixCacheLocation(str(tmp_path), "sha256:tiny")
    with Engine(str(tiny_gguf), OPTIONS, prefix_cache=where) as e:
        reference = run(e, 0)
    path = tmp_path / "sha256-tiny.f16.kvc"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"\x00garbage" * 100)
    with Engine(str(tiny_gguf), OPTIONS, prefix_cache=where) as e:
        assert run(e, 0).text == reference.text
        assert e.batcher is not None
        e.batcher.kv.check_integrity()
