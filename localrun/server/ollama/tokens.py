"""The model's tokenizer over HTTP: ``POST /api/tokenize`` and ``POST /api/detokenize``.

Field names are llama.cpp server's (``content``, ``add_special``, ``tokens``), which the Ollama
proposals for these routes also use, plus ``model`` and ``keep_alive`` as on every /api route:

    /api/tokenize    {"model", "content": text, "add_special": true}  -> {"model", "tokens": [ids]}
    /api/detokenize  {"model", "tokens": [ids]}                         -> {"model", "content": text}

``add_special`` adds what the model adds to a prompt on its own (BOS), so ``len(tokens)`` is
what a generation request with that text as a raw prompt counts. Special-token text in
``content`` (``<|im_start|>``) becomes the special token, as in prompts. Detokenized text omits
special tokens (BOS, EOS, control tokens print nothing). Both load the model like any request
(an instance already loaded with other options serves as is). Limits keep one call bounded:
``content`` up to MAX_TOKENIZE_BYTES of UTF-8, ``tokens`` up to MAX_DETOKENIZE_TOKENS ids (413).
"""

from __future__ import annotations

from aiohttp import web

from ... import errors
from ...jsontypes import JSONMapping, JSONObject
from ..http import get, json_reply, read_json
from ..keys import SERVICE
from ..options import parse_keep_alive

MAX_TOKENIZE_BYTES = 8 * 1024 * 1024
MAX_DETOKENIZE_TOKENS = 2 * 1024 * 1024


def _content(body: JSONMapping) -> str:
    value = body.get("content")
    if not isinstance(value, str):
        got = "nothing" if value is None else type(value).__name__
        raise errors.InvalidRequest(f"'content' is required and must be a string (the text to tokenize), got {got}")
    size = len(value.encode("utf-8"))  # read_json already refused lone surrogates
    if size > MAX_TOKENIZE_BYTES:
        raise errors.PayloadTooLarge(
            f"'content' is {size} bytes; /api/tokenize takes at most {MAX_TOKENIZE_BYTES} bytes at a time")
    return value


def _token_ids(body: JSONMapping) -> list[int]:
    value = body.get("tokens")
    if not isinstance(value, list):
        got = "nothing" if value is None else type(value).__name__
        raise errors.InvalidRequest(f"'tokens' is required and must be a list of token ids, got {got}")
    if len(value) > MAX_DETOKENIZE_TOKENS:
        raise errors.PayloadTooLarge(
            f"'tokens' holds {len(value)} ids; /api/detokenize takes at most {MAX_DETOKENIZE_TOKENS} at a time")
    for t in value:
        if isinstance(t, bool) or not isinstance(t, int):
            raise errors.InvalidRequest(f"'tokens' must hold whole-number token ids, got {t!r}")
        if t < 0:
            raise errors.InvalidRequest(f"token id {t} is not in the vocabulary (ids start at 0)")
    return value


async def tokenize(request: web.Request) -> web.Response:
    body: JSONObject = await read_json(request)
    text = _content(body)
    add_special = get(body, "add_special", bool, True)
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    service = request.app[SERVICE]
    target = await service.target(body.get("model"), None, keep_alive)
    tokens = await service.tokenize(target, text, add_special)
    return json_reply({"model": target.name, "tokens": tokens})


async def detokenize(request: web.Request) -> web.Response:
    body: JSONObject = await read_json(request)
    tokens = _token_ids(body)
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    service = request.app[SERVICE]
    target = await service.target(body.get("model"), None, keep_alive)
    text = await service.detokenize(target, tokens)
    return json_reply({"model": target.name, "content": text})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/api/tokenize", tokenize)
    app.router.add_post("/api/detokenize", detokenize)
