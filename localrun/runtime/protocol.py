"""The wire protocol between the daemon and a runner process.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (an object).
JSON rather than pickle: a runner that misbehaves can send nothing that runs code in the daemon.

Daemon -> runner ops (``op``):
    load {model_path, options, template, factory, prefix_cache}   first frame, exactly once
    generate {id, request}    -> accepted {id} | error {id, error}, then events {id, event}
    cancel {id}                -> (the stream ends with a done/cancelled or error event)
    embed {id, input, truncate} / tokenize {id, text, add_special} / detokenize {id, tokens}
    stats {id}                -> result {id, result} | error {id, error}
    close                     -> the runner closes its engine and exits 0
    debug_abort               -> os.abort(); only honoured when LOCALRUN_RUNNER_DEBUG=1 (tests)
Runner -> daemon: loaded {info} | load_error {error} first, then accepted/event/result/error frames,
    or a batch {messages: [...]} frame holding several of those in order (what queued up since the
    runner's last write, e.g. one engine step's tokens for every stream).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import struct
from typing import IO, Any

from .. import errors
from ..engine.types import (
    DoneEvent,
    DoneReason,
    EmbedResult,
    EngineStats,
    ErrorEvent,
    Event,
    GenerateRequest,
    LoadOptions,
    SamplingOptions,
    TokenEvent,
    TokenLogprob,
    Truncation,
)

MAX_FRAME = 256 * 1024 * 1024
_HEADER = struct.Struct(">I")


class ProtocolError(errors.RunnerCrashed):
    """The runner sent something that is not a valid frame."""


def encode_frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(body) > MAX_FRAME:
        raise errors.EngineError(f"message of {len(body)} bytes is over the {MAX_FRAME}-byte frame limit")
    return _HEADER.pack(len(body)) + body


def _decode_body(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"runner sent a malformed frame: {exc}") from exc
    if not isinstance(message, dict):
        raise ProtocolError("runner sent a frame that is not a JSON object")
    return message


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """Read one frame; None at a clean end of stream. Raises ProtocolError on garbage."""
    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProtocolError("runner stream ended inside a frame header") from exc
        return None
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ProtocolError(f"runner announced a {length}-byte frame")
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError("runner stream ended inside a frame") from exc
    return _decode_body(body)


def read_frame_sync(stream: IO[bytes]) -> dict[str, Any] | None:
    """Blocking read of one frame from a binary file; None at end of stream."""
    header = stream.read(_HEADER.size)
    if not header:
        return None
    if len(header) < _HEADER.size:
        raise ProtocolError("stream ended inside a frame header")
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME:
        raise ProtocolError(f"peer announced a {length}-byte frame")
    body = stream.read(length)
    if len(body) < length:
        raise ProtocolError("stream ended inside a frame")
    return _decode_body(body)


# --- errors -------------------------------------------------------------------------------


def encode_error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, errors.LocalrunError):
        out: dict[str, Any] = {"type": type(exc).__name__, "message": exc.message}
        if isinstance(exc, errors.Busy):
            out["retry_after"] = exc.retry_after
        return out
    return {"type": "EngineError", "message": f"{type(exc).__name__}: {exc}"}


def decode_error(data: Any) -> errors.LocalrunError:
    if not isinstance(data, dict):
        return errors.EngineError(str(data))
    cls = getattr(errors, str(data.get("type", "")), None)
    message = str(data.get("message", "runner error"))
    if not (isinstance(cls, type) and issubclass(cls, errors.LocalrunError)):
        return errors.EngineError(message)
    if cls is errors.Busy:
        return errors.Busy(message, float(data.get("retry_after", 1.0)))
    if cls is errors.ModelfileError:
        return errors.ModelfileError(message)
    try:
        return cls(message)
    except TypeError:
        return errors.EngineError(message)


# --- requests -----------------------------------------------------------------------------


def encode_load_options(options: LoadOptions) -> dict[str, Any]:
    return dataclasses.asdict(options)


def decode_load_options(data: dict[str, Any]) -> LoadOptions:
    names = {f.name for f in dataclasses.fields(LoadOptions)}
    kwargs = {k: v for k, v in data.items() if k in names}
    if "rpc_servers" in kwargs:  # a JSON list on the wire
        kwargs["rpc_servers"] = tuple(kwargs["rpc_servers"])
    return LoadOptions(**kwargs)


def encode_request(request: GenerateRequest) -> dict[str, Any]:
    sampling = dataclasses.asdict(request.sampling)
    sampling["stop"] = list(request.sampling.stop)
    return {
        "prompt": request.prompt,
        "sampling": sampling,
        "format": request.format,
        "grammar": request.grammar,
        "format_frame": list(request.format_frame) if request.format_frame is not None else None,
        "truncation": request.truncation.value,
        "num_keep": request.num_keep,
        "add_special": request.add_special,
        "interactive": request.interactive,
    }


def decode_request(data: dict[str, Any]) -> GenerateRequest:
    sampling = dict(data.get("sampling") or {})
    sampling["stop"] = tuple(sampling.get("stop") or ())
    names = {f.name for f in dataclasses.fields(SamplingOptions)}
    return GenerateRequest(
        prompt=data["prompt"],
        sampling=SamplingOptions(**{k: v for k, v in sampling.items() if k in names}),
        format=data.get("format"),
        grammar=data.get("grammar"),
        format_frame=_frame(data.get("format_frame")),
        truncation=Truncation(data.get("truncation", "front")),
        num_keep=int(data.get("num_keep", 0)),
        add_special=bool(data.get("add_special", True)),
        interactive=None if data.get("interactive") is None else bool(data["interactive"]),
    )


def _frame(value: Any) -> tuple[str, str] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return value[0], value[1]
    return None


# --- events -------------------------------------------------------------------------------


def encode_event(event: Event) -> dict[str, Any]:
    if isinstance(event, TokenEvent):
        out: dict[str, Any] = {"type": "token", "text": event.text}
        if event.logprobs:
            out["logprobs"] = [
                {"token": lp.token, "logprob": lp.logprob, "top": [list(t) for t in lp.top]}
                for lp in event.logprobs
            ]
        return out
    if isinstance(event, DoneEvent):
        out = dataclasses.asdict(event)
        out["type"] = "done"
        out["done_reason"] = event.done_reason.value
        out["context"] = list(event.context)
        return out
    if isinstance(event, ErrorEvent):
        return {"type": "error", "error": encode_error(event.error)}
    raise TypeError(f"not an engine event: {event!r}")


def decode_event(data: dict[str, Any]) -> Event:
    kind = data.get("type")
    if kind == "token":
        lps = tuple(
            TokenLogprob(
                token=lp["token"],
                logprob=float(lp["logprob"]),
                top=tuple((str(t), float(p)) for t, p in lp.get("top", ())),
            )
            for lp in data.get("logprobs", ())
        )
        return TokenEvent(text=data["text"], logprobs=lps)
    if kind == "done":
        fields = {f.name for f in dataclasses.fields(DoneEvent)}
        values = {k: v for k, v in data.items() if k in fields}
        values["done_reason"] = DoneReason(values["done_reason"])
        values["context"] = tuple(values.get("context", ()))
        return DoneEvent(**values)
    if kind == "error":
        return ErrorEvent(error=decode_error(data.get("error")))
    raise ProtocolError(f"unknown event type {kind!r}")


def encode_embed_result(result: EmbedResult) -> dict[str, Any]:
    return dataclasses.asdict(result)


def decode_embed_result(data: dict[str, Any]) -> EmbedResult:
    return EmbedResult(
        embeddings=[list(map(float, e)) for e in data["embeddings"]],
        prompt_eval_count=int(data["prompt_eval_count"]),
        truncated=[bool(t) for t in data["truncated"]],
    )


def decode_stats(data: dict[str, Any]) -> EngineStats:
    names = {f.name for f in dataclasses.fields(EngineStats)}
    return EngineStats(**{k: int(v) for k, v in data.items() if k in names})


def to_jsonable(value: Any) -> Any:
    """A best-effort JSON form of an engine object (ModelInfo, EngineStats...)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "value") and hasattr(value, "name"):  # Enum
        return to_jsonable(value.value)
    if hasattr(value, "__dict__"):
        return {k: to_jsonable(v) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)
