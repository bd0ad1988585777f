"""Anthropic's Messages API: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

Thin: :mod:`.convert` turns the request into a native call, :func:`..chat.start_chat` runs it, and
:class:`.stream.MessageEncoder` turns the model's output events into the reply:
Anthropic's SSE events when ``stream`` is true (with a ``ping`` every PING_INTERVAL seconds
while a long prompt is still being read), else the final ``message``. The ``anthropic-version``
and ``anthropic-beta`` headers are accepted and not needed; errors come in Anthropic's shape
(the error middleware renders every error under /v1/messages that way). A prompt longer than the
context is never cut: it is a 400 "prompt is too long: N tokens > M maximum" (Claude Code compacts
the conversation on it). A message ``thread`` is refused with the 400 the SDKs resend in full on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from ... import errors
from ...chat.events import ContentDelta, ThinkingDelta
from ...engine.types import Truncation
from ...jsontypes import JSONObject
from ..chat import ChatRun, TokenUsage, count_prompt_tokens, hit_length_limit, output_events, start_chat, with_heartbeat
from ..http import EventStream, NamedEvent, json_reply, read_json
from ..image_fetch import inline_remote_images
from ..keys import SERVICE
from ..middleware import anthropic_error_type
from .convert import messages_to_native, thread_refusal, tool_use_id
from .stream import MessageEncoder, error_event, ping

PING_INTERVAL = 10.0  # seconds without output before a keep-alive ping (prefill of a long prompt)

Emit = Callable[[list[NamedEvent]], Awaitable[None]]


async def _drive(run: ChatRun, encoder: MessageEncoder, stops: tuple[str, ...], prompt_tokens: int,
                 emit: Emit) -> None:
    """Run the generation to its end, handing each batch of events to ``emit``."""
    out = run.outputs[0]
    await emit(encoder.start(prompt_tokens))
    async for item in with_heartbeat(output_events(out), PING_INTERVAL):
        if item is None:
            await emit([ping()])
        elif isinstance(item, ContentDelta):
            await emit(encoder.text(item.text))
        elif isinstance(item, ThinkingDelta):
            await emit(encoder.thinking(item.text))
        else:  # the parser's stable call id, in Anthropic's toolu_ form
            await emit(encoder.tool_use(tool_use_id(item.id), item.name, item.arguments_json(), item.arguments))
    done = out.done
    await emit(encoder.finish(TokenUsage.of(done), hit_length_limit(done), done.stop_string if done else None, stops))


async def messages(request: web.Request) -> web.StreamResponse:
    body: JSONObject = await read_json(request)
    await inline_remote_images(request, body)
    converted = messages_to_native(body)
    if converted.thread is not None:
        raise thread_refusal(converted.thread)
    service = request.app[SERVICE]
    run = await start_chat(service, converted.call, "/v1/messages", Truncation.REJECT)
    encoder = MessageEncoder(run.model)
    try:
        if not converted.call.stream:
            async def keep(events: list[NamedEvent]) -> None:
                return None

            await _drive(run, encoder, converted.stop_sequences, 0, keep)
            return json_reply(encoder.message)
        # message_start carries the prompt's size; the model is loaded now, so this is quick.
        prompt_tokens = await run.prompt_tokens()
        out = EventStream(request)

        async def send(events: list[NamedEvent]) -> None:
            for name, data in events:
                await out.write(name, data)

        try:
            await _drive(run, encoder, converted.stop_sequences, prompt_tokens, send)
        except errors.LocalrunError as exc:
            run.outputs[0].status = "error"
            await send([error_event(anthropic_error_type(exc.status), exc.message)])
        return await out.finish()
    finally:
        await run.close()


async def count_tokens(request: web.Request) -> web.Response:
    """``{"input_tokens": N}``: the size of the prompt the request would send, tools and system included."""
    body: JSONObject = await read_json(request)
    await inline_remote_images(request, body)
    converted = messages_to_native(body, count_only=True)
    return json_reply({"input_tokens": await count_prompt_tokens(request.app[SERVICE], converted.call)})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
