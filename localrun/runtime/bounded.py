"""Run short pure-Python jobs from strangers' input in child processes bounded in CPU, memory and time.

A thread cannot be stopped, and a long computation in C (Jinja folding ``9 ** 15000000`` while
holding the GIL) stops every other thread with it. So work whose cost depends on untrusted input
(chat templates) runs in a :class:`BoundedPool` of child processes (``python -m
localrun.runtime.bounded_child``), each with

- a CPU budget per job (``RLIMIT_CPU`` re-armed before every job: the kernel kills a worker that
  spends more than ``Limits.cpu_seconds`` on one job),
- a memory cap (``RLIMIT_AS``: an allocation past it is a MemoryError in the worker, not in the
  daemon), and no core dumps,
- a wall-clock deadline kept by the caller: a worker that has not answered in ``Limits.wall_seconds``
  is killed (SIGKILL).

A job that breaks a limit fails with the pool's ``error`` type (a LocalrunError, so the client
gets a 4xx), its worker is replaced, and no other job notices. A worker that died between jobs
(killed from outside: the OOM killer, a ``kill -9``) costs nothing: a worker acknowledges each job
(:data:`ACCEPTED`) before it runs any of it, so a job that finds its worker dead (exited, a broken
pipe, end of stream before the acknowledgement) never started, and goes to a fresh worker; only
a worker that dies after the acknowledgement fails its job. Jobs are named module-level
functions of localrun and travel as JSON (arguments and results), never pickles: a worker that
were somehow subverted could send nothing that runs code in the daemon.

Thread-safe: :meth:`BoundedPool.run` blocks its calling thread (run it in an executor sized to the
pool); at most ``size`` workers exist, callers beyond that wait for a free one. On platforms
without ``resource`` (Windows) only the wall-clock deadline applies.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import IO, TypeVarTuple

from .. import errors
from ..jsontypes import JSONObject, JSONValue, as_object
from . import framing

log = logging.getLogger(__name__)

MAX_FRAME = 64 * 1024 * 1024  # a job's arguments or result: a rendered prompt is megabytes at most
ACCEPTED: JSONObject = {"accepted": True}
"""What a worker answers first to every job, before running any of it (see the module docstring)."""
Args = TypeVarTuple("Args")


@dataclass(frozen=True, slots=True)
class Limits:
    """What one job may use: CPU seconds, bytes of address space (the whole worker), wall seconds."""

    cpu_seconds: int = 5
    memory_bytes: int = 1 << 30
    wall_seconds: float = 10.0


def encode_frame(message: object) -> bytes:
    """``message`` as one frame (TypeError or ValueError when it is not JSON, FrameTooLarge when
    it is over :data:`MAX_FRAME`)."""
    return framing.encode(message, MAX_FRAME)


def write_frame(out: IO[bytes], message: object) -> None:
    """Send ``message`` (the errors of :func:`encode_frame`, before anything is sent)."""
    out.write(encode_frame(message))
    out.flush()


def read_frame(inp: IO[bytes]) -> JSONValue:
    """The next message, or None at end of stream (the other side is gone); BadFrame on garbage."""
    return framing.read_sync(inp, MAX_FRAME)


class _WorkerGone(Exception):
    """The worker died or missed its deadline; it is never used again."""


class _NotTaken(_WorkerGone):
    """The worker was dead before it acknowledged the job: nothing of the job ran, another may take it."""


class _Worker:
    """One child process; its replies are read by a thread into a queue so waits can time out."""

    def __init__(self, limits: Limits) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "localrun.runtime.bounded_child", json.dumps(asdict(limits))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        self.replies: queue.Queue[JSONValue] = queue.Queue()  # None: the worker is gone
        self._reader = threading.Thread(target=self._read, name=f"bounded-reader-{self.proc.pid}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            while (message := read_frame(self.proc.stdout)) is not None:
                self.replies.put(message)
        except (OSError, errors.BadFrame):
            pass
        self.replies.put(None)

    def call(self, frame: bytes, timeout: float) -> JSONObject:
        """Send the job ``frame`` and wait up to ``timeout`` seconds for its reply.

        Raises _NotTaken when the worker was gone before it acknowledged the job (the pipe is
        broken, or ends before the acknowledgement), _WorkerGone when it died or missed the
        deadline after that (then it is killed).
        """
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(frame)
            self.proc.stdin.flush()
        except OSError as exc:  # EPIPE: nobody reads the pipe any more
            raise _NotTaken(f"could not send the job ({exc})") from None
        deadline = time.monotonic() + timeout
        if (ack := self._next(deadline, timeout)) != ACCEPTED:
            if ack is None:
                raise _NotTaken(_describe_exit(self.proc.wait()))
            raise _WorkerGone(f"it answered {str(ack)[:80]}, not an acknowledgement")
        reply = self._next(deadline, timeout)
        if reply is None:
            raise _WorkerGone(_describe_exit(self.proc.wait()))
        if not isinstance(reply, dict):  # bounded_child always answers {"ok": ...} or {"error": ...}
            raise _WorkerGone(f"it answered {type(reply).__name__}, not a reply")
        return reply

    def _next(self, deadline: float, timeout: float) -> JSONValue:
        """The worker's next message (None: it is gone); kills it at ``deadline``."""
        try:
            return self.replies.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self.kill()
            raise _WorkerGone(f"it took longer than {timeout:g}s") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # a zombie the kernel will reap
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        sig = -code
        if sig == getattr(signal, "SIGXCPU", -1):
            return "it used up its CPU time"
        if sig == signal.SIGKILL:  # the CPU limit's hard stop, or the kernel's OOM killer
            return "it was killed (SIGKILL: out of CPU time or out of memory)"
        try:
            return f"it was stopped by {signal.Signals(sig).name}"
        except ValueError:
            return f"it was stopped by signal {sig}"
    return f"it exited with status {code}"


class BoundedPool:
    """Up to ``size`` bounded workers; see the module docstring."""

    def __init__(self, size: int, limits: Limits, *, error: type[errors.LocalrunError], what: str) -> None:
        self.size = size
        self.limits = limits
        self._error = error
        self._what = what  # e.g. "the chat template": error messages start with it
        self._idle: list[_Worker] = []
        self._spawned = 0
        self._cond = threading.Condition()
        self._closed = False

    def warm(self) -> None:
        """Start one worker ahead of the first job (starting one takes a few hundred ms)."""
        with self._cond:
            if self._spawned or self._closed:
                return
            self._spawned += 1
        try:
            worker = _Worker(self.limits)
        except OSError:
            with self._cond:
                self._spawned -= 1
            raise
        self._release(worker)

    def run(self, fn: Callable[[*Args], object], *args: *Args) -> JSONValue:
        """``fn(*args)`` in a worker; its JSON result, or the error it raised (a LocalrunError).

        ``fn`` must be a module-level function of localrun taking and returning JSON values; what
        comes back is that value as JSON reads it (a tuple is a list), for the caller to narrow.
        Raises the pool's error type when the job breaks a limit or its worker dies.
        """
        name = f"{fn.__module__}:{fn.__qualname__}"
        if not fn.__module__.startswith("localrun.") or "<" in fn.__qualname__:
            raise ValueError(f"{name} cannot run in a bounded worker")
        try:
            frame = encode_frame({"fn": name, "args": args})
        except (TypeError, ValueError, errors.FrameTooLarge) as exc:
            raise self._error(f"{self._what} cannot run: {exc}") from None
        reply = self._hand_off(frame)
        if "ok" in reply:
            return reply["ok"]
        raise self._rebuild(as_object(reply.get("error")))

    def _hand_off(self, frame: bytes) -> JSONObject:
        """The reply to ``frame`` from a live worker: one found dead before it took the job is
        replaced and the job goes to the next (at most ``size + 1`` tries: a fresh worker that dies
        before taking a job means workers cannot run here at all)."""
        for _ in range(self.size + 1):
            worker = self._acquire()
            started = time.monotonic()
            try:
                reply = worker.call(frame, self.limits.wall_seconds)
            except _NotTaken as exc:
                self._discard(worker)
                log.warning("a worker for %s had died (%s); the job goes to a new one", self._what, exc)
                continue
            except _WorkerGone as exc:
                self._discard(worker)
                log.warning("%s was stopped after %.1fs: %s", self._what, time.monotonic() - started, exc)
                raise self._error(f"{self._what} was stopped: {exc} (limits: {self.limits.cpu_seconds}s of CPU, "
                                  f"{self.limits.memory_bytes >> 20} MiB of memory, "
                                  f"{self.limits.wall_seconds:g}s)") from None
            self._release(worker)
            return reply
        raise self._error(f"{self._what} cannot run: {self.size + 1} worker processes in a row died before "
                          "taking the job")

    def _rebuild(self, error: JSONObject) -> errors.LocalrunError:
        message = str(error.get("message") or "failed")
        rebuilt = errors.from_code(error.get("code"), message)  # the same mapping as the runner pipe's
        return rebuilt if rebuilt is not None else self._error(f"{self._what} failed: {message}")

    def _acquire(self) -> _Worker:
        """An idle worker that has not exited, else a new one (waits while ``size`` are busy)."""
        dead: list[_Worker] = []
        try:
            with self._cond:
                while True:
                    if self._closed:
                        raise self._error(f"{self._what} cannot run: the server is shutting down")
                    if self._idle:
                        worker = self._idle.pop()
                        if worker.proc.poll() is None:
                            return worker
                        dead.append(worker)  # killed while idle: its place goes to a new one
                        self._spawned -= 1
                        continue
                    if self._spawned < self.size:
                        self._spawned += 1
                        break
                    self._cond.wait()
        finally:
            for worker in dead:
                log.warning("a worker for %s had died while idle (%s); a new one replaces it", self._what,
                            _describe_exit(worker.proc.returncode))
                worker.kill()
        try:
            return _Worker(self.limits)
        except OSError as exc:
            with self._cond:
                self._spawned -= 1
                self._cond.notify()
            raise self._error(f"{self._what} cannot run: no worker process ({exc})") from None

    def _release(self, worker: _Worker) -> None:
        with self._cond:
            if self._closed:
                worker.kill()
                return
            self._idle.append(worker)
            self._cond.notify()

    def _discard(self, worker: _Worker) -> None:
        worker.kill()
        with self._cond:
            self._spawned -= 1
            self._cond.notify()

    def close(self) -> None:
        """Kill idle workers now and busy ones as they finish; later runs fail."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        for worker in idle:
            worker.kill()


def default_size() -> int:
    """Two workers, more on machines with more cores (at most four)."""
    return max(2, min(4, (os.cpu_count() or 2) // 2))
