"""Captured agent requests as OpenAI chat completions bodies, for servers that speak only that API.

``benchmarks/agent_replay.py`` sends these to llama.cpp's ``llama-server`` (``/v1/chat/completions``,
which every version has) in place of Claude Code's Anthropic Messages bodies and Codex's
Responses bodies. The conversation and the tools are kept; what chat completions has no place for
is dropped: thinking and reasoning items, cache-control marks, images, server-side tools (Codex's
``web_search``), and each API's own fields (``metadata``, ``context_management``, ``include``...).
Pure functions of a body; standard library only.
"""

from __future__ import annotations

import json
from typing import Any

Body = dict[str, Any]


def from_anthropic(body: Body) -> Body:
    """An Anthropic Messages body (``system``, ``messages`` of content blocks, ``tools``) as chat."""
    messages: list[Body] = []
    system = _texts(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for message in body.get("messages", []):
        messages += _anthropic_message(message)
    tools = [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                               "parameters": t.get("input_schema", {"type": "object"})}}
             for t in body.get("tools", []) if "input_schema" in t or "name" in t]
    return _chat(body, messages, tools, body.get("max_tokens"))


def _anthropic_message(message: Body) -> list[Body]:
    role, content = message["role"], message.get("content")
    if not isinstance(content, list) or role == "system":
        return [{"role": role, "content": _texts(content)}]
    text = _texts([b for b in content if b.get("type") == "text"])
    if role == "assistant":
        calls = [{"id": b["id"], "type": "function",
                  "function": {"name": b["name"], "arguments": json.dumps(b.get("input", {}))}}
                 for b in content if b.get("type") == "tool_use"]
        return [{"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})}]
    results = [{"role": "tool", "tool_call_id": b["tool_use_id"], "content": _texts(b.get("content"))}
               for b in content if b.get("type") == "tool_result"]
    return results + ([{"role": "user", "content": text}] if text else [])


def from_responses(body: Body) -> Body:
    """An OpenAI Responses body (``instructions``, ``input`` items, ``tools``) as chat."""
    messages: list[Body] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    for item in [{"type": "message", "role": "user", "content": items}] if isinstance(items, str) else items or []:
        messages += _responses_item(item)
    tools = [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                               "parameters": t.get("parameters") or {"type": "object"}}}
             for t in body.get("tools", []) if t.get("type") == "function"]
    return _chat(body, messages, tools, body.get("max_output_tokens"))


def _responses_item(item: Body) -> list[Body]:
    kind = item.get("type", "message")
    if kind == "message":
        role = "system" if item["role"] == "developer" else item["role"]
        return [{"role": role, "content": _texts(item.get("content"))}]
    if kind == "function_call":
        call = {"id": item["call_id"], "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments", "{}")}}
        return [{"role": "assistant", "content": None, "tool_calls": [call]}]
    if kind == "function_call_output":
        output = item.get("output")
        return [{"role": "tool", "tool_call_id": item["call_id"],
                 "content": output if isinstance(output, str) else _texts(output)}]
    return []  # reasoning items, web search calls...: no place in chat completions


def _texts(value: Any) -> str:
    """The text of a string or of a list of content parts (text, input_text, output_text), joined."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return "\n\n".join(str(p.get("text", "")) for p in value if isinstance(p, dict) and "text" in p)


def _chat(body: Body, messages: list[Body], tools: list[Body], max_tokens: Any) -> Body:
    out: Body = {"model": body.get("model"), "messages": _merge_systems(messages), "stream": True}
    if tools:
        out["tools"] = tools
    if max_tokens is not None:
        out["max_tokens"] = max_tokens
    for name in ("temperature", "top_p"):
        if name in body:
            out[name] = body[name]
    return out


def _merge_systems(messages: list[Body]) -> list[Body]:
    """Leading system messages as one (many chat templates take a single system message, first)."""
    lead = 0
    while lead < len(messages) and messages[lead]["role"] == "system":
        lead += 1
    if lead <= 1:
        return messages
    system = "\n\n".join(m["content"] for m in messages[:lead] if m["content"])
    return [{"role": "system", "content": system}, *messages[lead:]]
