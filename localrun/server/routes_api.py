"""Ollama's native generation routes: /api/generate, /api/chat, /api/embed, /api/embeddings.

Handlers parse and validate, call the Service, and stream NDJSON. The final chunk carries
``done_reason`` and Ollama's timing fields in nanoseconds, plus ``prompt_eval_cached_count``
(prompt tokens served from the prefix cache) and, when the prompt was cut to fit,
``prompt_truncated_count``. An error after streaming started becomes a last ``{"error": ...}``
line, as Ollama does. Chat output goes through :mod:`.chatturn` / :mod:`.chatparse` (the same
as /v1's): ``message.thinking`` and ``message.tool_calls`` come from the model's own formats.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from aiohttp import web

from .. import errors
from ..engine.types import GenerateRequest, TokenEvent, Truncation
from ..errors import UnsupportedCapability
from . import chatturn, prompts
from .chatformat import parse_think
from .chatparse import ChatStreamParser, ContentDelta, Reply, collect
from .http import NDJSONStream, get, now_iso, read_json
from .keys import SERVICE
from .native_shapes import CHAT, GENERATE, Shape
from .options import parse_keep_alive
from .service import Generation, Target
from .tools import validate_tools


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
    suffix = get(body, "suffix", str, "")
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    stream = get(body, "stream", bool, True)
    think = parse_think(body.get("think"))
    if not prompt and not images and not suffix:
        return await _load_or_unload(request, body, keep_alive, chat=False)
    if images:
        raise errors.InvalidRequest(f"model {body.get('model')!r} does not support images")
    service = request.app[SERVICE]
    target = await service.target(body.get("model"), body.get("options"), keep_alive)
    context = get(body, "context", list, None)
    if context is not None and not all(isinstance(t, int) and not isinstance(t, bool) for t in context):
        raise errors.InvalidRequest("'context' must be a list of token ids")
    parser: ChatStreamParser | None = None
    system_prefix = None
    if suffix:
        text = fill_in_the_middle(target, prompt, suffix)
    elif get(body, "raw", bool, False):
        text = prompt
    else:
        messages = [{"role": "user", "content": prompt}]
        system = get(body, "system", str, None) or target.system
        if system:
            messages.insert(0, {"role": "system", "content": system})
        template = get(body, "template", str, None)
        if template:
            target = dataclasses.replace(target, template_override=template)
        turn = await chatturn.prepare(target, messages, think=think)
        text, system_prefix, parser = turn.prompt, turn.system_prefix, turn.parser()
    req = GenerateRequest(
        prompt=text, sampling=sampling_with_logprobs(target, body), format=check_format(body.get("format")),
        truncation=truncation(body),
    )
    gen = await service.generate(target, req, "/api/generate", context=context, system_prefix=system_prefix)
    try:
        return await _respond(request, gen, stream, GENERATE, parser)
    finally:
        await gen.close()


def fill_in_the_middle(target: Target, prompt: str, suffix: str) -> str:
    """The infill prompt (prefix, suffix, middle tokens) for a model whose vocabulary has FIM tokens."""
    fim = target.geometry.fim
    if fim is None:
        raise UnsupportedCapability(f"{target.name} does not support insert")
    return f"{fim[0]}{prompt}{fim[1]}{suffix}{fim[2]}"


async def chat(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    messages = prompts.check_messages(body.get("messages"))
    tools = validate_tools(body.get("tools"))
    think = parse_think(body.get("think"))
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    stream = get(body, "stream", bool, True)
    if not messages:
        return await _load_or_unload(request, body, keep_alive, chat=True)
    service = request.app[SERVICE]
    target = await service.target(body.get("model"), body.get("options"), keep_alive)
    turn = await chatturn.prepare(target, messages, tools=tools, think=think)
    req = turn.request(sampling_with_logprobs(target, body), check_format(body.get("format")), truncation(body))
    gen = await service.generate(target, req, "/api/chat", system_prefix=turn.system_prefix)
    try:
        return await _respond(request, gen, stream, CHAT, turn.parser())
    finally:
        await gen.close()


async def _respond(request: web.Request, gen: Generation, stream: bool, shape: Shape,
                   parser: ChatStreamParser | None) -> web.StreamResponse:
    """Stream chunks (or collect them) and finish with the done chunk; ``parser`` splits the text."""
    model = gen.target.name

    def head() -> dict[str, Any]:
        return {"model": model, "created_at": now_iso()}

    if stream:
        out = NDJSONStream(request)
        try:
            async for event in gen.events():
                pieces = parser.feed(event.text) if parser else [ContentDelta(event.text)]
                logprobs = logprobs_json(event) if event.logprobs else None
                for piece in pieces or ([ContentDelta("")] if logprobs else []):
                    await out.write({**head(), **shape.piece(piece), "done": False,
                                     **({"logprobs": logprobs} if logprobs else {})})
                    logprobs = None
            for piece in parser.finish() if parser else []:
                await out.write({**head(), **shape.piece(piece), "done": False})
            await out.write({**head(), **shape.final(gen.done, None), **done_fields(gen)})
        except errors.LocalrunError as exc:
            if not out.response.prepared:
                raise
            gen.status = "error"
            await out.write({"error": exc.message, "code": exc.code})
        return await out.finish()
    parts: list[str] = []
    logprobs_all: list[dict[str, Any]] = []
    async for event in gen.events():
        parts.append(event.text)
        if event.logprobs:
            logprobs_all.extend(logprobs_json(event))
    text = "".join(parts)
    reply = collect(parser.feed(text) + parser.finish()) if parser else Reply(text, "", ())
    result = {**head(), **shape.final(gen.done, reply), **done_fields(gen)}
    if logprobs_all:
        result["logprobs"] = logprobs_all
    return web.json_response(result)


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
