"""``python -m localrun.runtime.runner``: one loaded model in its own process.

The daemon writes frames (see :mod:`.protocol`) to this process's stdin and reads frames from
its stdout. Native code may print to stdout, so at start-up the protocol keeps a private copy of
fd 1 and fd 1 is pointed at stderr: only frames ever reach the daemon's reader.

Threads: the main thread reads frames and dispatches them; each generate request gets a pump
thread that iterates its RequestHandle and writes events; blocking calls (embed, tokenize,
stats) run in a small pool so a slow embed never delays a cancel. All writes share one lock.
A native crash kills only this process; the daemon notices end-of-stream and reports it.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any, Callable

from . import protocol

log = logging.getLogger(__name__)

DEFAULT_FACTORY = "localrun.engine.engine:Engine"
DEBUG_ENV = "LOCALRUN_RUNNER_DEBUG"


def load_factory(spec: str) -> Callable[..., Any]:
    """Import ``module:attribute`` (the engine class, or a fake one in tests)."""
    module_name, _, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    factory = getattr(module, attr or "Engine")
    if not callable(factory):
        raise TypeError(f"{spec} is not callable")
    return factory  # type: ignore[no-any-return]


class Runner:
    """Serves one engine over a frame stream (owned by the main thread)."""

    def __init__(self, engine: Any, out: IO[bytes]) -> None:
        self.engine = engine
        self._out = out
        self._write_lock = threading.Lock()
        self._handles: dict[int, Any] = {}
        self._handles_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="runner-rpc")

    def send(self, message: dict[str, Any]) -> None:
        frame = protocol.encode_frame(message)
        with self._write_lock:
            self._out.write(frame)
            self._out.flush()

    def serve(self, stream: IO[bytes]) -> None:
        while True:
            message = protocol.read_frame_sync(stream)
            if message is None or message.get("op") == "close":
                break
            self.dispatch(message)
        self.shutdown()

    def dispatch(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        rid = message.get("id")
        if op == "generate":
            self._generate(int(message["id"]), message["request"])
        elif op == "cancel":
            with self._handles_lock:
                handle = self._handles.get(int(message["id"]))
            if handle is not None:
                handle.cancel()
        elif op in ("embed", "tokenize", "detokenize", "stats"):
            self._pool.submit(self._rpc, rid, op, message)
        elif op == "debug_abort" and os.environ.get(DEBUG_ENV) == "1":
            os.abort()  # simulate a native crash (tests only)
        else:
            self.send({"op": "error", "id": rid, "error": {"type": "EngineError", "message": f"unknown op {op!r}"}})

    def _generate(self, rid: int, data: dict[str, Any]) -> None:
        try:
            handle = self.engine.submit(protocol.decode_request(data))
        except Exception as exc:  # OptionError, GrammarError, ContextOverflow... go back as-is
            self.send({"op": "error", "id": rid, "error": protocol.encode_error(exc)})
            return
        with self._handles_lock:
            self._handles[rid] = handle
        self.send({"op": "accepted", "id": rid})
        threading.Thread(target=self._pump, args=(rid, handle), name=f"pump-{rid}", daemon=True).start()

    def _pump(self, rid: int, handle: Any) -> None:
        try:
            for event in handle:
                self.send({"op": "event", "id": rid, "event": protocol.encode_event(event)})
        except Exception as exc:
            self.send({"op": "event", "id": rid, "event": {"type": "error", "error": protocol.encode_error(exc)}})
        finally:
            with self._handles_lock:
                self._handles.pop(rid, None)

    def _rpc(self, rid: Any, op: str, message: dict[str, Any]) -> None:
        try:
            if op == "embed":
                result: Any = protocol.encode_embed_result(
                    self.engine.embed(list(message["input"]), truncate=bool(message.get("truncate", True)))
                )
            elif op == "tokenize":
                result = list(self.engine.tokenize(message["text"], add_special=bool(message.get("add_special", True))))
            elif op == "detokenize":
                result = self.engine.detokenize(list(message["tokens"]))
            else:
                result = protocol.to_jsonable(self.engine.stats())
            self.send({"op": "result", "id": rid, "result": result})
        except Exception as exc:
            self.send({"op": "error", "id": rid, "error": protocol.encode_error(exc)})

    def shutdown(self) -> None:
        with self._handles_lock:
            handles = list(self._handles.values())
        for handle in handles:
            handle.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.engine.close()


def main() -> int:
    logging.basicConfig(
        level=os.environ.get("LOCALRUN_LOG_LEVEL", "INFO").upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s runner[%(process)d] %(name)s: %(message)s",
    )
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray native prints go to stderr, never into the frame stream
    sys.stdout = sys.stderr
    stream = sys.stdin.buffer
    first = protocol.read_frame_sync(stream)
    if first is None:
        return 0
    writer = Runner(engine=None, out=out)
    if first.get("op") != "load":
        writer.send({"op": "load_error", "error": {"type": "EngineError", "message": "expected a load frame"}})
        return 2
    try:
        factory = load_factory(str(first.get("factory") or DEFAULT_FACTORY))
        options = protocol.decode_load_options(first.get("options") or {})
        engine = factory(str(first["model_path"]), options, template=first.get("template"))
    except Exception as exc:
        log.info("load failed: %s", exc)
        writer.send({"op": "load_error", "error": protocol.encode_error(exc)})
        return 1
    runner = Runner(engine, out)
    runner.send({"op": "loaded", "info": protocol.to_jsonable(getattr(engine, "info", None)), "pid": os.getpid()})
    runner.serve(stream)
    return 0


if __name__ == "__main__":
    sys.exit(main())
