"""``POST /v1/responses``: OpenAI's Responses API over the shared chat path (stateless).

Thin: :mod:`.responses_compat` converts the request, :func:`.chat.start_chat` runs it, and
:class:`.responses_stream.ResponsesEncoder` turns the model's output events into the reply:
typed SSE events when ``stream`` is true, else the final ``response`` object.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from .. import errors
from ..chatevents import ContentDelta, ThinkingDelta
from .chat import ChatRun, TokenUsage, hit_length_limit, output_events, start_chat
from .http import EventStream, read_json
from .keys import SERVICE
from .responses_compat import ResponsesCall, responses_to_native
from .responses_stream import Event, ResponsesEncoder

Emit = Callable[[list[Event]], Awaitable[None]]


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


async def create_response(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    converted = responses_to_native(body)
    run = await start_chat(request.app[SERVICE], converted.call, "/v1/responses", converted.truncation)
    encoder = ResponsesEncoder(run.model, converted.echo)
    try:
        if not converted.call.stream:
            async def keep(events: list[Event]) -> None:
                return None

            await _drive(run, converted, encoder, keep)
            return web.json_response(encoder.response)
        out = EventStream(request)

        async def send(events: list[Event]) -> None:
            for name, data in events:
                await out.write(name, data)

        try:
            await _drive(run, converted, encoder, send)
        except errors.LocalrunError as exc:
            run.outputs[0].status = "error"
            await send(encoder.fail(exc.code, exc.message))
        return await out.finish()
    finally:
        await run.close()


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/responses", create_response)
