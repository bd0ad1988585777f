"""A request in flight: its handle (caller side) and its sequence state (engine side)."""

from __future__ import annotations

import enum
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .detok import TextStream
from .drafter import DraftPolicy, NgramDrafter
from .kvcache import SeqLease
from .sampling import Sampler
from .types import Event, TokenLogprob, is_last
from .vision import ImageSpan


class RequestHandle:
    """The caller's end of a request: a thread-safe stream of events.

    Iterating blocks and ends after the DoneEvent or ErrorEvent. ``cancel()`` may be called from
    any thread; the engine retires the sequence within one step and ends the stream with
    DoneEvent(CANCELLED).
    """

    def __init__(self, request_id: int, wake: Callable[[], None]) -> None:
        self.request_id = request_id
        self._events: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._wake = wake
        self._finished = False
        self._sink: Callable[[Event], None] | None = None
        self._sink_lock = threading.Lock()
        self.cancelled = False

    def __iter__(self) -> Iterator[Event]:
        while not self._finished:
            event = self._events.get()
            if is_last(event):
                self._finished = True
            yield event

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event, or None after ``timeout`` seconds (or when the stream has ended)."""
        if self._finished:
            return None
        try:
            event = self._events.get(timeout=timeout)
        except queue.Empty:
            return None
        if is_last(event):
            self._finished = True
        return event

    def cancel(self) -> None:
        self.cancelled = True
        self._wake()

    def forward(self, sink: Callable[[Event], None]) -> None:
        """Deliver every event, those already queued first, to ``sink`` instead of the iterator.

        ``sink`` then runs on the engine's threads (the engine thread, or the helper that publishes
        tokens while it decodes: never two at once), once per event and in order, so it must be
        quick and must not raise (e.g. put the event on another queue). A server that streams many
        requests uses this to collect one step's events from all of them without a thread per
        request. After ``forward`` the handle's own iteration and ``get`` receive nothing more.
        """
        with self._sink_lock:
            while True:
                try:
                    sink(self._events.get_nowait())
                except queue.Empty:
                    break
            self._sink = sink

    def put(self, event: Event) -> None:
        """Engine side: deliver one event."""
        with self._sink_lock:
            if self._sink is None:
                self._events.put(event)
                return
            sink = self._sink
        sink(event)


Unpublished = tuple[int, int, tuple[TokenLogprob, ...]]
"""A sampled token whose text is not streamed yet: its index in ``Sequence.tokens``, the token, its logprobs."""


class SeqState(enum.Enum):
    WAITING = "waiting"   # queued, no sequence id yet
    PREFILL = "prefill"   # prompt being decoded in chunks
    DECODE = "decode"     # one token per step
    DONE = "done"


@dataclass(slots=True, eq=False)
class Sequence:
    """Engine-thread state of one request.

    ``tokens`` is the prompt followed by the generated tokens; positions ``[0, n_past)`` have KV
    in the context under ``lease.seq_id``. In DECODE the last token is the one to decode next.
    """

    handle: RequestHandle
    tokens: list[int]
    prompt_len: int
    truncated: int
    sampler: Sampler
    text: TextStream
    num_ctx: int
    num_predict: int | None
    last_n: int                                  # penalty window fed with prompt tokens
    interactive: bool = False                    # admitted and prefilled first (batcher.py)
    seeded: bool = False                         # an explicit seed: computed so that it repeats alone (batcher.py)
    cache_reuse: int = 0                         # GenerateRequest.cache_reuse (KVCache.acquire)
    state: SeqState = SeqState.WAITING
    lease: SeqLease | None = None
    n_past: int = 0
    row: int | None = None                       # output row in the current batch (of the first of its rows)
    draft: list[int] = field(default_factory=list)  # tokens guessed after tokens[-1] in this step's batch
    drafter: NgramDrafter | None = None          # greedy sequences only (speculative decoding: drafter.py)
    policy: DraftPolicy = field(default_factory=DraftPolicy)
    chunk: int = 0                               # prompt tokens in the current batch
    generated: int = 0
    t_submit: float = field(default_factory=time.perf_counter)
    t_start: float = 0.0                         # first admitted
    t_first: float = 0.0                         # first token sampled
    t_admit: float = 0.0                         # last admitted (again after a preemption: admission.py)
    # Paused while generating (admission.py): re-admitted, it computes tokens[:-1] again (mostly from
    # the prefix cache), then decodes tokens[-1] as if it had never stopped.
    resume_decode: bool = False
    spans: tuple[ImageSpan, ...] = ()            # images: their stand-in ranges of ``tokens`` (vision.py)
    # Sampled, not streamed yet: published while the next step decodes (batcher.py, helperthread.py).
    unpublished: list[Unpublished] = field(default_factory=list)
    stop_at: int | None = None                   # index in ``tokens`` of the token that completed a stop string

    @property
    def cached(self) -> int:
        """Prompt tokens taken from the cache at admission (shifted runs past a gap too)."""
        return self.lease.cached + self.lease.gapped_cached if self.lease else 0

    def extra_cells_from(self, index: int) -> int:
        """Cells the images from ``index`` on take beyond their positions (M-RoPE: vision.py): what
        the pool must hold on top of the token count."""
        return sum(s.extra_cells for s in self.spans if s.start >= index)

    def counted(self, n: int) -> int:
        """Usage's count for the first ``n`` positions: an image counts its embeddings (vision.py)."""
        return n + sum(s.extra_cells for s in self.spans if s.end <= n)

    def next_span(self) -> ImageSpan | None:
        """The first image whose KV is not computed yet (its range ends after ``n_past``)."""
        return next((s for s in self.spans if s.end > self.n_past), None)

    @property
    def prefill_end(self) -> int:
        """Positions to compute before the next token is sampled or decoded: the prompt, or for a
        sequence resuming after a preemption everything but its last token."""
        return len(self.tokens) - 1 if self.resume_decode else self.prompt_len
