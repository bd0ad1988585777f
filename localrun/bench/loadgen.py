"""Closed-loop load: ``concurrency`` clients, each sending its next request when the last ends.

One level of one endpoint runs as: clients start together at ``t0``; the measurement window opens
at ``t0 + warmup_s``; it closes when the first client has nothing more to send (``requests``
measured requests issued, or ``duration_s`` elapsed), which is the moment the load starts to
drop. Requests still in flight then run to completion (bounded by the request timeout), so slow
requests are measured rather than cut off; tokens they deliver after the window do not count
toward throughput. See :mod:`localrun.bench.stats` for the statistics.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from ..jsontypes import JSONObject, as_object
from .stats import Outcome, RequestRecord, TokenSource, Window

now = time.perf_counter


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An OpenAI-compatible endpoint to measure."""

    label: str
    base_url: str  # without the trailing /v1
    model: str
    api_key: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """How one level is driven; exactly one of ``requests`` and ``duration_s`` is set."""

    api: str  # "completions" or "chat"
    output_tokens: int
    requests: int | None = None
    duration_s: float | None = None
    warmup_s: float = 0.0
    timeout_s: float = 300.0
    temperature: float = 0.0
    extras: JSONObject = field(default_factory=dict)  # ignore_eos, min_tokens, stream_options


@dataclass(slots=True)
class LevelRun:
    """Raw result of one level: every request (warm-up included) and the window."""

    records: list[RequestRecord]
    window: Window


def build_payload(plan: LoadPlan, model: str, prompt: str, max_tokens: int | None = None) -> JSONObject:
    payload: JSONObject = {
        "model": model,
        "max_tokens": max_tokens or plan.output_tokens,
        "stream": True,
        "temperature": plan.temperature,
    }
    if plan.api == "chat":
        payload["messages"] = [{"role": "user", "content": prompt}]
    else:
        payload["prompt"] = prompt
    payload.update(plan.extras)
    min_tokens, most = payload.get("min_tokens"), payload.get("max_tokens")
    if isinstance(min_tokens, int) and isinstance(most, (int, float)):  # vLLM and localrun refuse
        payload["min_tokens"] = min(min_tokens, most)                   # min_tokens > max_tokens (400)
    return payload


def _chunk_text(choice: JSONObject) -> str:
    if isinstance(choice.get("text"), str):
        return str(choice["text"])
    delta = as_object(choice.get("delta"))
    parts = [delta.get("content"), delta.get("reasoning_content")]
    return "".join(p for p in parts if isinstance(p, str))


async def _stream(client: httpx.AsyncClient, target: Endpoint, path: str, payload: JSONObject,
                  rec: RequestRecord) -> None:
    """Send one streaming request, filling ``rec``; raises nothing for server-side failures."""
    async with client.stream("POST", target.base_url + path, json=payload, headers=target.headers) as resp:
        if resp.status_code != 200:
            body = (await resp.aread()).decode("utf-8", "replace").strip().replace("\n", " ")
            rec.outcome, rec.error = Outcome.ERROR, f"HTTP {resp.status_code}: {body[:200]}"
            return
        done = False
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                obj = json.loads(data)
            except ValueError:
                rec.outcome, rec.error = Outcome.ERROR, f"malformed stream chunk: {data[:80]!r}"
                return
            if not isinstance(obj, dict):
                continue
            if obj.get("error"):
                err = obj["error"]
                msg = err.get("message") if isinstance(err, dict) else err
                rec.outcome, rec.error = Outcome.ERROR, f"error in stream: {str(msg)[:200]}"
                return
            usage = obj.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
                rec.output_tokens, rec.token_source = usage["completion_tokens"], TokenSource.USAGE
                if isinstance(usage.get("prompt_tokens"), int):
                    rec.prompt_tokens = usage["prompt_tokens"]
            for choice in obj.get("choices") or []:
                if _chunk_text(choice):
                    t = now()
                    rec.chunk_times.append(t)
                    if rec.first_token is None:
                        rec.first_token = t
                if choice.get("finish_reason"):
                    rec.finish_reason = choice["finish_reason"]
        if rec.finish_reason is None:
            # llama-cpp-python's server, for one, ends an interrupted stream with [DONE] and no
            # finish_reason: the client did not get its whole answer, so it is a failure.
            how = "with [DONE]" if done else "without [DONE]"
            rec.outcome, rec.error = Outcome.ERROR, f"stream ended {how} but without a finish_reason (cut short)"


async def send_one(
    client: httpx.AsyncClient, target: Endpoint, plan: LoadPlan, prompt: str, client_id: int = 0,
    max_tokens: int | None = None,
) -> RequestRecord:
    """One measured request: never raises for server or network failures, records them instead."""
    path = "/v1/chat/completions" if plan.api == "chat" else "/v1/completions"
    rec = RequestRecord(client=client_id, start=now())
    limit = max_tokens or plan.output_tokens
    try:
        async with asyncio.timeout(plan.timeout_s):
            await _stream(client, target, path, build_payload(plan, target.model, prompt, limit), rec)
    except (TimeoutError, httpx.TimeoutException):
        rec.outcome, rec.error = Outcome.TIMEOUT, f"no complete response within {plan.timeout_s:g} s"
    except httpx.HTTPError as exc:
        rec.outcome, rec.error = Outcome.ERROR, f"{type(exc).__name__}: {exc}"[:200]
    rec.end = now()
    if rec.token_source is not TokenSource.USAGE:
        if rec.finish_reason == "length" and rec.outcome is Outcome.OK:
            rec.output_tokens, rec.token_source = limit, TokenSource.MAX_TOKENS
        else:
            rec.output_tokens = len(rec.chunk_times)
    return rec


async def run_level(
    client: httpx.AsyncClient,
    target: Endpoint,
    plan: LoadPlan,
    concurrency: int,
    next_prompt: Callable[[], str],
    on_done: Callable[[RequestRecord], None] | None = None,
) -> LevelRun:
    """Drive ``concurrency`` closed-loop clients through one level (see the module docstring)."""
    t0 = now()
    window_start = t0 + plan.warmup_s
    window_end: float | None = None
    issued = 0
    records: list[RequestRecord] = []

    def may_send(t: float) -> bool:
        nonlocal window_end, issued
        if window_end is not None:
            return False
        if t < window_start:
            return True
        if plan.duration_s is not None and t >= window_start + plan.duration_s:
            window_end = window_start + plan.duration_s
            return False
        if plan.requests is not None and issued >= plan.requests:
            window_end = t
            return False
        issued += 1
        return True

    async def client_loop(i: int) -> None:
        while may_send(now()):
            rec = await send_one(client, target, plan, next_prompt(), i)
            records.append(rec)
            if on_done is not None:
                on_done(rec)

    await asyncio.gather(*(client_loop(i) for i in range(concurrency)))
    end = window_end if window_end is not None else now()
    return LevelRun(records, Window(min(window_start, end), end))
