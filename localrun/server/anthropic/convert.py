"""Anthropic's Messages API (``POST /v1/messages``) as a pure conversion to a native chat call.

A request holds ``model``, ``max_tokens`` (required, as Anthropic requires), ``messages`` (user and
assistant turns, and the ``system`` turns Claude Code sends mid-conversation under Anthropic's
``mid-conversation-system`` beta; content a string or blocks: ``text``, ``tool_use``, ``tool_result``, and
``thinking`` blocks a client replays, which are dropped), ``system`` (a string or text blocks),
``tools`` (``name``, ``description``, ``input_schema``), ``tool_choice`` (``auto``, ``any``,
``tool`` + ``name``, ``none``), ``stop_sequences``, ``temperature`` (0-1), ``top_p``, ``top_k``,
``metadata``, ``stream``, ``thinking`` and ``output_config`` (``format``: a JSON schema the
answer must match, enforced by grammar; ``effort``). ``cache_control`` marks are accepted and ignored: the
prefix cache reuses every shared prefix on its own. Images, documents, hosted (server) tools and
other blocks a text model cannot take are a 400 that names them.

``count_tokens`` takes the same body without ``max_tokens``. A ``thread`` (Anthropic's server-side
conversations) is refused with the 400 the SDKs resend the whole conversation on (:func:`thread_refusal`);
count_tokens ignores it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...chat import images as chat_images
from ...chat.prompt import TURN_ROLES, role_names
from ...chat.think import ThinkLevel
from ...errors import InvalidRequest, ThreadUnsupported
from ...jsontypes import JSONMapping, JSONObject, JSONValue, as_object
from ..http import get, get_number, get_whole, str_field
from ..native_call import EXTRA_OPTIONS, NativeCall, extra_options
from ..options import parse_keep_alive

_UNSUPPORTED_BLOCKS = {"document": "documents", "search_result": "search results",
                       "container_upload": "container uploads"}
_THINKING_BLOCKS = ("thinking", "redacted_thinking")
MIN_THINKING_BUDGET = 1024  # Anthropic's own minimum
_EFFORTS = ("low", "medium", "high", "xhigh", "max")
_LOCALRUN_FIELDS = (*(n for n in EXTRA_OPTIONS if n != "top_k"), "seed")  # top_k is a field of Anthropic's own


@dataclass(frozen=True, slots=True)
class Thinking:
    """The request's ``thinking``: True (``enabled``: a thinking model must think; a 400 on a model that
    cannot), False (``disabled``), None (not given, or ``adaptive``: the model's own default, which
    for a thinking model is to think). ``budget_tokens`` is checked, not enforced."""

    enabled: bool | None
    budget_tokens: int | None = None


@dataclass(slots=True)
class MessagesCall:
    """A Messages request in native terms, plus what the reply needs from it. ``thread`` is the request's
    message-thread ``type`` ("create" / "continue"), None without one (see :func:`thread_refusal`)."""

    call: NativeCall
    stop_sequences: tuple[str, ...]
    thinking: Thinking
    thread: str | None = None


def messages_to_native(body: JSONObject, *, count_only: bool = False) -> MessagesCall:
    """Validate a ``/v1/messages`` body (or a count_tokens body) and convert it; InvalidRequest on bad input."""
    max_tokens = get_whole(body, "max_tokens", 1)
    if max_tokens is None and not count_only:
        raise InvalidRequest("max_tokens: field required")
    options = extra_options(body, _LOCALRUN_FIELDS)  # localrun's extras
    for name in ("temperature", "top_p"):  # Anthropic's range for both is [0, 1]
        value = get_number(body, name, 0.0, 1.0)
        if value is not None:
            options[name] = value
    top_k = get_whole(body, "top_k", 0)
    if top_k is not None:
        options["top_k"] = top_k
    stops = body.get("stop_sequences")
    if stops is not None and (not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops)):
        raise InvalidRequest("stop_sequences: must be a list of non-empty strings")
    sequences = tuple(s for s in stops or () if isinstance(s, str))  # all of them
    if sequences:
        options["stop"] = list(sequences)
    if max_tokens is not None:
        options["num_predict"] = max_tokens
    get(body, "metadata", dict)
    stream = get(body, "stream", bool, False)
    messages = system_messages(body.get("system")) + conversation(body.get("messages"))
    call = NativeCall(model=body.get("model"), options=options, keep_alive=parse_keep_alive(body.get("keep_alive")),
                      stream=stream, messages=messages, tools=tools_to_native(body.get("tools")),
                      tool_choice=tool_choice(body.get("tool_choice")), format=output_format(body.get("output_config")))
    think = thinking(body.get("thinking"))
    if think.budget_tokens is not None and max_tokens is not None and think.budget_tokens >= max_tokens:
        raise InvalidRequest("thinking.budget_tokens: must be less than max_tokens")
    call.think = (effort_level(body.get("output_config")) or True) if think.enabled else think.enabled
    return MessagesCall(call, sequences, think, thread_type(body.get("thread")))


_LEVELS: dict[str, ThinkLevel] = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def effort_level(config: JSONValue) -> ThinkLevel | None:
    """``output_config.effort`` as a thinking level (``max`` and ``xhigh`` are ``high``), for a request whose
    ``thinking`` is enabled; with ``adaptive`` (what Claude Code sends, beside ``effort: "high"``) the
    model keeps its own default, so a model that cannot think still answers."""
    effort = config.get("effort") if isinstance(config, dict) else None
    return _LEVELS.get(effort) if isinstance(effort, str) else None


_THREAD_TYPES = ("create", "continue")


def thread_type(value: JSONValue) -> str | None:
    """The ``type`` of a message ``thread`` (Anthropic's server-side conversations), None without one."""
    if value is None:
        return None
    kind = str_field(value, "type")
    if kind not in _THREAD_TYPES:
        raise InvalidRequest("thread.type: must be 'create' or 'continue'")
    return kind


def thread_refusal(kind: str) -> ThreadUnsupported:
    """The 400 for a request with a ``thread``: this server keeps no conversation between requests.

    A ``continue`` carries only the newest messages (without ``system`` and ``tools``), so answering it
    would answer them alone. ``error.details.error_code`` ``thread_unsupported_request`` is what the
    SDKs' thread state (the 2.x Python SDK's tool runner, Claude Code) reads as "send this turn again
    with the whole conversation and no ``thread``, and stop threading"; a ``create`` is refused the
    same way so a client learns it on its first turn, before it sends a delta.
    """
    return ThreadUnsupported(f"thread: this server keeps no conversation between requests, so it cannot {kind} "
                             "a thread; send the whole conversation without 'thread'")


def prompt_too_long(prompt_tokens: int, max_tokens: int) -> str:
    """A prompt over the request's context in Anthropic's words, which agents look for (Claude Code
    compacts the conversation when it reads them)."""
    return f"prompt is too long: {prompt_tokens} tokens > {max_tokens} maximum"


def system_messages(value: JSONValue, where: str = "system") -> list[JSONObject]:
    """A system prompt (a string or text blocks) as one native system message; none when empty."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [{"role": "system", "content": value}]
    if isinstance(value, list):
        texts = []
        for i, block in enumerate(value):
            text = block.get("text") if isinstance(block, dict) else None
            if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(text, str):
                raise InvalidRequest(f"{where}.{i}: system blocks must be text blocks {{type: 'text', text}}")
            texts.append(text)
        return [{"role": "system", "content": "\n\n".join(texts)}] if texts else []
    raise InvalidRequest(f"{where}: must be a string or a list of text blocks")


def conversation(value: JSONValue) -> list[JSONObject]:
    """``messages`` -> native chat messages; tool results become ``tool`` messages before the user's text."""
    if not isinstance(value, list) or not value:
        raise InvalidRequest("messages: must be a non-empty list of {role, content} turns")
    out: list[JSONObject] = []
    names: dict[str, str] = {}  # tool_use id -> tool name, for the results that answer them
    for i, message in enumerate(value):
        where = f"messages.{i}"
        if not isinstance(message, dict):
            raise InvalidRequest(f"{where}: must be an object with 'role' and 'content'")
        role = str_field(message, "role")
        if role not in TURN_ROLES:  # no alias: Anthropic's API has no 'developer' role
            raise InvalidRequest(f"{where}.role: must be {role_names(TURN_ROLES, aliases=False)}")
        content = message.get("content")
        if role == "system":
            out.extend(system_messages(content, where=f"{where}.content"))
            continue
        if isinstance(content, str):
            chat_images.refuse_marker(content, f"{where}.content")
            out.append({"role": role, "content": content})
            continue
        if not isinstance(content, list):
            raise InvalidRequest(f"{where}.content: must be a string or a list of content blocks")
        out.extend(_blocks(role, content, where, names))
    return out


def _image(block: JSONMapping, at: str) -> chat_images.Image:
    """An ``image`` block: its ``source`` must be base64 data (a URL is never fetched)."""
    raw = block.get("source")
    source: JSONMapping = raw if isinstance(raw, dict) else {}
    kind = source.get("type")
    if kind == "base64":
        return chat_images.from_base64(source.get("data"), f"{at}.source.data")
    if kind == "url":
        return chat_images.from_data_url(source.get("url"), f"{at}.source.url")
    raise InvalidRequest(f"{at}.source: must be {{type: 'base64', media_type, data}}")


def _blocks(role: str, blocks: list[JSONValue], where: str, names: dict[str, str]) -> list[JSONObject]:
    texts = chat_images.Content()
    calls: list[JSONValue] = []  # the message's tool_calls, each an object
    results: list[JSONObject] = []
    for j, item in enumerate(blocks):
        at = f"{where}.content.{j}"
        block = as_object(item)  # not an object: no type, refused below
        kind, text = str_field(block, "type"), block.get("text")
        if kind == "text" and isinstance(text, str):
            texts.text(text, f"{at}.text")
        elif kind == "image" and role == "user":
            texts.image(_image(block, at))
        elif kind == "tool_use" and role == "assistant":
            call_id, name, args = block.get("id"), block.get("name"), block.get("input", {})
            if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
                raise InvalidRequest(f"{at}: tool_use blocks need an 'id' and a 'name'")
            if not isinstance(args, dict):
                raise InvalidRequest(f"{at}.input: must be an object")
            names[call_id] = name
            calls.append({"id": call_id, "function": {"name": name, "arguments": args}})
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(block, at, names))
        elif kind in _THINKING_BLOCKS and role == "assistant":
            continue  # earlier reasoning a client replays; the model does not need to read it again
        elif kind in _UNSUPPORTED_BLOCKS:
            raise InvalidRequest(f"{at}: this model does not support {_UNSUPPORTED_BLOCKS[kind]} ({kind} blocks)")
        elif kind in ("tool_use", "tool_result", *_THINKING_BLOCKS):
            raise InvalidRequest(f"{at}: {kind} blocks belong in {'assistant' if kind != 'tool_result' else 'user'} "
                                 "messages")
        else:
            raise InvalidRequest(f"{at}: unsupported content block {kind!r} (text, tool_use, tool_result)")
    out = list(results)
    if texts or calls or not results:
        message: JSONObject = {"role": role, **texts.fields()}
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    return out


def _tool_result(block: JSONMapping, at: str, names: dict[str, str]) -> JSONObject:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(f"{at}: tool_result blocks need the 'tool_use_id' they answer")
    content = block.get("content", "")
    built = chat_images.Content(sep="\n")
    if isinstance(content, list):
        for k, item in enumerate(content):
            part = as_object(item)  # not an object: no type, refused below
            kind, text = str_field(part, "type"), part.get("text")
            if kind == "text" and isinstance(text, str):
                built.text(text, f"{at}.content.{k}.text")
            elif kind == "image":  # a screenshot a coding agent's tool took
                built.image(_image(part, f"{at}.content.{k}"))
            elif kind in _UNSUPPORTED_BLOCKS:
                raise InvalidRequest(f"{at}.content.{k}: this model does not support {_UNSUPPORTED_BLOCKS[kind]}")
            else:
                raise InvalidRequest(f"{at}.content.{k}: tool results hold text and image blocks")
    elif isinstance(content, str):
        built.text(content, f"{at}.content")
    else:
        raise InvalidRequest(f"{at}.content: must be a string or a list of text blocks")
    message: JSONObject = {"role": "tool", **built.fields(), "tool_call_id": call_id}
    if block.get("is_error") is True:
        message["content"] = f"Error: {message['content']}"
    if call_id in names:
        message["tool_name"] = names[call_id]
    return message


def tools_to_native(value: JSONValue) -> list[JSONObject] | None:
    """Client tools (``name``, ``description``, ``input_schema``) -> chat-completions function tools."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidRequest("tools: must be a list of {name, description, input_schema} objects")
    out: list[JSONObject] = []
    for i, tool in enumerate(value):
        if not isinstance(tool, dict):
            raise InvalidRequest(f"tools.{i}: must be an object")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise InvalidRequest(f"tools.{i}: server tools ({kind}) are not available here; define the tool "
                                 "with name, description and input_schema")
        name, schema, description = tool.get("name"), tool.get("input_schema"), tool.get("description")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"tools.{i}.name: must be a non-empty string")
        if not isinstance(schema, dict):
            raise InvalidRequest(f"tools.{i}.input_schema: must be a JSON schema object")
        if description is not None and not isinstance(description, str):
            raise InvalidRequest(f"tools.{i}.description: must be a string")
        fn: JSONObject = {"name": name, "parameters": schema}
        if description:
            fn["description"] = description
        if tool.get("strict") is True:  # its input holds the schema, under any tool_choice (tools.py)
            fn["strict"] = True
        out.append({"type": "function", "function": fn})
    return out or None


def tool_choice(value: JSONValue) -> JSONValue:
    """Anthropic's ``tool_choice`` -> the chat-completions form (``any`` is ``required``)."""
    if value is None:
        return None
    kind = str_field(value, "type")
    if isinstance(value, dict) and not isinstance(value.get("disable_parallel_tool_use", False), bool):
        raise InvalidRequest("tool_choice.disable_parallel_tool_use: must be true or false")
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    name = as_object(value).get("name")  # value is an object when it has a type
    if kind == "tool" and isinstance(name, str) and name:
        return {"type": "function", "function": {"name": name}}
    raise InvalidRequest("tool_choice: must be {type: 'auto' | 'any' | 'none'} or {type: 'tool', name}")


def thinking(value: JSONValue) -> Thinking:
    if value is None:
        return Thinking(None)
    kind = str_field(value, "type")
    if kind == "disabled":
        return Thinking(False)
    if kind in ("adaptive", "between_tools"):
        return Thinking(None)
    if kind == "enabled":
        budget = as_object(value).get("budget_tokens")  # value is an object: it has a type
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
            raise InvalidRequest(f"thinking.budget_tokens: must be a whole number of at least {MIN_THINKING_BUDGET}")
        return Thinking(True, budget)
    raise InvalidRequest("thinking: must be {type: 'enabled', budget_tokens}, {type: 'adaptive'}, "
                         "{type: 'between_tools'} or {type: 'disabled'}")


def output_format(value: JSONValue) -> JSONObject | None:
    """``output_config``: its ``format`` (``{"type": "json_schema", "schema"}``) as the native format."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequest("output_config: must be an object")
    if value.get("effort") not in (None, *_EFFORTS):
        raise InvalidRequest(f"output_config.effort: must be one of {', '.join(_EFFORTS)}")
    fmt = value.get("format")
    if fmt is None:
        return None
    schema = fmt.get("schema") if isinstance(fmt, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(schema, dict):
        raise InvalidRequest("output_config.format: must be {type: 'json_schema', schema: {...}}")
    return schema


def tool_use_id(call_id: str) -> str:
    """A parsed call's id (``call_<hex>``) in Anthropic's form (``toolu_<hex>``), as stable as the id."""
    return "toolu_" + call_id.removeprefix("call_")
