"""Talking to an OpenAI-compatible ``/v1`` upstream: request bodies and reply decoders (pure).

Chat goes to ``/v1/chat/completions`` streamed (``stream_options.include_usage`` for token
counts), completions to ``/v1/completions``, embeddings to ``/v1/embeddings``, reranking to
``/v1/rerank`` (llama-server's, vLLM's and localrun's; Ollama's ``/api`` has none). Decoders turn the
streamed chunks into chat events: ``delta.content`` -> ContentDelta, ``delta.reasoning_content``
(vLLM, llama.cpp's server, DeepSeek) or ``delta.reasoning`` -> ThinkingDelta, ``delta.tool_calls``
fragments -> one ToolCall per index once its arguments are complete, and the usage and
``finish_reason`` -> the final DoneEvent.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..chat import images
from ..chat.events import ChatEvent, ContentDelta, ThinkingDelta, ToolCall, new_call_id
from ..chat.think import template_variables
from ..engine.types import DoneEvent, DoneReason, EmbedResult, RerankResult
from ..errors import InvalidRequest, UpstreamError
from ..jsontypes import JSONMapping, JSONValue, as_number, as_object, loads
from .requests import ChatRequest, CompletionRequest, EmbedRequest, Format, RerankRequest, Sampling

CHAT_PATH = "/v1/chat/completions"
COMPLETION_PATH = "/v1/completions"
EMBED_PATH = "/v1/embeddings"
RERANK_PATH = "/v1/rerank"  # llama-server's, vLLM's and localrun's (Jina's shape)
# How a reranking reply names a document cut to fit the context, in ``meta.warnings`` (Cohere's field):
# localrun writes it (server/rerank.py) and reads it back from a localrun upstream.
CUT_WARNING = "document {} was cut to fit the model's context"
_CUT = re.compile(re.escape(CUT_WARNING).replace(re.escape("{}"), r"(\d+)"))
MODELS_PATH = "/v1/models"


def _sampling(s: Sampling) -> dict[str, object]:
    """OpenAI's fields, plus the common extensions (``top_k``, ``min_p``, ``repetition_penalty``:
    vLLM, SGLang, llama.cpp's server) only when the client set them."""
    out: dict[str, object] = {}
    for name, value in (("temperature", s.temperature), ("top_p", s.top_p), ("seed", s.seed),
                        ("max_tokens", s.max_tokens), ("presence_penalty", s.presence_penalty),
                        ("frequency_penalty", s.frequency_penalty), ("top_k", s.top_k), ("min_p", s.min_p),
                        ("repetition_penalty", s.repeat_penalty)):
        if value is not None:
            out[name] = value
    if s.stop:
        out["stop"] = list(s.stop)
    if s.ignore_eos:
        out["ignore_eos"] = True
    if s.min_tokens:
        out["min_tokens"] = s.min_tokens
    return out


def response_format(fmt: Format) -> dict[str, object] | None:
    if fmt is None:
        return None
    if fmt == "json":
        return {"type": "json_object"}
    if isinstance(fmt, Mapping):
        return {"type": "json_schema", "json_schema": {"name": "response", "schema": dict(fmt), "strict": True}}
    return None


def legacy_schema_body(body: Mapping[str, object]) -> dict[str, object] | None:
    """``body`` with a ``json_schema`` response_format in the older ``{"type": "json_object", "schema": ...}``
    form (llama-cpp-python's server knows only that one), or None when it has no schema."""
    fmt = body.get("response_format")
    if not isinstance(fmt, Mapping) or fmt.get("type") != "json_schema":
        return None
    spec = fmt.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, Mapping) else None
    return {**body, "response_format": {"type": "json_object", "schema": schema}}


def _arguments_text(args: object) -> str:
    return args if isinstance(args, str) else json.dumps(args if args is not None else {}, ensure_ascii=False)


def messages(native: Sequence[JSONMapping]) -> list[dict[str, object]]:
    """Native messages in OpenAI's shape. Calls without ids get ``call_N`` ids, which the tool
    results that follow them (in order) answer, when they carry no ``tool_call_id`` of their own."""
    out: list[dict[str, object]] = []
    pending: list[str] = []
    for n, m in enumerate(native):
        role = str(m.get("role"))
        content = m.get("content")
        text = content if isinstance(content, str) else ""
        if m.get("images") and role != "user":  # never dropped silently: a tool's screenshot, say
            raise InvalidRequest("an OpenAI-compatible upstream takes images in user messages only")
        if role == "assistant":
            item: dict[str, object] = {"role": "assistant", "content": text}
            calls = m.get("tool_calls")
            if isinstance(calls, list) and calls:
                converted = []
                pending = []
                for j, call in enumerate(calls):
                    fn = call.get("function") if isinstance(call, dict) else None
                    if not isinstance(fn, dict):
                        continue
                    cid = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else f"call_{n}_{j}"
                    pending.append(str(cid))
                    converted.append({"id": cid, "type": "function",
                                      "function": {"name": fn.get("name"),
                                                   "arguments": _arguments_text(fn.get("arguments"))}})
                item["tool_calls"] = converted
            out.append(item)
        elif role == "tool":
            cid = m.get("tool_call_id")
            if not isinstance(cid, str) or not cid:
                cid = pending.pop(0) if pending else f"call_{n}"
            elif cid in pending:
                pending.remove(cid)
            tool: dict[str, object] = {"role": "tool", "tool_call_id": cid, "content": text}
            if isinstance(m.get("tool_name"), str):
                tool["name"] = m["tool_name"]
            out.append(tool)
        elif m.get("images") and role == "user":  # text and images as OpenAI's content parts, in order
            out.append({"role": role, "content": [
                {"type": "text", "text": part} if isinstance(part, str)
                else {"type": "image_url", "image_url": {"url": images.data_url(part)}}
                for part in images.parts(m)]})
        else:
            out.append({"role": role, "content": text})
    return out


def chat_body(req: ChatRequest) -> dict[str, object]:
    body: dict[str, object] = {"model": req.model, "messages": messages(req.messages), "stream": True,
                               "stream_options": {"include_usage": True}, **_sampling(req.sampling)}
    if req.tools:
        body["tools"] = [dict(t) for t in req.tools]
        if req.tool_choice is not None:
            body["tool_choice"] = req.tool_choice
    fmt = response_format(req.format)
    if fmt is not None:
        body["response_format"] = fmt
    if req.think is not None:  # vLLM's and llama.cpp's server's switch for thinking templates
        body["chat_template_kwargs"] = template_variables(req.think, go=False)
    return body


def completion_body(req: CompletionRequest) -> dict[str, object]:
    body: dict[str, object] = {"model": req.model, "prompt": req.prompt, "stream": True,
                               "stream_options": {"include_usage": True}, **_sampling(req.sampling)}
    if req.suffix:
        body["suffix"] = req.suffix
    fmt = response_format(req.format)
    if fmt is not None:
        body["response_format"] = fmt
    return body


def embed_body(req: EmbedRequest) -> dict[str, object]:
    return {"model": req.model, "input": list(req.inputs), "encoding_format": "float"}


def rerank_body(req: RerankRequest) -> dict[str, object]:
    """Every document scored, none echoed: the daemon writes its own reply from the scores."""
    body: dict[str, object] = {"model": req.model, "query": req.query, "documents": list(req.documents),
                               "top_n": len(req.documents), "return_documents": False}
    if not req.truncate:  # servers that do not know the field cut as they always do (localrun refuses)
        body["truncate"] = False
    return body


def rerank_result(body: JSONValue, count: int) -> RerankResult:
    """The scores a ``/v1/rerank`` reply gives ``count`` documents, back in the documents' order.
    Raises UpstreamError unless it scores each of them exactly once (a null score, as a NaN is
    written, is read back as NaN)."""
    reply = as_object(body)
    results = reply.get("results")
    if not isinstance(results, list):
        raise UpstreamError("the rerank reply holds no 'results' list")
    scores: dict[int, float] = {}
    for r in results:
        item = as_object(r)
        index, score = item.get("index"), item.get("relevance_score")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count or index in scores:
            raise UpstreamError(f"the rerank reply's results do not score each of the {count} document(s) once")
        number = math.nan if score is None else as_number(score)
        if number is None:
            raise UpstreamError("a relevance_score in the rerank reply is not a number")
        scores[index] = float(number)
    if len(scores) != count:
        raise UpstreamError(f"the rerank reply scores {len(scores)} of {count} document(s)")
    usage = as_object(reply.get("usage"))
    tokens = usage.get("prompt_tokens", usage.get("total_tokens"))
    warnings = as_object(reply.get("meta")).get("warnings")
    matches = [_CUT.fullmatch(w) for w in warnings if isinstance(w, str)] if isinstance(warnings, list) else []
    cut = {int(m.group(1)) for m in matches if m is not None}
    return RerankResult(scores=[scores[i] for i in range(count)],
                        prompt_eval_count=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else 0,
                        truncated=[i in cut for i in range(count)])


def model_ids(body: object) -> list[str]:
    """The ids a ``GET /v1/models`` reply lists. Raises UpstreamError on another shape."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise UpstreamError("GET /v1/models did not answer {\"data\": [...]}")
    return [str(m["id"]) for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


def embeddings(body: object, count: int) -> EmbedResult:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list) or len(data) != count:
        raise UpstreamError(f"the embeddings reply does not hold {count} embedding(s)")
    ordered = sorted(data, key=lambda d: d.get("index", 0) if isinstance(d, dict) else 0)
    vectors: list[list[float]] = []
    for d in ordered:
        vec = d.get("embedding") if isinstance(d, dict) else None
        if not isinstance(vec, list) or not all(isinstance(v, (int, float)) for v in vec):
            raise UpstreamError("an embedding in the reply is not a list of numbers (base64 is not asked for)")
        vectors.append([float(v) for v in vec])
    usage = body.get("usage") if isinstance(body, dict) else None
    prompt = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return EmbedResult(embeddings=vectors, prompt_eval_count=prompt if isinstance(prompt, int) else 0,
                       truncated=[False] * count)


def _done_reason(finish: object) -> DoneReason:
    return DoneReason.LENGTH if finish == "length" else DoneReason.STOP


class StreamDecoder:
    """One streamed ``/v1`` reply (chat or completion chunks) -> chat events, then a DoneEvent.

    Feed each SSE ``data`` payload; ``[DONE]`` and empty payloads are ignored. Only choice 0 is
    read (localrun asks for one). Not thread-safe; one per reply.
    """

    def __init__(self) -> None:
        self._calls: dict[int, dict[str, str]] = {}  # index -> id, name, arguments so far
        self._emitted = 0
        self.finish: object = None
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.output_tokens = 0
        self._counted = 0  # content pieces seen, when the server sends no usage
        self._ended = False  # [DONE] or a finish_reason came: the reply is whole

    def feed(self, data: str) -> list[ChatEvent]:
        if data.strip() == "[DONE]":
            self._ended = True
            return []
        if not data.strip():
            return []
        try:
            chunk: Any = loads(data)  # walked as loosely as the upstream writes it
        except ValueError as exc:
            raise UpstreamError(f"a streamed chunk is not JSON ({exc})") from None
        if not isinstance(chunk, dict):
            raise UpstreamError("a streamed chunk is not a JSON object")
        if chunk.get("error") is not None:
            err = chunk["error"]
            message = err.get("message") if isinstance(err, dict) else err
            raise UpstreamError(f"the upstream failed mid-reply: {str(message)[:300]}")
        self._usage(chunk.get("usage"))
        events: list[ChatEvent] = []
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                events.extend(self._delta(delta))
            elif isinstance(choice.get("text"), str) and choice["text"]:  # a completion chunk
                events.append(ContentDelta(choice["text"]))
            if choice.get("finish_reason") is not None:
                self.finish, self._ended = choice["finish_reason"], True
                events.extend(self._flush_calls())
        self._counted += sum(1 for e in events if not isinstance(e, ToolCall))
        return events

    def _delta(self, delta: dict[str, object]) -> list[ChatEvent]:
        events: list[ChatEvent] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            events.append(ThinkingDelta(reasoning))
        content = delta.get("content")
        if isinstance(content, str) and content:
            events.append(ContentDelta(content))
        calls = delta.get("tool_calls")
        for frag in calls if isinstance(calls, list) else []:
            if not isinstance(frag, dict):
                continue
            index = frag.get("index") if isinstance(frag.get("index"), int) else len(self._calls)
            assert isinstance(index, int)
            if index not in self._calls and self._calls:
                events.extend(self._flush_calls(below=index))
            slot = self._calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            if isinstance(frag.get("id"), str) and frag["id"]:
                slot["id"] = str(frag["id"])
            fn = frag.get("function")
            if isinstance(fn, dict):
                if isinstance(fn.get("name"), str) and not slot["name"]:  # sent with the first fragment
                    slot["name"] = str(fn["name"])
                if isinstance(fn.get("arguments"), str):
                    slot["arguments"] += str(fn["arguments"])
                elif isinstance(fn.get("arguments"), dict):
                    slot["arguments"] = json.dumps(fn["arguments"])
        return events

    def _flush_calls(self, below: int | None = None) -> list[ChatEvent]:
        """The calls collected so far (those with an index below ``below``), as ToolCall events.

        A call whose arguments are not a JSON object (cut by max_tokens) comes out as content,
        as a local model's broken call does (chatparse).
        """
        out: list[ChatEvent] = []
        for index in sorted(self._calls):
            if below is not None and index >= below:
                continue
            slot = self._calls.pop(index)
            try:
                args = loads(slot["arguments"]) if slot["arguments"].strip() else {}
            except ValueError:
                args = None
            if not isinstance(args, dict):
                out.append(ContentDelta(slot["arguments"]))
                continue
            out.append(ToolCall(name=slot["name"], arguments=args, index=self._emitted,
                                id=slot["id"] or new_call_id()))
            self._emitted += 1
        return out

    def _usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        if isinstance(usage.get("prompt_tokens"), int):
            self.prompt_tokens = int(usage["prompt_tokens"])
        if isinstance(usage.get("completion_tokens"), int):
            self.output_tokens = int(usage["completion_tokens"])
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            self.cached_tokens = int(details["cached_tokens"])

    def finish_events(self) -> list[ChatEvent]:
        """Calls still held when the stream ended without a finish_reason."""
        return list(self._flush_calls())

    def done(self, prompt_ns: int, eval_ns: int) -> DoneEvent:
        if not self._ended:
            raise UpstreamError("the reply ended before its finish_reason (connection lost?)")
        return DoneEvent(done_reason=_done_reason(self.finish), prompt_eval_count=self.prompt_tokens,
                         cached_tokens=self.cached_tokens, eval_count=self.output_tokens or self._counted,
                         prompt_eval_duration=prompt_ns, eval_duration=eval_ns)
