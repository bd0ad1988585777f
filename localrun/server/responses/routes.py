"""``POST /v1/responses``: OpenAI's Responses API over the shared chat path;
``POST /v1/responses/input_tokens``: how many tokens its input is; and the stored responses:
``GET`` and ``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items``, and
``POST /v1/responses/{id}/cancel`` for a background one (``"background": true``: :mod:`.background`).

Thin: :mod:`.convert` turns the request into a native call, :func:`..chat.start_chat` runs it, and
:class:`.stream.ResponsesEncoder` turns the model's output events into the reply:
typed SSE events when ``stream`` is true, else the final ``response`` object. A response whose
request did not say ``"store": false`` is kept once it ends (:mod:`.store`: in memory, bounded),
so ``previous_response_id`` and ``item_reference`` items can continue it.

A prompt is never cut by tokens. Over the context, ``truncation: "disabled"`` (the default) is a 400
``context_length_exceeded``; ``"auto"`` drops the oldest input items (:func:`_start_fitted`) and the
response says what went in ``truncation_details`` (localrun's field), as does a WARNING.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from ... import errors
from ...chat.events import ContentDelta, ThinkingDelta
from ...engine.types import Truncation
from ...jsontypes import JSONObject
from ..chat import ChatRun, TokenUsage, count_prompt_tokens, hit_length_limit, output_events, start_chat
from ..http import EventStream, NamedEvent, json_reply, read_json
from ..image_fetch import inline_remote_images
from ..keys import BACKGROUND, RESPONSES, SERVICE
from ..service import Service
from .background import MAX_ENDED, BackgroundRun
from .convert import ResponsesCall, listed_item, responses_to_native
from .stream import ResponsesEncoder

log = logging.getLogger("localrun.requests")
Emit = Callable[[list[NamedEvent]], Awaitable[None]]


async def _drive(run: ChatRun, converted: ResponsesCall, encoder: ResponsesEncoder, emit: Emit) -> None:
    """Run the generation to its end, handing each batch of events to ``emit``."""
    out = run.outputs[0]
    await emit(encoder.start())
    async for item in output_events(out):
        if isinstance(item, ContentDelta):
            await emit(encoder.text(item.text))
        elif isinstance(item, ThinkingDelta):
            await emit(encoder.reasoning(item.text))
        else:
            namespace, name = converted.split_name(item.name)
            await emit(encoder.tool_call(item.id, name, item.arguments_json(), namespace))
    await emit(encoder.finish(TokenUsage.of(out.done), hit_length_limit(out.done)))


def _convert(request: web.Request, body: JSONObject) -> ResponsesCall:
    """The request in native terms, with the conversation of its ``previous_response_id`` before its
    input and its ``item_reference`` items looked up among the stored responses."""
    stored = request.app[RESPONSES]
    previous = body.get("previous_response_id")
    history = stored.previous(previous).conversation() if isinstance(previous, str) else []
    return responses_to_native(body, history, stored.item)


async def create_response(request: web.Request) -> web.StreamResponse:
    body: JSONObject = await read_json(request)
    await inline_remote_images(request, body)
    converted = _convert(request, body)
    run, dropped = await _start(request.app[SERVICE], converted)
    encoder = ResponsesEncoder(run.model, {**converted.echo, **dropped})
    if converted.background:
        return await _in_background(request, run, converted, encoder)
    try:
        if not converted.call.stream:
            async def keep(events: list[NamedEvent]) -> None:
                return None

            await _drive(run, converted, encoder, keep)
            _store(request, converted, encoder)
            return json_reply(encoder.response)
        out = EventStream(request)

        async def send(events: list[NamedEvent]) -> None:
            for name, data in events:
                await out.write(name, data)

        try:
            await _drive(run, converted, encoder, send)
        except errors.LocalrunError as exc:
            run.outputs[0].status = "error"
            await send(encoder.fail(exc.code, exc.message))
        _store(request, converted, encoder)
        return await out.finish()
    finally:
        await run.close()


async def _in_background(request: web.Request, run: ChatRun, converted: ResponsesCall,
                         encoder: ResponsesEncoder) -> web.StreamResponse:
    """Write the reply in a task of its own (:mod:`.background`): the response object at once
    (``queued``), or with ``stream`` its events as they come, which stop only for this client if it
    leaves. Whatever ends the run, the response is stored."""
    app = request.app
    encoder.response["status"] = "queued"
    background = BackgroundRun(encoder)

    async def add(events: list[NamedEvent]) -> None:
        background.add(events)

    async def work() -> None:
        try:
            await _drive(run, converted, encoder, add)
        except errors.LocalrunError as exc:
            run.outputs[0].status = "error"
            background.add(encoder.fail(exc.code, exc.message))
        except asyncio.CancelledError:
            background.add(encoder.cancel())
        except Exception:  # a bug: the response says so rather than staying in progress for ever
            log.exception("background response %s failed", background.id)
            background.add(encoder.fail("server_error", "the server failed while writing this response"))
        finally:
            await run.close()
            app[RESPONSES].put(encoder.response, converted.items)
            background.end()

    app[BACKGROUND].start(background, work())
    if not converted.call.stream:
        return json_reply(encoder.current())
    return await _stream(request, background, -1)


async def _stream(request: web.Request, background: BackgroundRun, after: int) -> web.StreamResponse:
    out = EventStream(request)
    async for name, data in background.tail(after):
        await out.write(name, data)
    return await out.finish()


def _store(request: web.Request, converted: ResponsesCall, encoder: ResponsesEncoder) -> None:
    """Keep the finished response unless its request said ``"store": false``."""
    if converted.store:
        request.app[RESPONSES].put(encoder.response, converted.items)


def _response_id(request: web.Request) -> str:
    return request.match_info["response_id"]


async def get_response(request: web.Request) -> web.StreamResponse:
    """A response as it stands: a background one still running with its text so far, else the stored
    one as its request was answered (404 when it is not kept). With ``stream=true`` a background
    response's events after ``starting_after`` (its sequence numbers; all of them without it)."""
    response_id = _response_id(request)
    background = request.app[BACKGROUND].get(response_id)
    if request.query.get("stream", "false").lower() not in ("false", "0", ""):
        if background is None:
            request.app[RESPONSES].get(response_id)  # 404 when it is not kept
            raise errors.InvalidRequest(f"only a response created with 'background': true can be streamed again (the "
                                        f"last {MAX_ENDED} to end); ask without 'stream' for the response object")
        return await _stream(request, background, _starting_after(request))
    if background is not None and not background.ended:
        return json_reply(background.encoder.current())
    return json_reply(request.app[RESPONSES].get(response_id).response)


def _starting_after(request: web.Request) -> int:
    raw = request.query.get("starting_after")
    if raw is None:
        return -1
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise errors.InvalidRequest(f"'starting_after' must be an event's sequence number (0 or more), got {raw!r}")
    return value


async def delete_response(request: web.Request) -> web.Response:
    """Forget a stored response; a background one still running is cancelled first."""
    response_id = _response_id(request)
    runs = request.app[BACKGROUND]
    background = runs.get(response_id)
    if background is not None:
        await runs.cancel(background)
        runs.forget(response_id)
    request.app[RESPONSES].delete(response_id)
    return json_reply({"id": response_id, "object": "response", "deleted": True})


async def cancel_response(request: web.Request) -> web.Response:
    """Stop a background response and answer it as it ended (``cancelled``; one that had already ended
    is answered as it is). Any other stored response is a 400, as OpenAI answers; an unknown one a 404."""
    response_id = _response_id(request)
    runs = request.app[BACKGROUND]
    background = runs.get(response_id)
    if background is not None:
        await runs.cancel(background)
        return json_reply(background.encoder.response)
    stored = request.app[RESPONSES].get(response_id)
    if stored.response.get("background") is True:
        return json_reply(stored.response)
    raise errors.InvalidRequest("only responses created with 'background': true can be cancelled; this one was "
                                "answered as it was written and has ended")


async def list_input_items(request: web.Request) -> web.Response:
    """``{"object": "list", "data": [...], "first_id", "last_id", "has_more"}``: the items the model read for a
    stored response (those of the responses it continues, then its own), each with an ``id``. Query:
    ``order`` (``desc``, the default, or ``asc``), ``limit`` (1-100, default 20), ``after`` (an item id)."""
    entry = request.app[RESPONSES].get(_response_id(request))
    query = request.query
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise errors.InvalidRequest("'order' must be 'asc' or 'desc'")
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        raise errors.InvalidRequest("'limit' must be a whole number from 1 to 100") from None
    if not 1 <= limit <= 100:
        raise errors.InvalidRequest("'limit' must be a whole number from 1 to 100")
    items = entry.context if order == "asc" else entry.context[::-1]
    after = query.get("after")
    if after is not None:
        at = next((i for i, item in enumerate(items) if item.get("id") == after), None)
        if at is None:
            raise errors.InvalidRequest(f"'after': no input item with id {after!r} in response {entry.id!r}")
        items = items[at + 1:]
    page = [listed_item(item) for item in items[:limit]]
    return json_reply({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                       "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit})


async def _start(service: Service, converted: ResponsesCall) -> tuple[ChatRun, JSONObject]:
    """Start the reply, refusing a prompt over the context; with ``truncation: "auto"`` one that does
    not fit starts again without its oldest input items. Returns the run and the response's
    ``truncation_details`` field (empty when nothing was dropped)."""
    try:
        return await start_chat(service, converted.call, "/v1/responses", Truncation.REJECT), {}
    except errors.ContextOverflow as overflow:
        if not converted.auto_truncation or overflow.prompt_tokens is None or overflow.max_tokens is None:
            raise
        return await _start_fitted(service, converted, overflow.prompt_tokens, overflow.max_tokens)


async def _start_fitted(service: Service, converted: ResponsesCall, prompt_tokens: int,
                        max_tokens: int) -> tuple[ChatRun, JSONObject]:
    """Drop the fewest oldest input items that leave room for the output, and start the reply.

    A bounded search: the prompt is rendered and counted once per halving of the droppable items
    (about log2 of their number), and the newest item always stays. If even that one alone does not
    fit, the engine's refusal (400, with the counts) stands.
    """
    budget = max_tokens - _output_room(converted.call.options.get("num_predict"), max_tokens)
    counts: dict[int, int] = {}

    async def size(count: int) -> int:
        if count not in counts:
            counts[count] = await count_prompt_tokens(service, converted.without_oldest(count)[0])
        return counts[count]

    low, high = 1, converted.droppable - 1  # the smallest count that fits lies in [low, high]
    if high < low:
        raise errors.ContextOverflow("the input is over the context and has no item to drop", prompt_tokens,
                                     max_tokens)
    while low < high:
        middle = (low + high) // 2
        if await size(middle) <= budget:
            high = middle
        else:
            low = middle + 1
    call, dropped = converted.without_oldest(low)
    kept_tokens = await size(low)
    run = await start_chat(service, call, "/v1/responses", Truncation.REJECT)
    log.warning("input items dropped to fit the context (truncation auto): model=%s items=%d prompt_tokens=%d "
                "kept=%d context=%d", run.model, dropped, prompt_tokens, kept_tokens, max_tokens)
    return run, {"truncation_details": {"dropped_items": dropped, "dropped_tokens": prompt_tokens - kept_tokens}}


def _output_room(num_predict: object, max_tokens: int) -> int:
    """Tokens of the context kept free for the output when input items are dropped: ``max_output_tokens``
    when set, else a quarter of the context, never more than half (the engine's own rule when it cuts
    a prompt's front, ``engine._fit``)."""
    wanted = num_predict if isinstance(num_predict, int) and num_predict > 0 else max_tokens // 4
    return max(1, min(wanted, max_tokens // 2))


async def input_tokens(request: web.Request) -> web.Response:
    """``{"object": "response.input_tokens", "input_tokens": N}``: the prompt the request would send, as
    the model's template renders it (instructions, tools and the ``previous_response_id`` conversation
    included) and its tokenizer counts it."""
    body: JSONObject = await read_json(request)
    await inline_remote_images(request, body)
    converted = _convert(request, body)
    count = await count_prompt_tokens(request.app[SERVICE], converted.call)
    return json_reply({"object": "response.input_tokens", "input_tokens": count})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/responses", create_response)
    app.router.add_post("/v1/responses/input_tokens", input_tokens)
    app.router.add_get("/v1/responses/{response_id}", get_response)
    app.router.add_delete("/v1/responses/{response_id}", delete_response)
    app.router.add_post("/v1/responses/{response_id}/cancel", cancel_response)
    app.router.add_get("/v1/responses/{response_id}/input_items", list_input_items)
