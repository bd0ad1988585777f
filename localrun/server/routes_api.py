"""Ollama's native generation routes: /api/generate, /api/chat, /api/embed, /api/embeddings.

Handlers parse and validate, call the Service, and stream NDJSON. The final chunk carries
``done_reason`` and Ollama's timing fields in nanoseconds, plus ``prompt_eval_cached_count``
(prompt tokens served from the prefix cache) and, when the prompt was cut to fit,
``prompt_truncated_count``. An error after streaming started becomes a last ``{"error": ...}``
line, as Ollama does.
"""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from .. import errors
from ..engine.types import DoneEvent, GenerateRequest, TokenEvent, Truncation
from . import prompts
from .http import NDJSONStream, get, now_iso, read_json
from .keys import SERVICE
from .options import parse_keep_alive
from .service import Generation, Target
from .tools import ToolStreamFilter, parse_tool_calls, tool_names, validate_tools


def check_format(value: Any) -> str | dict[str, Any] | None:
    if value in (None, ""):
        return None
    if value == "json" or isinstance(value, dict):
        return value  # type: ignore[no-any-return]
    raise errors.InvalidRequest("'format' must be \"json\" or a JSON schema object")


def truncation(body: dict[str, Any]) -> Truncation:
    """``truncate: false`` refuses a prompt longer than the context (400) instead of cutting its front."""
    return Truncation.FRONT if get(body, "truncate", bool, True) else Truncation.REJECT


def done_fields(gen: Generation) -> dict[str, Any]:
    done = gen.done
    assert done is not None
    out: dict[str, Any] = {
        "done": True,
        "done_reason": done.done_reason.value,
        "total_duration": gen.total_duration_ns,
        "load_duration": gen.load_duration_ns,
        "prompt_eval_count": done.prompt_eval_count,
        "prompt_eval_duration": done.prompt_eval_duration,
        "eval_count": done.eval_count,
        "eval_duration": done.eval_duration,
        "prompt_eval_cached_count": done.cached_tokens,
    }
    if done.truncated_tokens:
        out["prompt_truncated_count"] = done.truncated_tokens
    return out


def logprobs_json(event: TokenEvent) -> list[dict[str, Any]]:
    return [
        {"token": lp.token, "logprob": lp.logprob,
         "top_logprobs": [{"token": t, "logprob": p} for t, p in lp.top]}
        for lp in event.logprobs
    ]


def sampling_with_logprobs(target: Target, body: dict[str, Any]) -> Any:
    from dataclasses import replace

    logprobs = get(body, "logprobs", bool, False)
    top = get(body, "top_logprobs", int, 0)
    if top < 0 or top > 20:
        raise errors.OptionError("'top_logprobs' must be between 0 and 20")
    if logprobs or top:
        return replace(target.sampling, logprobs=True, top_logprobs=top)
    return target.sampling


async def _load_or_unload(request: web.Request, body: dict[str, Any], keep_alive: Any, chat: bool) -> web.Response:
    """An empty prompt loads the model; with keep_alive 0 it unloads it."""
    service = request.app[SERVICE]
    target = await service.target(body.get("model"), body.get("options"), keep_alive)
    if keep_alive == 0:
        await service.unload(target.name)
        reason = "unload"
    else:
        await service.load_only(target)
        reason = "load"
    out: dict[str, Any] = {"model": target.name, "created_at": now_iso(), "done": True, "done_reason": reason}
    if chat:
        out["message"] = {"role": "assistant", "content": ""}
    else:
        out["response"] = ""
    return web.json_response(out)


async def generate(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    prompt = get(body, "prompt", str, "")
    images = get(body, "images", list, [])
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    stream = get(body, "stream", bool, True)
    if not prompt and not images and not get(body, "suffix", str, ""):
        return await _load_or_unload(request, body, keep_alive, chat=False)
    if images:
        raise errors.InvalidRequest(f"model {body.get('model')!r} does not support images")
    service = request.app[SERVICE]
    target = await service.target(body.get("model"), body.get("options"), keep_alive)
    raw = get(body, "raw", bool, False)
    context = get(body, "context", list, None)
    if context is not None and not all(isinstance(t, int) and not isinstance(t, bool) for t in context):
        raise errors.InvalidRequest("'context' must be a list of token ids")
    if get(body, "suffix", str, ""):
        raise errors.InvalidRequest(f"model {target.name!r} does not support insert (suffix)")
    system_prefix = None
    if raw:
        text = prompt
    else:
        template = get(body, "template", str, None) or target.template
        messages = [{"role": "user", "content": prompt}]
        system = get(body, "system", str, None) or target.system
        if system:
            messages.insert(0, {"role": "system", "content": system})
        text, system_prefix = await prompts.render_async(template, messages)
    req = GenerateRequest(
        prompt=text, sampling=sampling_with_logprobs(target, body), format=check_format(body.get("format")),
        truncation=truncation(body),
    )
    gen = await service.generate(target, req, "/api/generate", context=context, system_prefix=system_prefix)
    try:
        return await _respond(request, gen, stream, lambda text, ev: _generate_chunk(target, text, ev),
                              final_extra=lambda d: {"response": "", "context": list(d.context)})
    finally:
        await gen.close()


def _generate_chunk(target: Target, text: str, event: TokenEvent | None) -> dict[str, Any]:
    out: dict[str, Any] = {"model": target.name, "created_at": now_iso(), "response": text, "done": False}
    if event is not None and event.logprobs:
        out["logprobs"] = logprobs_json(event)
    return out


async def _respond(request: web.Request, gen: Generation, stream: bool, chunk: Any, final_extra: Any,
                   tool_filter: ToolStreamFilter | None = None) -> web.StreamResponse:
    """Stream chunks (or collect them) and finish with the done chunk."""
    model = gen.target.name
    if stream:
        out = NDJSONStream(request)
        try:
            async for event in gen.events():
                text = tool_filter.feed(event.text) if tool_filter else event.text
                if text or event.logprobs:
                    await out.write(chunk(text, event))
            final = {"model": model, "created_at": now_iso(), **final_extra(gen.done)}
            if tool_filter is not None:
                content, calls = tool_filter.finish()
                if content:
                    await out.write(chunk(content, None))
                if calls:
                    msg = {"role": "assistant", "content": "", "tool_calls": [
                        {"function": {"name": c.name, "arguments": c.arguments}} for c in calls]}
                    await out.write({"model": model, "created_at": now_iso(), "message": msg, "done": False})
            await out.write({**final, **done_fields(gen)})
        except errors.LocalrunError as exc:
            if not out.response.prepared:
                raise
            gen.status = "error"
            await out.write({"error": exc.message, "code": exc.code})
        return await out.finish()
    parts: list[str] = []
    logprobs: list[dict[str, Any]] = []
    async for event in gen.events():
        parts.append(event.text)
        if event.logprobs:
            logprobs.extend(logprobs_json(event))
    result = {"model": model, "created_at": now_iso(), **final_extra(gen.done), **done_fields(gen)}
    text = "".join(parts)
    if "message" in result:
        result["message"] = _final_message(text, tool_filter)
    else:
        result["response"] = text
    if logprobs:
        result["logprobs"] = logprobs
    return web.json_response(result)


def _final_message(text: str, tool_filter: ToolStreamFilter | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_filter is not None:
        content, calls = parse_tool_calls(text, tool_filter.names)
        message["content"] = content
        if calls:
            message["tool_calls"] = [{"function": {"name": c.name, "arguments": c.arguments}} for c in calls]
    return message


async def chat(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    messages = prompts.check_messages(body.get("messages"))
    tools = validate_tools(body.get("tools"))
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    stream = get(body, "stream", bool, True)
    if not messages:
        return await _load_or_unload(request, body, keep_alive, chat=True)
    service = request.app[SERVICE]
    target = await service.target(body.get("model"), body.get("options"), keep_alive)
    full = prompts.with_defaults(messages, target.system, target.messages)
    text, system_prefix = await prompts.render_async(target.template, full, tools)
    req = GenerateRequest(
        prompt=text, sampling=sampling_with_logprobs(target, body), format=check_format(body.get("format")),
        truncation=truncation(body),
    )
    gen = await service.generate(target, req, "/api/chat", system_prefix=system_prefix)
    tool_filter = ToolStreamFilter(tool_names(tools)) if tools else None

    def chunk(text: str, event: TokenEvent | None) -> dict[str, Any]:
        out: dict[str, Any] = {"model": target.name, "created_at": now_iso(),
                               "message": {"role": "assistant", "content": text}, "done": False}
        if event is not None and event.logprobs:
            out["logprobs"] = logprobs_json(event)
        return out

    def final(done: DoneEvent) -> dict[str, Any]:
        return {"message": {"role": "assistant", "content": ""}}

    try:
        return await _respond(request, gen, stream, chunk, final, tool_filter)
    finally:
        await gen.close()


def _inputs(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        if any(not v for v in value):
            raise errors.InvalidRequest(f"'{name}' must not contain empty strings")
        return list(value)
    raise errors.InvalidRequest(f"'{name}' must be a string or a list of strings")


def resize(vector: list[float], dimensions: int | None) -> list[float]:
    """Matryoshka-style: keep the first ``dimensions`` values and renormalise."""
    if not dimensions or dimensions >= len(vector):
        return vector
    cut = vector[:dimensions]
    norm = math.sqrt(sum(v * v for v in cut)) or 1.0
    return [v / norm for v in cut]


async def embed(request: web.Request) -> web.Response:
    body = await read_json(request)
    inputs = _inputs(body.get("input", ""), "input")
    truncate = get(body, "truncate", bool, True)
    dimensions = get(body, "dimensions", int, None)
    if dimensions is not None and dimensions < 1:
        raise errors.InvalidRequest("'dimensions' must be at least 1")
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    service = request.app[SERVICE]
    target = await service.target(body.get("model"), body.get("options"), keep_alive)
    if not inputs:
        load = await service.load_only(target)
        return web.json_response({"model": target.name, "embeddings": [], "load_duration": load,
                                  "total_duration": load, "prompt_eval_count": 0})
    result, load_ns, total_ns = await service.embed(target, inputs, truncate)
    return web.json_response({
        "model": target.name,
        "embeddings": [resize(e, dimensions) for e in result.embeddings],
        "total_duration": total_ns,
        "load_duration": load_ns,
        "prompt_eval_count": result.prompt_eval_count,
    })


async def embeddings(request: web.Request) -> web.Response:
    """The older endpoint: one ``prompt`` in, one ``embedding`` out."""
    body = await read_json(request)
    prompt = get(body, "prompt", str, "")
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    service = request.app[SERVICE]
    target = await service.target(body.get("model"), body.get("options"), keep_alive)
    if not prompt:
        await service.load_only(target)
        return web.json_response({"embedding": []})
    result, _, _ = await service.embed(target, [prompt], True)
    return web.json_response({"embedding": result.embeddings[0]})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/generate", generate)
    app.router.add_post("/api/chat", chat)
    app.router.add_post("/api/embed", embed)
    app.router.add_post("/api/embeddings", embeddings)
