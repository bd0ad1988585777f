"""OpenAI's Responses API (``POST /v1/responses``) as a pure conversion to a native chat call.

Pure: the stored responses a request continues come in as ``history`` (the items before its own
input, :mod:`.store`) and ``find_item`` (what an ``item_reference`` names); the route looks them
up. ``conversation`` (OpenAI's Conversations API) is a 400 that says so; ``background`` runs in
:mod:`.background`.
What a request may hold:

- ``input``: a string (one user message) or a list of items: messages (``role`` + ``content``
  as a string or ``input_text`` / ``output_text`` parts), ``function_call`` items (the model's
  earlier calls, with ``call_id``), ``function_call_output`` items (their results) and
  ``item_reference`` items (``{"type": "item_reference", "id": ...}``: an item of a stored
  response, sent again by name). ``reasoning`` items a client replays are dropped: the model reads
  its own history as text.
- ``previous_response_id`` (the route's ``history``) and ``store`` (default true: the route keeps
  the response, :mod:`.store`).
- ``instructions``: a system message put first.
- ``tools``: flat function tools (``{"type": "function", "name", "parameters", ...}``), and
  ``namespace`` tools (a group of functions, as Codex sends): each member is offered to the model
  as ``NAMESPACE.NAME`` and its calls come back as ``function_call`` items with ``namespace`` and
  ``name`` apart; ``tool_choice`` (``auto`` / ``none`` / ``required`` / ``{"type": "function", "name"}``).
  A ``web_search`` tool is not offered to the model (nothing here searches the web; Codex sends
  one with ``external_web_access: false``); other hosted tools (file search...) are a 400.
- ``text.format``: ``text``, ``json_object`` or ``json_schema`` (with ``schema``; enforced by grammar).
- ``truncation``: ``disabled`` (the default) refuses an input longer than the context (400
  ``context_length_exceeded``); ``auto`` drops its oldest items until it fits, never the instructions
  (``instructions``, system and developer messages), a call's result together with its call.
- ``max_output_tokens``, ``temperature``, ``top_p``, ``stream``, ``metadata``,
  plus localrun's extra fields as on the other /v1 routes (``keep_alive``, ``options``, ``num_ctx``...).

Images, files and audio are a 400 (text models).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ...chat import images as chat_images
from ...chat.prompt import TURN_ROLES, native_role, role_names
from ...chat.think import Think, from_effort
from ...errors import InvalidRequest
from ...jsontypes import JSONMapping, JSONObject, JSONValue, as_object, loads
from ..http import get, get_whole, str_field
from ..native_call import NativeCall
from ..openai.convert import options_from_openai
from ..options import parse_keep_alive

_PASSED_OPTIONS = ("temperature", "top_p", "seed", "options", "num_ctx", "top_k", "min_p", "typical_p",
                   "repeat_penalty", "repeat_last_n", "num_batch", "num_gpu", "num_thread", "num_keep", "use_mmap",
                   "presence_penalty", "frequency_penalty", "cache_reuse")
_UNSUPPORTED_PARTS = {"input_file": "files", "input_audio": "audio"}


@dataclass(slots=True)
class ResponsesCall:
    """A Responses request in native terms, plus what the reply echoes back.

    ``auto_truncation`` is ``truncation: "auto"``: a prompt over the context drops its oldest input
    items (:meth:`without_oldest`); otherwise it is a 400. ``items`` are the request's input items
    (a string input is one user message) and ``instructions`` the system message before them.
    """

    call: NativeCall
    auto_truncation: bool = False
    echo: JSONObject = field(default_factory=dict)  # request fields the response object repeats
    namespaces: dict[str, tuple[str, str]] = field(default_factory=dict)  # "ns.name" -> (ns, name)
    items: list[JSONObject] = field(default_factory=list)  # the history's items, then the request's own
    instructions: list[JSONObject] = field(default_factory=list)
    store: bool = True
    background: bool = False  # written by a task of its own, read back by id (.background)

    def split_name(self, offered: str) -> tuple[str | None, str]:
        """A called tool's (namespace, name): a namespaced member was offered as ``NAMESPACE.NAME``."""
        namespace, name = self.namespaces.get(offered, (None, offered))
        return namespace, name

    @property
    def droppable(self) -> int:
        """How many input items ``truncation: "auto"`` may drop: all but system / developer messages."""
        return len(_droppable(self.items))

    def without_oldest(self, count: int) -> tuple[NativeCall, int]:
        """The call without its ``count`` oldest droppable input items, and how many items went in all.

        Instructions (``instructions``, system and developer messages) stay; a ``function_call_output``
        whose call was dropped goes with it, so a result never reaches the model without its call (a
        call always comes before its result, so a kept result keeps its call).
        """
        kept = drop_oldest(self.items, count)
        call = replace(self.call, messages=self.instructions + input_messages(kept))
        return call, len(self.items) - len(kept)


def _kind(item: JSONMapping) -> str | None:
    """An input item's type; an item without one is a message when it has a ``role``."""
    return str_field(item, "type") if "type" in item else "message" if "role" in item else None


def _droppable(items: list[JSONObject]) -> list[int]:
    """Indices of the items truncation may drop, oldest first: every item but system / developer messages."""
    return [i for i, item in enumerate(items)
            if not (_kind(item) == "message" and native_role(item.get("role")) == "system")]


def drop_oldest(items: list[JSONObject], count: int) -> list[JSONObject]:
    """``items`` without their ``count`` oldest droppable items and the results of the calls among them."""
    gone = set(_droppable(items)[:count])
    calls = {str_field(items[i], "call_id") for i in gone if _kind(items[i]) == "function_call"}
    return [item for i, item in enumerate(items)
            if i not in gone and not (_kind(item) == "function_call_output" and str_field(item, "call_id") in calls)]


FindItem = Callable[[str], JSONObject | None]


def _no_items(item_id: str) -> JSONObject | None:
    return None


def responses_to_native(body: JSONObject, history: Sequence[JSONObject] = (),
                        find_item: FindItem = _no_items) -> ResponsesCall:
    """Validate a ``/v1/responses`` body and convert it; raises InvalidRequest (400) on bad input.

    ``history`` holds the items the model reads before the request's input (the conversation of
    its ``previous_response_id``); ``find_item`` gives the stored item an ``item_reference`` names.
    """
    if body.get("conversation") is not None:
        raise InvalidRequest("'conversation' is not supported: this server has no Conversations API; continue "
                             "a stored response with 'previous_response_id', or send the whole conversation "
                             "in 'input'")
    if body.get("prompt") is not None:
        raise InvalidRequest("'prompt' names a prompt template kept by OpenAI, which this server does not have: send "
                             "the 'model', 'instructions' and 'input' it holds instead")
    for name in ("store", "parallel_tool_calls", "background"):
        get(body, name, bool)
    previous = get(body, "previous_response_id", str)
    store = body.get("store") is not False  # OpenAI's default: kept
    background = body.get("background") is True
    if background and not store:
        raise InvalidRequest("a 'background' response must be stored: drop \"store\": false (it is read back by "
                             "its id)")
    instructions = get(body, "instructions", str)
    metadata = get(body, "metadata", dict)
    max_output = get_whole(body, "max_output_tokens", 1)
    truncation = get(body, "truncation", str)
    if truncation not in (None, "auto", "disabled"):
        raise InvalidRequest("'truncation' must be 'auto' or 'disabled'")
    options = options_from_openai({k: body[k] for k in _PASSED_OPTIONS if k in body})
    if max_output is not None:
        options["num_predict"] = max_output
    items = [*history, *resolve_references(input_items(body.get("input")), find_item)]
    system: list[JSONObject] = [{"role": "system", "content": instructions}] if instructions else []
    messages = system + input_messages(items, len(history))
    tools, namespaces = function_tools(body.get("tools"))
    choice = tool_choice(body.get("tool_choice"))
    call = NativeCall(model=body.get("model"), options=options, keep_alive=parse_keep_alive(body.get("keep_alive")),
                      stream=get(body, "stream", bool, False), messages=messages,
                      tools=tools, tool_choice=choice, format=text_format(body.get("text")),
                      think=reasoning_think(body.get("reasoning")))
    echo: JSONObject = {
        "instructions": instructions, "max_output_tokens": max_output, "metadata": metadata or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
        "temperature": body.get("temperature"), "top_p": body.get("top_p"),
        "tool_choice": body.get("tool_choice") or "auto", "tools": body.get("tools") or [],
        "text": body.get("text") or {"format": {"type": "text"}}, "truncation": truncation or "disabled",
        "user": body.get("user") if isinstance(body.get("user"), str) else None,
        # reasoning_think (above) let only an object or null through
        "reasoning": {"effort": as_object(body.get("reasoning")).get("effort"), "summary": None},
        "previous_response_id": previous, "store": store, "background": background,
    }
    return ResponsesCall(call, truncation == "auto", echo, namespaces, items, system, store, background)


def resolve_references(items: list[JSONObject], find_item: FindItem) -> list[JSONObject]:
    """``items`` with each ``item_reference`` replaced by the stored item it names; one that names no
    stored item is a 400."""
    resolved: list[JSONObject] = []
    for i, item in enumerate(items):
        if _kind(item) != "item_reference":
            resolved.append(item)
            continue
        item_id = item.get("id")
        found = find_item(item_id) if isinstance(item_id, str) and item_id else None
        if found is None:
            raise InvalidRequest(f"input[{i}]: no stored item with id {item_id!r} (an item_reference names an item "
                                 "of a response stored with \"store\": true, while this server keeps it)")
        resolved.append(found)
    return resolved


def input_items(value: object) -> list[JSONObject]:
    """``input`` (or its items again) as a list of items (a string is one user message); their shapes are
    :func:`input_messages`' job."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise InvalidRequest("'input' must be a string or a non-empty list of input items")
    items: list[JSONObject] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise InvalidRequest(f"input[{i}] must be an object")
        items.append(item)
    return items


def listed_item(item: JSONObject) -> JSONObject:
    """A stored input item as ``GET /v1/responses/{id}/input_items`` lists it: a message's string content
    as one text part (``input_text``, ``output_text`` for the assistant's), and a ``status``."""
    listed: JSONObject = {**item, "status": item.get("status", "completed")}
    if _kind(item) == "message":
        listed["type"] = "message"
        content = item.get("content")
        if isinstance(content, str):
            kind = "output_text" if item.get("role") == "assistant" else "input_text"
            listed["content"] = [{"type": kind, "text": content}]
    return listed


def input_too_long(prompt_tokens: int, max_tokens: int) -> str:
    """An input over the request's context in OpenAI's words, naming both counts, and the way out."""
    return (f"Your input exceeds the context window of this model: {prompt_tokens} tokens > {max_tokens} maximum. "
            "Please adjust your input and try again, or send \"truncation\": \"auto\" to drop its oldest items.")


def _text_parts(content: JSONValue, where: str) -> JSONObject:
    """A message's content (a string, text parts and ``input_image`` parts) as native ``content``
    and ``images`` (chat/images.py: data URLs only, nothing is fetched)."""
    built = chat_images.Content()
    if isinstance(content, str):
        built.text(content, f"{where}.content")
        return built.fields()
    if not isinstance(content, list):
        raise InvalidRequest(f"{where}.content must be a string or a list of content parts")
    for j, part in enumerate(content):
        fields = as_object(part)  # not an object: no type, refused below
        kind, text, refusal = str_field(fields, "type"), fields.get("text"), fields.get("refusal")
        if kind in ("input_text", "output_text", "text", "summary_text", "reasoning_text") and isinstance(text, str):
            built.text(text, f"{where}.content[{j}].text")
        elif kind == "refusal" and isinstance(refusal, str):
            built.text(refusal, f"{where}.content[{j}].refusal")
        elif kind == "input_image":
            if fields.get("file_id"):
                raise InvalidRequest(f"{where}.content[{j}]: file_id images need OpenAI's file store; send the "
                                     "image as a base64 data URL in image_url")
            built.image(chat_images.from_data_url(fields.get("image_url"), f"{where}.content[{j}].image_url"))
        elif kind in _UNSUPPORTED_PARTS:
            raise InvalidRequest(f"{where}.content[{j}]: this model does not support {_UNSUPPORTED_PARTS[kind]} "
                                 f"({kind})")
        else:
            raise InvalidRequest(f"{where}.content[{j}] must be a text part like "
                                 "{\"type\": \"input_text\", \"text\": \"...\"}")
    return built.fields()


def _arguments(value: JSONValue, where: str) -> JSONObject:
    if value is None or value == "":
        return {}
    if not isinstance(value, str):
        raise InvalidRequest(f"{where}.arguments must be a JSON string")
    try:
        args = loads(value)
    except ValueError as exc:
        raise InvalidRequest(f"{where}.arguments is not valid JSON: {exc}") from None
    if not isinstance(args, dict):
        raise InvalidRequest(f"{where}.arguments must be a JSON object")
    return args


def input_messages(value: object, first_own: int = 0) -> list[JSONObject]:
    """``input`` (or its items) as native chat messages (Ollama shape, tool calls as ``{"function": ...}``).

    The items before ``first_own`` come from stored responses: an error names the request's own
    items by their index in its ``input``."""
    items = input_items(value)
    out: list[JSONObject] = []
    names: dict[str, str] = {}  # call_id -> function name, for the results that answer them
    for i, item in enumerate(items):
        where = f"input[{i - first_own}]" if i >= first_own else f"the stored conversation's item {i}"
        kind = _kind(item)
        if kind == "message":
            role = native_role(item.get("role"), TURN_ROLES)
            if role is None:
                raise InvalidRequest(f"{where}.role must be {role_names(TURN_ROLES)}")
            out.append({"role": role, **_text_parts(item.get("content"), where)})
        elif kind == "function_call":
            name, call_id, namespace = item.get("name"), item.get("call_id"), item.get("namespace")
            if not isinstance(name, str) or not name or not isinstance(call_id, str) or not call_id:
                raise InvalidRequest(f"{where} must have a 'name' and a 'call_id'")
            if namespace is not None:
                if not isinstance(namespace, str) or not namespace:
                    raise InvalidRequest(f"{where}.namespace must be a non-empty string")
                name = f"{namespace}.{name}"
            names[call_id] = name
            call: JSONObject = {"id": call_id,
                                "function": {"name": name, "arguments": _arguments(item.get("arguments"), where)}}
            # calls of one turn share one assistant message (whose tool_calls this loop made a list)
            calls = out[-1].setdefault("tool_calls", []) if out and out[-1]["role"] == "assistant" else None
            if isinstance(calls, list):
                calls.append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidRequest(f"{where} must have the 'call_id' of the call it answers")
            output = item.get("output")
            result = _text_parts(output, where)  # a string, or parts: text and images (a screenshot)
            message: JSONObject = {"role": "tool", **result, "tool_call_id": call_id}
            if call_id in names:
                message["tool_name"] = names[call_id]
            out.append(message)
        elif kind == "reasoning":
            continue
        else:
            raise InvalidRequest(f"{where}: input items of type {kind!r} are not supported (message, "
                                 "function_call, function_call_output)")
    if not out:
        raise InvalidRequest("'input' holds no message")
    return out


_NOT_OFFERED = ("web_search", "web_search_preview")  # hosted tools dropped rather than refused (see above)


def function_tools(value: JSONValue) -> tuple[list[JSONObject] | None, dict[str, tuple[str, str]]]:
    """Responses tools -> chat-completions tools (``{"type", "function": {...}}``), and the namespaced
    members among them (offered name -> (namespace, name))."""
    if value is None:
        return None, {}
    if not isinstance(value, list):
        raise InvalidRequest("'tools' must be a list of {type: 'function', name, parameters} objects")
    tools: list[JSONObject] = []
    namespaces: dict[str, tuple[str, str]] = {}
    for i, item in enumerate(value):
        tool = as_object(item)  # not an object: no type, refused below
        kind = str_field(tool, "type")
        if kind == "function":
            tools.append(_function(tool, f"tools[{i}]", ""))
        elif kind == "namespace":
            prefix = tool.get("name")
            members = tool.get("tools")
            if not isinstance(prefix, str) or not prefix or not isinstance(members, list):
                raise InvalidRequest(f"tools[{i}]: a namespace needs a 'name' and a list of function 'tools'")
            for j, entry in enumerate(members):
                member = as_object(entry)
                if str_field(member, "type") != "function":
                    raise InvalidRequest(f"tools[{i}].tools[{j}]: a namespace holds function tools")
                tools.append(_function(member, f"tools[{i}].tools[{j}]", prefix + "."))
                name = member.get("name")  # _function checked it: a non-empty string
                if isinstance(name, str):
                    namespaces[f"{prefix}.{name}"] = (prefix, name)  # the name _function offered
        elif kind not in _NOT_OFFERED:
            raise InvalidRequest(f"tools[{i}]: only function tools are supported here, got type {kind!r}")
    return tools or None, namespaces


def _function(tool: JSONMapping, where: str, prefix: str) -> JSONObject:
    name, params = tool.get("name"), tool.get("parameters")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{where}.name must be a non-empty string")
    if params is not None and not isinstance(params, dict):
        raise InvalidRequest(f"{where}.parameters must be a JSON schema object")
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidRequest(f"{where}.description must be a string")
    fn: JSONObject = {"name": prefix + name, "parameters": params or {"type": "object", "properties": {}}}
    if description:
        fn["description"] = description
    # Only an explicit true: OpenAI's Responses default (true) would put every call of a client that
    # does not say under a grammar; Codex says false for its tools.
    if tool.get("strict") is True:
        fn["strict"] = True
    return {"type": "function", "function": fn}


def tool_choice(value: JSONValue) -> JSONValue:
    """Responses ``tool_choice`` -> the chat-completions form :func:`~.tools.forced_call_schema` reads."""
    if value is None or value in ("auto", "none", "required"):
        return value
    name = value.get("name") if isinstance(value, dict) else None
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(name, str):
        return {"type": "function", "function": {"name": name}}
    raise InvalidRequest("'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": ...}")


def reasoning_think(value: JSONValue) -> Think | None:
    """``reasoning.effort`` -> think: "none" = no, a level = yes with that effort
    (:func:`~localrun.chat.think.from_effort`), unset = the model's default."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequest("'reasoning' must be an object like {\"effort\": \"low\"}")
    return from_effort(value.get("effort"), "reasoning.effort")


def text_format(value: JSONValue) -> str | JSONObject | None:
    """``text.format`` -> the native format: None (text), "json" or a JSON schema."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidRequest("'text' must be an object like {\"format\": {\"type\": \"json_object\"}}")
    fmt = value.get("format")
    if fmt is None:
        return None
    kind = str_field(fmt, "type")
    if kind == "text":
        return None
    if kind == "json_object":
        return "json"
    if kind == "json_schema":
        schema = as_object(fmt).get("schema")  # fmt is an object: it has a type
        if not isinstance(schema, dict):
            raise InvalidRequest("text.format.schema must be a JSON schema object")
        return schema
    raise InvalidRequest("text.format.type must be text, json_object or json_schema")
