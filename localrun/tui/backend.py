"""What the terminal UI needs from the daemon, and the adapter onto :mod:`localrun.client`.

The UI is written against :class:`DaemonApi` (a Protocol), so tests drive it with a fake and the
real thing is :class:`ClientBackend`, a thin adapter over :class:`localrun.client.AsyncClient`.
Streams yield the daemon's NDJSON chunks as dicts (Ollama's shapes): chat chunks carry
``message.content``; the last one has ``done: true`` and the timing fields in nanoseconds.
Every method raises errors from :mod:`localrun.errors`; a daemon that does not answer raises
DaemonUnavailable, which the UI treats as "reconnect".
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..client import AsyncClient
from ..fmt import format_seconds
from ..jsontypes import JSONObject

# The daemon's JSON objects, as the client returns them (``list`` is a method name below).
Rows = list[JSONObject]
# A chat request's messages: role, content, images, tool_calls... as /api/chat takes them (the daemon checks them).
Messages = Sequence[Mapping[str, object]]


class DaemonApi(Protocol):
    base_url: str

    def chat(self, model: str, messages: Messages, **fields: object) -> AsyncIterator[JSONObject]:
        """Stream a chat reply; ``fields`` are options / format / keep_alive as /api/chat takes them."""
        ...

    async def list(self) -> Rows: ...

    async def show(self, model: str) -> JSONObject: ...

    async def ps(self) -> Rows: ...

    async def pulls(self) -> Rows: ...

    def pull(self, model: str) -> AsyncIterator[JSONObject]: ...

    def create(self, model: str, modelfile: str) -> AsyncIterator[JSONObject]: ...

    async def health(self) -> JSONObject: ...

    async def metrics(self) -> str:
        """The daemon's Prometheus text (``GET /metrics``)."""
        ...

    async def load(self, model: str, keep_alive: str | None = None) -> None:
        """Load ``model`` now (an empty chat), so errors show before the first message."""
        ...

    async def aclose(self) -> None: ...


class ClientBackend:
    """:class:`DaemonApi` over :class:`localrun.client.AsyncClient` (created lazily, on the UI's loop)."""

    def __init__(self, client: AsyncClient | None = None, base_url: str | None = None) -> None:
        self._client = client if client is not None else AsyncClient(base_url)
        self.base_url: str = self._client.base_url

    def chat(self, model: str, messages: Messages, **fields: object) -> AsyncIterator[JSONObject]:
        return self._client.chat(model, messages, **fields)

    async def list(self) -> Rows:
        return await self._client.list()

    async def show(self, model: str) -> JSONObject:
        return await self._client.show(model)

    async def ps(self) -> Rows:
        return await self._client.ps()

    async def pulls(self) -> Rows:
        return await self._client.pulls()

    def pull(self, model: str) -> AsyncIterator[JSONObject]:
        return self._client.pull(model)

    def create(self, model: str, modelfile: str) -> AsyncIterator[JSONObject]:
        return self._client.create(model, modelfile)

    async def health(self) -> JSONObject:
        return await self._client.health()

    async def metrics(self) -> str:
        return await self._client.metrics()

    async def load(self, model: str, keep_alive: str | None = None) -> None:
        fields = {"keep_alive": keep_alive} if keep_alive is not None else {}
        async for _ in self._client.chat(model, [], **fields):
            pass

    async def aclose(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True, slots=True)
class ReplyStats:
    """How one reply went: the daemon's counts and durations plus the time to first token seen here."""

    eval_count: int = 0
    eval_duration_ns: int = 0
    prompt_eval_count: int = 0
    prompt_eval_duration_ns: int = 0
    cached_tokens: int = 0
    total_duration_ns: int = 0
    load_duration_ns: int = 0
    done_reason: str = ""
    ttft_s: float | None = None
    truncated_tokens: int = 0  # the conversation's oldest tokens the daemon left out to fit the context

    @classmethod
    def from_done(cls, chunk: JSONObject, ttft_s: float | None) -> ReplyStats:
        def num(key: str) -> int:
            value = chunk.get(key)
            return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

        return cls(
            eval_count=num("eval_count"), eval_duration_ns=num("eval_duration"),
            prompt_eval_count=num("prompt_eval_count"), prompt_eval_duration_ns=num("prompt_eval_duration"),
            cached_tokens=num("prompt_eval_cached_count"), total_duration_ns=num("total_duration"),
            load_duration_ns=num("load_duration"), done_reason=str(chunk.get("done_reason") or ""),
            ttft_s=ttft_s, truncated_tokens=num("prompt_truncated_count"),
        )

    def truncation_notice(self, context_length: int | None) -> str:
        """What to tell the user when the conversation no longer fits the model's context (``truncated_tokens``
        > 0): how many of its oldest tokens this reply did not see, and the context when known."""
        context = f"the model's {context_length:,}-token context" if context_length else "the model's context"
        return (f"The conversation no longer fits {context}: its oldest {self.truncated_tokens:,} tokens were "
                "left out of this reply (the system prompt was kept). /clear starts afresh; "
                "/set parameter num_ctx N gives the model a larger context.")

    @property
    def tokens_per_second(self) -> float | None:
        if self.eval_count <= 0 or self.eval_duration_ns <= 0:
            return None
        return self.eval_count / (self.eval_duration_ns / 1e9)

    @property
    def prompt_tokens_per_second(self) -> float | None:
        if self.prompt_eval_count <= 0 or self.prompt_eval_duration_ns <= 0:
            return None
        return self.prompt_eval_count / (self.prompt_eval_duration_ns / 1e9)

    def summary(self) -> str:
        """One line for under a reply: ``first token 120 ms · 45.3 tok/s · 64 tokens · prompt 12 (8 cached)``."""
        parts: list[str] = []
        if self.ttft_s is not None:
            parts.append(f"first token {format_seconds(self.ttft_s)}")
        rate = self.tokens_per_second
        if rate is not None:
            parts.append(f"{rate:.1f} tok/s")
        parts.append(f"{self.eval_count} token{'s' if self.eval_count != 1 else ''}")
        prompt = f"prompt {self.prompt_eval_count}"
        if self.cached_tokens:
            prompt += f" ({self.cached_tokens} cached)"
        parts.append(prompt)
        if self.done_reason == "length":
            parts.append("stopped at num_predict / context limit")
        return " · ".join(parts)

    def verbose_lines(self) -> list[str]:
        """``ollama run --verbose``'s timing block."""
        def dur(ns: int) -> str:
            return format_seconds(ns / 1e9)

        def rate(value: float | None) -> str:
            return f"{value:.2f} tokens/s" if value is not None else "n/a"

        rows = [
            ("total duration", dur(self.total_duration_ns)),
            ("load duration", dur(self.load_duration_ns)),
            ("prompt eval count", f"{self.prompt_eval_count} token(s)"),
            ("prompt cached", f"{self.cached_tokens} token(s)"),
            ("prompt eval duration", dur(self.prompt_eval_duration_ns)),
            ("prompt eval rate", rate(self.prompt_tokens_per_second)),
            ("eval count", f"{self.eval_count} token(s)"),
            ("eval duration", dur(self.eval_duration_ns)),
            ("eval rate", rate(self.tokens_per_second)),
        ]
        if self.ttft_s is not None:
            rows.insert(1, ("time to first token", format_seconds(self.ttft_s)))
        return [f"{name + ':':<22}{value}" for name, value in rows]
