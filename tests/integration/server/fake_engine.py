"""A stand-in Engine for runner-process tests that need control over timing (queue, disconnect).

Loaded inside a real runner process through the runner's ``factory`` seam. It implements the
runner's ServedEngine protocol: ``submit`` returns a handle with ``forward``/``cancel``; one sequence slot
per ``num_parallel``, extra requests wait. A prompt containing ``SLOW`` produces a token every
20 ms until ``num_predict`` (default 10000) or cancel; a prompt containing ``SAY:`` answers the
rest of that line (after the last ``SAY:``, up to a newline or ``<|im_end|>``) in 3-character
tokens, honouring ``num_predict`` and stop strings, then ends with STOP; a prompt containing ``KEEP?``
answers ``num_keep=N`` (the tokens the request asked to keep when truncating); other prompts echo 5 words.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from localrun.engine.types import (
    DoneEvent,
    DoneReason,
    EmbedResult,
    EngineStats,
    Event,
    GenerateRequest,
    LoadOptions,
    ModelInfo,
    PrefixCacheLocation,
    TokenEvent,
)
from localrun.errors import OptionError

_IDS = itertools.count(1)


class Handle:
    def __init__(self, engine: FakeEngine, request: GenerateRequest) -> None:
        self.request_id = next(_IDS)
        self.events: queue.Queue[Any] = queue.Queue()
        self.cancelled = threading.Event()
        self.engine, self.request = engine, request
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        with self.engine.slots:
            self.engine.active += 1
            try:
                self._generate()
            finally:
                self.engine.active -= 1

    def _generate(self) -> None:
        prompt = (self.request.prompt if isinstance(self.request.prompt, str)
                  else " ".join(map(str, self.request.prompt)))
        if "SAY:" in prompt:
            self._say(prompt)
            return
        if "KEEP?" in prompt:
            self.events.put(TokenEvent(text=f"num_keep={self.request.num_keep}"))
            self.events.put(DoneEvent(done_reason=DoneReason.STOP, prompt_eval_count=len(prompt.split()),
                                      cached_tokens=0, eval_count=1, prompt_eval_duration=1000, eval_duration=2000))
            return
        slow = "SLOW" in prompt
        limit = self.request.sampling.num_predict or (10000 if slow else 5)
        n = 0
        while n < limit and not self.cancelled.is_set():
            if slow:
                time.sleep(0.02)
            self.events.put(TokenEvent(text=f" w{n}"))
            n += 1
        reason = DoneReason.CANCELLED if self.cancelled.is_set() else DoneReason.LENGTH
        self.engine.cancelled_total += int(self.cancelled.is_set())
        self.events.put(DoneEvent(done_reason=reason, prompt_eval_count=len(prompt.split()), cached_tokens=0,
                                  eval_count=n, prompt_eval_duration=1000, eval_duration=2000))

    def _say(self, prompt: str) -> None:
        text = prompt.rsplit("SAY:", 1)[1].split("<|im_end|>", 1)[0].split("\n", 1)[0]
        matched = [(text.find(s), s) for s in self.request.sampling.stop if s and s in text]
        stop_string = min(matched)[1] if matched else None
        if stop_string is not None:
            text = text[: text.find(stop_string)]
        pieces = [text[i:i + 3] for i in range(0, len(text), 3)]
        limit = self.request.sampling.num_predict
        reason = DoneReason.STOP
        if limit is not None and len(pieces) > limit:
            pieces, reason, stop_string = pieces[:limit], DoneReason.LENGTH, None
        for piece in pieces:
            self.events.put(TokenEvent(text=piece))
        self.events.put(DoneEvent(done_reason=reason, prompt_eval_count=len(prompt.split()), cached_tokens=0,
                                  eval_count=len(pieces), prompt_eval_duration=1000, eval_duration=2000,
                                  stop_string=stop_string))

    def get(self, timeout: float | None = None) -> Any:
        return self.events.get(timeout=timeout)

    def cancel(self) -> None:
        self.cancelled.set()

    def forward(self, sink: Callable[[Event], None]) -> None:
        """Deliver every event to ``sink`` from a thread of this handle's own (the engine has no step loop)."""
        def pump() -> None:
            for event in self:
                sink(event)

        threading.Thread(target=pump, daemon=True).start()

    def __iter__(self) -> Any:
        while True:
            event = self.events.get()
            yield event
            if isinstance(event, DoneEvent):
                return


class FakeEngine:
    def __init__(self, model_path: str, options: LoadOptions, *,
                 prefix_cache: PrefixCacheLocation | None = None) -> None:
        self.options = options
        self.slots = threading.Semaphore(options.num_parallel)
        self.active = 0
        self.cancelled_total = 0
        self.info = ModelInfo(architecture="fake", n_params=0, n_ctx_train=2048, n_embd=3, n_layer=1, n_vocab=256,
                              chat_template=None, bos_text="", eos_text="", size_bytes=0,
                              num_ctx=options.num_ctx, num_parallel=options.num_parallel)

    def submit(self, request: GenerateRequest) -> Handle:
        if request.sampling.temperature > 100:
            raise OptionError("temperature is absurd")
        return Handle(self, request)

    def embed(self, inputs: list[Any], *, truncate: bool = True) -> EmbedResult:
        return EmbedResult([[1.0, 0.0, 0.0] for _ in inputs],
                           sum(len(i.split()) if isinstance(i, str) else len(i) for i in inputs),
                           [False] * len(inputs))

    def tokenize(self, text: str, *, add_special: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def detokenize(self, tokens: list[int]) -> str:
        return "".join(chr(t) for t in tokens)

    def stats(self) -> EngineStats:
        return EngineStats(self.options.num_parallel, self.active, 0, 100, self.active * 10,
                           0, 0, 0)

    def close(self) -> None:
        pass
