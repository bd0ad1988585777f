"""Chat templates run where they cannot hurt the daemon: bounded worker processes.

A chat template is code from a stranger (a GGUF's metadata, a Modelfile, a request's ``template``)
and it runs on every chat request. Two layers keep it from freezing or exhausting the daemon:

1. the template engine refuses unbounded work before doing it (:mod:`localrun.chat.template_limits`:
   no compile-time folding, capped arithmetic, repetition and sizes, a step budget per render), so
   a hostile template usually fails in milliseconds with a 400 naming the limit;
2. rendering happens in a :class:`~localrun.runtime.bounded.BoundedPool` of child processes with a
   CPU budget per render (5 s), a memory cap (1 GiB) and a wall-clock deadline (10 s), so whatever
   layer 1 misses costs one worker, never the daemon: ``/health``, ``/api/tags`` and generation keep
   answering, and the offending request gets a 400 ``template_limit``.

Why a process and not only a sandbox: a thread cannot be stopped, and Jinja's compiler folds
``{{ (9 ** 15000000) % 7 }}`` in C while holding the GIL, which stopped every route for minutes; a
sandbox alone is a list of known shapes, and a gigabyte string or a loop bomb it has not thought of
would still land in the daemon. Why not only a process: a render killed by its limits takes
seconds and a new worker; layer 1 answers the known shapes at once. The cost, measured with
``benchmarks/template_bench.py`` on the Qwen2.5 chat template (10 messages, one tool; 2-vCPU AMD EPYC,
busy): 0.09 ms per render in the plain sandbox, 0.13 ms with layer 1, 0.5 ms per request through a
worker (the prompt and the system prefix, and the pipe both ways), about 2 % of one decoded token
(~22 ms here). See RELIABILITY.md.

:func:`render_async` renders a chat turn's prompt there; :meth:`TemplateRenderer.vet`
(through :func:`vet_template`) decides once per template text whether a GGUF's
own template may be used (a template that cannot render one user
message within the limits is refused: the model loads with a warning and gets the Modelfile's
TEMPLATE or a plain prompt). The renderer is process-wide (``render_async`` takes no app), created
on first use; the app warms it at start-up and closes it at shutdown.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import TypeVarTuple

from .. import trace
from ..chat.prompt import NO_INPUTS, TemplateInputs, render_pair, render_sample
from ..errors import LocalrunError, TemplateLimit
from ..jsontypes import JSONObject, JSONValue
from ..runtime.bounded import BoundedPool, Limits, default_size

log = logging.getLogger(__name__)

RENDER_TIMEOUT = 10.0  # seconds; templates are user-supplied code (Modelfile TEMPLATE, request template)
LIMITS = Limits(cpu_seconds=5, memory_bytes=1 << 30, wall_seconds=RENDER_TIMEOUT)
Args = TypeVarTuple("Args")


class TemplateRenderer:
    """A bounded worker pool for templates plus the threads that wait on it (the render executor)."""

    def __init__(self, size: int | None = None, limits: Limits = LIMITS) -> None:
        self.pool = BoundedPool(size or default_size(), limits, error=TemplateLimit, what="the chat template")
        self.executor = ThreadPoolExecutor(max_workers=self.pool.size, thread_name_prefix="render")
        self._verdicts: OrderedDict[str, str | None] = OrderedDict()
        self._lock = threading.Lock()

    async def run(self, fn: Callable[[*Args], object], *args: *Args) -> JSONValue:
        """``fn(*args)`` in a bounded worker (see :meth:`BoundedPool.run`), awaited off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.pool.run, fn, *args)

    async def vet(self, source: str, model: str, sample: Callable[[str], object]) -> str | None:
        """None when ``sample(source)`` (a job rendering a one-message chat with ``source``) runs
        within the limits, else why the template is refused.

        Decided once per template text (the answer is cached); a refusal is logged once, naming
        ``model``: it loads anyway, with the Modelfile's TEMPLATE or a plain prompt.
        """
        key = hashlib.sha256(source.encode("utf-8", errors="replace")).hexdigest()
        with self._lock:
            if key in self._verdicts:
                self._verdicts.move_to_end(key)
                return self._verdicts[key]
        try:
            await self.run(sample, source)
            verdict = None
        except LocalrunError as exc:
            verdict = exc.message
            log.warning("model %s: its GGUF chat template is refused (%s); using the Modelfile's TEMPLATE "
                        "or a plain prompt", model, verdict)
        with self._lock:
            self._verdicts[key] = verdict
            while len(self._verdicts) > 256:
                self._verdicts.popitem(last=False)
        return verdict

    def warm(self) -> None:
        """Start a worker in the background so the first chat does not wait for it."""
        self.executor.submit(self.pool.warm)

    def close(self) -> None:
        self.pool.close()
        self.executor.shutdown(wait=False, cancel_futures=True)


_renderer: TemplateRenderer | None = None
_renderer_lock = threading.Lock()


def renderer() -> TemplateRenderer:
    """The process-wide renderer, created on first use."""
    global _renderer
    with _renderer_lock:
        if _renderer is None:
            _renderer = TemplateRenderer()
        return _renderer


def close() -> None:
    """Close the process-wide renderer (its workers exit); the next use creates a new one."""
    global _renderer
    with _renderer_lock:
        current, _renderer = _renderer, None
    if current is not None:
        current.close()


async def run(fn: Callable[[*Args], object], *args: *Args) -> JSONValue:
    """``fn(*args)`` in the process-wide renderer's bounded workers."""
    return await renderer().run(fn, *args)


async def render_async(source: str | None, messages: list[JSONObject],
                       tools: list[JSONObject] | None = None, *,
                       inputs: TemplateInputs = NO_INPUTS, num_ctx: int | None = None) -> tuple[str, str | None]:
    """Render the prompt and the system prefix in a bounded worker process.

    A hostile or buggy template (huge arithmetic, nested loops, huge output) must not freeze or
    exhaust the daemon that serves every other client: it gets a TemplateError (400) within
    ``RENDER_TIMEOUT``. Returns (prompt, system prefix or None). With ``num_ctx``, the system prefix
    (a second render, only ever used to keep the system prompt when truncating) is rendered only
    when the prompt :func:`~localrun.chat.prompt.might_overflow` that context; otherwise it is None.
    """
    prompt: JSONValue
    prefix: JSONValue
    if not source:  # no template code to run: the messages joined
        prompt, prefix = render_pair(source, messages, tools, None, num_ctx)
    else:
        rendered = await run(render_pair, source, messages, tools, asdict(inputs), num_ctx)
        assert isinstance(rendered, list), "render_pair returns [prompt, prefix]"
        prompt, prefix = rendered
    trace.mark_request("rendered")
    return str(prompt), prefix if prefix is None else str(prefix)


async def vet_template(model: str, source: str) -> bool:
    """True when a GGUF's own template may be used: it renders one user message within the
    worker's limits (see :meth:`TemplateRenderer.vet`; decided once per template text)."""
    return await renderer().vet(source, model, render_sample) is None
