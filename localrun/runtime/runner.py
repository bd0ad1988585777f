"""``python -m localrun.runtime.runner``: one loaded model in its own process.

The daemon writes frames (see :mod:`.protocol`) to this process's stdin and reads frames from
its stdout. Native code may print to stdout, so at start-up the protocol keeps a private copy of
fd 1 and fd 1 is pointed at stderr: only frames ever reach the daemon's reader.

Threads: the main thread reads frames and dispatches them; blocking calls (embed, tokenize,
stats) run in a small pool so a slow embed never delays a cancel. Every outgoing message goes
through one outbox drained by one writer thread: generate requests forward their events into it
straight from the engine's threads (:meth:`RequestHandle.forward`), and whatever has piled up since
the last write leaves as one ``batch`` frame. So one engine step's tokens for 16 streams cost one
write and one wake-up of the daemon, not 16 of each and no thread per stream; and the writer
encodes JSON while the engine thread is inside ``llama_decode`` (which releases the GIL), beside
the engine's helper that publishes the last step's tokens meanwhile (engine/helperthread.py).
A native crash kills only this process; the daemon notices end-of-stream and reports it.
"""

from __future__ import annotations

import binascii
import importlib
import logging
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, Protocol

from .. import config, errors, trace
from ..engine.types import (
    EmbedInput,
    EmbedResult,
    EngineStats,
    ErrorEvent,
    Event,
    GenerateRequest,
    ModelInfo,
    RerankResult,
    is_last,
)
from ..jsontypes import JSONObject, JSONValue
from . import protocol

log = logging.getLogger(__name__)

RpcMessage = protocol.Embed | protocol.Rerank | protocol.Tokenize | protocol.Detokenize | protocol.Stats
"""The blocking calls a runner answers with one result frame (run in its pool)."""

INTERNAL_ERROR = "internal error in the model runner (see the daemon's log)"

DEFAULT_FACTORY = "localrun.engine.engine:Engine"
DEBUG_ENV = "LOCALRUN_RUNNER_DEBUG"


class EngineHandle(Protocol):
    """One submitted request as the runner drives it (the engine's RequestHandle)."""

    request_id: int

    def forward(self, sink: Callable[[Event], None]) -> None:
        """Deliver every event, in order, to ``sink`` (on the engine's thread); see RequestHandle.forward."""
        ...

    def cancel(self) -> None: ...


class ServedEngine(Protocol):
    """What a runner serves: :class:`localrun.engine.engine.Engine`, or a fake loaded through ``factory``."""

    @property
    def info(self) -> ModelInfo:
        """The load report sent to the daemon in the ``loaded`` message."""
        ...

    def submit(self, request: GenerateRequest) -> EngineHandle: ...

    def embed(self, inputs: list[EmbedInput], *, truncate: bool = True) -> EmbedResult: ...

    def rerank(self, query: str, documents: list[str], *, truncate: bool = True) -> RerankResult: ...

    def tokenize(self, text: str, *, add_special: bool = True, images: tuple[bytes, ...] = ()) -> list[int]: ...

    def detokenize(self, tokens: list[int]) -> str: ...

    def stats(self) -> EngineStats: ...

    def close(self) -> None: ...


def load_factory(spec: str) -> Callable[..., ServedEngine]:
    """Import ``module:attribute`` (the engine class, or a fake one in tests).

    The factory is called as ``factory(model_path, options, prefix_cache=...)``,
    ``prefix_cache`` (a PrefixCacheLocation) only when the model has a store digest to key it by.
    """
    module_name, _, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    factory = getattr(module, attr or "Engine")
    if not callable(factory):
        raise TypeError(f"{spec} is not callable")
    return factory  # type: ignore[no-any-return]


_Queued = protocol.FromRunner | tuple[int, Event] | None
"""An outbox item: a message, one request's event (encoded by the writer), or None to stop the writer."""


class Outbox:
    """Every message to the daemon, in order, written by one writer thread (a frame per wake-up)."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._queue: queue.SimpleQueue[_Queued] = queue.SimpleQueue()
        self._traced: set[int] = set()  # request ids whose first event went out (tracing only)
        self._writer = threading.Thread(target=self._write_loop, name="runner-writer", daemon=True)
        self._writer.start()

    def send(self, message: protocol.FromRunner) -> None:
        """Queue one message; the writer sends messages in the order they were queued."""
        self._queue.put(message)

    def send_event(self, rid: int, event: Event) -> None:
        """Any thread (the engine's): queue one event of request ``rid``; the writer encodes it."""
        self._queue.put((rid, event))

    def flush(self, timeout: float = 5.0) -> None:
        """Send everything queued so far and stop the writer (the last call before exiting)."""
        self._queue.put(None)
        self._writer.join(timeout)

    def _write_loop(self) -> None:
        while True:
            items = [self._queue.get()]
            while True:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = None in items
            messages = [_as_message(item) for item in items if item is not None]
            if messages:
                frame = protocol.encode_frame(messages[0] if len(messages) == 1 else protocol.encode_batch(messages))
                try:
                    self._out.write(frame)
                    self._out.flush()
                except (BrokenPipeError, OSError):  # the daemon went away: nothing left to tell it
                    return
                if trace.enabled():
                    self._trace_frame(items)
            if stop:
                return

    def _trace_frame(self, items: list[_Queued]) -> None:
        """Tracing only: mark the frame, and each request whose first event it carried."""
        trace.mark("frame_written", 0, len(items))
        for item in items:
            if isinstance(item, tuple) and item[0] not in self._traced:
                self._traced.add(item[0])
                trace.mark("first_written", item[0])


class Runner:
    """Serves one engine over a frame stream (owned by the main thread)."""

    def __init__(self, engine: ServedEngine, out: IO[bytes]) -> None:
        self.engine = engine
        self._outbox = Outbox(out)
        self._handles: dict[int, EngineHandle] = {}
        self._handles_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="runner-rpc")
        # the one dispatch table; each handler takes its own message type (Any: a dict cannot say so)
        self._handlers: dict[type[protocol.Message], Callable[[Any], None]] = {
            protocol.Generate: self._generate,
            protocol.Cancel: self._cancel,
            protocol.Embed: self._submit_rpc,
            protocol.Rerank: self._submit_rpc,
            protocol.Tokenize: self._submit_rpc,
            protocol.Detokenize: self._submit_rpc,
            protocol.Stats: self._submit_rpc,
            protocol.DebugAbort: self._debug_abort,
        }

    def send(self, message: protocol.FromRunner) -> None:
        """Queue one message; the writer sends messages in the order they were queued."""
        self._outbox.send(message)

    def flush(self, timeout: float = 5.0) -> None:
        """Send everything queued so far and stop the writer (the last call before exiting)."""
        self._outbox.flush(timeout)

    def serve(self, stream: IO[bytes]) -> None:
        while True:
            message = protocol.read_frame_sync(stream)
            if message is None or message.get("op") == protocol.Close.OP:
                break
            self.dispatch(message)
        self.shutdown()

    def dispatch(self, frame: JSONObject) -> None:
        """Decode one frame from the daemon and run its op (the one table: ``self._handlers``)."""
        try:
            message = protocol.decode_message(frame)
            handler = self._handlers[type(message)]
        except (protocol.ProtocolError, KeyError) as exc:
            problem = str(exc) if isinstance(exc, protocol.ProtocolError) else f"unknown op {frame.get('op')!r}"
            self.send(protocol.Failed(protocol.message_id(frame), errors.EngineError(problem)))
            return
        handler(message)

    def _generate(self, message: protocol.Generate) -> None:
        rid = message.id
        trace.mark("recv", rid)
        try:
            handle = self.engine.submit(message.request)
        except Exception as exc:  # OptionError, GrammarError, ContextOverflow... go back as-is
            self.send(protocol.Failed(rid, _as_error(exc)))
            return
        with self._handles_lock:
            self._handles[rid] = handle
        if trace.enabled():
            trace.mark("submitted", rid, handle.request_id)
        self.send(protocol.Accepted(rid))
        handle.forward(lambda event: self._on_event(rid, event))

    def _cancel(self, message: protocol.Cancel) -> None:
        with self._handles_lock:
            handle = self._handles.get(message.id)
        if handle is not None:
            handle.cancel()

    def _debug_abort(self, message: protocol.DebugAbort) -> None:
        if os.environ.get(DEBUG_ENV) == "1":
            os.abort()  # simulate a native crash (tests only)
        self.send(protocol.Failed(None, errors.EngineError(f"unknown op {message.OP!r}")))

    def _on_event(self, rid: int, event: Event) -> None:
        """Engine thread: queue one event of request ``rid`` (encoded later by the writer)."""
        self._outbox.send_event(rid, event)
        if is_last(event):
            with self._handles_lock:
                self._handles.pop(rid, None)

    def _submit_rpc(self, message: RpcMessage) -> None:
        """Blocking calls run in the pool, so a slow embed never delays a cancel read after it."""
        self._pool.submit(self._rpc, message)

    def _rpc(self, message: RpcMessage) -> None:
        try:
            result: JSONValue
            if isinstance(message, protocol.Embed):
                result = protocol.encode_embed_result(self.engine.embed(message.input, truncate=message.truncate))
            elif isinstance(message, protocol.Rerank):
                result = protocol.encode_rerank_result(
                    self.engine.rerank(message.query, message.documents, truncate=message.truncate))
            elif isinstance(message, protocol.Tokenize):
                if message.images:
                    pictures = tuple(binascii.a2b_base64(image) for image in message.images)
                    result = list(self.engine.tokenize(message.text, add_special=message.add_special, images=pictures))
                else:
                    result = list(self.engine.tokenize(message.text, add_special=message.add_special))
            elif isinstance(message, protocol.Detokenize):
                result = self.engine.detokenize(message.tokens)
            else:
                result = protocol.to_jsonable(self.engine.stats())
            self.send(protocol.Result(message.id, result))
        except Exception as exc:
            self.send(protocol.Failed(message.id, _as_error(exc)))

    def shutdown(self) -> None:
        with self._handles_lock:
            handles = list(self._handles.values())
        for handle in handles:
            handle.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.engine.close()


def _as_message(item: protocol.FromRunner | tuple[int, Event]) -> JSONObject:
    """A queued item encoded: a message as it is, a ``(rid, event)`` pair as an event message."""
    message = protocol.EventMessage(*item) if isinstance(item, tuple) else item
    try:
        return protocol.encode_message(message)
    except Exception as exc:  # an event that cannot be encoded ends its stream with an error, not the writer
        rid = message.id if isinstance(message, protocol.EventMessage) else None
        return protocol.encode_message(protocol.EventMessage(rid, ErrorEvent(error=_as_error(exc))) if rid is not None
                                       else protocol.Failed(None, _as_error(exc)))


def _as_error(exc: BaseException) -> errors.LocalrunError:
    """What crosses the pipe for ``exc``: itself when it is localrun's, else an EngineError naming it.

    An AssertionError is a broken invariant of ours (the server checks every option where the
    request arrives, so no input should reach one): its traceback goes to the log, and the client
    is told only that it was an internal error, never the assertion's text.
    """
    if isinstance(exc, AssertionError):
        log.error("internal error in the runner", exc_info=exc)
        return errors.EngineError(INTERNAL_ERROR)
    return protocol.decode_error(protocol.encode_error(exc))


def _stop_gracefully(signum: int, _frame: object) -> None:
    """SIGTERM or SIGINT (e.g. `systemctl stop`, which signals the daemon's whole process group): end
    the way a ``close`` frame does, so the engine saves its prefix cache before the process exits."""
    raise SystemExit(0)


def main() -> int:
    signal.signal(signal.SIGTERM, _stop_gracefully)
    signal.signal(signal.SIGINT, _stop_gracefully)
    logging.basicConfig(
        level=config.log_level(),  # the daemon checked it before starting this process
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s runner[%(process)d] %(name)s: %(message)s",
    )
    trace.configure(config.trace_dir())
    trace.mark("runner_main")  # after the interpreter and this module's imports
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray native prints go to stderr, never into the frame stream
    sys.stdout = sys.stderr
    stream = sys.stdin.buffer
    first = protocol.read_frame_sync(stream)
    if first is None:
        return 0
    writer = Outbox(out)  # until an engine exists: only a load failure to report
    try:
        load = protocol.decode_message(first)
    except protocol.ProtocolError as exc:
        load = exc  # type: ignore[assignment]
    if not isinstance(load, protocol.Load):
        writer.send(protocol.LoadFailed(errors.EngineError("expected a load frame")))
        writer.flush()
        return 2
    try:
        trace.mark("load_frame")
        factory = load_factory(load.factory or DEFAULT_FACTORY)
        trace.mark("factory_imported")  # llama_cpp and the engine
        extra = {"prefix_cache": load.prefix_cache} if load.prefix_cache is not None else {}
        engine = factory(load.model_path, load.options, **extra)
    except Exception as exc:
        log.info("load failed: %s", exc)
        writer.send(protocol.LoadFailed(_as_error(exc)))
        writer.flush()
        return 1
    trace.mark("engine_built")
    writer.flush()
    runner = Runner(engine, out)
    runner.send(protocol.Loaded(engine.info, os.getpid()))
    try:
        runner.serve(stream)
    except SystemExit:  # a signal: shut down as for a close frame
        runner.shutdown()
    runner.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
