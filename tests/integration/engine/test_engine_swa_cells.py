"""Cached prefixes survive on a sliding-window model (Gemma 3 270M: a 512-token window).

llama.cpp takes a cell held by one sequence as free once it is out of that sequence's window, and
wrote new tokens over cached prefixes once the pool wrapped around: the prefix tree then lent
cells that were gone, and the next request sharing the prefix failed with llama_decode -1
("inconsistent sequence positions"), as Claude Code's and opencode's first requests did one after
the other on gemma3. The guard id (kvcache.py) keeps every cached cell.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from engine_helpers import collect

from localrun.engine.engine import Engine
from localrun.engine.types import DoneReason, GenerateRequest, LoadOptions, SamplingOptions

pytestmark = [pytest.mark.starter, pytest.mark.slow]


def test_cached_prefixes_keep_their_cells_when_the_pool_wraps_around(gemma_gguf: Path) -> None:
    rng = random.Random(3)

    def words(n: int) -> list[int]:
        return [rng.randrange(1000, 200000) for _ in range(n)]

    shared = [2, *words(8)]  # what every request starts with (a system prompt's first tokens)
    options = LoadOptions(num_ctx=4096, num_parallel=4, num_batch=512, context_pool=4096, prefix_cache_ram=0)
    with Engine(str(gemma_gguf), options) as engine:
        kv = engine.batcher.kv  # type: ignore[union-attr]
        assert kv.guard_id is not None  # a sliding-window model
        for _ in range(8):  # 8 x 1,500 tokens through a pool of 4,096: it wraps around twice
            result = collect(engine.submit(GenerateRequest(shared + words(1500), SamplingOptions(num_predict=4))))
            assert result.done.done_reason in (DoneReason.LENGTH, DoneReason.STOP)
            kv.check_integrity()
            kv.check_cells()  # every cached path still held by llama.cpp, whole
        reused = collect(engine.submit(GenerateRequest(shared + words(600), SamplingOptions(num_predict=4))))
        assert reused.done.cached_tokens == len(shared)
