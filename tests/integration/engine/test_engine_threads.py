"""The engine and the thread policy: a count nobody has checked since the engine sat idle gets a short step."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from engine_helpers import collect

from localrun.engine.engine import Engine
from localrun.engine.threads import CpuTimes, ThreadPolicy, Threads
from localrun.engine.types import MAX_UBATCH, GenerateRequest, LoadOptions, SamplingOptions


class IdleThenBusy:
    """/proc as the policy reads it: a minute passes (the engine waits for the request), then this process
    is busy on both cores. Each look at the clock is a third of a second later (a sample is due at every step)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls = 0

    def clock(self) -> float:
        """0 when the engine says it waits, 60 s later its first step, then 0.3 s a step."""
        self.calls += 1
        if self.calls > 1:
            self.now += 60.0 if self.calls == 2 else 0.3
        return self.now

    def read(self) -> CpuTimes:
        busy = 2.0 * max(0.0, self.now - 60.0)
        return CpuTimes(self.now, busy, busy)


@pytest.mark.parametrize("pinned", [False, True])
def test_a_long_prompt_after_an_idle_spell_starts_with_one_physical_batch(tiny_gguf: Path, pinned: bool) -> None:
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=2048, num_parallel=1, num_batch=2048)) as engine:
        batcher = engine.batcher
        assert batcher is not None
        cpu = IdleThenBusy()
        engine.thread_policy = batcher.threads = ThreadPolicy(cores=2, pinned=2 if pinned else None,
                                                              reader=cpu.read, clock=cpu.clock)
        batcher.threads.idle()  # what the engine told its own policy when it began to wait
        steps: list[int] = []
        decode = batcher._decode

        def record(participants: list) -> bool:  # type: ignore[type-arg]
            steps.append(batcher.batch.n_tokens)
            return decode(participants)

        batcher._decode = record  # type: ignore[method-assign]
        prompt = [1] + [300 + (7 * i) % 400 for i in range(1500)]
        done = collect(engine.submit(GenerateRequest(prompt, SamplingOptions(temperature=0, num_predict=2))))
        assert done.done.prompt_eval_count == len(prompt)
        if pinned:
            assert steps[0] == len(prompt)  # num_thread pins the count: nothing to check, one step
        else:
            assert steps[0] == MAX_UBATCH  # then the count is sampled over that work and settles
            assert steps[1] == len(prompt) - MAX_UBATCH


def test_the_engine_tells_its_policy_when_it_waits(tiny_gguf: Path) -> None:
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=256, num_parallel=1, num_batch=64)) as engine:
        collect(engine.submit(GenerateRequest([1, 300, 301], SamplingOptions(temperature=0, num_predict=2))))
        deadline = time.monotonic() + 5
        while engine.thread_policy._idle_since is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert engine.thread_policy._idle_since is not None  # the wait counts as idle time in the sample


class Contended:
    """A policy that allows one thread to decode and two to prefill (other load of about 0.3 cores)."""

    settled = True

    def update(self) -> Threads:
        return Threads(decode=1, prefill=2, cores=2, other_load=0.3)

    def current(self) -> Threads:
        return self.update()

    def idle(self) -> None:
        pass


def contended_engine(tiny_gguf: Path, decode_row_seconds: float) -> tuple[Engine, list[tuple[bool, int]]]:
    """An engine under the :class:`Contended` policy whose cost model learned decode rows of about
    ``decode_row_seconds``, and the list each step appends (has prompt tokens, threads it ran on) to."""
    engine = Engine(str(tiny_gguf), LoadOptions(num_ctx=512, num_parallel=1, num_batch=512, speculative=False))
    batcher = engine.batcher
    assert batcher is not None
    batcher.threads = Contended()  # type: ignore[assignment]
    for _ in range(64):  # what timing decode steps of one and two rows taught the cost model
        batcher.step_cost.record(1, 100, decode_row_seconds)
        batcher.step_cost.record(2, 200, decode_row_seconds * 1.1)
    seen: list[tuple[bool, int]] = []
    decode_batch = batcher._decode_batch

    def record(participants: list) -> bool:  # type: ignore[type-arg]
        seen.append((any(s.chunk > 1 for s in participants), batcher._n_threads))
        return decode_batch(participants)

    batcher._decode_batch = record  # type: ignore[method-assign]
    return engine, seen


def prompt_of(k: int) -> list[int]:
    return [1] + [300 + (7 * i + k) % 400 for i in range(100)]


@pytest.mark.parametrize(("step_seconds", "prefill_threads"), [(0.0002, 1), (0.05, 2)])
def test_a_prompt_step_too_short_to_gain_from_a_contended_thread_runs_on_the_decode_count(
        tiny_gguf: Path, step_seconds: float, prefill_threads: int) -> None:
    """A tiny model's prompt takes a millisecond: a second thread on a contended core costs more than
    it computes. A step the cost model prices long (a real model's prompt) still gets the prefill count."""
    engine, seen = contended_engine(tiny_gguf, step_seconds)
    with engine:
        collect(engine.submit(GenerateRequest(prompt_of(0), SamplingOptions(temperature=0, num_predict=3))))
    assert seen[0] == (True, prefill_threads)
    assert all(n == 1 for prompt_step, n in seen if not prompt_step)


def test_a_prompt_step_that_took_little_runs_on_the_decode_count_whatever_decode_rows_cost(
        tiny_gguf: Path) -> None:
    """On a small model one more decode row beside one costs more than one more prompt row among sixty,
    so the decode rows priced a tiny model's prompt step long and gave it a thread on a contended core.
    What prompt steps of that size took decides once one was timed (the engine times them itself)."""
    engine, seen = contended_engine(tiny_gguf, 0.05)  # decode rows that price a 101-row step at 3 s
    with engine:
        batcher = engine.batcher
        assert batcher is not None
        for k in range(2):  # the first of a size is left out of the timing, the second counts
            collect(engine.submit(GenerateRequest(prompt_of(k), SamplingOptions(temperature=0, num_predict=3))))
        assert batcher.step_cost.prompt_seconds(len(prompt_of(0))) is not None
        for _ in range(40):  # what a tiny model's prompt step takes (the mean forgets the timed one)
            batcher.step_cost.record_prompt(len(prompt_of(0)), 0.001)
        seen.clear()
        collect(engine.submit(GenerateRequest(prompt_of(2), SamplingOptions(temperature=0, num_predict=3))))
    assert seen[0] == (True, 1)
