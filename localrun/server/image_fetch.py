"""Images named by an http(s) URL, downloaded only when the user opted in (``LOCALRUN_FETCH_IMAGES=1``).

By default nothing leaves the machine: :mod:`localrun.chat.images` answers a remote URL with a 400
that says so. With the setting on, :func:`inline_remote_images` runs before a request is converted:
it finds the image URLs of an OpenAI, Responses or Anthropic body (``image_url``, ``input_image``,
an ``image`` block whose ``source`` is a ``url``), downloads them at once (at most
:data:`~localrun.chat.images.MAX_IMAGES`, each :data:`~localrun.chat.images.MAX_IMAGE_BYTES` and
:data:`TIMEOUT_S`), checks each as an image, and puts the bytes in the body as a ``data:`` URL or a
base64 source, so the rest of the path reads them like images sent inline. A URL that cannot be
fetched, or fetches something that is not an image, is a 400 naming it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import httpx
from aiohttp import web

from ..chat import images
from ..errors import InvalidRequest
from ..jsontypes import JSONObject, JSONValue
from .keys import SETTINGS

TIMEOUT_S = 15.0
_MAX_DEPTH = 8  # content parts sit at most a few levels down (messages -> content -> tool_result -> content)


async def inline_remote_images(request: web.Request, body: JSONObject) -> None:
    """Replace the http(s) image URLs of ``body`` by the images' bytes, when the daemon fetches images."""
    if not request.app[SETTINGS].fetch_images:
        return
    found = list(_remote_urls(body, 0))
    if not found:
        return
    if len(found) > images.MAX_IMAGES:
        raise InvalidRequest(f"the request names {len(found)} images; localrun reads at most {images.MAX_IMAGES}")
    async with httpx.AsyncClient(follow_redirects=True, max_redirects=3, timeout=TIMEOUT_S) as client:
        fetched = await asyncio.gather(*(_fetch(client, url) for url, _ in found))
    for (_, put), image in zip(found, fetched, strict=True):
        put(image)


def _remote_urls(value: JSONValue, depth: int) -> Iterator[tuple[str, Callable[[images.Image], None]]]:
    """Each remote image URL of ``value`` and how to put the fetched image in its place."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, list):
        for item in value:
            yield from _remote_urls(item, depth + 1)
        return
    if not isinstance(value, dict):
        return
    kind = value.get("type")
    if kind == "image_url":
        holder = value.get("image_url")
        url = holder.get("url") if isinstance(holder, dict) else holder
        if _remote(url):
            yield str(url), _setter(holder, "url", images.data_url) if isinstance(holder, dict) \
                else _setter(value, "image_url", images.data_url)
    elif kind == "input_image" and _remote(value.get("image_url")):
        yield str(value["image_url"]), _setter(value, "image_url", images.data_url)
    elif kind == "image":
        source = value.get("source")
        if isinstance(source, dict) and source.get("type") == "url" and _remote(source.get("url")):
            yield str(source["url"]), _setter(value, "source", _base64_source)
    for child in value.values():
        if isinstance(child, (list, dict)):
            yield from _remote_urls(child, depth + 1)


def _setter(target: JSONObject, key: str, value: Callable[[images.Image], JSONValue]
            ) -> Callable[[images.Image], None]:
    def put(image: images.Image) -> None:
        target[key] = value(image)
    return put


def _base64_source(image: images.Image) -> JSONValue:
    """An Anthropic image ``source`` holding the image itself."""
    return {"type": "base64", "media_type": f"image/{image.format}", "data": image.as_base64()}


def _remote(url: object) -> bool:
    return isinstance(url, str) and url.lower().startswith(("http://", "https://"))


async def _fetch(client: httpx.AsyncClient, url: str) -> images.Image:
    shown = url if len(url) <= 80 else url[:77] + "..."
    try:
        async with client.stream("GET", url) as response:
            if response.status_code != 200:
                raise InvalidRequest(f"fetching the image {shown!r} answered HTTP {response.status_code}")
            data = bytearray()
            async for piece in response.aiter_bytes():
                data += piece
                if len(data) > images.MAX_IMAGE_BYTES:
                    raise InvalidRequest(f"the image {shown!r} is larger than {images.MAX_IMAGE_BYTES >> 20} MB")
    except httpx.HTTPError as exc:
        raise InvalidRequest(f"the image {shown!r} could not be fetched: {exc}") from None
    return images.check(bytes(data), f"the image {shown!r}")
