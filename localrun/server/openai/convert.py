"""The OpenAI API as pure conversions to and from localrun's native requests.

Requests: :func:`chat_to_native`, :func:`completion_to_native`, :func:`embedding_inputs`.
Responses: :func:`chat_completion`, :func:`chat_chunk`, :func:`completion`, :func:`usage`...
No I/O here; :mod:`.routes` does the calling and streaming. Fields a request leaves unset
keep the model's Modelfile defaults; ``num_ctx``, ``keep_alive``, ``top_k``, ``min_p``,
``repeat_penalty`` (and a whole Ollama ``options`` object) may be passed as extra fields, and
vLLM's ``ignore_eos`` / ``min_tokens`` (end-of-generation tokens do not end the output).
"""

from __future__ import annotations

import base64
import struct

from ...chat import images as chat_images
from ...chat.events import ChatEvent, ContentDelta, Reply, ThinkingDelta, ToolCall
from ...chat.prompt import native_role, role_names
from ...chat.think import Think, from_effort, parse_think
from ...chat.tools import validate_tools
from ...engine.types import DoneEvent, DoneReason, EmbedInput, TokenLogprob
from ...errors import InvalidRequest, OptionError
from ...jsontypes import JSONObject, JSONValue, loads
from ..http import get, get_whole
from ..native_call import NativeCall, extra_options
from ..options import parse_keep_alive, top_logprobs

MAX_N = 16  # replies per request
MAX_COMPLETION_LOGPROBS = 5  # /v1/completions' legacy ``logprobs``: OpenAI's own bound

def options_from_openai(body: JSONObject) -> JSONObject:
    """Sampling fields and localrun's extra fields -> an Ollama options dict."""
    options = extra_options(body)  # disjoint from the fields below: their order does not matter
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        value = get(body, name, float)
        if value is not None:
            options[name] = value
    if body.get("seed") is not None:
        options["seed"] = get(body, "seed", int)
    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise InvalidRequest("'stop' must be a string or a list of strings")
        options["stop"] = stop
    for name in ("max_completion_tokens", "max_tokens"):
        value = get_whole(body, name, 1)
        if value is not None:
            options["num_predict"] = value
            break
    return options


def response_format(value: JSONValue) -> str | JSONObject | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequest("'response_format' must be an object like {\"type\": \"json_object\"}")
    kind = value.get("type")
    if kind in ("text", None):
        return None
    if kind == "json_object":
        return "json"
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise InvalidRequest("response_format.json_schema.schema must be a JSON schema object")
        return schema
    raise InvalidRequest(f"response_format.type must be text, json_object or json_schema, got {kind!r}")


def _content(content: JSONValue, where: str) -> JSONObject:
    """A message's ``content`` (a string, or text and ``image_url`` parts) as native ``content``
    and ``images`` (chat/images.py: data URLs only, nothing is fetched)."""
    built = chat_images.Content()
    if content is None:
        return built.fields()
    if isinstance(content, str):
        built.text(content, f"{where}.content")
        return built.fields()
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}: content must be a string or a list of content parts")
    for k, part in enumerate(content):
        if not isinstance(part, dict):
            raise InvalidRequest(f"{where}: content parts must be objects")
        text, url = part.get("text"), part.get("image_url")
        if part.get("type") == "text" and isinstance(text, str):
            built.text(text, f"{where}.content[{k}].text")
        elif part.get("type") == "image_url":
            link = url.get("url") if isinstance(url, dict) else url
            built.image(chat_images.from_data_url(link, f"{where}.content[{k}].image_url"))
        elif part.get("type") in ("input_audio", "file"):
            raise InvalidRequest(f"{where}: {part['type']} content is not supported (text and images are)")
        else:
            raise InvalidRequest(f"{where}: unsupported content part {part.get('type')!r}")
    return built.fields()


def messages_from_openai(messages: JSONValue) -> list[JSONObject]:
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty list")
    out: list[JSONObject] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InvalidRequest(f"messages[{i}] must be an object")
        role = native_role(m.get("role"))
        if role is None:
            raise InvalidRequest(f"messages[{i}].role must be {role_names()}")
        item: JSONObject = {"role": role, **_content(m.get("content"), f"messages[{i}]")}
        calls = m.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise InvalidRequest(f"messages[{i}].tool_calls must be a list")
            item["tool_calls"] = [_native_call(c, f"messages[{i}].tool_calls[{j}]") for j, c in enumerate(calls)]
        if role == "tool":
            if m.get("tool_call_id"):
                item["tool_call_id"] = m["tool_call_id"]
            if m.get("name"):
                item["tool_name"] = m["name"]
        out.append(item)
    return out


def _native_call(call: JSONValue, where: str) -> JSONObject:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise InvalidRequest(f"{where} must be {{type: 'function', function: {{name, arguments}}}}")
    args: JSONValue = fn.get("arguments") or {}
    if isinstance(args, str):
        try:
            args = loads(args) if args.strip() else {}
        except ValueError as exc:
            raise InvalidRequest(f"{where}.function.arguments is not valid JSON: {exc}") from None
    out: JSONObject = {"function": {"name": fn["name"], "arguments": args}}
    call_id = call.get("id")
    if isinstance(call_id, str) and call_id:
        out["id"] = call_id  # kept: an upstream pairs the tool results with it
    return out


def _common(body: JSONObject) -> NativeCall:
    n = get_whole(body, "n", 1, MAX_N)
    stream = bool(get(body, "stream", bool))
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise InvalidRequest("'stream_options' must be an object")
    include_usage = bool(stream_options and stream_options.get("include_usage"))
    options = options_from_openai(body)
    ignore_eos, min_tokens = _eos_controls(body, options.get("num_predict"))
    return NativeCall(
        model=body.get("model"), options=options,
        keep_alive=parse_keep_alive(body.get("keep_alive")), stream=stream, include_usage=include_usage,
        n=n or 1, ignore_eos=ignore_eos, min_tokens=min_tokens,
    )


def _eos_controls(body: JSONObject, max_tokens: JSONValue) -> tuple[bool, int]:
    """vLLM's ``ignore_eos`` and ``min_tokens`` (benchmarks use them to pin the output length)."""
    ignore_eos = bool(get(body, "ignore_eos", bool))
    min_tokens = get_whole(body, "min_tokens", 0) or 0
    if isinstance(max_tokens, int) and 0 < max_tokens < min_tokens:
        raise OptionError(f"'min_tokens' ({min_tokens}) must not be more than 'max_tokens' ({max_tokens})")
    return ignore_eos, min_tokens


def chat_to_native(body: JSONObject) -> NativeCall:
    call = _common(body)
    call.messages = messages_from_openai(body.get("messages"))
    call.tools = validate_tools(body.get("tools"))
    call.tool_choice = body.get("tool_choice")
    call.think = think_from_openai(body)
    call.format = response_format(body.get("response_format"))
    call.logprobs = bool(get(body, "logprobs", bool))
    call.top_logprobs = top_logprobs(body)
    return call


def think_from_openai(body: JSONObject) -> Think | None:
    """Whether to think, and how hard: Ollama's ``think``, OpenAI's ``reasoning_effort`` ("none" = no, a
    level passed on: :func:`~localrun.chat.think.from_effort`), or ``chat_template_kwargs.enable_thinking``
    (vLLM's and llama.cpp's server's way); None when unset."""
    if body.get("think") is not None:
        return parse_think(body["think"])
    if body.get("reasoning_effort") is not None:
        return from_effort(body["reasoning_effort"], "reasoning_effort")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise InvalidRequest("'chat_template_kwargs' must be an object")
        enable = kwargs.get("enable_thinking")
        if enable is not None and not isinstance(enable, bool):
            raise InvalidRequest("'chat_template_kwargs.enable_thinking' must be true or false")
        return enable
    return None


def completion_to_native(body: JSONObject) -> NativeCall:
    call = _common(body)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        call.prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        call.prompts = [p for p in prompt if isinstance(p, str)]  # all of them
    else:
        raise InvalidRequest("'prompt' must be a string or a list of strings")
    call.suffix = get(body, "suffix", str, "")
    logprobs = get_whole(body, "logprobs", 0, MAX_COMPLETION_LOGPROBS)
    if logprobs is not None:
        call.logprobs, call.top_logprobs = True, logprobs
    call.echo = bool(get(body, "echo", bool))
    return call


def _token_ids(value: list[JSONValue], where: str) -> list[int]:
    if not value:
        raise InvalidRequest(f"{where} must not be an empty list of token ids")
    ids: list[int] = []
    for t in value:
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise InvalidRequest(f"{where} must hold token ids (whole numbers from 0), got {t!r}")
        ids.append(t)
    return ids


def embedding_inputs(value: JSONValue) -> list[EmbedInput]:
    """OpenAI's ``input``: a string, a list of strings, a token-id list, or a list of token-id lists.

    Token ids are embedded exactly as given (no BOS added); whether each id is in the model's
    vocabulary is checked by the engine, which knows its size (InvalidRequest, 400).
    """
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        texts: list[EmbedInput] = [v for v in value if isinstance(v, str)]
        if len(texts) == len(value):
            return texts
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return [_token_ids(value, "'input'")]
        lists = [v for v in value if isinstance(v, list)]
        if len(lists) == len(value):
            return [_token_ids(v, f"input[{i}]") for i, v in enumerate(lists)]
    raise InvalidRequest("'input' must be a non-empty string, a list of strings, a list of token ids or a list "
                         "of token-id lists")


# --- responses ------------------------------------------------------------------------------


def finish_reason(reason: DoneReason | None, tool_calls: bool) -> str:
    """OpenAI's ``finish_reason``: ``length`` whenever the token limit ended the output, also after
    a whole call (the next one was cut: the client must not run the calls as if the turn were
    over), else ``tool_calls`` when there are calls, else ``stop``."""
    if reason is DoneReason.LENGTH:
        return "length"
    return "tool_calls" if tool_calls else "stop"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int, truncated_tokens: int = 0) -> JSONObject:
    """OpenAI's ``usage``; ``prompt_truncated_count`` (localrun's, as on /api) when ``truncate: true`` cut the
    prompt's oldest tokens to fit the context: ``prompt_tokens`` counts what was kept."""
    out: JSONObject = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
    if truncated_tokens:
        out["prompt_truncated_count"] = truncated_tokens
    return out


def context_overflow_message(prompt_tokens: int, max_tokens: int, what: str = "messages") -> str:
    """A prompt over the request's context in OpenAI's words (the ones clients such as LiteLLM look for),
    naming both counts, then localrun's ways out; ``what`` is "messages" (chat) or "prompt" (completions)."""
    return (f"This model's maximum context length is {max_tokens} tokens. However, your {what} resulted in "
            f"{prompt_tokens} tokens. Please reduce the length of the {what} (or raise num_ctx, or send "
            "\"truncate\": true to cut the oldest tokens).")


def truncation_note(done: DoneEvent | None) -> JSONObject:
    """The field a streamed choice's last chunk carries when ``truncate: true`` cut its prompt (else none):
    ``prompt_truncated_count``, the oldest prompt tokens left out, so a stream without usage says it too."""
    return {"prompt_truncated_count": done.truncated_tokens} if done is not None and done.truncated_tokens else {}


def tool_call_json(call: ToolCall, stream: bool = False) -> JSONObject:
    """One call as OpenAI writes it (arguments as JSON text); streamed deltas carry ``index``."""
    item: JSONObject = {"id": call.id, "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments_json()}}
    return {"index": call.index, **item} if stream else item


def chat_delta(event: ChatEvent) -> JSONObject:
    """The ``delta`` of a streamed chunk for one parsed event (reasoning as ``reasoning_content``)."""
    if isinstance(event, ContentDelta):
        return {"content": event.text}
    if isinstance(event, ThinkingDelta):
        return {"reasoning_content": event.text}
    return {"tool_calls": [tool_call_json(event, stream=True)]}


def chat_logprobs(lps: list[TokenLogprob]) -> JSONObject:
    return {"content": [
        {"token": lp.token, "logprob": lp.logprob, "bytes": list(lp.token.encode()),
         "top_logprobs": [{"token": t, "logprob": p, "bytes": list(t.encode())} for t, p in lp.top]}
        for lp in lps
    ]}


def completion_logprobs(lps: list[TokenLogprob], offset: int = 0) -> JSONObject:
    offsets: list[JSONValue] = []
    pos = offset
    for lp in lps:
        offsets.append(pos)
        pos += len(lp.token)
    return {
        "tokens": [lp.token for lp in lps],
        "token_logprobs": [lp.logprob for lp in lps],
        "top_logprobs": [dict(lp.top) for lp in lps],
        "text_offset": offsets,
    }


def chat_message(reply: Reply) -> JSONObject:
    """The ``message`` of a non-streamed choice: content (None when there are only calls),
    ``reasoning_content`` when the model thought, ``tool_calls``."""
    calls = reply.tool_calls
    message: JSONObject = {"role": "assistant", "content": reply.content if reply.content or not calls else None}
    if reply.thinking:
        message["reasoning_content"] = reply.thinking
    if calls:
        message["tool_calls"] = [tool_call_json(c) for c in calls]
    return message


def chat_completion(rid: str, model: str, created: int, choices: list[JSONValue],
                    usage_: JSONObject) -> JSONObject:
    return {"id": rid, "object": "chat.completion", "created": created, "model": model,
            "system_fingerprint": "fp_localrun", "choices": choices, "usage": usage_}


def chat_chunk(rid: str, model: str, created: int, index: int, delta: JSONObject,
               finish: str | None = None, logprobs: JSONObject | None = None) -> JSONObject:
    return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": "fp_localrun",
            "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}


def usage_chunk(rid: str, model: str, created: int, obj: str, usage_: JSONObject) -> JSONObject:
    return {"id": rid, "object": obj, "created": created, "model": model,
            "system_fingerprint": "fp_localrun", "choices": [], "usage": usage_}


def completion(rid: str, model: str, created: int, choices: list[JSONValue],
               usage_: JSONObject | None) -> JSONObject:
    out: JSONObject = {"id": rid, "object": "text_completion", "created": created, "model": model,
           "system_fingerprint": "fp_localrun", "choices": choices}
    if usage_ is not None:
        out["usage"] = usage_
    return out


def embedding_vector(vector: list[float], encoding: str) -> str | list[float]:
    if encoding == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
    return vector


