"""The daemon side of a runner process: start it, talk to it, notice when it dies.

:class:`RunnerProcess` owns one ``python -m localrun.runtime.runner`` child. All methods run on
the daemon's event loop. When the child exits unexpectedly (a native crash, SIGKILL, OOM), every
request still in flight ends with :class:`~localrun.errors.RunnerCrashed` and ``exited`` resolves
with the reason; the scheduler then forgets the model so the next request loads it again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import signal
import sys
from collections.abc import Mapping
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
    PrefixCacheLocation,
    is_last,
)
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
            try:
                await self._process._send({"op": "cancel", "id": self.rid})
            except (ConnectionError, errors.RunnerCrashed):
                pass


class RunnerProcess:
    """One model runner child process. Create with :meth:`start`."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self._proc = proc
        self.pid: int = proc.pid
        self.info: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._streams: dict[int, RunnerStream] = {}
        self._accept: dict[int, asyncio.Future[None]] = {}
        self._calls: dict[int, asyncio.Future[Any]] = {}
        self._write_lock = asyncio.Lock()
        self._closing = False
        self.exited: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._reader_task: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        name: str,
        model_path: str,
        options: LoadOptions,
        *,
        template: str | None = None,
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
            first = await runner._load(model_path, options, template, factory, prefix_cache)
        except BaseException:  # a failed, timed-out or abandoned load must not leave a process behind
            runner.kill()
            await proc.wait()
            raise
        if first is None or first.get("op") not in ("loaded", "load_error"):
            runner.kill()
            code = await proc.wait()
            raise errors.RunnerCrashed(f"the runner for {name} died while loading ({_describe_exit(code)})")
        if first["op"] == "load_error":
            await proc.wait()
            raise protocol.decode_error(first.get("error"))
        runner.info = first.get("info") or {}
        runner._reader_task = asyncio.create_task(runner._read_loop(), name=f"runner-reader-{name}")
        return runner

    async def _load(self, model_path: str, options: LoadOptions, template: str | None,
                    factory: str | None, prefix_cache: PrefixCacheLocation | None) -> dict[str, Any] | None:
        await self._send({
            "op": "load",
            "model_path": model_path,
            "options": protocol.encode_load_options(options),
            "template": template,
            "factory": factory,
            "prefix_cache": dataclasses.asdict(prefix_cache) if prefix_cache is not None else None,
        })
        assert self._proc.stdout is not None
        try:
            return await protocol.read_frame(self._proc.stdout)
        except errors.RunnerCrashed:
            return None

    @property
    def alive(self) -> bool:
        return not self.exited.done()

    async def _send(self, message: dict[str, Any]) -> None:
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing():
            raise errors.RunnerCrashed(f"the runner for {self.name} is not running")
        async with self._write_lock:
            try:
                stdin.write(protocol.encode_frame(message))
                await stdin.drain()
            except (ConnectionError, BrokenPipeError) as exc:
                raise errors.RunnerCrashed(f"the runner for {self.name} is not running") from exc

    async def _read_loop(self) -> None:
        assert self._proc.stdout is not None
        problem = ""
        try:
            while True:
                message = await protocol.read_frame(self._proc.stdout)
                if message is None:
                    break
                trace.mark("frame_read", self.pid)
                self._dispatch(message)
        except errors.RunnerCrashed as exc:
            problem = str(exc)
        code = await self._proc.wait()
        reason = "unloaded" if self._closing and code == 0 else _describe_exit(code)
        if problem:
            reason = f"{reason}; {problem}"
        self._fail_all(reason)
        if not self.exited.done():
            self.exited.set_result(reason)

    def _dispatch(self, message: dict[str, Any]) -> None:
        op, rid = message.get("op"), message.get("id")
        if op == "batch":  # several messages written at once (one engine step's events), in order
            for inner in message.get("messages") or ():
                if isinstance(inner, dict) and inner.get("op") != "batch":
                    self._dispatch(inner)
        elif op == "event" and isinstance(rid, int):
            stream = self._streams.get(rid)
            if stream is not None:
                stream._push(protocol.decode_event(message["event"]))
        elif op == "accepted" and isinstance(rid, int):
            fut = self._accept.pop(rid, None)
            if fut is not None and not fut.done():
                fut.set_result(None)
        elif op in ("result", "error"):
            fut_any = self._calls.pop(rid, None) if isinstance(rid, int) else None
            if fut_any is None and op == "error" and isinstance(rid, int):
                fut_any = self._accept.pop(rid, None)
                self._streams.pop(rid, None)
            if fut_any is not None and not fut_any.done():
                if op == "result":
                    fut_any.set_result(message.get("result"))
                else:
                    fut_any.set_exception(protocol.decode_error(message.get("error")))

    def _fail_all(self, reason: str) -> None:
        error = errors.RunnerCrashed(
            f"the runner for model {self.name!r} stopped ({reason}); the next request loads it again"
        )
        for fut in [*self._accept.values(), *self._calls.values()]:
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
            raise errors.RunnerCrashed(f"the runner for model {self.name!r} is not running")
        try:
            await self._send({"op": "generate", "id": rid, "request": protocol.encode_request(request)})
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
                try:
                    await self._send({"op": "cancel", "id": rid})
                except errors.RunnerCrashed:
                    pass
            raise
        return stream

    async def _call(self, message: dict[str, Any]) -> Any:
        rid = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._calls[rid] = fut
        if not self.alive:
            self._calls.pop(rid, None)
            raise errors.RunnerCrashed(f"the runner for model {self.name!r} is not running")
        try:
            await self._send({**message, "id": rid})
            return await fut
        finally:
            self._calls.pop(rid, None)

    async def embed(self, inputs: list[EmbedInput], truncate: bool = True) -> EmbedResult:
        return protocol.decode_embed_result(await self._call({"op": "embed", "input": inputs, "truncate": truncate}))

    async def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return [int(t) for t in await self._call({"op": "tokenize", "text": text, "add_special": add_special})]

    async def detokenize(self, tokens: list[int]) -> str:
        return str(await self._call({"op": "detokenize", "tokens": tokens}))

    async def stats(self) -> EngineStats:
        return protocol.decode_stats(await self._call({"op": "stats"}))

    async def debug_abort(self) -> None:
        """Make the runner call os.abort() (honoured only with LOCALRUN_RUNNER_DEBUG=1)."""
        await self._send({"op": "debug_abort"})

    async def close(self, timeout: float = 10.0) -> None:
        """End the process (its memory returns to the system); kill it if it does not exit in time."""
        if not self.alive:
            return
        self._closing = True
        try:
            await self._send({"op": "close"})
            if self._proc.stdin is not None:
                self._proc.stdin.close()
        except errors.RunnerCrashed:
            pass
        try:
            await asyncio.wait_for(asyncio.shield(self.exited), timeout)
        except asyncio.TimeoutError:
            log.warning("runner for %s (pid %d) did not exit in %.0fs; killing it", self.name, self.pid, timeout)
            self.kill()
            await self.exited

    def kill(self) -> None:
        try:
            self._proc.kill()
        except ProcessLookupError:
            pass


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
