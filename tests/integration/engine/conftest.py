"""Engines on the tiny random-weight GGUF (fast)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localrun.engine.engine import Engine
from localrun.engine.types import LoadOptions


@pytest.fixture(scope="module")
def tiny_engine(tiny_gguf: Path) -> Iterator[Engine]:
    engine = Engine(str(tiny_gguf), LoadOptions(num_ctx=256, num_parallel=4, num_batch=64))
    yield engine
    engine.close()
