"""The daemon side of a runner process: start it, talk to it, notice when it dies.

:class:`RunnerProcess` owns one ``python -m localrun.runtime.runner`` child. All methods run on
the daemon's event loop. When the child exits unexpectedly (a native crash, SIGKILL, OOM), every
request still in flight ends with :class:`~localrun.errors.RunnerCrashed` and ``exited`` resolves
with the reason; the scheduler then forgets the model so the next request loads it again.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .. import errors, trace
from ..engine.types import (
    EmbedInput,
    EmbedResult,
    EngineStats,
    ErrorEvent,
    Event,
    GenerateRequest,
    LoadOptions,
    ModelInfo,
    PrefixCacheLocation,
    RerankResult,
    is_last,
)
from ..jsontypes import JSONValue
from . import protocol

log = logging.getLogger(__name__)


class RunnerStream:
    """The events of one generate request, in order; ends after a DoneEvent or ErrorEvent."""

    def __init__(self, process: RunnerProcess, rid: int) -> None:
        self._process = process
        self.rid = rid
        self._queue: asyncio.Queue[Event] = asyncio.Queue()
        self._finished = False
        self._cancelled = False

    def _push(self, event: Event) -> None:
        self._queue.put_nowait(event)

    def __aiter__(self) -> RunnerStream:
        return self

    async def __anext__(self) -> Event:
        if self._finished:
            raise StopAsyncIteration
        event = await self._queue.get()
        if is_last(event):
            self._finished = True
            self._process._streams.pop(self.rid, None)
        return event

    @property
    def finished(self) -> bool:
        return self._finished

    async def cancel(self) -> None:
        """Ask the engine to stop this request (frees its slot at the next engine step). Idempotent."""
        if self._cancelled or self._finished:
            return
        self._cancelled = True
        if self._process.alive:
            with contextlib.suppress(ConnectionError, errors.RunnerCrashed):
                await self._process._send(protocol.Cancel(self.rid))


class RunnerProcess:
    """One model runner child process. Create with :meth:`start`."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self._proc = proc
        self.pid: int = proc.pid
        self.info: ModelInfo | None = None  # the engine's load report, set once loaded
        self._ids = itertools.count(1)
        self._streams: dict[int, RunnerStream] = {}
        self._accept: dict[int, asyncio.Future[None]] = {}
        self._calls: dict[int, asyncio.Future[JSONValue]] = {}
        self._write_lock = asyncio.Lock()
        self._closing = False
        self.exited: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._reader_task: asyncio.Task[None] | None = None
        # the one dispatch table; each handler takes its own message type (Any: a dict cannot say so)
        self._handlers: dict[type[protocol.Message], Callable[[Any], None]] = {
            protocol.Batch: self._on_batch,
            protocol.EventMessage: self._on_event,
            protocol.Accepted: self._on_accepted,
            protocol.Result: self._on_result,
            protocol.Failed: self._on_failed,
        }

    @classmethod
    async def start(
        cls,
        name: str,
        model_path: str,
        options: LoadOptions,
        *,
        factory: str | None = None,
        env: Mapping[str, str] | None = None,
        prefix_cache: PrefixCacheLocation | None = None,
    ) -> RunnerProcess:
        """Spawn a runner, load the model in it and wait until it is ready.

        Raises the runner's load error (e.g. InvalidModelFile) or RunnerCrashed if it died.
        """
        trace.mark("runner_spawn", name)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "localrun.runtime.runner",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, **(env or {})},
            limit=protocol.MAX_FRAME,
        )
        runner = cls(name, proc)
        trace.mark("runner_spawned", name, proc.pid)
        try:
            first = await runner._load(model_path, options, factory, prefix_cache)
        except BaseException:  # a failed, timed-out or abandoned load must not leave a process behind
            runner.kill()
            await runner._reap()
            raise
        if not isinstance(first, (protocol.Loaded, protocol.LoadFailed)):
            runner.kill()
            code = await runner._reap()
            raise errors.RunnerCrashed(f"the runner for {name} died while loading ({_describe_exit(code)})")
        if isinstance(first, protocol.LoadFailed):
            await runner._reap()
            raise first.error
        runner.info = first.info
        runner._reader_task = asyncio.create_task(runner._read_loop(), name=f"runner-reader-{name}")
        return runner

    async def _load(self, model_path: str, options: LoadOptions, factory: str | None,
                    prefix_cache: PrefixCacheLocation | None) -> protocol.Message | None:
        await self._send(protocol.Load(model_path, options, factory, prefix_cache))
        assert self._proc.stdout is not None
        try:
            frame = await protocol.read_frame(self._proc.stdout)
            return None if frame is None else protocol.decode_message(frame)
        except errors.RunnerCrashed:  # ProtocolError included
            return None

    @property
    def alive(self) -> bool:
        return not self.exited.done()

    async def _send(self, message: protocol.ToRunner) -> None:
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing():
            raise self._not_running()
        async with self._write_lock:
            try:
                stdin.write(protocol.encode_frame(protocol.encode_message(message)))
                await stdin.drain()
            except (ConnectionError, BrokenPipeError) as exc:
                raise self._not_running() from exc

    def _not_running(self) -> errors.RunnerGone:
        """What a request meets when this runner is gone (it died, or was stopped) before the
        request reached it."""
        return errors.RunnerGone(f"the runner for model {self.name!r} is not running; the next request "
                                    "loads it again")

    async def _read_loop(self) -> None:
        assert self._proc.stdout is not None
        problem = ""
        frames = protocol.frames(self._proc.stdout)
        try:
            while (messages := await protocol.read_messages(frames)) is not None:
                for message in messages:
                    trace.mark("frame_read", self.pid)
                    self._dispatch(protocol.decode_message(message))
        except errors.RunnerCrashed as exc:
            problem = str(exc)
        code = await self._reap()
        reason = "unloaded" if self._closing and code == 0 else _describe_exit(code)
        if problem:
            reason = f"{reason}; {problem}"
        self._fail_all(reason)
        if not self.exited.done():
            self.exited.set_result(reason)

    def _dispatch(self, message: protocol.Message) -> None:
        """Route one message from the runner (the one table: ``self._handlers``); ops only the
        daemon sends, or a second ``loaded``, are ignored."""
        handler = self._handlers.get(type(message))
        if handler is not None:
            handler(message)

    def _on_batch(self, message: protocol.Batch) -> None:
        for inner in message.messages:  # one engine step's events for every stream, in order
            self._dispatch(inner)

    def _on_event(self, message: protocol.EventMessage) -> None:
        stream = self._streams.get(message.id)
        if stream is not None:
            stream._push(message.event)

    def _on_accepted(self, message: protocol.Accepted) -> None:
        fut = self._accept.pop(message.id, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _on_result(self, message: protocol.Result) -> None:
        fut = self._calls.pop(message.id, None)
        if fut is not None and not fut.done():
            fut.set_result(message.result)

    def _on_failed(self, message: protocol.Failed) -> None:
        if message.id is None:
            return
        call = self._calls.pop(message.id, None)
        if call is not None:
            if not call.done():
                call.set_exception(message.error)
            return
        accepted = self._accept.pop(message.id, None)  # a refused generate
        self._streams.pop(message.id, None)
        if accepted is not None and not accepted.done():
            accepted.set_exception(message.error)

    def _fail_all(self, reason: str) -> None:
        error = errors.RunnerCrashed(
            f"the runner for model {self.name!r} stopped ({reason}); the next request loads it again"
        )
        futures: list[asyncio.Future[None] | asyncio.Future[JSONValue]] = [*self._accept.values(),
                                                                            *self._calls.values()]
        for fut in futures:
            if not fut.done():
                fut.set_exception(error)
        self._accept.clear()
        self._calls.clear()
        for stream in list(self._streams.values()):
            stream._push(ErrorEvent(error=error))
        self._streams.clear()

    async def generate(self, request: GenerateRequest) -> RunnerStream:
        """Submit a request; raises the engine's synchronous errors (OptionError, ...)."""
        rid = next(self._ids)
        stream = RunnerStream(self, rid)
        accepted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._streams[rid] = stream
        self._accept[rid] = accepted
        if not self.alive:
            self._streams.pop(rid, None)
            self._accept.pop(rid, None)
            raise self._not_running()
        try:
            await self._send(protocol.Generate(rid, request))
            trace.mark_request("sent", f"{self.pid}:{rid}")
            await accepted
        except errors.LocalrunError:  # refused by the engine (OptionError...) or the runner died
            self._streams.pop(rid, None)
            self._accept.pop(rid, None)
            raise
        except BaseException:
            # The caller went away: the runner reads frames in order, so this cancel finds the request.
            self._streams.pop(rid, None)
            self._accept.pop(rid, None)
            if self.alive:
                with contextlib.suppress(errors.RunnerCrashed):
                    await self._send(protocol.Cancel(rid))
            raise
        return stream

    async def _call(self, make: Callable[[int], protocol.ToRunner]) -> JSONValue:
        """Send the RPC ``make(id)`` builds and wait for its result (raises the error it failed with)."""
        rid = next(self._ids)
        fut: asyncio.Future[JSONValue] = asyncio.get_running_loop().create_future()
        self._calls[rid] = fut
        if not self.alive:
            self._calls.pop(rid, None)
            raise self._not_running()
        try:
            await self._send(make(rid))
            return await fut
        finally:
            self._calls.pop(rid, None)

    async def embed(self, inputs: list[EmbedInput], truncate: bool = True) -> EmbedResult:
        return protocol.decode_embed_result(await self._call(lambda rid: protocol.Embed(rid, inputs, truncate)))

    async def rerank(self, query: str, documents: list[str], truncate: bool = True) -> RerankResult:
        return protocol.decode_rerank_result(
            await self._call(lambda rid: protocol.Rerank(rid, query, documents, truncate)))

    async def tokenize(self, text: str, add_special: bool = True, images: tuple[bytes, ...] = ()) -> list[int]:
        """``text`` as token ids; with ``images``, one marker each, the image positions count too."""
        pictures = [base64.b64encode(image).decode("ascii") for image in images]
        return protocol.decode_tokens(await self._call(lambda rid: protocol.Tokenize(rid, text, add_special,
                                                                                        pictures)))

    async def detokenize(self, tokens: list[int]) -> str:
        return str(await self._call(lambda rid: protocol.Detokenize(rid, tokens)))

    async def stats(self) -> EngineStats:
        return protocol.decode_stats(await self._call(protocol.Stats))

    async def debug_abort(self) -> None:
        """Make the runner call os.abort() (honoured only with LOCALRUN_RUNNER_DEBUG=1)."""
        await self._send(protocol.DebugAbort())

    async def close(self, timeout: float = 10.0) -> None:
        """End the process (its memory returns to the system); kill it if it does not exit in time."""
        if not self.alive:
            return
        self._closing = True
        try:
            await self._send(protocol.Close())
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except errors.RunnerCrashed:
            pass
        try:
            await asyncio.wait_for(asyncio.shield(self.exited), timeout)
        except TimeoutError:
            log.warning("runner for %s (pid %d) did not exit in %.0fs; killing it", self.name, self.pid, timeout)
            self.kill()
            await self.exited

    async def _reap(self) -> int:
        """Wait for the process to exit, then close our end of its stdin: asyncio frees the
        process's transport only once every pipe is closed, and a runner that died or was killed
        leaves stdin open (the transport was otherwise collected after its loop had closed)."""
        code = await self._proc.wait()
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        return code

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self._proc.kill()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
