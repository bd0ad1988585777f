"""Replay coding agents' captured requests against localrun and llama-server: time to first token.

    python benchmarks/agent_replay.py --model MODEL [--localrun URL] [--llama-server URL --llama-model NAME]
        [--agents claude codex] [--restart-localrun CMD] [--restart-llama CMD] [--max-tokens 16]
        [--out benchmarks/out/agent_replay]

The captures are ``benchmarks/agents/captures/AGENT/turn{1,2}.json`` (``benchmarks/agents/capture.py`` made
them from Claude Code, Codex and opencode pointed at a stand-in). For each target and agent, in
this order, with the model loaded first by a one-token request (so no step includes the load):

1. ``first``: turn 1, the agent's first request of a session (its whole system prompt and tools);
2. ``next_turn``: turn 2, the same conversation one exchange later (a prefix cache serves most);
3. ``second_session``: turn 1 with other words from the user: a new session on the same server,
   whose system prompt and tools are the same;
4. ``after_restart``: the server restarted by ``--restart-localrun`` / ``--restart-llama`` (a
   shell command; the replay then waits until the server answers), the model loaded again, and
   turn 1 with a third user message: a new session's first request after a restart (what a prefix
   cache kept on disk saves). Skipped without the command.

Each request is streamed; its time to first token is from sending it to the first event that
carries output (text, thinking or a tool call), and its total time to the end of the stream.
``max_tokens`` is set to ``--max-tokens``; the model name to ``--model`` (``--llama-model`` for
llama-server); the rest of the body is what the agent sent.

APIs: localrun gets each capture on its own API (Claude Code: ``/v1/messages``, Codex:
``/v1/responses``, opencode: ``/v1/chat/completions``); llama-server gets each converted to
``/v1/chat/completions`` (``benchmarks/agents/to_chat.py``), which every version has, or with
``--llama-api native`` the same paths as localrun (builds with Anthropic Messages support).
Either target may be left out; with both, the table gives localrun's time over llama-server's.

Writes ``OUT/results.json`` (every timing, the targets, the captures' agent versions) and
``OUT/results.md`` (the table, also printed). A model with tools in its template is needed (the
captures carry the agents' tools; localrun refuses them for a model without). For example, with
llama-server built by ``../shared/bench/build_llama_server.sh`` (``BIN`` its output):

    localrun serve &                                     # LOCALRUN_HOST=127.0.0.1:11435
    LD_LIBRARY_PATH=$BIN $BIN/llama-server -m MODEL.gguf --jinja -c 65536 --port 8080 &
    echo $! > /tmp/llama.pid
    python benchmarks/agent_replay.py --model qwen2.5-coder:7b --llama-server http://127.0.0.1:8080 \\
        --restart-localrun 'localrun daemon stop && (setsid localrun serve >> /tmp/serve.log 2>&1 &)' \\
        --restart-llama 'kill $(cat /tmp/llama.pid); sleep 1; (LD_LIBRARY_PATH=$BIN setsid $BIN/llama-server \\
            -m MODEL.gguf --jinja -c 65536 --port 8080 & echo $! > /tmp/llama.pid)'

A dry run against the stand-in, with no model:

    python benchmarks/agents/standin.py --port 8999 --out /tmp/req --delay 0.2 &
    python benchmarks/agent_replay.py --model m --localrun http://127.0.0.1:8999 \\
        --llama-server http://127.0.0.1:8999 --llama-model m --out /tmp/replay

On a 2-core CPU, Claude Code's first request (about 19k tokens) takes minutes on a 0.5B model.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "agents"))
from to_chat import from_anthropic, from_responses  # noqa: E402 - benchmarks/agents is not a package

CAPTURES = HERE / "agents" / "captures"
STEPS = ("first", "next_turn", "second_session", "after_restart")
OTHER_WORDS = {"second_session": "List the files in this project and say what each is for.",
               "after_restart": "Is there a test for add? Answer yes or no."}
NATIVE_PATH = {"claude": "/v1/messages", "codex": "/v1/responses", "opencode": "/v1/chat/completions"}
TO_CHAT = {"claude": from_anthropic, "codex": from_responses}


@dataclass(frozen=True, slots=True)
class Target:
    """A server to replay against, and how it is spoken to."""

    name: str                # "localrun" or "llama-server", the column in the table
    url: str
    model: str
    chat_only: bool          # True: every capture converted to /v1/chat/completions
    restart: str | None      # a shell command that restarts the server and returns once it answers


@dataclass(frozen=True, slots=True)
class Timing:
    """One streamed request: seconds to the first output event and to the end (None: no output),
    and the prompt's size in tokens where the server reported it."""

    ttft_s: float | None
    total_s: float
    prompt_tokens: int | None = None
    error: str | None = None


def load_capture(agent: str, turn: int) -> dict[str, Any]:
    return json.loads((CAPTURES / agent / f"turn{turn}.json").read_text())  # type: ignore[no-any-return]


def with_user_words(body: dict[str, Any], words: str) -> dict[str, Any]:
    """``body`` with the last user text replaced: the same system prompt and tools, a new session."""
    out = copy.deepcopy(body)
    if isinstance(out.get("input"), str):
        return {**out, "input": words}
    items: list[dict[str, Any]] = out.get("messages") or out.get("input") or []
    for item in reversed(items):
        if item.get("role") != "user":
            continue
        content = item["content"]
        if isinstance(content, str):
            item["content"] = words
        else:
            texts = [p for p in content if p.get("type") in ("text", "input_text")]
            texts[-1]["text"] = words
        return out
    raise ValueError("no user message to replace")


def request_for(target: Target, agent: str, body: dict[str, Any], max_tokens: int) -> tuple[str, dict[str, Any]]:
    """The path and body ``target`` gets for a capture of ``agent``."""
    body = {**body, "model": target.model, "stream": True}
    if target.chat_only and agent in TO_CHAT:
        body = TO_CHAT[agent](body)
    path = "/v1/chat/completions" if target.chat_only else NATIVE_PATH[agent]
    limit = "max_output_tokens" if path == "/v1/responses" else "max_tokens"
    body.pop("max_completion_tokens", None)
    body[limit] = max_tokens
    if path == "/v1/chat/completions":
        body["stream_options"] = {"include_usage": True}
    return path, body


def carries_output(event: dict[str, Any]) -> bool:
    """True for a streamed event of any of the three APIs that holds generated text, thinking or a tool call."""
    kind = str(event.get("type", ""))
    if kind == "content_block_delta":  # Anthropic: text_delta, thinking_delta, input_json_delta
        return True
    if kind == "content_block_start":
        return event.get("content_block", {}).get("type") in ("tool_use", "thinking")
    if kind.startswith("response."):  # Responses: output_text.delta, reasoning_*.delta, function_call_arguments.delta
        return kind.endswith(".delta")
    for choice in event.get("choices") or []:  # chat completions
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
            return True
    return False


def stream_error(event: dict[str, Any]) -> str | None:
    """The message of an error sent inside a stream (Anthropic ``error``, Responses ``response.failed``, chat)."""
    if event.get("type") == "response.failed":
        event = event.get("response") or {}
    error = event.get("error")
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error) if error else None


def prompt_tokens(event: dict[str, Any]) -> int | None:
    """The prompt's token count, in the event of each API that reports it."""
    holder = next((v for v in (event.get("message"), event.get("response")) if isinstance(v, dict)), event)
    usage = holder.get("usage") or {}
    count = usage.get("input_tokens", usage.get("prompt_tokens"))
    return count if isinstance(count, int) and count > 0 else None


def stream(client: httpx.Client, url: str, body: dict[str, Any]) -> Timing:
    """Send ``body`` and read its SSE stream to the end, timing the first output event; sent again
    once when the server closed a kept-alive connection before answering (llama-server after a long
    request)."""
    timing = _stream_once(client, url, body)
    if timing.error is not None and timing.error.startswith("RemoteProtocolError") and timing.ttft_s is None:
        timing = _stream_once(client, url, body)
    return timing


def _stream_once(client: httpx.Client, url: str, body: dict[str, Any]) -> Timing:
    start = time.perf_counter()
    first, tokens, error = None, None, None
    try:
        with client.stream("POST", url, json=body, headers={"anthropic-version": "2023-06-01"}) as response:
            if response.status_code >= 400:
                error = f"{response.status_code}: {response.read()[:300].decode(errors='replace')}"
                return Timing(None, time.perf_counter() - start, None, error)
            for line in response.iter_lines():
                if not line.startswith("data:") or line[5:].strip() in ("", "[DONE]"):
                    continue
                event = json.loads(line[5:])
                if first is None and carries_output(event):
                    first = time.perf_counter() - start
                tokens = prompt_tokens(event) or tokens
                error = error or stream_error(event)
    except httpx.HTTPError as exc:
        return Timing(first, time.perf_counter() - start, tokens, f"{type(exc).__name__}: {exc}")
    if first is None and error is None:
        error = "the stream ended with no output"
    return Timing(first, time.perf_counter() - start, tokens, error)


def warm_up(client: httpx.Client, target: Target, agent: str) -> Timing:
    """A one-token request in the agent's API: loads the model, shares no prompt with the captures."""
    path, request = request_for(target, agent, load_capture(agent, 1)["body"], 1)
    request = with_user_words(request, "hi")
    for field in ("messages", "input"):  # only the user's "hi": the agent's prompt must stay unread
        if field in request:
            request[field] = [m for m in request[field] if m.get("role") == "user"][-1:]
    request.pop("system", None)
    request.pop("instructions", None)
    request.pop("tools", None)
    return stream(client, target.url + path, request)


def restart(target: Target, client: httpx.Client, timeout: float) -> None:
    """Run the target's restart command, then wait until the server answers HTTP again."""
    assert target.restart is not None
    subprocess.run(target.restart, shell=True, check=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if client.get(target.url + "/v1/models", timeout=5).status_code == 200:  # llama-server: 503 while loading
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{target.name} did not answer within {timeout:.0f} s of its restart")


def replay(target: Target, agents: list[str], max_tokens: int, timeout: float) -> dict[str, dict[str, Timing]]:
    """Every step for every agent against ``target``."""
    results: dict[str, dict[str, Timing]] = {}
    with httpx.Client(timeout=timeout) as client:
        for agent in agents:
            turn1, turn2 = load_capture(agent, 1)["body"], load_capture(agent, 2)["body"]
            bodies = {"first": turn1, "next_turn": turn2,
                      **{step: with_user_words(turn1, words) for step, words in OTHER_WORDS.items()}}
            steps: dict[str, Timing] = {"load": warm_up(client, target, agent)}
            for step in STEPS:
                if step == "after_restart":
                    if target.restart is None:
                        continue
                    restart(target, client, timeout)
                    steps["reload"] = warm_up(client, target, agent)
                path, body = request_for(target, agent, bodies[step], max_tokens)
                steps[step] = stream(client, target.url + path, body)
                print(f"{target.name} {agent} {step}: {steps[step]}", file=sys.stderr, flush=True)
            results[agent] = steps
    return results


def _seconds(timing: Timing | None) -> str:
    if timing is None:
        return "-"
    return f"{timing.ttft_s:.2f}" if timing.ttft_s is not None else f"error ({timing.error})"


def table(results: dict[str, dict[str, dict[str, Timing]]]) -> str:
    """Markdown: time to first token per agent and step, per target, and localrun's over llama-server's
    (the prompt's size as the first target that reported it counted it)."""
    names = list(results)
    both = names == ["localrun", "llama-server"]
    head = ["agent", "step", "prompt tokens", *[f"{n} TTFT s" for n in names],
            *(["localrun / llama-server"] if both else [])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    agents = list(next(iter(results.values()))) if results else []
    for agent in agents:
        for step in STEPS:
            timings = [results[n][agent].get(step) for n in names]
            if all(t is None for t in timings):
                continue
            tokens = next((t.prompt_tokens for t in timings if t is not None and t.prompt_tokens), None)
            row = [agent, step, str(tokens or "-"), *[_seconds(t) for t in timings]]
            if both:
                a, b = (t.ttft_s if t else None for t in timings)
                row.append(f"{a / b:.2f}" if a is not None and b else "-")
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the model name localrun serves")
    parser.add_argument("--localrun", default="http://127.0.0.1:11435", help="localrun's URL ('' to leave it out)")
    parser.add_argument("--llama-server", default="", help="llama-server's URL (left out when empty)")
    parser.add_argument("--llama-model", default="", help="the model name llama-server answers to")
    parser.add_argument("--llama-api", choices=["chat", "native"], default="chat",
                        help="chat: captures converted to /v1/chat/completions; native: the agents' own paths")
    parser.add_argument("--agents", nargs="+", default=["claude", "codex"], choices=sorted(NATIVE_PATH))
    parser.add_argument("--restart-localrun", default=None, metavar="CMD", help="shell command restarting localrun")
    parser.add_argument("--restart-llama", default=None, metavar="CMD", help="shell command restarting llama-server")
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens each reply may have (TTFT is the aim)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds one request may take")
    parser.add_argument("--out", type=Path, default=HERE / "out" / "agent_replay")
    args = parser.parse_args()
    targets = []
    if args.localrun:
        targets.append(Target("localrun", args.localrun.rstrip("/"), args.model, False, args.restart_localrun))
    if args.llama_server:
        targets.append(Target("llama-server", args.llama_server.rstrip("/"), args.llama_model or args.model,
                              args.llama_api == "chat", args.restart_llama))
    results = {t.name: replay(t, args.agents, args.max_tokens, args.timeout) for t in targets}
    args.out.mkdir(parents=True, exist_ok=True)
    versions = {agent: load_capture(agent, 1)["version"] for agent in args.agents}
    report = {"targets": [asdict(t) for t in targets], "agent_versions": versions, "max_tokens": args.max_tokens,
              "results": {n: {a: {s: asdict(t) for s, t in steps.items()} for a, steps in r.items()}
                          for n, r in results.items()}}
    (args.out / "results.json").write_text(json.dumps(report, indent=1) + "\n")
    markdown = table(results)
    (args.out / "results.md").write_text(markdown + "\n")
    print(markdown)


if __name__ == "__main__":
    main()
