"""Middlewares: errors in each API's shape, metrics, Host/Origin checks, CORS and the API key.

Order (outermost first): metrics -> errors -> host -> cors -> auth -> handler. Every
LocalrunError becomes its HTTP status with ``{"error": msg}`` on /api (Ollama), an Anthropic
error (``{"type": "error", "error": {"type", "message"}}``) on /v1/messages, an OpenAI
error object on the rest of /v1, or llama-server's (``{"error": {"code", "message", "type"}}``)
on its own routes (/completion, /infill); a prompt over the context is worded as each API's clients
expect (:func:`error_message`). aiohttp's own HTTP errors (404 route, 405, 413 body too
large) are rendered the same way. Anything else is logged with a traceback and answered 500.
Every 5xx is logged once as ``METHOD PATH answered STATUS`` (the test suite's 5xx guard reads
that line, in-process and in a daemon's log file).
A request whose client went away before the answer (its handler cancelled, or a write to a
closed connection) is counted as 499, nginx's "client closed request", never as 500.
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import hmac
import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from .. import errors, trace
from ..jsontypes import JSONObject
from .anthropic import convert as anthropic_convert
from .http import PRIORITIES, PRIORITY_HEADER, interactive_hint, json_reply
from .keys import METRICS, SETTINGS
from .openai import convert as openai_convert
from .responses import convert as responses_convert

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PUBLIC_PATHS = ("/", "/health")
# Typed request storage where aiohttp has it (3.12+), a plain key before.
_CORS: Any = web.RequestKey("cors_headers", dict) if hasattr(web, "RequestKey") else "cors_headers"
_LOCAL_NAMES = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "[::1]")
LLAMA_SERVER_PATHS = frozenset({"/completion", "/completions", "/infill"})  # llama-server's routes (.llamacpp)


def is_openai(request: web.Request) -> bool:
    return request.path.startswith("/v1/") or request.path == "/v1"


def is_anthropic(request: web.Request) -> bool:
    """Whether the reply (errors included) takes Anthropic's shape: the Messages API's paths, and any
    request of Anthropic's clients (they send ``anthropic-version`` on every call), such as the model
    list, whose path OpenAI's shares, or a route of Anthropic's this server does not have (a 404)."""
    if request.path == "/v1/messages" or request.path.startswith("/v1/messages/"):
        return True
    return "anthropic-version" in request.headers


def is_llama_server(request: web.Request) -> bool:
    """Whether the reply takes llama-server's shape: its own routes (:mod:`.llamacpp`)."""
    return request.path in LLAMA_SERVER_PATHS


def anthropic_error_type(status: int) -> str:
    """Anthropic's error ``type`` for an HTTP status."""
    return {
        400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
        404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
        529: "overloaded_error",
    }.get(status, "api_error" if status >= 500 else "invalid_request_error")


def llama_server_error_type(status: int, code: str) -> str:
    """llama-server's error ``type`` for an HTTP status and localrun's error code."""
    if code == errors.ContextOverflow.code:
        return "exceed_context_size_error"
    return {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
            503: "unavailable_error"}.get(status, "server_error" if status >= 500 else "invalid_request_error")


def openai_error_type(status: int) -> str:
    return {
        400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
        404: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
    }.get(status, "server_error" if status >= 500 else "invalid_request_error")


def error_body(request: web.Request, status: int, message: str, code: str, param: str | None = None) -> JSONObject:
    if is_anthropic(request):
        error: JSONObject = {"type": anthropic_error_type(status), "message": message}
        if code == errors.ThreadUnsupported.code:  # what the SDKs read to resend the whole conversation
            error["details"] = {"error_code": code}
        return {"type": "error", "error": error}
    if is_openai(request):
        return {"error": {"message": message, "type": openai_error_type(status), "param": param, "code": code}}
    if is_llama_server(request):
        return {"error": {"code": status, "message": message, "type": llama_server_error_type(status, code)}}
    return {"error": message, "code": code}  # Ollama's shape; "code" lets localrun's client map the error


# A prompt over the context in each API's own words, by route: the words its clients look for
# (Claude Code compacts the conversation on Anthropic's "prompt is too long"); /api keeps the engine's.
_OVERFLOW_WORDS: dict[str, Callable[[int, int], str]] = {
    "/v1/chat/completions": openai_convert.context_overflow_message,
    "/v1/completions": lambda n, m: openai_convert.context_overflow_message(n, m, "prompt"),
    "/v1/responses": responses_convert.input_too_long,
    "/v1/messages": anthropic_convert.prompt_too_long,
    **dict.fromkeys(LLAMA_SERVER_PATHS, lambda n, m: f"the request exceeds the available context size: the "
                    f"prompt is {n} tokens, at most {m} fit (shorten it, or raise the model's num_ctx)"),
}


def error_message(request: web.Request, exc: errors.LocalrunError) -> str:
    """``exc``'s message as the API of ``request`` words it (a context overflow names both counts)."""
    if isinstance(exc, errors.ContextOverflow) and exc.prompt_tokens is not None and exc.max_tokens is not None:
        words = _OVERFLOW_WORDS.get(request.path)
        if words is not None:
            return words(exc.prompt_tokens, exc.max_tokens)
    return exc.message


def error_response(request: web.Request, exc: errors.LocalrunError) -> web.Response:
    headers = {}
    if isinstance(exc, errors.Busy):
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    if isinstance(exc, errors.Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    body = error_body(request, exc.status, error_message(request, exc), exc.code, exc.param)
    if is_llama_server(request) and isinstance(exc, errors.ContextOverflow):  # llama-server names both counts
        error = body["error"]
        assert isinstance(error, dict)
        error.update(n_prompt_tokens=exc.prompt_tokens, n_ctx=exc.max_tokens)
    return json_reply(body, status=exc.status, headers=headers)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except errors.LocalrunError as exc:
        if exc.status >= 500:
            log.warning("%s %s answered %d: %s", request.method, request.path, exc.status, exc)
        return error_response(request, exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = {404: f"{request.path} not found", 405: f"method {request.method} not allowed on {request.path}",
                   413: "request body too large"}.get(exc.status, exc.reason)
        body = error_body(request, exc.status, message, exc.reason.lower().replace(" ", "_"))
        return json_reply(body, status=exc.status, headers={
            k: v for k, v in exc.headers.items() if k.lower() in ("allow",)})
    except asyncio.CancelledError:
        raise
    except ConnectionResetError:
        # The client left while we streamed to it (the write found the transport closing): nothing
        # is wrong on our side and nobody is there to read an error. 499 is nginx's "client closed
        # request"; aiohttp sees the closed transport and writes nothing.
        log.debug("%s %s: client disconnected mid-response", request.method, request.path)
        return web.Response(status=499, reason="Client Closed Request")
    except Exception:  # a bug: log it with its traceback, answer in the API's shape
        log.exception("%s %s answered 500", request.method, request.path)
        return json_reply(error_body(request, 500, "internal error (see the server log)", "internal_error"),
                                 status=500)


def _endpoint(request: web.Request) -> str:
    route = request.match_info.route.resource
    return route.canonical if route is not None else "unmatched"


@web.middleware
async def metrics_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    trace.mark_request("http")
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = 499  # the client left and aiohttp cancelled the handler: not our error
        raise
    finally:
        request.app[METRICS].requests.labels(_endpoint(request), str(status)).inc()


def _is_local_host(hostname: str) -> bool:
    name = hostname.strip("[]").lower().rstrip(".")
    if name in ("localhost", "::1", "0.0.0.0") or name.endswith(".localhost") or name == _own_hostname():
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=1)
def _own_hostname() -> str:
    """This machine's name, which local tools also use to reach it (as Ollama allows)."""
    return socket.gethostname().lower()


# RFC 3986 reg-name characters (unreserved, pct-encoded, sub-delims): no "@", "/", "?", "#", spaces.
_REG_NAME = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=%]*")
_PORT = re.compile(r"[0-9]{0,5}")


def _split_host(host_header: str) -> str | None:
    """The host of a ``Host`` header or origin authority (RFC 3986 ``host [":" port]``), None if malformed.

    Userinfo is not a host: ``localhost:80@evil.example`` is malformed, not ``localhost``.
    """
    if host_header.startswith("["):
        literal, bracket, rest = host_header[1:].partition("]")
        if not bracket:
            return None
        try:
            ipaddress.IPv6Address(literal.split("%", 1)[0])
        except ValueError:
            return None
        return literal if rest == "" or (rest.startswith(":") and _PORT.fullmatch(rest[1:])) else None
    host, colon, port = host_header.rpartition(":") if ":" in host_header else (host_header, "", "")
    if (colon and not _PORT.fullmatch(port)) or not _REG_NAME.fullmatch(host):
        return None
    return host


@web.middleware
async def host_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse foreign Host headers while bound to loopback: a DNS-rebinding page cannot reach us."""
    settings = request.app[SETTINGS]
    host = request.headers.get("Host")
    if settings.host.is_loopback and host:
        name = _split_host(host)
        if name is None or not _is_local_host(name):
            raise errors.Forbidden(f"Host {host[:200]!r} is not allowed: this server only answers local names")
    return await handler(request)


def origin_allowed(origin: str, extra: tuple[str, ...]) -> bool:
    scheme, _, rest = origin.partition("://")
    hostname = _split_host(rest.split("/", 1)[0]) if rest else None
    if scheme in ("http", "https") and hostname is not None and _is_local_host(hostname):
        return True
    if scheme in ("app", "file", "tauri", "vscode-webview"):
        return True
    return any(pattern == "*" or fnmatch.fnmatchcase(origin, pattern) for pattern in extra)


@web.middleware
async def cors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    origin = request.headers.get("Origin")
    if origin is None:
        return await handler(request)
    if not origin_allowed(origin, request.app[SETTINGS].origins):
        raise errors.Forbidden(f"origin {origin!r} is not allowed (set LOCALRUN_ORIGINS to allow it)")
    cors = {
        "Access-Control-Allow-Origin": origin,
        "Vary": "Origin",
        "Access-Control-Allow-Credentials": "true",
    }
    if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
        return web.Response(status=204, headers={
            **cors,
            "Access-Control-Allow-Methods": "GET, HEAD, POST, PUT, DELETE, OPTIONS",
            "Access-Control-Allow-Headers": request.headers.get(
                "Access-Control-Request-Headers", "Authorization, Content-Type"),
            "Access-Control-Max-Age": "600",
        })
    request[_CORS] = cors  # added to every response, streams and errors too (on_response_prepare)
    return await handler(request)


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare`` signal: CORS headers for allowed origins."""
    cors = request.get(_CORS)
    if cors:
        response.headers.update(cors)


def presented_key(request: web.Request) -> str | None:
    """The API key a client sent: ``Authorization: Bearer KEY``, or ``x-api-key: KEY`` (Anthropic's SDKs)."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key", "").strip() or None


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    key = request.app[SETTINGS].api_key
    if key and request.path not in PUBLIC_PATHS:
        token = presented_key(request)
        if token is None or not hmac.compare_digest(token.encode(), key.encode()):
            raise errors.Unauthorized("missing or wrong API key: send 'Authorization: Bearer <LOCALRUN_API_KEY>' "
                                      "or 'x-api-key: <LOCALRUN_API_KEY>'")
    return await handler(request)


@web.middleware
async def priority_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Read PRIORITY_HEADER into ``interactive_hint`` (an unknown value is ignored, as no header)."""
    hint = PRIORITIES.get(request.headers.get(PRIORITY_HEADER, "").strip().lower())
    if hint is not None:
        interactive_hint.set(hint)
    return await handler(request)


MIDDLEWARES = [metrics_middleware, error_middleware, host_middleware, cors_middleware, auth_middleware,
               priority_middleware]
