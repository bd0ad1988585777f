"""OpenAI-compatible routes under /v1: chat/completions, completions, embeddings (models: :mod:`..model_list`).

Thin: convert with :mod:`.convert`, run through the Service, stream as SSE.
``n`` > 1 runs n requests side by side (they batch together in the engine); with a seed,
choice i uses seed + i so the choices differ but stay reproducible. A prompt over the context is a
400 ``context_length_exceeded`` unless the request says ``truncate: true``; then the reply says how
many tokens went (``usage.prompt_truncated_count``, and on each streamed choice's last chunk).
"""

from __future__ import annotations

import time

from aiohttp import web

from ... import errors
from ...chat.events import ChatEvent, ContentDelta, ToolCall, collect, new_id
from ...engine.types import TokenLogprob
from ...jsontypes import JSONObject, JSONValue
from ..chat import ChatRun, start_chat, start_completions
from ..http import SSEStream, get, json_reply, read_json
from ..image_fetch import inline_remote_images
from ..keys import SERVICE
from ..middleware import error_body
from ..ollama.routes import embed_inputs, resize, truncated_field, truncation
from ..options import parse_keep_alive
from ..output import Output, merged
from . import convert as oc


async def _collect(outputs: list[Output]) -> tuple[list[list[ChatEvent]], list[str], list[list[TokenLogprob]]]:
    """Run every reply to its end (non-streaming): each one's events, raw text and token logprobs."""
    events: list[list[ChatEvent]] = [[] for _ in outputs]
    texts: list[list[str]] = [[] for _ in outputs]
    lps: list[list[TokenLogprob]] = [[] for _ in outputs]
    async for i, piece in merged(outputs):
        if piece is not None:
            events[i].extend(piece.events)
            texts[i].append(piece.text)
            lps[i].extend(piece.logprobs)
    return events, ["".join(t) for t in texts], lps


def _usage(outputs: list[Output], prompt_groups: int = 1) -> JSONObject:
    """Usage of every reply: each prompt's tokens once (its ``n`` replies share it), every output token."""
    per_prompt = max(1, len(outputs) // max(1, prompt_groups))
    firsts = [o.done for i, o in enumerate(outputs) if i % per_prompt == 0 and o.done is not None]
    return oc.usage(sum(d.prompt_eval_count for d in firsts), sum(o.done.eval_count for o in outputs if o.done),
                    sum(d.cached_tokens for d in firsts), sum(d.truncated_tokens for d in firsts))


async def _stream_error(sse: SSEStream, request: web.Request, exc: errors.LocalrunError) -> None:
    await sse.write(error_body(request, exc.status, exc.message, exc.code))


async def chat_completions(request: web.Request) -> web.StreamResponse:
    body: JSONObject = await read_json(request)
    await inline_remote_images(request, body)
    call = oc.chat_to_native(body)
    run = await start_chat(request.app[SERVICE], call, "/v1/chat/completions", truncation(body, default=False))
    rid, created = new_id("chatcmpl", "-"), int(time.time())
    try:
        if call.stream:
            return await _chat_stream(request, run, rid, created, call.include_usage)
        events, _, lps = await _collect(run.outputs)
        choices: list[JSONValue] = []
        for i, out in enumerate(run.outputs):
            reply = collect(events[i])
            done = out.done
            choices.append({
                "index": i, "message": oc.chat_message(reply),
                "logprobs": oc.chat_logprobs(lps[i]) if call.logprobs else None,
                "finish_reason": oc.finish_reason(done.done_reason if done else None, bool(reply.tool_calls)),
            })
        return json_reply(oc.chat_completion(rid, run.model, created, choices, _usage(run.outputs)))
    finally:
        await run.close()


async def _chat_stream(request: web.Request, run: ChatRun, rid: str, created: int,
                       include_usage: bool) -> web.StreamResponse:
    """SSE chunks: content, reasoning_content and tool_calls deltas as the replies yield them."""
    sse = SSEStream(request)
    outputs, model = run.outputs, run.model
    called = [False for _ in outputs]

    async def send(i: int, events: tuple[ChatEvent, ...], logprobs: JSONObject | None = None) -> None:
        for event in events or ((ContentDelta(""),) if logprobs else ()):
            called[i] = called[i] or isinstance(event, ToolCall)
            await sse.write(oc.chat_chunk(rid, model, created, i, oc.chat_delta(event), logprobs=logprobs))
            logprobs = None

    try:
        for i in range(len(outputs)):
            await sse.write(oc.chat_chunk(rid, model, created, i, {"role": "assistant", "content": ""}))
        async for i, piece in merged(outputs):
            if piece is not None:
                lp = oc.chat_logprobs(list(piece.logprobs)) if piece.logprobs else None
                await send(i, piece.events, lp)
                continue
            done = outputs[i].done
            await sse.write({**oc.chat_chunk(rid, model, created, i, {},
                                             oc.finish_reason(done.done_reason if done else None, called[i])),
                             **oc.truncation_note(done)})
        if include_usage:
            await sse.write(oc.usage_chunk(rid, model, created, "chat.completion.chunk", _usage(outputs)))
    except errors.LocalrunError as exc:
        for o in outputs:
            o.status = "error"
        await _stream_error(sse, request, exc)
    return await sse.finish()


async def completions(request: web.Request) -> web.StreamResponse:
    body: JSONObject = await read_json(request)
    call = oc.completion_to_native(body)
    fmt = oc.response_format(body.get("response_format"))
    run = await start_completions(request.app[SERVICE], call, fmt, "/v1/completions", truncation(body, default=False))
    outputs, model = run.outputs, run.model
    try:
        rid, created = new_id("cmpl", "-"), int(time.time())
        prefix = [call.prompts[i // call.n] if call.echo else "" for i in range(len(outputs))]
        if call.stream:
            sse = SSEStream(request)
            try:
                for i in range(len(outputs)):
                    if prefix[i]:
                        await sse.write(oc.completion(rid, model, created, [
                            {"index": i, "text": prefix[i], "logprobs": None, "finish_reason": None}], None))
                async for i, piece in merged(outputs):
                    choice: JSONObject
                    if piece is not None:
                        lp = oc.completion_logprobs(list(piece.logprobs)) if call.logprobs else None
                        choice = {"index": i, "text": piece.text, "logprobs": lp, "finish_reason": None}
                    else:
                        done = outputs[i].done
                        choice = {"index": i, "text": "", "logprobs": None,
                                  "finish_reason": oc.finish_reason(done.done_reason if done else None, False)}
                    note = oc.truncation_note(outputs[i].done) if piece is None else {}
                    await sse.write({**oc.completion(rid, model, created, [choice], None), **note})
                if call.include_usage:
                    await sse.write(oc.usage_chunk(rid, model, created, "text_completion",
                                                   _usage(outputs, len(call.prompts))))
            except errors.LocalrunError as exc:
                await _stream_error(sse, request, exc)
            return await sse.finish()
        _, texts, lps = await _collect(outputs)
        choices: list[JSONValue] = []
        for i, out in enumerate(outputs):
            done = out.done
            choices.append({
                "index": i, "text": prefix[i] + texts[i],
                "logprobs": oc.completion_logprobs(lps[i], len(prefix[i])) if call.logprobs else None,
                "finish_reason": oc.finish_reason(done.done_reason if done else None, False),
            })
        return json_reply(oc.completion(rid, model, created, choices, _usage(outputs, len(call.prompts))))
    finally:
        await run.close()


async def embeddings(request: web.Request) -> web.Response:
    body: JSONObject = await read_json(request)
    inputs = oc.embedding_inputs(body.get("input"))
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise errors.InvalidRequest("'encoding_format' must be 'float' or 'base64'")
    dimensions = body.get("dimensions")
    if dimensions is not None and (isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1):
        raise errors.InvalidRequest("'dimensions' must be a positive whole number")
    # OpenAI refuses an input over the model's context; ``truncate: true`` (as on our chat routes) cuts it
    name, result, _, _ = await embed_inputs(request.app[SERVICE], body.get("model"), oc.options_from_openai(body),
                                            parse_keep_alive(body.get("keep_alive")), inputs,
                                            get(body, "truncate", bool, False))
    data = [{"object": "embedding", "index": i, "embedding": oc.embedding_vector(resize(e, dimensions), encoding)}
            for i, e in enumerate(result.embeddings)]
    return json_reply({"object": "list", "data": data, "model": name,
                             "usage": {"prompt_tokens": result.prompt_eval_count,
                                       "total_tokens": result.prompt_eval_count},
                             **truncated_field(result)})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/embeddings", embeddings)
