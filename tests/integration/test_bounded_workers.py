"""Bounded worker processes: a job that breaks its CPU, memory or time limit costs one worker, never the caller.

These shapes slip past the template engine's own checks on purpose (each step is small, there are
just many of them), so only the process limits stop them.
"""

from __future__ import annotations

import os
import threading
import time

import psutil
import pytest

from localrun.chat.prompt import render_pair
from localrun.errors import TemplateLimit
from localrun.runtime.bounded import BoundedPool, Limits

# multi-process: spawns worker pools and waits out CPU, memory and time limits
pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "hi"}]
SORTS = "{% for i in range(1000) %}{{ ((range(100000)|list) * 10)|sort|length }}{% endfor %}"  # ~100 s of CPU
HOARD = ("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = ns.l + [(range(100000)|list) * 10] %}"
         "{% endfor %}{{ ns.l|length }}")  # ~8 GB, 1,000 steps


def _pool(**limits: float) -> BoundedPool:
    return BoundedPool(1, Limits(**limits), error=TemplateLimit, what="the chat template")  # type: ignore[arg-type]


def test_a_render_past_its_cpu_budget_is_killed_and_the_pool_recovers() -> None:
    pytest.importorskip("resource", reason="no CPU limits on this platform")
    pool = _pool(cpu_seconds=1, wall_seconds=60)
    try:
        started = time.monotonic()
        with pytest.raises(TemplateLimit, match="CPU"):
            pool.run(render_pair, SORTS, MESSAGES, None)
        assert time.monotonic() - started < 55  # the CPU limit fired, not the wall clock
        assert pool.run(render_pair, "{{ messages[0].content }}", MESSAGES, None) == ["hi", None]
    finally:
        pool.close()


def test_a_render_past_its_memory_cap_fails_in_the_worker_not_the_caller() -> None:
    pool = _pool(memory_bytes=512 << 20, wall_seconds=60)
    before = psutil.Process().memory_info().rss
    try:
        with pytest.raises(TemplateLimit, match="memory"):
            pool.run(render_pair, HOARD, MESSAGES, None)
        assert psutil.Process().memory_info().rss - before < 100 << 20
        assert pool.run(render_pair, "ok", MESSAGES, None) == ["ok", None]
    finally:
        pool.close()


def test_a_render_past_its_deadline_is_killed() -> None:
    pool = _pool(wall_seconds=1, cpu_seconds=60)
    try:
        started = time.monotonic()
        with pytest.raises(TemplateLimit, match="longer than 1s"):
            pool.run(render_pair, SORTS, MESSAGES, None)
        assert time.monotonic() - started < 10
        assert pool.run(render_pair, "ok", MESSAGES, None) == ["ok", None]
    finally:
        pool.close()


def test_other_callers_are_served_while_one_worker_is_stuck() -> None:
    pool = BoundedPool(2, Limits(wall_seconds=20), error=TemplateLimit, what="the chat template")
    try:
        pool.warm()
        def render_stuck() -> None:
            with pytest.raises(TemplateLimit):
                pool.run(render_pair, SORTS, MESSAGES, None)

        stuck = threading.Thread(target=render_stuck, daemon=True)
        stuck.start()
        time.sleep(0.5)
        started = time.monotonic()
        assert pool.run(render_pair, "{{ messages|length }}", MESSAGES, None) == ["1", None]
        assert time.monotonic() - started < 5
        stuck.join(60)
    finally:
        pool.close()


def test_only_localrun_functions_run_in_workers() -> None:
    pool = _pool()
    try:
        with pytest.raises(ValueError):
            pool.run(os.getcwd)
    finally:
        pool.close()
