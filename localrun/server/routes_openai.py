"""OpenAI-compatible routes under /v1: chat/completions, completions, embeddings, models.

Thin: convert with :mod:`.openai_compat`, run through the Service, stream as SSE.
``n`` > 1 runs n requests side by side (they batch together in the engine); with a seed,
choice i uses seed + i so the choices differ but stay reproducible.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from aiohttp import web

from .. import errors
from ..engine.types import GenerateRequest, TokenEvent, TokenLogprob
from . import openai_compat as oc
from .chat import start_chat, start_generations
from .chatparse import ChatEvent, ContentDelta, ToolCall, collect
from .chatturn import ChatTurn
from .http import SSEStream, read_json
from .keys import SERVICE, STORE
from .middleware import error_body
from .options import parse_keep_alive
from .routes_api import resize, truncation
from .service import Generation


async def _merge(gens: list[Generation]) -> AsyncIterator[tuple[int, TokenEvent | None]]:
    """Events of several generations as they come: (index, event), then (index, None) at its end."""
    if len(gens) == 1:
        async for event in gens[0].events():
            yield 0, event
        yield 0, None
        return
    queue: asyncio.Queue[tuple[int, TokenEvent | None, BaseException | None]] = asyncio.Queue()

    async def pump(i: int, gen: Generation) -> None:
        try:
            async for event in gen.events():
                await queue.put((i, event, None))
            await queue.put((i, None, None))
        except Exception as exc:
            await queue.put((i, None, exc))

    tasks = [asyncio.create_task(pump(i, g)) for i, g in enumerate(gens)]
    try:
        remaining = len(gens)
        while remaining:
            i, item, exc = await queue.get()
            if exc is not None:
                raise exc
            if item is None:
                remaining -= 1
            yield i, item
    finally:
        for t in tasks:
            t.cancel()


async def _collect(gens: list[Generation]) -> tuple[list[str], list[list[TokenLogprob]]]:
    """Run every generation to its end (non-streaming): each one's text and token logprobs."""
    parts: list[list[str]] = [[] for _ in gens]
    lps: list[list[TokenLogprob]] = [[] for _ in gens]
    async for i, event in _merge(gens):
        if event is not None:
            parts[i].append(event.text)
            lps[i].extend(event.logprobs)
    return ["".join(p) for p in parts], lps


def _usage(gens: list[Generation], prompt_groups: int = 1) -> dict[str, Any]:
    per_prompt = len(gens) // max(1, prompt_groups)
    dones = [g.done for g in gens]
    prompt = sum(d.prompt_eval_count for i, d in enumerate(dones) if d and i % max(1, per_prompt) == 0)
    cached = sum(d.cached_tokens for i, d in enumerate(dones) if d and i % max(1, per_prompt) == 0)
    return oc.usage(prompt, sum(d.eval_count for d in dones if d), cached)


async def _stream_error(sse: SSEStream, request: web.Request, exc: errors.LocalrunError) -> None:
    await sse.write(error_body(request, exc.status, exc.message, exc.code))


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    call = oc.chat_to_native(body)
    run = await start_chat(request.app[SERVICE], call, "/v1/chat/completions", truncation(body))
    target, turn, gens = run.target, run.turn, run.gens
    rid, created = oc.new_id("chatcmpl"), int(time.time())
    try:
        if call.stream:
            return await _chat_stream(request, gens, target.name, rid, created, turn, call.include_usage)
        texts, lps = await _collect(gens)
        choices = []
        for i, gen in enumerate(gens):
            parser = turn.parser()
            reply = collect(parser.feed(texts[i]) + parser.finish())
            done = gen.done
            choices.append({
                "index": i, "message": oc.chat_message(reply),
                "logprobs": oc.chat_logprobs(lps[i]) if call.logprobs else None,
                "finish_reason": oc.finish_reason(done.done_reason if done else None, bool(reply.tool_calls)),
            })
        return web.json_response(oc.chat_completion(rid, target.name, created, choices, _usage(gens)))
    finally:
        for g in gens:
            await g.close()


async def _chat_stream(request: web.Request, gens: list[Generation], model: str, rid: str, created: int,
                       turn: ChatTurn, include_usage: bool) -> web.StreamResponse:
    """SSE chunks: content, reasoning_content and tool_calls deltas as the parser yields them."""
    sse = SSEStream(request)
    parsers = [turn.parser() for _ in gens]
    called = [False for _ in gens]

    async def send(i: int, events: list[ChatEvent], logprobs: dict[str, Any] | None = None) -> None:
        for event in events or ([ContentDelta("")] if logprobs else []):
            called[i] = called[i] or isinstance(event, ToolCall)
            await sse.write(oc.chat_chunk(rid, model, created, i, oc.chat_delta(event), logprobs=logprobs))
            logprobs = None

    try:
        for i in range(len(gens)):
            await sse.write(oc.chat_chunk(rid, model, created, i, {"role": "assistant", "content": ""}))
        async for i, event in _merge(gens):
            if event is not None:
                lp = oc.chat_logprobs(list(event.logprobs)) if event.logprobs else None
                await send(i, parsers[i].feed(event.text), lp)
                continue
            await send(i, parsers[i].finish())
            done = gens[i].done
            await sse.write(oc.chat_chunk(rid, model, created, i, {},
                                          oc.finish_reason(done.done_reason if done else None, called[i])))
        if include_usage:
            await sse.write(oc.usage_chunk(rid, model, created, "chat.completion.chunk", _usage(gens)))
    except errors.LocalrunError as exc:
        for g in gens:
            g.status = "error"
        await _stream_error(sse, request, exc)
    return await sse.finish()


async def completions(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    call = oc.completion_to_native(body)
    service = request.app[SERVICE]
    target = await service.target(call.model, call.options, call.keep_alive)
    sampling = replace(target.sampling, logprobs=call.logprobs, top_logprobs=call.top_logprobs,
                       ignore_eos=call.ignore_eos, min_tokens=call.min_tokens)
    fmt = oc.response_format(body.get("response_format"))
    gens: list[Generation] = []
    try:
        for p in call.prompts:
            req = GenerateRequest(prompt=p, sampling=sampling, format=fmt, truncation=truncation(body))
            gens.extend(await start_generations(service, target, req, call.n, "/v1/completions"))
        rid, created = oc.new_id("cmpl"), int(time.time())
        prefix = [call.prompts[i // call.n] if call.echo else "" for i in range(len(gens))]
        if call.stream:
            sse = SSEStream(request)
            try:
                for i in range(len(gens)):
                    if prefix[i]:
                        await sse.write(oc.completion(rid, target.name, created, [
                            {"index": i, "text": prefix[i], "logprobs": None, "finish_reason": None}], None))
                async for i, event in _merge(gens):
                    if event is not None:
                        lp = oc.completion_logprobs(list(event.logprobs)) if call.logprobs else None
                        choice = {"index": i, "text": event.text, "logprobs": lp, "finish_reason": None}
                    else:
                        done = gens[i].done
                        choice = {"index": i, "text": "", "logprobs": None,
                                  "finish_reason": oc.finish_reason(done.done_reason if done else None, False)}
                    await sse.write(oc.completion(rid, target.name, created, [choice], None))
                if call.include_usage:
                    await sse.write(oc.usage_chunk(rid, target.name, created, "text_completion",
                                                   _usage(gens, len(call.prompts))))
            except errors.LocalrunError as exc:
                await _stream_error(sse, request, exc)
            return await sse.finish()
        texts, lps = await _collect(gens)
        choices = []
        for i, gen in enumerate(gens):
            done = gen.done
            choices.append({
                "index": i, "text": prefix[i] + texts[i],
                "logprobs": oc.completion_logprobs(lps[i], len(prefix[i])) if call.logprobs else None,
                "finish_reason": oc.finish_reason(done.done_reason if done else None, False),
            })
        return web.json_response(oc.completion(rid, target.name, created, choices,
                                               _usage(gens, len(call.prompts))))
    finally:
        for g in gens:
            await g.close()


async def embeddings(request: web.Request) -> web.Response:
    body = await read_json(request)
    inputs = oc.embedding_inputs(body.get("input"))
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise errors.InvalidRequest("'encoding_format' must be 'float' or 'base64'")
    dimensions = body.get("dimensions")
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1):
        raise errors.InvalidRequest("'dimensions' must be a positive whole number")
    service = request.app[SERVICE]
    target = await service.target(body.get("model"), oc.options_from_openai(body),
                                  parse_keep_alive(body.get("keep_alive")))
    result, _, _ = await service.embed(target, inputs, True)
    data = [{"object": "embedding", "index": i, "embedding": oc.embedding_vector(resize(e, dimensions), encoding)}
            for i, e in enumerate(result.embeddings)]
    return web.json_response({"object": "list", "data": data, "model": target.name,
                              "usage": {"prompt_tokens": result.prompt_eval_count,
                                        "total_tokens": result.prompt_eval_count}})


def _store_models(request: web.Request) -> list[tuple[str, int]]:
    items = request.app[STORE].list()
    out = []
    for item in items:
        name = str(getattr(item, "name", item))
        modified = getattr(item, "modified_at", None) or getattr(item, "modified", None)
        ts = int(modified.timestamp()) if modified is not None and hasattr(modified, "timestamp") \
            else int(modified or 0)
        out.append((name, ts))
    return out


async def models(request: web.Request) -> web.Response:
    data = [oc.model_object(name, ts) for name, ts in _store_models(request)]
    return web.json_response({"object": "list", "data": data})


async def model(request: web.Request) -> web.Response:
    wanted = request.match_info["model"]
    store = request.app[STORE]
    resolved = store.resolve(wanted)  # raises ModelNotFound (404) for unknown names
    name = str(getattr(resolved, "name", wanted))
    for listed, ts in _store_models(request):
        if listed == name:
            return web.json_response(oc.model_object(name, ts))
    return web.json_response(oc.model_object(name, 0))


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/{model:.+}", model)
