"""llama.cpp's own server routes: ``/completion`` (also ``/completions``) and ``/infill``, in
llama-server's request and reply shapes, so what was written for it (llama.vim and llama.vscode's
code completion, Continue's llama.cpp provider, scripts) works by base URL.

- ``/completion``: ``prompt`` is text, token ids, or a list of them (one reply each, as a JSON
  array). ``/infill``: ``input_prefix`` and ``input_suffix`` (required), ``input_extra`` (other files:
  ``[{filename, text}]``) and ``prompt`` (typed in the gap); the engine builds the FIM prompt as
  llama-server does (engine/infill.py), cutting what does not fit as it does, and the reply says so
  (``truncated``, ``tokens_cut``).
- Options by llama-server's names, with its defaults (temperature 0.8, top_k 40, top_p 0.95,
  min_p 0.05, no repeat penalty) where neither the request nor the model's Modelfile sets them.
  ``samplers`` runs exactly the chain it names; ``n_indent`` and ``t_max_predict_ms`` end a
  completion as llama-server does (``stop_type: "limit"``); ``n_cmpl`` (``n``) completions of
  each prompt; ``response_fields`` picks reply fields by path (``timings/prompt_n``).
- ``n_cache_reuse``: cached runs of at least that many tokens further along a cached prompt are
  reused with their positions shifted (llama-server's ``--cache-reuse``; GenerateRequest.cache_reuse).
  ``/infill`` reuses runs of :data:`INFILL_CACHE_REUSE` unless the request says otherwise, as
  llama-server runs in llama.vim's and llama.vscode's presets; ``/completion`` none unless asked.
- Without ``model`` (llama-server serves one): the one text model loaded, else the starter. Local
  models only: an upstream's (``NAME/model``) is a 400 pointing to ``/v1/completions``.
- Refused with a 400 rather than ignored: settings that change sampling which localrun does not
  run (mirostat, DRY, XTC, top-n-sigma, dynamic temperature, logit bias, LoRA), ``n_probs`` and
  ``return_tokens``. Taken and without effect: ``cache_prompt`` (the prefix cache is always on),
  ``id_slot`` (there are no slots to pin), ``t_max_prompt_ms`` (llama-server does not apply it
  either), ``n_keep`` (a prompt over the context is a 400 here, never cut: nothing to keep),
  ``timings_per_token`` and ``return_progress`` (the last chunk has the timings).
- A prompt over the context is a 400 ``exceed_context_size_error``, as llama-server answers it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web

from .. import errors
from ..config import STARTER_MODEL
from ..engine.types import DoneEvent, DoneReason, GenerateRequest, Infill, OutputFormat, SamplingOptions, Truncation
from ..jsontypes import JSONObject, JSONValue
from ..modelkind import ModelKind
from .chat import start_generations, upstream_route
from .http import SSEStream, get, json_reply, read_json
from .keys import SERVICE
from .middleware import LLAMA_SERVER_PATHS, error_body
from .options import check_option, parse_keep_alive
from .output import LocalOutput, Output, merged
from .service import Service, Target

# llama-server's --cache-reuse in the FIM presets llama.vim and llama.vscode start it with (--fim-qwen-*-default):
# a completion whose first kept line moved reuses the file's text instead of reading it again
INFILL_CACHE_REUSE = 256
# llama-server's defaults (its common_params_sampling) for what neither the request nor the Modelfile sets
_DEFAULTS: dict[str, Any] = {  # SamplingOptions fields: each its own type
    "temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "typical_p": 1.0, "repeat_penalty": 1.0,
    "repeat_last_n": 64, "presence_penalty": 0.0, "frequency_penalty": 0.0,
}
# llama-server's field -> localrun's option (later names win: ``n_predict`` over ``max_tokens``)
_OPTIONS = {
    "temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "typ_p": "typical_p",
    "typical_p": "typical_p", "repeat_penalty": "repeat_penalty", "repeat_last_n": "repeat_last_n",
    "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty", "seed": "seed",
    "max_tokens": "num_predict", "n_predict": "num_predict", "stop": "stop",
}
# what llama-server would change and localrun does not run: refused unless at its no-effect value
_REFUSED: dict[str, Callable[[JSONValue], bool]] = {
    "mirostat": lambda v: v == 0, "dry_multiplier": lambda v: v == 0, "xtc_probability": lambda v: v == 0,
    "top_n_sigma": lambda v: isinstance(v, (int, float)) and v <= 0, "dynatemp_range": lambda v: v == 0,
    "logit_bias": lambda v: v in ([], {}), "lora": lambda v: v == [], "n_probs": lambda v: v == 0,
    "return_tokens": lambda v: v is False,  # the replies' token ids: the route has only text
}
MAX_COMPLETIONS = 16  # n_cmpl: llama-server caps it at its slot count


@dataclass(frozen=True, slots=True)
class _Call:
    """One /completion or /infill request, parsed."""

    target: Target
    prompts: list[str | list[int] | Infill]
    sampling: SamplingOptions
    n: int
    stream: bool
    grammar: str | None
    format: OutputFormat
    n_indent: int
    t_max_predict_ms: int
    fields: list[str] | None
    cache_reuse: int


class _Limits:
    """llama-server's ``n_indent`` and ``t_max_predict_ms`` for one completion, over its text as it comes.

    After the first line, a line whose first character comes with less indentation than
    ``n_indent`` ends the completion just before that character; text with a line break arriving
    more than ``t_max_predict_ms`` after the first token ends it after that text.
    """

    def __init__(self, n_indent: int, t_max_predict_ms: int) -> None:
        self.n_indent = n_indent
        self.deadline_ns = t_max_predict_ms * 1_000_000
        self.text = ""
        self.first_ns: int | None = None
        self.line: int | None = None  # where the first line not yet checked begins (None: before any break)

    def feed(self, text: str) -> tuple[str, bool]:
        """What of ``text`` to keep, and whether the completion ends with it."""
        now = time.perf_counter_ns()
        if self.first_ns is None:
            self.first_ns = now
        start = len(self.text)
        self.text += text
        while self.n_indent > 0:
            if self.line is None:
                first_break = self.text.find("\n")
                if first_break == -1:
                    break
                self.line = first_break + 1
            pos = self.line
            while pos < len(self.text) and self.text[pos] in " \t":
                pos += 1
            if pos == len(self.text):
                break  # no character on this line yet
            if pos - self.line < self.n_indent:
                self.text = self.text[:pos]
                return self.text[start:], True
            next_break = self.text.find("\n", pos)
            if next_break == -1:
                break
            self.line = next_break + 1
        return text, self.deadline_ns > 0 and "\n" in text and now - self.first_ns > self.deadline_ns


def _model_name(service: Service, body: JSONObject) -> str:
    """The request's ``model``; without one, or with an empty one (llama-server serves a single model
    and ignores it), the one text model loaded, else the starter (what ``localrun run`` chats with)."""
    name = body.get("model")
    if name is not None and name != "":  # llama.vim sends "" when no model is set
        return name if isinstance(name, str) else ""  # Service.target refuses it with its message
    loaded = [m.name for m in service.scheduler.models.values()
              if m.backend.info is None or m.backend.info.kind is ModelKind.GENERATION]
    return loaded[0] if len(loaded) == 1 else STARTER_MODEL


def _options(body: JSONObject) -> JSONObject:
    """The request's sampling options under localrun's names; a refused setting is a 400."""
    for name, harmless in _REFUSED.items():
        value = body.get(name)
        if value is not None and not harmless(value):
            raise errors.UnsupportedCapability(f"'{name}' is not supported by localrun (leave it out or at "
                                               "its default)")
    options: JSONObject = {}
    for field, option in _OPTIONS.items():
        if body.get(field) is not None:
            options[option] = body[field]
    return options


def _prompts(body: JSONObject, infill: bool) -> list[str | list[int] | Infill]:
    if infill:
        prefix, suffix = body.get("input_prefix"), body.get("input_suffix")
        if not isinstance(prefix, str) or not isinstance(suffix, str):
            raise errors.InvalidRequest("'input_prefix' and 'input_suffix' are required and must be strings")
        extra = get(body, "input_extra", list, [])
        chunks: list[tuple[str, str]] = []
        for i, chunk in enumerate(extra):
            text = chunk.get("text") if isinstance(chunk, dict) else None
            filename = chunk.get("filename", "tmp") if isinstance(chunk, dict) else None
            if not isinstance(text, str) or not isinstance(filename, str):
                raise errors.InvalidRequest(f"'input_extra' item {i} must be an object with a string 'text' "
                                            "(and, optionally, a string 'filename')")
            chunks.append((filename, text))
        return [Infill(prefix, suffix, get(body, "prompt", str, ""), tuple(chunks))]
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    ids = _token_ids(prompt)
    if ids is not None:
        return [ids]
    if isinstance(prompt, list) and prompt:
        items: list[str | list[int] | Infill] = []
        for i, item in enumerate(prompt):
            ids = _token_ids(item)
            if not isinstance(item, str) and ids is None:
                raise errors.InvalidRequest(f"'prompt' item {i} must be text or a list of token ids (a prompt "
                                            "mixing text and token ids is not supported)")
            items.append(item if isinstance(item, str) else ids or [])
        return items
    raise errors.InvalidRequest("'prompt' is required: text, a list of token ids, or a list of those")


def _token_ids(value: JSONValue) -> list[int] | None:
    """``value`` as token ids when it is a non-empty list of whole numbers, else None."""
    if not isinstance(value, list) or not value:
        return None
    ids = [t for t in value if isinstance(t, int) and not isinstance(t, bool)]
    return ids if len(ids) == len(value) else None


async def _parse(service: Service, body: JSONObject, infill: bool) -> _Call:
    prompts = _prompts(body, infill)
    options = _options(body)
    name = _model_name(service, body)
    if upstream_route(service, name) is not None:
        raise errors.UnsupportedCapability(f"{name} is served by an upstream: llama-server's routes take local "
                                           "models only (ask it through /v1/completions)")
    target = await service.target(name, options, parse_keep_alive(body.get("keep_alive")))
    target.require(ModelKind.GENERATION)
    modelfile = target.resolved.parameters or {}
    defaults = {k: v for k, v in _DEFAULTS.items() if k not in options and k not in modelfile}
    sampling = dataclasses.replace(target.sampling, **defaults)
    samplers = body.get("samplers")
    if samplers is not None:
        sampling = dataclasses.replace(sampling, samplers=cast("tuple[str, ...]", check_option("samplers", samplers)))
    if get(body, "ignore_eos", bool, False):
        sampling = dataclasses.replace(sampling, ignore_eos=True)
    n = get(body, "n_cmpl", int, None)
    n = get(body, "n", int, 1) if n is None else n
    if not 1 <= n <= MAX_COMPLETIONS:
        raise errors.InvalidRequest(f"'n_cmpl' must be between 1 and {MAX_COMPLETIONS}, got {n}")
    schema = get(body, "json_schema", dict, None)
    fields = get(body, "response_fields", list, None)
    if fields is not None and not all(isinstance(f, str) for f in fields):
        raise errors.InvalidRequest("'response_fields' must be a list of field paths (e.g. 'timings/prompt_n')")
    return _Call(
        target=target, prompts=prompts, sampling=sampling, n=n, stream=get(body, "stream", bool, False),
        grammar=get(body, "grammar", str, None) or None, format=schema,
        n_indent=max(0, get(body, "n_indent", int, 0)), t_max_predict_ms=max(0, get(body, "t_max_predict_ms", int, 0)),
        fields=fields, cache_reuse=max(0, _cache_reuse(body, target, infill)),
    )


def _cache_reuse(body: JSONObject, target: Target, infill: bool) -> int:
    """``n_cache_reuse``; unset, the model's ``cache_reuse`` PARAMETER, else llama-server's default for the
    route as editors start it (INFILL_CACHE_REUSE on /infill, 0 on /completion). Negative means 0."""
    value = get(body, "n_cache_reuse", int, None)
    if value is None:
        value = target.cache_reuse if target.cache_reuse is not None else INFILL_CACHE_REUSE if infill else 0
    return value


async def completion(request: web.Request) -> web.StreamResponse:
    return await _complete(request, infill=False)


async def infill(request: web.Request) -> web.StreamResponse:
    return await _complete(request, infill=True)


async def _complete(request: web.Request, *, infill: bool) -> web.StreamResponse:
    body = await read_json(request)
    service: Service = request.app[SERVICE]
    call = await _parse(service, body, infill)
    endpoint = request.path
    outputs: list[LocalOutput] = []
    try:
        for prompt in call.prompts:
            req = GenerateRequest(prompt=prompt, sampling=call.sampling, format=call.format, grammar=call.grammar,
                                  truncation=Truncation.REJECT, cache_reuse=call.cache_reuse)
            gens = await start_generations(service, call.target, req, call.n, endpoint)
            outputs.extend(LocalOutput(g, None) for g in gens)
        limits = [_Limits(call.n_indent, call.t_max_predict_ms) for _ in outputs]
        texts = ["" for _ in outputs]
        limited = [False for _ in outputs]
        sse = SSEStream(request, done_marker=False) if call.stream else None
        try:
            async for i, piece in merged(outputs):
                if piece is None:
                    if sse is not None:
                        await sse.write(_pick(_final(call, i, outputs[i], texts[i], limited[i], streamed=True),
                                              call.fields))
                    continue
                if limited[i]:
                    continue  # what the engine made before it saw the stop
                text, stop = limits[i].feed(piece.text)
                texts[i] += text
                if stop:
                    limited[i] = True
                    await outputs[i].gen.stop()
                if sse is not None and text:
                    await sse.write({"index": i, "content": text, "tokens": [], "stop": False, "id_slot": -1})
        except errors.LocalrunError as exc:
            if sse is None or not sse.response.prepared:
                raise
            for o in outputs:
                o.status = "error"
            await sse.write(error_body(request, exc.status, exc.message, exc.code))
        if sse is not None:
            return await sse.finish()
        replies = [_pick(_final(call, i, o, texts[i], limited[i]), call.fields) for i, o in enumerate(outputs)]
        return json_reply(replies[0] if len(replies) == 1 else replies)
    finally:
        for o in outputs:
            await o.close()


def _final(call: _Call, index: int, output: Output, text: str, limited: bool, *, streamed: bool = False) -> JSONObject:
    """The last reply object of one completion (``text``: all of it; streamed, the chunks had it)."""
    done = output.done
    assert done is not None  # pieces() ended without an error
    cached = done.cached_tokens
    prompt_n, predicted_n = done.prompt_eval_count - cached, done.eval_count
    prompt_ms, predicted_ms = done.prompt_eval_duration / 1e6, done.eval_duration / 1e6
    s = call.sampling
    return {
        "index": index, "content": "" if streamed else text, "tokens": [], "id_slot": -1, "stop": True,
        "model": output.model, "tokens_predicted": predicted_n, "tokens_evaluated": done.prompt_eval_count,
        "generation_settings": {
            "n_predict": -1 if s.num_predict is None else s.num_predict, "seed": -1 if s.seed is None else s.seed,
            "temperature": s.temperature, "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p,
            "typical_p": s.typical_p, "repeat_penalty": s.repeat_penalty, "repeat_last_n": s.repeat_last_n,
            "presence_penalty": s.presence_penalty, "frequency_penalty": s.frequency_penalty,
            "stop": list(s.stop), "ignore_eos": s.ignore_eos, "n_indent": call.n_indent,
            "t_max_predict_ms": call.t_max_predict_ms,
            "samplers": list(s.samplers) if s.samplers is not None else None,
        },
        "has_new_line": "\n" in text, "truncated": done.truncated_tokens > 0, "tokens_cut": done.truncated_tokens,
        "stop_type": _stop_type(done, limited), "stopping_word": done.stop_string or "",
        "tokens_cached": done.prompt_eval_count + predicted_n,
        "timings": {
            "cache_n": cached, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
            "prompt_per_second": prompt_n / prompt_ms * 1e3 if prompt_ms > 0 else 0.0,
            "predicted_n": predicted_n, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
            "predicted_per_second": predicted_n / predicted_ms * 1e3 if predicted_ms > 0 else 0.0,
        },
    }


def _stop_type(done: DoneEvent, limited: bool) -> str:
    """llama-server's ``stop_type``: "eos" (the model ended), "word" (a stop string), "limit"
    (n_predict, the context, n_indent or t_max_predict_ms)."""
    if limited or done.done_reason is not DoneReason.STOP:
        return "limit"
    return "word" if done.stop_string else "eos"


def _pick(reply: JSONObject, fields: list[str] | None) -> JSONObject:
    """``response_fields``: only the fields at these paths (``timings/prompt_n``), each under its path."""
    if fields is None:
        return reply
    picked: JSONObject = {}
    for path in fields:
        value: JSONValue = reply
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            picked[path] = value
    return picked


def add_routes(app: web.Application) -> None:
    for path, handler in (("/completion", completion), ("/completions", completion), ("/infill", infill)):
        assert path in LLAMA_SERVER_PATHS, path  # their errors take llama-server's shape (middleware)
        app.router.add_post(path, handler)
