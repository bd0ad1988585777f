"""The runner's outbox: events reach the daemon in order, batched, without a thread per request."""

from __future__ import annotations

import io
import threading
from typing import Any

from localrun.engine.sequence import RequestHandle
from localrun.engine.types import DoneEvent, DoneReason, GenerateRequest, SamplingOptions, TokenEvent
from localrun.runtime import protocol
from localrun.runtime.runner import Runner


class _Out(io.RawIOBase):
    def __init__(self) -> None:
        self.data = bytearray()
        self.writes = 0
        self.gate = threading.Event()  # the first write waits for it: a daemon slow to read

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.gate.wait(5)
        self.data += bytes(b)
        self.writes += 1
        return len(b)


class _Engine:
    """Emits ``early`` tokens before the runner forwards the handle, the rest after."""

    def __init__(self, early: int = 3) -> None:
        self.handles: list[RequestHandle] = []
        self.early = early

    def submit(self, request: GenerateRequest) -> RequestHandle:
        handle = RequestHandle(len(self.handles), wake=lambda: None)
        for i in range(self.early):
            handle.put(TokenEvent(f"t{i}"))
        self.handles.append(handle)
        return handle

    def close(self) -> None:
        pass


def _frames(data: bytes) -> list[dict[str, Any]]:
    stream, out = io.BytesIO(data), []
    while (frame := protocol.read_frame_sync(stream)) is not None:
        out.extend(frame["messages"] if frame["op"] == "batch" else [frame])
    return out


def test_events_queued_before_and_after_forwarding_arrive_in_order_after_accepted() -> None:
    engine, out = _Engine(), _Out()
    runner = Runner(engine, out)  # type: ignore[arg-type]
    request = protocol.encode_request(GenerateRequest("hi", SamplingOptions()))
    for rid in (1, 2):
        runner.dispatch({"op": "generate", "id": rid, "request": request})

    def engine_step() -> None:  # the engine thread goes on producing after forward()
        for i in range(3, 50):
            for handle in engine.handles:
                handle.put(TokenEvent(f"t{i}"))
        for handle in engine.handles:
            handle.put(DoneEvent(DoneReason.LENGTH, 1, 0, 50, 0, 0))

    worker = threading.Thread(target=engine_step)
    worker.start()
    worker.join()
    out.gate.set()
    runner.flush()

    messages = _frames(bytes(out.data))
    for rid in (1, 2):
        mine = [m for m in messages if m.get("id") == rid]
        assert mine[0] == {"op": "accepted", "id": rid}
        texts = [m["event"].get("text") for m in mine[1:-1]]
        assert texts == [f"t{i}" for i in range(50)]
        assert mine[-1]["event"]["type"] == "done"
    assert out.writes <= 3  # what piled up while the daemon was slow left in one write, not 100


def _lone_request(out: _Out, early: int = 3) -> tuple[Runner, _Engine]:
    engine = _Engine(early)
    runner = Runner(engine, out)  # type: ignore[arg-type]
    runner.dispatch({"op": "generate", "id": 1,
                     "request": protocol.encode_request(GenerateRequest("hi", SamplingOptions()))})
    return runner, engine


def _wait_for_frames(out: _Out, n: int) -> None:
    for _ in range(500):
        if len(_frames(bytes(out.data))) >= n:
            return
        threading.Event().wait(0.01)


def test_a_lone_request_s_first_and_last_events_leave_on_the_engine_thread_at_once() -> None:
    out = _Out()
    out.gate.set()
    runner, engine = _lone_request(out, early=0)
    _wait_for_frames(out, 1)  # "accepted", from the writer
    seen: list[list[str]] = []

    def engine_step() -> None:
        handle = engine.handles[0]
        handle.put(TokenEvent("first"))
        seen.append([m["event"].get("text", "") for m in _frames(bytes(out.data))[1:]])  # out already
        for i in range(5):
            handle.put(TokenEvent(f"t{i}"))  # for the writer
        _wait_for_frames(out, 7)
        handle.put(DoneEvent(DoneReason.LENGTH, 1, 0, 6, 0, 0))
        seen.append([m["event"]["type"] for m in _frames(bytes(out.data))[-1:]])

    worker = threading.Thread(target=engine_step)
    worker.start()
    worker.join()
    runner.flush()
    assert seen == [["first"], ["done"]]
    texts = [m["event"].get("text") for m in _frames(bytes(out.data))[1:-1]]
    assert texts == ["first"] + [f"t{i}" for i in range(5)]


def test_a_lone_request_s_events_wait_behind_what_the_writer_has_not_sent() -> None:
    out = _Out()  # the daemon reads slowly: "accepted" and the first tokens are stuck in the writer
    runner, engine = _lone_request(out)

    def engine_step() -> None:
        for i in range(3, 20):
            engine.handles[0].put(TokenEvent(f"t{i}"))
        engine.handles[0].put(DoneEvent(DoneReason.LENGTH, 1, 0, 20, 0, 0))

    worker = threading.Thread(target=engine_step)
    worker.start()
    worker.join(5)
    assert not worker.is_alive()  # queued behind the stuck write, never blocked on it
    out.gate.set()
    runner.flush()
    mine = _frames(bytes(out.data))
    assert mine[0] == {"op": "accepted", "id": 1}
    assert [m["event"].get("text") for m in mine[1:-1]] == [f"t{i}" for i in range(20)]
    assert mine[-1]["event"]["type"] == "done"
