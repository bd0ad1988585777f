"""Collecting a request's events in engine tests; an engine in a runner process of its own; a vocabulary alone."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import llama_cpp as lc

from localrun.engine import native
from localrun.engine.types import (
    DoneEvent,
    EngineStats,
    ErrorEvent,
    Event,
    GenerateRequest,
    LoadOptions,
    TokenEvent,
)
from localrun.runtime.process import RunnerProcess

T = TypeVar("T")


def vocab_of(path: Path) -> Iterator[native.Vocab]:
    """The vocabulary of the GGUF at ``path``, loaded without its weights (a generator: the model is
    freed when it resumes)."""
    native.init_backend()
    params = lc.llama_model_default_params()
    params.vocab_only = True
    model = lc.llama_model_load_from_file(str(path).encode(), params)
    assert model
    yield native.Vocab(model)
    lc.llama_model_free(model)


class Handle(Protocol):
    def get(self, timeout: float | None = None) -> Event | None: ...


@dataclass
class Result:
    text: str
    tokens: list[TokenEvent]
    done: DoneEvent

    @property
    def generated(self) -> list[int]:
        # the tail of the context: prompt_eval_count counts an image's embeddings, its positions may be fewer
        return list(self.done.context[len(self.done.context) - self.done.eval_count:])


def collect(handle: Handle, timeout: float = 120.0) -> Result:
    events: list[Event] = []
    while True:
        event = handle.get(timeout=timeout)
        assert event is not None, "no event within the timeout"
        events.append(event)
        if isinstance(event, ErrorEvent):
            raise event.error
        if isinstance(event, DoneEvent):
            tokens = [e for e in events if isinstance(e, TokenEvent)]
            return Result("".join(t.text for t in tokens), tokens, event)


def same_until_a_near_tie(want: Result, got: Result, margin: float = 0.02) -> None:
    """``got`` says what ``want`` says, or parts from it only where ``want``'s two best tokens were
    within ``margin`` in log-probability (a near-tie that other cells or rows can round the other
    way). ``want`` must have been asked for ``top_logprobs`` of at least 2."""
    if got.generated == want.generated:
        return
    at = next(i for i, (a, b) in enumerate(zip(want.generated, got.generated, strict=False)) if a != b)
    top = [lp.top for e in want.tokens for lp in e.logprobs][at]
    assert len(top) >= 2 and top[0][1] - top[1][1] < margin, f"parted at token {at} with no near-tie: {top}"


class RunnerEngine:
    """A model loaded in its own runner process, as the daemon loads it, driven synchronously like
    an Engine (``submit`` returns a handle with ``get``). The matmul kernels llama.cpp picks are
    fixed per process at its first decode, so load options such as batch_invariant only take
    full effect in a process of their own."""

    def __init__(self, model_path: str, options: LoadOptions) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.process: RunnerProcess = self._run(RunnerProcess.start("test", model_path, options))

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(600)

    def submit(self, request: GenerateRequest) -> _QueueHandle:
        stream = self._run(self.process.generate(request))
        events: queue.Queue[Event] = queue.Queue()

        async def pump() -> None:
            async for event in stream:
                events.put(event)

        asyncio.run_coroutine_threadsafe(pump(), self._loop)
        return _QueueHandle(events)

    def stats(self) -> EngineStats:
        return self._run(self.process.stats())

    def close(self) -> None:
        self._run(self.process.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> RunnerEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _QueueHandle:
    def __init__(self, events: queue.Queue[Event]) -> None:
        self._events = events

    def get(self, timeout: float | None = None) -> Event | None:
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None
