"""``localrun bench``: measure any OpenAI-compatible server on a fixed, reproducible workload.

Modules, outer to inner: :mod:`.runner` (a whole run, targets interleaved per level),
:mod:`.loadgen` (closed-loop clients, streaming requests), :mod:`.prompts` (prompts of a given
token length), :mod:`.cpu` (who used the cores), :mod:`.stats` (pure statistics),
:mod:`.report` and :mod:`.chart` (table, Markdown, JSON, HTML/SVG). Nothing here imports the
server or the engine: the bench talks to targets over HTTP only.
"""

from __future__ import annotations

from .loadgen import Endpoint, LoadPlan
from .runner import BenchConfig, BenchResult, run_bench
from .stats import LevelStats, RequestRecord, Window, percentile, summarize

__all__ = [
    "BenchConfig",
    "BenchResult",
    "Endpoint",
    "LevelStats",
    "LoadPlan",
    "RequestRecord",
    "Window",
    "percentile",
    "run_bench",
    "summarize",
]
