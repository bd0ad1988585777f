"""Talking to an upstream that has only Ollama's ``/api``: request bodies and reply decoders (pure).

Chat goes to ``/api/chat`` (messages are already in Ollama's shape), raw prompts to
``/api/generate`` with ``raw: true``, embeddings to ``/api/embed``; ``/api/show`` tells a model's
capabilities (:func:`shown`). Replies are NDJSON:
``message.content`` / ``message.thinking`` / ``message.tool_calls`` (whole calls), ``response``
for generate, and a last chunk with ``done: true``, ``done_reason`` and the token counts.

Ollama has no ``tool_choice``: "none" drops the tools, a named function keeps only that tool,
"required" sends them all (the upstream model decides).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..chat import images
from ..chat.events import ChatEvent, ContentDelta, ThinkingDelta, ToolCall, new_call_id
from ..engine.types import DoneEvent, DoneReason, EmbedResult
from ..errors import UpstreamError
from ..jsontypes import JSONMapping, JSONValue, as_object, loads
from .requests import ChatRequest, CompletionRequest, EmbedRequest, Sampling, ToolChoice

CHAT_PATH = "/api/chat"
GENERATE_PATH = "/api/generate"
EMBED_PATH = "/api/embed"
MODELS_PATH = "/api/tags"
SHOW_PATH = "/api/show"
_DETAIL_TEXTS = ("parent_model", "format", "family", "parameter_size", "quantization_level")


@dataclass(frozen=True, slots=True)
class Shown:
    """What an Ollama-API upstream's ``/api/show`` says of a model that clients act on: its
    capabilities (``vision``, ``tools``, ``thinking``, ``embedding``...) and its ``details``."""

    capabilities: tuple[str, ...]
    details: dict[str, JSONValue]


def options(s: Sampling) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, value in (("temperature", s.temperature), ("top_p", s.top_p), ("top_k", s.top_k),
                        ("min_p", s.min_p), ("seed", s.seed), ("num_predict", s.max_tokens),
                        ("presence_penalty", s.presence_penalty), ("frequency_penalty", s.frequency_penalty),
                        ("repeat_penalty", s.repeat_penalty), ("num_ctx", s.num_ctx)):
        if value is not None:
            out[name] = value
    if s.stop:
        out["stop"] = list(s.stop)
    return out


def _tool_name(tool: JSONMapping) -> object:
    fn = tool.get("function")
    return fn.get("name") if isinstance(fn, Mapping) else None


def _tools(tools: Sequence[JSONMapping] | None, choice: ToolChoice) -> list[dict[str, object]] | None:
    if not tools or choice == "none":
        return None
    if isinstance(choice, Mapping):
        wanted = _tool_name(choice)
        picked = [dict(t) for t in tools if _tool_name(t) == wanted]
        return picked or [dict(t) for t in tools]
    return [dict(t) for t in tools]


def chat_body(req: ChatRequest) -> dict[str, object]:
    body: dict[str, object] = {"model": req.model, "messages": [images.without_markers(m) for m in req.messages],
                               "stream": True}
    tools = _tools(req.tools, req.tool_choice)
    if tools:
        body["tools"] = tools
    if req.format is not None:
        body["format"] = req.format if isinstance(req.format, str) else dict(req.format)
    if req.think is not None:
        body["think"] = req.think
    opts = options(req.sampling)
    if opts:
        body["options"] = opts
    return body


def generate_body(req: CompletionRequest) -> dict[str, object]:
    body: dict[str, object] = {"model": req.model, "prompt": req.prompt, "raw": not req.suffix, "stream": True}
    if req.suffix:
        body["suffix"] = req.suffix
    if req.format is not None:
        body["format"] = req.format if isinstance(req.format, str) else dict(req.format)
    opts = options(req.sampling)
    if opts:
        body["options"] = opts
    return body


def embed_body(req: EmbedRequest) -> dict[str, object]:
    return {"model": req.model, "input": list(req.inputs), "truncate": req.truncate}


def shown(body: JSONValue) -> Shown | None:
    """The capabilities and details of a ``/api/show`` reply; None when it lists no capabilities
    (Ollama before 0.6.4, some other /api servers): nothing is known then, no failure of the member."""
    capabilities = as_object(body).get("capabilities")
    if not isinstance(capabilities, list):
        return None
    raw = as_object(as_object(body).get("details"))
    details: dict[str, JSONValue] = {k: raw[k] for k in _DETAIL_TEXTS if isinstance(raw.get(k), str)}
    families = raw.get("families")
    if isinstance(families, list):
        details["families"] = [f for f in families if isinstance(f, str)]
    return Shown(capabilities=tuple(c for c in capabilities if isinstance(c, str)), details=details)


def model_names(body: object) -> list[str]:
    items = body.get("models") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise UpstreamError("GET /api/tags did not answer {\"models\": [...]}")
    out = []
    for m in items:
        name = m.get("name") or m.get("model") if isinstance(m, dict) else None
        if isinstance(name, str):
            out.append(name)
    return out


def embeddings(body: object, count: int) -> EmbedResult:
    vectors = body.get("embeddings") if isinstance(body, dict) else None
    if not isinstance(vectors, list) or len(vectors) != count or not all(
            isinstance(v, list) and all(isinstance(x, (int, float)) for x in v) for v in vectors):
        raise UpstreamError(f"the embeddings reply does not hold {count} embedding(s)")
    prompt = body.get("prompt_eval_count") if isinstance(body, dict) else None
    return EmbedResult(embeddings=[[float(x) for x in v] for v in vectors],
                       prompt_eval_count=prompt if isinstance(prompt, int) else 0, truncated=[False] * count)


class StreamDecoder:
    """One NDJSON ``/api/chat`` or ``/api/generate`` reply -> chat events, then a DoneEvent."""

    def __init__(self) -> None:
        self._last: dict[str, object] = {}
        self._calls = 0

    def feed(self, line: str) -> list[ChatEvent]:
        if not line.strip():
            return []
        try:
            chunk: Any = loads(line)  # walked as loosely as the upstream writes it
        except ValueError as exc:
            raise UpstreamError(f"a streamed chunk is not JSON ({exc})") from None
        if not isinstance(chunk, dict):
            raise UpstreamError("a streamed chunk is not a JSON object")
        if chunk.get("error") is not None:
            raise UpstreamError(f"the upstream failed mid-reply: {str(chunk['error'])[:300]}")
        events: list[ChatEvent] = []
        message = chunk.get("message")
        source = message if isinstance(message, dict) else chunk
        thinking = source.get("thinking")
        if isinstance(thinking, str) and thinking:
            events.append(ThinkingDelta(thinking))
        text = source.get("content") if isinstance(message, dict) else chunk.get("response")
        if isinstance(text, str) and text:
            events.append(ContentDelta(text))
        calls = source.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                continue
            args = fn.get("arguments")
            if isinstance(args, str):
                raw = args
                try:
                    args = loads(raw) if raw.strip() else {}
                except ValueError:
                    events.append(ContentDelta(raw))  # a broken call is content, as chatparse has it
                    continue
            cid = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else new_call_id()
            events.append(ToolCall(name=fn["name"], arguments=args if isinstance(args, dict) else {},
                                   index=self._calls, id=str(cid)))
            self._calls += 1
        if chunk.get("done") is True:
            self._last = chunk
        return events

    def finish_events(self) -> list[ChatEvent]:
        return []

    def done(self, prompt_ns: int, eval_ns: int) -> DoneEvent:
        last = self._last
        if not last:
            raise UpstreamError("the reply ended without its final chunk")

        def count(name: str) -> int:
            value = last.get(name)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        return DoneEvent(
            done_reason=DoneReason.LENGTH if last.get("done_reason") == "length" else DoneReason.STOP,
            prompt_eval_count=count("prompt_eval_count"), cached_tokens=count("prompt_eval_cached_count"),
            eval_count=count("eval_count"), prompt_eval_duration=count("prompt_eval_duration") or prompt_ns,
            eval_duration=count("eval_duration") or eval_ns,
        )
