"""The runner protocol's typed messages: one codec for every op, errors by code, bad frames refused."""

from __future__ import annotations

import io
from typing import Any

import pytest

from localrun import errors
from localrun.engine.types import (
    DoneEvent,
    DoneReason,
    GenerateRequest,
    LoadOptions,
    ModelInfo,
    SamplingOptions,
    TokenEvent,
)
from localrun.runtime import protocol
from localrun.runtime.runner import Runner

MESSAGES: list[Any] = [
    protocol.Load("/m.gguf", LoadOptions(num_ctx=128, rpc_servers=("h:1",)), "a:B"),
    protocol.Generate(3, GenerateRequest("hi", SamplingOptions(stop=("\n",)))),
    protocol.Generate(4, GenerateRequest("look <__media__> here", images=(b"\x89PNG\r\n\x1a\n\x00\xff", b"BM"))),
    protocol.Cancel(3), protocol.Embed(4, ["a", [1, 2]], False), protocol.Tokenize(5, "hé", False),
    protocol.Detokenize(6, [1, 2]), protocol.Stats(7), protocol.Close(), protocol.DebugAbort(),
    protocol.Loaded(ModelInfo("llama", 1, 2048, 8, 2, 32, None, "{{ x }}", "<s>", "</s>", 10, 256, 2,
                              buffer_bytes={"CPU_Mapped": 10}, rpc_servers=("h:1",)), 42),
    protocol.LoadFailed(errors.InvalidModelFile("not a GGUF")),
    protocol.Accepted(3), protocol.Result(5, [1, 2]),
    protocol.Batch((protocol.EventMessage(3, TokenEvent("a")),
                    protocol.EventMessage(3, DoneEvent(DoneReason.STOP, 1, 0, 1, 0, 0)))),
]


def _same(a: Any, b: Any) -> bool:
    """Dataclass equality, errors compared by class and message (exceptions compare by identity)."""
    if isinstance(a, BaseException):
        return type(a) is type(b) and str(a) == str(b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "__dataclass_fields__") and type(a) is type(b):
        return all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return bool(a == b)


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_survives_a_frame(message: Any) -> None:
    frame = protocol.read_frame_sync(io.BytesIO(protocol.encode_frame(protocol.encode_message(message))))
    assert frame is not None and _same(protocol.decode_message(frame), message)


def test_errors_cross_by_code_through_the_shared_mapping() -> None:
    for exc in (errors.ContextOverflow("long"), errors.ModelfileError("bad", line=2), errors.Busy("full", 4.0)):
        back = protocol.decode_error(protocol.encode_error(exc))
        assert type(back) is type(exc) and back.message == exc.message
    assert protocol.decode_error({"code": "server_busy", "message": "m", "retry_after": 4.0}).retry_after == 4.0
    assert errors.from_code("runner_crashed", "x").__class__ is errors.RunnerCrashed
    assert errors.from_code("os.system", "x") is None and errors.from_code(["x"], "x") is None
    odd = protocol.decode_error(protocol.encode_error(ZeroDivisionError("nope")))
    assert isinstance(odd, errors.EngineError) and "ZeroDivisionError" in odd.message


@pytest.mark.parametrize("frame", [{"op": "teleport", "id": 9}, {"op": "generate", "id": 9},
                                   {"op": "tokenize", "id": 9, "text": 5},
                                   {"op": "batch", "messages": [{"op": "batch", "messages": []}]}])
def test_a_frame_that_does_not_decode_is_answered_with_an_engine_error(frame: dict[str, Any]) -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.decode_message(frame)

    class Out(io.BytesIO):
        pass

    out = Out()
    runner = Runner(engine=None, out=out)
    runner.dispatch(frame)
    runner.flush()
    reply = protocol.decode_message(protocol.read_frame_sync(io.BytesIO(out.getvalue())) or {})
    assert isinstance(reply, protocol.Failed) and isinstance(reply.error, errors.EngineError)
    assert reply.id == (9 if "id" in frame else None)
