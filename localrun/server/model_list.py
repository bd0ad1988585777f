"""``GET /v1/models`` and ``GET /v1/models/{model}``: the models this daemon serves, for OpenAI's and
Anthropic's clients alike.

Both providers use these paths with different shapes. A request that carries ``anthropic-version``
(Anthropic's SDKs send it on every call; :func:`.middleware.is_anthropic`) gets Anthropic's: model
objects with ``type``, ``display_name``, ``created_at``, ``lifecycle`` and ``max_input_tokens``, and a page
(``limit`` 1-1000, default 20; ``after_id`` / ``before_id``; ``has_more``, ``first_id``, ``last_id``),
its errors in Anthropic's shape. Every other request gets OpenAI's list, whole. Either way a stored
model that can load says how long one request may be (``context_length`` / ``max_input_tokens``) and,
in OpenAI's shape, the KV pool the running requests share (``context_pool``); upstream models are
listed after the local ones, by their ``NAME/model`` names.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from aiohttp import web

from .. import errors
from ..jsontypes import JSONObject
from . import remote
from .chat import upstream_route
from .http import json_reply
from .keys import SERVICE, STORE
from .middleware import is_anthropic

ANTHROPIC_PAGE = 20        # Anthropic's default ``limit``
ANTHROPIC_MAX_PAGE = 1000  # ... and its largest


@dataclass(frozen=True, slots=True)
class Listed:
    """One model as both shapes describe it; the context numbers are None for an upstream model
    or a stored file that cannot load."""

    name: str
    created: int  # seconds since the epoch (a stored model's modification time; 0 upstream)
    context_length: int | None = None
    context_pool: int | None = None


def openai_object(model: Listed) -> JSONObject:
    out: JSONObject = {"id": model.name, "object": "model", "created": model.created, "owned_by": "library"}
    if model.context_length is not None:
        out.update(context_length=model.context_length, context_pool=model.context_pool)
    return out


def anthropic_object(model: Listed) -> JSONObject:
    out: JSONObject = {"type": "model", "id": model.name, "display_name": model.name,
                       "created_at": dt.datetime.fromtimestamp(model.created, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "lifecycle": "active"}
    if model.context_length is not None:  # the output may fill what the prompt leaves
        out.update(max_input_tokens=model.context_length, max_tokens=model.context_length)
    return out


async def _local(request: web.Request, name: str, created: int) -> Listed:
    try:
        plan = await request.app[SERVICE].context_of(name)
    except errors.LocalrunError:  # a broken file still lists, without the numbers
        return Listed(name, created)
    return Listed(name, created, plan.num_ctx, plan.context_pool)


def _stored(request: web.Request) -> list[tuple[str, int]]:
    return [(entry.name, int(entry.modified)) for entry in request.app[STORE].list()]


async def _all(request: web.Request) -> list[Listed]:
    listed = [await _local(request, name, ts) for name, ts in _stored(request)]
    upstreams = remote.upstreams_for(request.app[SERVICE].upstreams)
    if upstreams is not None:
        listed += [Listed(name, 0) for row in await remote.tag_entries(upstreams)
                   if isinstance(name := row["name"], str)]  # always: an upstream model's name
    return listed


def _whole(request: web.Request, name: str, default: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if not 1 <= value <= ANTHROPIC_MAX_PAGE:
        raise errors.InvalidRequest(f"'{name}' must be a whole number from 1 to {ANTHROPIC_MAX_PAGE}, got {raw!r}")
    return value


def anthropic_page(request: web.Request, models: list[Listed]) -> JSONObject:
    """The page of ``models`` the query asks for, in Anthropic's list shape."""
    limit = _whole(request, "limit", ANTHROPIC_PAGE)
    after, before = request.query.get("after_id"), request.query.get("before_id")
    if after is not None and before is not None:
        raise errors.InvalidRequest("give 'after_id' or 'before_id', not both")
    names = [m.name for m in models]
    for param, value in (("after_id", after), ("before_id", before)):
        if value is not None and value not in names:
            raise errors.InvalidRequest(f"'{param}' names no listed model: {value!r}")
    if before is not None:
        end = names.index(before)
        start = max(0, end - limit)
        page, has_more = models[start:end], start > 0
    else:
        start = names.index(after) + 1 if after is not None else 0
        page, has_more = models[start:start + limit], start + limit < len(models)
    return {"data": [anthropic_object(m) for m in page], "has_more": has_more,
            "first_id": page[0].name if page else None, "last_id": page[-1].name if page else None}


async def models(request: web.Request) -> web.Response:
    listed = await _all(request)
    if is_anthropic(request):
        return json_reply(anthropic_page(request, listed))
    return json_reply({"object": "list", "data": [openai_object(m) for m in listed]})


async def model(request: web.Request) -> web.Response:
    wanted = request.match_info["model"]
    service = request.app[SERVICE]
    route = upstream_route(service, wanted)
    if route is not None and service.upstreams is not None:
        await remote.check_served(service.upstreams, route)
        found = Listed(route.name, 0)
    else:
        name = request.app[STORE].resolve(wanted).name  # raises ModelNotFound (404) for unknown names
        found = await _local(request, name, next((ts for listed, ts in _stored(request) if listed == name), 0))
    return json_reply(anthropic_object(found) if is_anthropic(request) else openai_object(found))


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/{model:.+}", model)
