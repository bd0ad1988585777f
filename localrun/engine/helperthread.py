"""A helper thread that streams a step's tokens while the engine thread is inside ``llama_decode``.

After a step's tokens are sampled, what is left of it (detokenizing, stop strings, one event per
token: batcher.py's *publishing*) does not decide the next batch, only whether a sequence that hit
a stop string is in it one step too long. So the batcher builds the next batch, hands the
publishing to this thread and calls ``llama_decode``, as SGLang's overlap scheduler does: ctypes
releases the GIL inside it, so the kernels and the Python run on two cores at once instead of one
after the other.

The engine thread decodes and this one publishes, not the other way round: a thread woken to
decode would need the GIL to start, and the engine thread busy publishing would hold it, so the
decode would begin only after the publishing (measured: no overlap at all). Here the engine
thread drops the GIL as it enters ``llama_decode``, which is when the helper takes it.

One job at a time: :meth:`start`, then :meth:`wait` before touching what the job touches.
Owned by the engine thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

_Job = Callable[[], None] | None


class HelperThread:
    """Runs one job at a time on a thread of its own."""

    def __init__(self, name: str) -> None:
        self._todo: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[BaseException | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def start(self, job: Callable[[], None]) -> None:
        """Begin ``job``; :meth:`wait` for it before the next one."""
        self._todo.put(job)

    def wait(self) -> None:
        """Return once the job has ended; re-raise what it raised."""
        error = self._done.get()
        if error is not None:
            raise error

    def close(self) -> None:
        """Stop the thread (after the job in flight, if any)."""
        self._todo.put(None)
        self._thread.join()

    def _loop(self) -> None:
        while (job := self._todo.get()) is not None:
            try:
                job()
                self._done.put(None)
            except BaseException as exc:  # handed to wait(), which the engine thread is blocked in
                self._done.put(exc)
