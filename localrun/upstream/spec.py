"""What an upstream is: :class:`UpstreamSpec` and the rules a name, URL and model list must follow.

Pure (no I/O, no httpx): ``localrun.config`` parses ``LOCALRUN_UPSTREAMS`` with it and the
registry validates the file with it. Every rule raises :class:`~localrun.errors.InvalidRequest`
naming what is wrong; callers that read a setting re-raise it as ConfigError.

Names are short lowercase words (``gpu``, ``team-box``): no dot, so ``NAME/model`` never looks
like a registry host (``hf.co/...``, ``registry.ollama.ai/...``). URLs are ``http(s)://host[:port]
[/path]`` with no user, password, query or fragment (credentials go in an environment variable
named by ``api_key_env``, never in the URL or the file). A URL ending in ``/v1`` says the server
speaks OpenAI's API; one ending in ``/api`` says Ollama's; otherwise localrun asks the server.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import InvalidRequest
from ..jsontypes import JSONObject

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_MODELS = 256          # models one --models list may name
MAX_MODEL_NAME = 256      # characters in one model id


class Api(enum.Enum):
    """Which API localrun speaks to an upstream."""

    OPENAI = "openai"  # /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models
    OLLAMA = "ollama"  # /api/chat, /api/generate, /api/embed, /api/tags


@dataclass(frozen=True, slots=True)
class UpstreamSpec:
    """One upstream server as the user configured it.

    ``url`` is the server's root (``/v1`` or ``/api`` removed: ``api`` says which it was);
    ``api`` None: ask the server (``/v1/models`` first, then ``/api/tags``). ``models`` None:
    serve whatever the server lists. ``api_key_env`` names the environment variable (of the
    daemon's environment) holding the key sent as ``Authorization: Bearer``; the key itself is
    never stored.
    """

    name: str
    url: str
    api: Api | None = None
    api_key_env: str | None = None
    models: tuple[str, ...] | None = None

    def to_json(self) -> JSONObject:
        out: JSONObject = {"name": self.name, "url": self.url}
        if self.api is not None:
            out["api"] = self.api.value
        if self.api_key_env:
            out["api_key_env"] = self.api_key_env
        if self.models is not None:
            out["models"] = list(self.models)
        return out

    @property
    def display_url(self) -> str:
        """The URL as shown to users: with the ``/v1`` or ``/api`` it was given with."""
        suffix = {Api.OPENAI: "/v1", Api.OLLAMA: "/api", None: ""}[self.api]
        return self.url + suffix


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidRequest(f"upstream name {name!r}: use 1-32 lowercase letters, digits, '-' or '_' "
                             "(no dots, so NAME/model never looks like a registry host)")
    return name


def check_env_name(variable: object) -> str:
    if not isinstance(variable, str) or not _ENV_RE.match(variable):
        raise InvalidRequest(f"--api-key-env {variable!r}: expected the NAME of an environment variable "
                             "(the key itself is never written to the config)")
    return variable


def check_url(raw: object) -> tuple[str, Api | None]:
    """``raw`` as (root URL, API hint). Raises InvalidRequest for anything but a plain http(s) URL."""
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidRequest("upstream URL is required, e.g. http://gpu-box:8000/v1")
    text = raw.strip()
    try:
        parts = urlsplit(text)
        shown = f"{parts.scheme}://{parts.hostname or ''}"  # never the whole URL: it may hold a secret
        port = parts.port
    except ValueError as exc:
        raise InvalidRequest(f"upstream URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest(f"upstream URL {shown}...: expected http://host[:port][/path] or https://...")
    if parts.username is not None or parts.password is not None:
        raise InvalidRequest("upstream URL must not hold a user or password: put the key in an environment "
                             "variable and pass --api-key-env VAR")
    if parts.query or parts.fragment:
        raise InvalidRequest(f"upstream URL {shown}...: no query string or fragment (a key goes in "
                             "--api-key-env VAR)")
    path = parts.path.rstrip("/")
    api: Api | None = None
    if path.endswith("/v1"):
        api, path = Api.OPENAI, path[: -len("/v1")]
    elif path.endswith("/api"):
        api, path = Api.OLLAMA, path[: -len("/api")]
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}{path}", api


def check_models(models: object) -> tuple[str, ...] | None:
    if models is None:
        return None
    items = [m.strip() for m in models.split(",")] if isinstance(models, str) else models
    if not isinstance(items, (list, tuple)) or not all(isinstance(m, str) for m in items):
        raise InvalidRequest("models must be a comma-separated list of model names")
    names = tuple(dict.fromkeys(m.strip() for m in items if m.strip()))
    if not names or len(names) > MAX_MODELS:
        raise InvalidRequest(f"models must name between 1 and {MAX_MODELS} models")
    for m in names:
        if len(m) > MAX_MODEL_NAME or any(c.isspace() or ord(c) < 32 for c in m):
            raise InvalidRequest(f"model name {m[:40]!r}: no spaces or control characters, at most "
                                 f"{MAX_MODEL_NAME} characters")
    return names


def make_spec(name: object, url: object, *, api_key_env: object = None, models: object = None,
              api: object = None) -> UpstreamSpec:
    """A validated spec; ``api`` ("openai"/"ollama") overrides what the URL's path says."""
    root, hint = check_url(url)
    if api is not None:
        try:
            hint = Api(api)
        except ValueError:
            raise InvalidRequest(f"api {api!r}: expected 'openai' or 'ollama'") from None
    return UpstreamSpec(
        name=check_name(name), url=root, api=hint,
        api_key_env=check_env_name(api_key_env) if api_key_env is not None else None,
        models=check_models(models),
    )


def spec_from_json(item: object) -> UpstreamSpec:
    if not isinstance(item, dict):
        raise InvalidRequest("each upstream must be an object with 'name' and 'url'")
    unknown = set(item) - {"name", "url", "api", "api_key_env", "models"}
    if unknown:
        raise InvalidRequest(f"unknown upstream field(s): {', '.join(sorted(unknown))}")
    return make_spec(item.get("name"), item.get("url"), api_key_env=item.get("api_key_env"),
                     models=item.get("models"), api=item.get("api"))


def parse_env(raw: str) -> tuple[UpstreamSpec, ...]:
    """``LOCALRUN_UPSTREAMS``: ``NAME=URL,NAME=URL`` (the same NAME twice makes a pool), or a JSON
    list of objects ``{"name", "url", "api_key_env", "models", "api"}`` for the full form."""
    text = raw.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise InvalidRequest(f"not valid JSON: {exc}") from None
        if not isinstance(items, list):
            raise InvalidRequest("expected a JSON list of upstream objects")
        specs = [spec_from_json(i) for i in items]
    else:
        specs = []
        for entry in (e.strip() for e in text.split(",")):
            if not entry:
                continue
            name, sep, url = entry.partition("=")
            if not sep:
                raise InvalidRequest(f"{entry!r}: expected NAME=URL, e.g. gpu=http://gpu-box:8000/v1")
            specs.append(make_spec(name.strip(), url.strip()))
    return dedupe(specs)


def dedupe(specs: list[UpstreamSpec]) -> tuple[UpstreamSpec, ...]:
    """``specs`` without a second entry for the same (name, url): the first one wins."""
    seen: dict[tuple[str, str], UpstreamSpec] = {}
    for s in specs:
        seen.setdefault((s.name, s.url), s)
    return tuple(seen.values())
