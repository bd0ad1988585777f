"""The scheduler's vocabulary: what a loaded model is and the seams it is built from.

- :class:`LoadSpec`      what to load (store name, GGUF path, load-time options)
- :class:`Backend`       a loaded model (a RunnerProcess, or a fake in tests)
- :class:`EventStream`   one generation's events, as a Backend returns them
- :class:`ResidentModel` a loaded model's residency state: refcount, keep-alive, placement
- :class:`Clock`         time, injectable (tests use a fake clock)
- ``LoadFn`` / ``ProbeFn`` the seams that start a backend and report free memory
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from ..engine.types import (
    EmbedInput,
    EmbedResult,
    EngineStats,
    Event,
    GenerateRequest,
    LoadOptions,
    ModelInfo,
    RerankResult,
)
from ..hardware.devices import Device
from ..hardware.memory import MemoryEstimate
from ..hardware.placement import Placement


class _Default(enum.Enum):
    DEFAULT = "default"


DEFAULT: Final = _Default.DEFAULT
"""A keep-alive nobody set: the model gets the server's default (``Scheduler.default_keep_alive``)."""

KeepAlive = float | None | Literal[_Default.DEFAULT]
"""How long a model stays loaded after a request: seconds, None = forever, DEFAULT = the server's default."""


class EventStream(Protocol):
    """One generation's events in order, ending with the last one (``is_last``); a RunnerStream in production."""

    def __aiter__(self) -> AsyncIterator[Event]: ...

    @property
    def finished(self) -> bool:
        """True once the last event was received (nothing left to cancel)."""
        ...

    async def cancel(self) -> None:
        """Stop the generation early; the runner frees its sequence. Idempotent."""
        ...


class Backend(Protocol):
    """A loaded model: a RunnerProcess in production, a fake in unit tests.

    The scheduler uses the residency part (``name``, ``pid``, ``exited``, ``alive``, ``close``);
    the request service calls the model through the rest while it holds a lease.
    """

    name: str
    pid: int
    info: ModelInfo | None  # the engine's load report (None: it sent none, e.g. a fake)
    exited: asyncio.Future[str]

    @property
    def alive(self) -> bool: ...

    async def close(self) -> None: ...

    async def generate(self, request: GenerateRequest) -> EventStream:
        """Submit ``request``; raises a LocalrunError before streaming if the runner rejects it."""
        ...

    async def embed(self, inputs: list[EmbedInput], truncate: bool = True) -> EmbedResult: ...

    async def rerank(self, query: str, documents: list[str], truncate: bool = True) -> RerankResult:
        """One relevance score per document, in order (a reranking model only)."""
        ...

    async def tokenize(self, text: str, add_special: bool = True, images: tuple[bytes, ...] = ()) -> list[int]: ...

    async def detokenize(self, tokens: list[int]) -> str: ...

    async def stats(self) -> EngineStats:
        """The engine's KV and prefix-cache counters (for /metrics and `localrun top`)."""
        ...


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """What to load: a store model name, its GGUF path and load-time options."""

    name: str
    model_path: str
    options: LoadOptions
    digest: str | None = None  # the store's digest of the model, shown by /api/ps


LoadFn = Callable[[LoadSpec, Placement], Awaitable[Backend]]
# Free RAM and GPUs; may be async (the daemon's probes devices in a thread, tests' is instant).
ProbeFn = Callable[[], "tuple[int, list[Device]] | Awaitable[tuple[int, list[Device]]]"]


class Phase(enum.Enum):
    READY = "ready"
    DRAINING = "draining"  # will be unloaded (reload or stop) once its requests finish


@dataclass(slots=True, eq=False)
class ResidentModel:
    """A loaded model. Mutated only on the event loop (by the scheduler and its leases)."""

    spec: LoadSpec
    backend: Backend
    placement: Placement
    estimate: MemoryEstimate
    loaded_at: float             # wall clock
    load_duration_ns: int
    reason: str                  # why it was (re)loaded, for logs and /api/ps
    refcount: int = 0
    keep_alive: float | None = 300.0
    last_used: float = 0.0       # monotonic
    idle_deadline: float | None = None  # monotonic time the keep-alive timer fires
    phase: Phase = Phase.READY
    timer: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def slots(self) -> int:
        return max(1, self.spec.options.num_parallel)

    @property
    def queued(self) -> int:
        return max(0, self.refcount - self.slots)

    @property
    def active(self) -> int:
        return min(self.refcount, self.slots)
