"""Ollama's native generation routes: /api/generate, /api/chat, /api/embed, /api/embeddings.

Handlers parse and validate, call the Service, and stream NDJSON. The final chunk carries
``done_reason`` and Ollama's timing fields in nanoseconds, plus ``prompt_eval_cached_count``
(prompt tokens served from the prefix cache) and, when the prompt was cut to fit,
``prompt_truncated_count`` (with a WARNING in the log: :func:`.chat.close_reply`). An error after
streaming started becomes a last ``{"error": ...}`` line, as Ollama does. Chat output goes through
:mod:`.chatturn` / :mod:`.chatparse` (the same as /v1's): ``message.thinking`` and
``message.tool_calls`` come from the model's own formats.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence

from aiohttp import web

from ... import errors
from ...chat import images as chat_images
from ...chat.events import ChatEvent, ContentDelta, collect
from ...chat.parse import ChatStreamParser
from ...chat.prompt import check_messages
from ...chat.think import Think, parse_think
from ...chat.tools import validate_tools
from ...engine import limits
from ...engine.types import (
    EmbedInput,
    EmbedResult,
    GenerateRequest,
    OutputFormat,
    SamplingOptions,
    TokenLogprob,
    Truncation,
)
from ...errors import UnsupportedCapability
from ...jsontypes import JSONObject, JSONValue
from ...modelkind import ModelKind
from ...runtime.resident import KeepAlive
from .. import chatturn, remote
from ..chat import close_reply, start_chat, start_completions, upstream_route
from ..http import NDJSONStream, get, json_reply, now_iso, read_json
from ..keys import SERVICE
from ..native_call import NativeCall
from ..options import parse_keep_alive, top_logprobs
from ..output import LocalOutput, Output
from ..service import Service, Target
from .shapes import CHAT, GENERATE, Shape


def check_format(value: JSONValue) -> OutputFormat:
    if value in (None, ""):
        return None
    if (isinstance(value, str) and value == "json") or isinstance(value, dict):
        return value
    raise errors.InvalidRequest("'format' must be \"json\" or a JSON schema object")


def truncation(body: JSONObject, *, default: bool = True) -> Truncation:
    """localrun's ``truncate``: true cuts the oldest tokens of a prompt longer than the context (the system
    prompt is kept, and the reply says how many went), false refuses it (400 ``context_length_exceeded``).

    ``default`` is what an unset ``truncate`` means: true on /api (Ollama's behaviour), false on /v1,
    where a prompt is never cut unless the client asks for it.
    """
    return Truncation.FRONT if get(body, "truncate", bool, default) else Truncation.REJECT


def done_fields(out_: Output) -> JSONObject:
    done = out_.done
    assert done is not None
    out: JSONObject = {
        "done": True,
        "done_reason": done.done_reason.value,
        "total_duration": out_.total_duration_ns,
        "load_duration": out_.load_duration_ns,
        "prompt_eval_count": done.prompt_eval_count,
        "prompt_eval_duration": done.prompt_eval_duration,
        "eval_count": done.eval_count,
        "eval_duration": done.eval_duration,
        "prompt_eval_cached_count": done.cached_tokens,
    }
    if done.truncated_tokens:
        out["prompt_truncated_count"] = done.truncated_tokens
    return out


def logprobs_json(logprobs: tuple[TokenLogprob, ...]) -> list[JSONObject]:
    return [
        {"token": lp.token, "logprob": lp.logprob,
         "top_logprobs": [{"token": t, "logprob": p} for t, p in lp.top]}
        for lp in logprobs
    ]


def sampling_with_logprobs(target: Target, body: JSONObject) -> SamplingOptions:
    from dataclasses import replace

    logprobs = get(body, "logprobs", bool, False)
    top = top_logprobs(body)
    if logprobs or top:
        return replace(target.sampling, logprobs=True, top_logprobs=top)
    return target.sampling


async def _load_or_unload(request: web.Request, body: JSONObject, keep_alive: KeepAlive,
                          chat: bool) -> web.Response:
    """An empty prompt loads the model; with keep_alive 0 it unloads it (an upstream's: only checked)."""
    service = request.app[SERVICE]
    route = upstream_route(service, body.get("model"))
    if route is not None and service.upstreams is not None:
        await remote.check_served(service.upstreams, route)
        name = route.name
    else:
        target = await service.target(body.get("model"), body.get("options"), keep_alive)
        name = target.name
        if keep_alive == 0:
            await service.unload(target.name)
        else:
            await service.load_only(target)
    out: JSONObject = {"model": name, "created_at": now_iso(), "done": True,
                      "done_reason": "unload" if keep_alive == 0 else "load"}
    if chat:
        out["message"] = {"role": "assistant", "content": ""}
    else:
        out["response"] = ""
    return json_reply(out)


async def generate(request: web.Request) -> web.StreamResponse:
    body: JSONObject = await read_json(request)
    prompt = get(body, "prompt", str, "")
    pictures = chat_images.from_list(body.get("images"), "images")
    suffix = get(body, "suffix", str, "")
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    stream = get(body, "stream", bool, True)
    think = parse_think(body.get("think"))
    if not prompt and not pictures and not suffix:
        return await _load_or_unload(request, body, keep_alive, chat=False)
    service = request.app[SERVICE]
    if pictures and (suffix or (get(body, "raw", bool, False) and upstream_route(service, body.get("model")))):
        raise UnsupportedCapability("images with 'suffix', or in a raw prompt for an upstream model, are not supported")
    if upstream_route(service, body.get("model")) is not None:
        out = await _generate_upstream(service, body, prompt, pictures, suffix, think, keep_alive, stream)
    else:
        out = await _generate_local(service, body, prompt, pictures, suffix, think, keep_alive)
    try:
        return await _respond(request, out, stream, GENERATE)
    finally:
        await close_reply(out)


async def _generate_local(service: Service, body: JSONObject, prompt: str, pictures: list[chat_images.Image],
                          suffix: str, think: Think | None, keep_alive: KeepAlive) -> Output:
    target = await service.target(body.get("model"), body.get("options"), keep_alive)
    target.require(ModelKind.GENERATION)
    user = chat_images.attach(prompt, pictures, "prompt")
    context = get(body, "context", list, None)
    if context is not None and pictures:
        raise errors.InvalidRequest("'context' cannot be combined with 'images'; send the conversation as /api/chat "
                                    "messages instead")
    if context is not None and not all(isinstance(t, int) and not isinstance(t, bool) for t in context):
        raise errors.InvalidRequest("'context' must be a list of token ids")
    parser: ChatStreamParser | None = None
    system_prefix = None
    if suffix:
        text = target.infill(prompt, suffix)
    elif get(body, "raw", bool, False):
        text = str(user["content"])
    else:
        messages: list[JSONObject] = [{"role": "user", **user}]
        system = get(body, "system", str, None) or target.system
        if system:
            messages.insert(0, {"role": "system", "content": system})
        template = get(body, "template", str, None)
        if template:
            target = dataclasses.replace(target, template_override=template)
        turn = await chatturn.prepare(target, messages, think=think)
        text, system_prefix, parser = turn.prompt, turn.system_prefix, turn.parser()
    chatturn.require_vision(target, [p.data for p in pictures])
    req = GenerateRequest(
        prompt=text, sampling=sampling_with_logprobs(target, body), format=check_format(body.get("format")),
        truncation=truncation(body), images=tuple(p.data for p in pictures),
    )
    gen = await service.generate(target, req, "/api/generate", context=context, system_prefix=system_prefix)
    return LocalOutput(gen, parser)


async def _generate_upstream(service: Service, body: JSONObject, prompt: str, pictures: list[chat_images.Image],
                             suffix: str, think: Think | None, keep_alive: KeepAlive, stream: bool) -> Output:
    """/api/generate on an upstream: a chat turn (its template applies), or a raw prompt (``raw``, ``suffix``)."""
    for name in ("context", "template"):
        if body.get(name):
            raise UnsupportedCapability(f"'{name}' is not available for upstream models")
    call = NativeCall(model=body.get("model"), options=get(body, "options", dict, {}), keep_alive=keep_alive,
                      stream=stream, format=check_format(body.get("format")), think=think,
                      logprobs=get(body, "logprobs", bool, False), top_logprobs=top_logprobs(body))
    if suffix or get(body, "raw", bool, False):
        call.prompts, call.suffix = [prompt], suffix
        run = await start_completions(service, call, call.format, "/api/generate")
    else:
        system = get(body, "system", str, None)
        turn: list[JSONObject] = [{"role": "system", "content": system}] if system else []
        call.messages = [*turn, {"role": "user", **chat_images.attach(prompt, pictures, "prompt")}]
        run = await start_chat(service, call, "/api/generate")
    return run.outputs[0]


async def chat(request: web.Request) -> web.StreamResponse:
    body: JSONObject = await read_json(request)
    messages = check_messages(body.get("messages"))
    tools = validate_tools(body.get("tools"))
    think = parse_think(body.get("think"))
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    stream = get(body, "stream", bool, True)
    if not messages:
        return await _load_or_unload(request, body, keep_alive, chat=True)
    top = top_logprobs(body)
    call = NativeCall(model=body.get("model"), options=get(body, "options", dict, {}), keep_alive=keep_alive,
                      stream=stream, messages=messages, tools=tools, think=think,
                      format=check_format(body.get("format")),
                      logprobs=get(body, "logprobs", bool, False) or top > 0, top_logprobs=top)
    run = await start_chat(request.app[SERVICE], call, "/api/chat", truncation(body))
    try:
        return await _respond(request, run.outputs[0], stream, CHAT)
    finally:
        await run.close()


async def _respond(request: web.Request, output: Output, stream: bool, shape: Shape) -> web.StreamResponse:
    """Stream chunks (or collect them) and finish with the done chunk."""
    model = output.model

    def head() -> JSONObject:
        return {"model": model, "created_at": now_iso()}

    if stream:
        out = NDJSONStream(request)
        try:
            async for piece in output.pieces():
                logprobs = logprobs_json(piece.logprobs) if piece.logprobs else None
                for event in piece.events or ((ContentDelta(""),) if logprobs else ()):
                    await out.write({**head(), **shape.piece(event), "done": False,
                                     **({"logprobs": logprobs} if logprobs else {})})
                    logprobs = None
            await out.write({**head(), **shape.final(output.done, None), **done_fields(output)})
        except errors.LocalrunError as exc:
            if not out.response.prepared:
                raise
            output.status = "error"
            await out.write({"error": exc.message, "code": exc.code})
        return await out.finish()
    events: list[ChatEvent] = []
    logprobs_all: list[JSONValue] = []
    async for piece in output.pieces():
        events.extend(piece.events)
        if piece.logprobs:
            logprobs_all.extend(logprobs_json(piece.logprobs))
    result = {**head(), **shape.final(output.done, collect(events)), **done_fields(output)}
    if logprobs_all:
        result["logprobs"] = logprobs_all
    return json_reply(result)


def _inputs(value: JSONValue, name: str) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list):
        texts = [v for v in value if isinstance(v, str)]
        if len(texts) == len(value):  # strings only
            if any(not v for v in texts):
                raise errors.InvalidRequest(f"'{name}' must not contain empty strings")
            return texts
    raise errors.InvalidRequest(f"'{name}' must be a string or a list of strings")


def resize(vector: list[float], dimensions: int | None) -> list[float]:
    """Matryoshka-style: keep the first ``dimensions`` values and renormalise."""
    if not dimensions or dimensions >= len(vector):
        return vector
    cut = vector[:dimensions]
    norm = math.sqrt(sum(v * v for v in cut)) or 1.0
    return [v / norm for v in cut]


async def embed_inputs(service: Service, model: object, options: object, keep_alive: KeepAlive,
                       inputs: Sequence[EmbedInput], truncate: bool) -> tuple[str, EmbedResult, int, int]:
    """(model name, result, load_duration_ns, total_duration_ns) for ``inputs``, on the model or upstream
    ``model`` names; no inputs only loads a local model."""
    limits.check_texts(inputs, "inputs")
    route = upstream_route(service, model)
    if route is not None and service.upstreams is not None:
        started = time.perf_counter_ns()
        if not inputs:
            await remote.check_served(service.upstreams, route)
            return route.name, EmbedResult([], 0, []), 0, time.perf_counter_ns() - started
        result = await remote.embed(service.upstreams, route, inputs, truncate)
        return route.name, result, 0, time.perf_counter_ns() - started
    target = await service.target(model, options, keep_alive)
    target.require(ModelKind.EMBEDDING)
    if not inputs:
        load = await service.load_only(target)
        return target.name, EmbedResult([], 0, []), load, load
    result, load_ns, total_ns = await service.embed(target, inputs, truncate)
    return target.name, result, load_ns, total_ns


async def embed(request: web.Request) -> web.Response:
    body: JSONObject = await read_json(request)
    inputs = _inputs(body.get("input", ""), "input")
    truncate = get(body, "truncate", bool, True)
    dimensions = get(body, "dimensions", int, None)
    if dimensions is not None and dimensions < 1:
        raise errors.InvalidRequest("'dimensions' must be at least 1")
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    name, result, load_ns, total_ns = await embed_inputs(request.app[SERVICE], body.get("model"),
                                                         body.get("options"), keep_alive, inputs, truncate)
    return json_reply({
        "model": name,
        "embeddings": [resize(e, dimensions) for e in result.embeddings],
        "total_duration": total_ns,
        "load_duration": load_ns,
        "prompt_eval_count": result.prompt_eval_count,
        **truncated_field(result),
    })


def truncated_field(result: EmbedResult) -> JSONObject:
    """``{"truncated": [indices]}`` naming the inputs cut to fit the context; empty when none was."""
    cut: list[JSONValue] = [i for i, was in enumerate(result.truncated) if was]
    return {"truncated": cut} if cut else {}


async def embeddings(request: web.Request) -> web.Response:
    """The older endpoint: one ``prompt`` in, one ``embedding`` out. It has no field to say a prompt
    was cut, so a prompt over the context is a 400 unless the request says ``truncate: true``."""
    body: JSONObject = await read_json(request)
    prompt = get(body, "prompt", str, "")
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    _, result, _, _ = await embed_inputs(request.app[SERVICE], body.get("model"), body.get("options"), keep_alive,
                                         [prompt] if prompt else [], get(body, "truncate", bool, False))
    return json_reply({"embedding": result.embeddings[0] if result.embeddings else [],
                             **truncated_field(result)})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/generate", generate)
    app.router.add_post("/api/chat", chat)
    app.router.add_post("/api/embed", embed)
    app.router.add_post("/api/embeddings", embeddings)
