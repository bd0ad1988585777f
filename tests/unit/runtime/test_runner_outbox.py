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
    """Emits three tokens before the runner forwards the handle, the rest after."""

    def __init__(self) -> None:
        self.handles: list[RequestHandle] = []

    def submit(self, request: GenerateRequest) -> RequestHandle:
        handle = RequestHandle(len(self.handles), wake=lambda: None)
        for i in range(3):
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
