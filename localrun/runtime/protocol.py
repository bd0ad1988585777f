"""The wire protocol between the daemon and a runner process.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (an object).
JSON rather than pickle: a runner that misbehaves can send nothing that runs code in the daemon.

Daemon -> runner ops (``op``):
    load {model_path, options, factory, prefix_cache}   first frame, exactly once
    generate {id, request}    -> accepted {id} | error {id, error}, then events {id, event}
    cancel {id}                -> (the stream ends with a done/cancelled or error event)
    embed {id, input, truncate} / rerank {id, query, documents, truncate}
    tokenize {id, text, add_special} / detokenize {id, tokens}
    stats {id}                -> result {id, result} | error {id, error}
    close                     -> the runner closes its engine and exits 0
    debug_abort               -> os.abort(); only honoured when LOCALRUN_RUNNER_DEBUG=1 (tests)
Runner -> daemon: loaded {info} | load_error {error} first, then accepted/event/result/error frames,
    or a batch {messages: [...]} frame holding several of those in order (what queued up since the
    runner's last write, e.g. one engine step's tokens for every stream).

Each op is a frozen dataclass below (:class:`Generate`, :class:`Accepted`, ...); :func:`encode_message`
and :func:`decode_message` are the one codec between them and frames, driven by the table ``MESSAGES``
(op -> class) and one decoder per payload type (a GenerateRequest, an Event, an error...). Errors cross
the pipe as ``{code, message[, retry_after][, prompt_tokens, max_tokens]}`` and are rebuilt with
:func:`localrun.errors.from_code`, the same mapping the HTTP client uses; a code nobody defines becomes an EngineError.
"""

from __future__ import annotations

import array
import asyncio
import base64
import binascii
import dataclasses
import itertools
import math
import sys
import typing
from collections.abc import Callable
from typing import IO, Any, ClassVar, TypeVar

from .. import errors
from ..engine.types import (
    DoneEvent,
    DoneReason,
    EmbedInput,
    EmbedResult,
    EngineStats,
    ErrorEvent,
    Event,
    GenerateRequest,
    Infill,
    LoadOptions,
    ModelInfo,
    OutputFormat,
    PrefixCacheLocation,
    RerankResult,
    SamplingOptions,
    TokenEvent,
    TokenLogprob,
    Truncation,
)
from ..jsontypes import JSONMapping, JSONObject, JSONValue
from ..modelkind import ModelKind
from . import framing

MAX_FRAME = 256 * 1024 * 1024  # a runner's frames: an embedding batch or a long prompt's tokens

ProtocolError = errors.BadFrame
"""The runner sent something that is not a valid frame or message (one class with the framing's)."""


def encode_frame(message: JSONObject) -> bytes:
    """``message`` as one frame (FrameTooLarge over :data:`MAX_FRAME`)."""
    return framing.encode(message, MAX_FRAME)


def _as_message(message: JSONValue | None) -> JSONObject | None:
    if message is not None and not isinstance(message, dict):
        raise ProtocolError("runner sent a frame that is not a JSON object")
    return message


async def read_frame(reader: asyncio.StreamReader) -> JSONObject | None:
    """Read one frame; None at a clean end of stream. Raises ProtocolError on garbage."""
    return _as_message(await framing.read_async(reader, MAX_FRAME))


def frames(reader: asyncio.StreamReader) -> framing.FrameStream:
    """A runner's output as frames a chunk at a time (:func:`read_messages`)."""
    return framing.FrameStream(reader, MAX_FRAME)


async def read_messages(stream: framing.FrameStream) -> list[JSONObject] | None:
    """The next frames of ``stream`` (at least one); None at a clean end. Raises ProtocolError on garbage."""
    batch = await stream.next()
    if batch is None:
        return None
    if not all(isinstance(message, dict) for message in batch):
        raise ProtocolError("runner sent a frame that is not a JSON object")
    return typing.cast(list[JSONObject], batch)


def read_frame_sync(stream: IO[bytes]) -> JSONObject | None:
    """Blocking read of one frame from a binary file; None at end of stream."""
    return _as_message(framing.read_sync(stream, MAX_FRAME))


# --- errors -------------------------------------------------------------------------------


def encode_error(exc: BaseException) -> JSONObject:
    """An exception as it crosses the pipe: its ``code`` (EngineError's for anything not localrun's)."""
    if isinstance(exc, errors.LocalrunError):
        out: JSONObject = {"code": exc.code, "message": exc.message}
        if isinstance(exc, errors.Busy):
            out["retry_after"] = exc.retry_after
        if isinstance(exc, errors.ContextOverflow) and exc.prompt_tokens is not None:
            out["prompt_tokens"], out["max_tokens"] = exc.prompt_tokens, exc.max_tokens
        return out
    return {"code": errors.EngineError.code, "message": f"{type(exc).__name__}: {exc}"}


def decode_error(data: object) -> errors.LocalrunError:
    """The error :func:`encode_error` sent; anything unrecognised is an EngineError with its message."""
    if not isinstance(data, dict):
        return errors.EngineError(str(data))
    message = str(data.get("message", "runner error"))
    retry_after = data.get("retry_after", 1.0)
    retry = float(retry_after) if isinstance(retry_after, (int, float)) and not isinstance(retry_after, bool) else 1.0
    counts = [v if isinstance(v, int) and not isinstance(v, bool) else None
              for v in (data.get("prompt_tokens"), data.get("max_tokens"))]
    return errors.from_code(data.get("code"), message, retry_after=retry, prompt_tokens=counts[0],
                            max_tokens=counts[1]) or errors.EngineError(message)


# --- requests -----------------------------------------------------------------------------


def encode_load_options(options: LoadOptions) -> JSONObject:
    return dataclasses.asdict(options)


_Record = TypeVar("_Record", LoadOptions, ModelInfo)
_T = TypeVar("_T")


def _build(cls: Callable[..., _T], fields: JSONMapping) -> _T:
    """``cls(**fields)``: a record built from the wire's values as they came (its dataclass checks no
    types; the engine checks what it uses), hence the constructor taken as ``Callable[..., _T]``."""
    return cls(**fields)


def _decode_record(cls: type[_Record], data: JSONObject) -> _Record:
    """``cls`` from its JSON object (unknown fields, e.g. from a newer peer, are dropped)."""
    names = {f.name for f in dataclasses.fields(cls)}
    fields: dict[str, object] = {k: v for k, v in data.items() if k in names}
    if "rpc_servers" in data and "rpc_servers" in names:  # a JSON list on the wire, a tuple in both records
        fields["rpc_servers"] = tuple(_list(data["rpc_servers"]))
    return _build(cls, fields)


def decode_load_options(data: JSONObject) -> LoadOptions:
    return _decode_record(LoadOptions, data)


def decode_model_info(data: JSONObject) -> ModelInfo:
    """The runner's load report: the engine's ModelInfo (ValueError for a kind nobody defines)."""
    info = _decode_record(ModelInfo, data)
    return dataclasses.replace(info, kind=ModelKind(info.kind))


def encode_request(request: GenerateRequest) -> JSONObject:
    sampling: JSONObject = dataclasses.asdict(request.sampling)
    sampling["stop"] = list(request.sampling.stop)
    return {
        "prompt": _encode_prompt(request.prompt),
        "sampling": sampling,
        "format": request.format,
        "grammar": request.grammar,
        "format_frame": list(request.format_frame) if request.format_frame is not None else None,
        "truncation": request.truncation.value,
        "num_keep": request.num_keep,
        "add_special": request.add_special,
        "cache_reuse": request.cache_reuse,
        "interactive": request.interactive,
        "images": [base64.b64encode(image).decode("ascii") for image in request.images],
    }


def decode_request(data: JSONObject) -> GenerateRequest:
    wire = _dict(data.get("sampling") or {})
    names = {f.name for f in dataclasses.fields(SamplingOptions)}
    sampling: dict[str, object] = {k: v for k, v in wire.items() if k in names}
    sampling["stop"] = tuple(_list(wire.get("stop") or []))
    if wire.get("samplers") is not None:
        sampling["samplers"] = tuple(_str(name) for name in _list(wire["samplers"]))
    interactive = data.get("interactive")
    return GenerateRequest(
        prompt=_prompt(data["prompt"]),
        sampling=_build(SamplingOptions, sampling),
        format=_format(data.get("format")),
        grammar=_optional_str(data.get("grammar")),
        format_frame=_frame(data.get("format_frame")),
        truncation=Truncation(data.get("truncation", "front")),
        num_keep=_int(data.get("num_keep", 0)),
        add_special=bool(data.get("add_special", True)),
        cache_reuse=None if data.get("cache_reuse") is None else _int(data["cache_reuse"]),
        images=tuple(binascii.a2b_base64(_str(image)) for image in _list(data.get("images") or [])),
        interactive=None if interactive is None else bool(interactive),
    )


def _encode_prompt(prompt: str | list[int] | Infill) -> JSONValue:
    if isinstance(prompt, Infill):
        return {"infill": {"prefix": prompt.prefix, "suffix": prompt.suffix, "middle": prompt.middle,
                           "extra": [list(pair) for pair in prompt.extra]}}
    return list(prompt) if isinstance(prompt, list) else prompt


def _prompt(value: JSONValue) -> str | list[int] | Infill:
    """Text, token ids (the engine checks their range) or the parts of a fill-in-the-middle prompt."""
    if isinstance(value, dict):
        parts = _dict(value["infill"])
        extra = tuple((_str(name), _str(text)) for name, text in (_list(pair) for pair in _list(parts["extra"])))
        return Infill(_str(parts["prefix"]), _str(parts["suffix"]), _str(parts["middle"]), extra)
    return value if isinstance(value, str) else [_int(token) for token in _list(value)]


def _format(value: JSONValue) -> OutputFormat:
    if value is None or isinstance(value, (str, dict)):
        return value
    raise TypeError(f"expected a format (a string or a schema), got {value!r}")


def _frame(value: JSONValue) -> tuple[str, str] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], str):
        return value[0], value[1]
    return None


# --- events -------------------------------------------------------------------------------


def encode_event(event: Event) -> JSONObject:
    if isinstance(event, TokenEvent):
        out: JSONObject = {"type": "token", "text": event.text}
        if event.logprobs:
            out["logprobs"] = [
                {"token": lp.token, "logprob": _wire_float(lp.logprob),
                 "top": [[token, _wire_float(p)] for token, p in lp.top]}
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


def decode_event(data: JSONObject) -> Event:
    kind = data.get("type")
    if kind == "token":
        raw = data.get("logprobs")
        lps = tuple(_logprob(_dict(lp)) for lp in _list(raw)) if raw is not None else ()
        return TokenEvent(text=_str(data["text"]), logprobs=lps)
    if kind == "done":
        fields = {f.name for f in dataclasses.fields(DoneEvent)}
        values: dict[str, object] = {k: v for k, v in data.items() if k in fields}
        values["done_reason"] = DoneReason(data["done_reason"])
        values["context"] = tuple(_list(data.get("context", [])))
        return _build(DoneEvent, values)
    if kind == "error":
        return ErrorEvent(error=decode_error(data.get("error")))
    raise ProtocolError(f"unknown event type {kind!r}")


def _logprob(data: JSONObject) -> TokenLogprob:
    top = tuple((str(t), _float(p)) for t, p in map(_list, _list(data.get("top", []))))
    return TokenLogprob(token=_str(data["token"]), logprob=_float(data["logprob"]), top=top)


def encode_embed_result(result: EmbedResult) -> JSONObject:
    """The vectors travel as little-endian float32 bytes in base64 (llama.cpp computes them in float32):
    256 vectors of 384 cost 5 ms this way against 140 ms as JSON numbers both sides. The ``array``
    module, not numpy, packs and unpacks them: the daemon never imports numpy (~0.15 s of its start)."""
    dims = {len(e) for e in result.embeddings}
    if len(dims) > 1:
        raise ValueError("embeddings of different lengths in one result")
    raw = _float32_bytes(itertools.chain.from_iterable(result.embeddings))
    return {"dim": dims.pop() if dims else 0, "vectors": base64.b64encode(raw).decode("ascii"),
            "prompt_eval_count": result.prompt_eval_count, "truncated": list(result.truncated)}


def decode_embed_result(result: JSONValue) -> EmbedResult:
    """An embed RPC's result (TypeError, KeyError or ValueError when it is not one)."""
    data = _dict(result)
    dim = _int(data["dim"])
    raw = base64.b64decode(_str(data["vectors"]), validate=True)
    if dim < 0 or (dim == 0 and raw) or (dim and len(raw) % (4 * dim)):
        raise ValueError(f"{len(raw)} bytes of vectors are not float32 rows of {dim}")
    values = _float32_values(raw)
    return EmbedResult(
        embeddings=[values[i:i + dim] for i in range(0, len(values), dim)] if dim else [],
        prompt_eval_count=_int(data["prompt_eval_count"]),
        truncated=[bool(t) for t in _list(data["truncated"])],
    )


def _float32_bytes(values: typing.Iterable[float]) -> bytes:
    """``values`` as little-endian float32 bytes (the wire's order on any machine)."""
    floats = array.array("f", values)
    if sys.byteorder == "big":
        floats.byteswap()
    return floats.tobytes()


def _float32_values(raw: bytes) -> list[float]:
    """The floats of little-endian float32 bytes (a multiple of 4 long)."""
    floats = array.array("f")
    floats.frombytes(raw)
    if sys.byteorder == "big":
        floats.byteswap()
    return floats.tolist()


def encode_rerank_result(result: RerankResult) -> JSONObject:
    return {"scores": [_wire_float(x) for x in result.scores], "prompt_eval_count": result.prompt_eval_count,
            "truncated": list(result.truncated)}


def decode_rerank_result(result: JSONValue) -> RerankResult:
    """A rerank RPC's result (TypeError, KeyError or ValueError when it is not one)."""
    data = _dict(result)
    return RerankResult(
        scores=[_float(x) for x in _list(data["scores"])],
        prompt_eval_count=_int(data["prompt_eval_count"]),
        truncated=[bool(t) for t in _list(data["truncated"])],
    )


def decode_tokens(result: JSONValue) -> list[int]:
    """A tokenize RPC's result: token ids (TypeError when it is not a list of them)."""
    return [_int(token) for token in _list(result)]


def decode_stats(result: JSONValue) -> EngineStats:
    """A stats RPC's result (TypeError when it is not an object of counts)."""
    names = {f.name for f in dataclasses.fields(EngineStats)}
    return EngineStats(**{k: _int(v) for k, v in _dict(result).items() if k in names})


def to_jsonable(value: object) -> JSONValue:
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


# --- messages -----------------------------------------------------------------------------
# One frozen dataclass per op. Field annotations name their payload type; the codec below
# looks each one up in _DECODERS (so a new field of a known type needs no new code).
# A JSONValue field (Result.result) is a value exactly as JSON carries it: an RPC result before
# its caller decodes it.


@dataclasses.dataclass(frozen=True)
class Load:
    OP: ClassVar[str] = "load"
    model_path: str
    options: LoadOptions
    factory: str | None = None
    prefix_cache: PrefixCacheLocation | None = None


@dataclasses.dataclass(frozen=True)
class Generate:
    OP: ClassVar[str] = "generate"
    id: int
    request: GenerateRequest


@dataclasses.dataclass(frozen=True)
class Cancel:
    OP: ClassVar[str] = "cancel"
    id: int


@dataclasses.dataclass(frozen=True)
class Embed:
    OP: ClassVar[str] = "embed"
    id: int
    input: list[EmbedInput]
    truncate: bool = True


@dataclasses.dataclass(frozen=True)
class Rerank:
    OP: ClassVar[str] = "rerank"
    id: int
    query: str
    documents: list[str]
    truncate: bool = True


@dataclasses.dataclass(frozen=True)
class Tokenize:
    OP: ClassVar[str] = "tokenize"
    id: int
    text: str
    add_special: bool = True
    images: list[str] = dataclasses.field(default_factory=list)  # base64: a prompt's images count as tokens


@dataclasses.dataclass(frozen=True)
class Detokenize:
    OP: ClassVar[str] = "detokenize"
    id: int
    tokens: list[int]


@dataclasses.dataclass(frozen=True)
class Stats:
    OP: ClassVar[str] = "stats"
    id: int


@dataclasses.dataclass(frozen=True)
class Close:
    OP: ClassVar[str] = "close"


@dataclasses.dataclass(frozen=True)
class DebugAbort:
    OP: ClassVar[str] = "debug_abort"


@dataclasses.dataclass(frozen=True)
class Loaded:
    """The model is loaded: ``info`` is the engine's report of what it loaded and where it put it."""

    OP: ClassVar[str] = "loaded"
    info: ModelInfo | None = None
    pid: int | None = None


@dataclasses.dataclass(frozen=True)
class LoadFailed:
    OP: ClassVar[str] = "load_error"
    error: errors.LocalrunError


@dataclasses.dataclass(frozen=True)
class Accepted:
    OP: ClassVar[str] = "accepted"
    id: int


@dataclasses.dataclass(frozen=True)
class EventMessage:
    OP: ClassVar[str] = "event"
    id: int
    event: Event


@dataclasses.dataclass(frozen=True)
class Result:
    OP: ClassVar[str] = "result"
    id: int
    result: JSONValue


@dataclasses.dataclass(frozen=True)
class Failed:
    """An op refused or failed: ``id`` names the generate or RPC it answers (None when unknown)."""

    OP: ClassVar[str] = "error"
    id: int | None
    error: errors.LocalrunError


@dataclasses.dataclass(frozen=True)
class Batch:
    """Several runner -> daemon messages written as one frame, in order (never nested)."""

    OP: ClassVar[str] = "batch"
    messages: tuple[Message, ...]


ToRunner = Load | Generate | Cancel | Embed | Rerank | Tokenize | Detokenize | Stats | Close | DebugAbort
FromRunner = Loaded | LoadFailed | Accepted | EventMessage | Result | Failed | Batch
Message = ToRunner | FromRunner

MESSAGES: dict[str, type[Message]] = {
    cls.OP: cls for cls in typing.get_args(ToRunner) + typing.get_args(FromRunner)
}
"""Every message class by its op: the codec's one table."""


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected a whole number, got {value!r}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _optional_str(value: JSONValue) -> str | None:
    return None if value is None else _str(value)


_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
"""A non-finite float on the wire (JSON has no form for one; a logprob of a token a grammar rules
out is -inf, a random model's score may be nan)."""


def _wire_float(value: float) -> float | str:
    """``value`` as a frame carries it: itself, or its name in :data:`_NON_FINITE`."""
    return value if math.isfinite(value) else repr(value)


def _float(value: object) -> float:
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {value!r}")
    return float(value)


def _optional(decode: Callable[[JSONValue], _T]) -> Callable[[JSONValue], _T | None]:
    return lambda value: None if value is None else decode(value)


def _dict(value: JSONValue) -> JSONObject:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {value!r}")
    return value


def _list(value: JSONValue) -> list[JSONValue]:
    """A JSON list (or a tuple: what ``dataclasses.asdict`` leaves, decoded without a trip through JSON)."""
    if isinstance(value, tuple):
        return list(value)
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {value!r}")
    return value


def _batch(value: JSONValue) -> tuple[Message, ...]:
    if not isinstance(value, list):
        raise TypeError("a batch holds a list of messages")
    inner = tuple(decode_message(_dict(item)) for item in value)
    if any(isinstance(message, Batch) for message in inner):
        raise TypeError("a batch inside a batch")
    return inner


_DECODERS: dict[str, Callable[[JSONValue], object]] = {
    "int": _int,
    "int | None": _optional(_int),
    "str": _str,
    "str | None": _optional_str,
    "bool": bool,
    "JSONValue": lambda value: value,
    "list[int]": lambda value: [_int(v) for v in _list(value)],
    "list[str]": lambda value: [_str(v) for v in _list(value)],
    "list[EmbedInput]": _list,  # the engine checks each input (a string or token ids) and says which is wrong
    "LoadOptions": lambda value: decode_load_options(_dict(value)),
    "ModelInfo | None": _optional(lambda value: decode_model_info(_dict(value))),
    "PrefixCacheLocation | None": _optional(lambda value: _build(PrefixCacheLocation, _dict(value))),
    "GenerateRequest": lambda value: decode_request(_dict(value)),
    "Event": lambda value: decode_event(_dict(value)),
    "errors.LocalrunError": decode_error,
    "tuple[Message, ...]": _batch,
}
"""One decoder per payload type, keyed by the annotation text a message field carries."""


def _json(value: object) -> JSONValue:
    """A field that already holds its own JSON (an id, a text, token ids, an RPC's result...)."""
    if isinstance(value, (str, int, float, list, dict)) or value is None:  # bool is an int
        return value
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _optional_asdict(value: object) -> JSONValue:
    return None if value is None else dataclasses.asdict(value)  # type: ignore[call-overload]


_ENCODERS: dict[str, Callable[[Any], JSONValue]] = {
    "int": _json,
    "int | None": _json,
    "str": _json,
    "str | None": _json,
    "bool": _json,
    "JSONValue": _json,
    "list[int]": _json,
    "list[str]": _json,
    "list[EmbedInput]": _json,
    "LoadOptions": encode_load_options,
    "ModelInfo | None": _optional_asdict,
    "PrefixCacheLocation | None": _optional_asdict,
    "GenerateRequest": encode_request,
    "Event": encode_event,
    "errors.LocalrunError": encode_error,
    "tuple[Message, ...]": lambda messages: [encode_message(m) for m in messages],
}
"""One encoder per payload type, keyed like :data:`_DECODERS`."""


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    encode: Callable[[Any], JSONValue]
    decode: Callable[[JSONValue], object]


def _fields(cls: type[Message]) -> tuple[_Field, ...]:
    """``cls``'s fields with the codec of each one's annotation (fails at import when one has none)."""
    out = []
    for f in dataclasses.fields(cls):
        kind = str(f.type)
        assert kind in _ENCODERS and kind in _DECODERS, f"{cls.__name__}.{f.name}: no codec for {kind}"
        out.append(_Field(f.name, _ENCODERS[kind], _DECODERS[kind]))
    return tuple(out)


_FIELDS: dict[type[Message], tuple[_Field, ...]] = {cls: _fields(cls) for cls in MESSAGES.values()}
"""Each message class's fields and their codecs, worked out once: every frame (a token of every
stream among them) is encoded and decoded by these, without a walk over the dataclass."""


def encode_message(message: Message) -> JSONObject:
    """A message as the JSON object of its frame: ``{"op": ..., field: payload, ...}``."""
    out: JSONObject = {"op": message.OP}
    for f in _FIELDS[type(message)]:
        out[f.name] = f.encode(getattr(message, f.name))
    return out


def encode_batch(encoded: list[JSONObject]) -> JSONObject:
    """A :class:`Batch` of messages already encoded one by one (the runner's writer encodes each apart,
    so one that cannot be encoded fails alone)."""
    return {"op": Batch.OP, "messages": list[JSONValue](encoded)}


def decode_message(data: JSONObject) -> Message:
    """The message a frame holds; raises ProtocolError for an unknown op or a malformed field."""
    op = data.get("op")
    cls = MESSAGES.get(op) if isinstance(op, str) else None
    if cls is None:
        raise ProtocolError(f"unknown op {op!r}")
    values: dict[str, object] = {}
    try:
        for f in _FIELDS[cls]:
            if f.name in data:
                values[f.name] = f.decode(data[f.name])
        build: Callable[..., Message] = cls  # each value decoded as its field's annotation says
        return build(**values)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"malformed {op!r} message: {exc}") from exc


def message_id(data: JSONObject) -> int | None:
    """The ``id`` of a raw frame, when it has a usable one (to answer a frame that did not decode)."""
    rid = data.get("id")
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else None
