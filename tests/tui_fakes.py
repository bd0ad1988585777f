"""A scriptable stand-in for the daemon, implementing localrun.tui.backend.DaemonApi.

Replies are the ``reply`` text split into word chunks (after ``thinking``, streamed as
``message.thinking``, and before ``tool_calls``); ``gate`` (an asyncio.Event) makes the
stream wait after the first chunk until set, so tests can stop a reply mid-way. ``down`` makes
every call raise DaemonUnavailable, as a stopped daemon does.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

from localrun.errors import DaemonUnavailable, InvalidRequest, ModelNotFound

METRICS = """\
# HELP localrun_generated_tokens_total Tokens generated
# TYPE localrun_generated_tokens_total counter
localrun_generated_tokens_total{{model="tiny:latest"}} {generated}
# HELP localrun_prompt_tokens_total Prompt tokens evaluated
# TYPE localrun_prompt_tokens_total counter
localrun_prompt_tokens_total{{model="tiny:latest"}} 200.0
# HELP localrun_prefix_cache_hit_tokens_total Prompt tokens served from the prefix cache
# TYPE localrun_prefix_cache_hit_tokens_total counter
localrun_prefix_cache_hit_tokens_total{{model="tiny:latest"}} 150.0
# HELP localrun_requests_total HTTP requests by route and status
# TYPE localrun_requests_total counter
localrun_requests_total{{endpoint="/api/chat",status="200"}} 7.0
# HELP localrun_queue_depth Requests waiting for a model or a slot
# TYPE localrun_queue_depth gauge
localrun_queue_depth 1.0
# HELP localrun_kv_cache_used_cells KV cache cells in use
# TYPE localrun_kv_cache_used_cells gauge
localrun_kv_cache_used_cells{{model="tiny:latest"}} 512.0
# HELP localrun_kv_cache_cells KV cache cells allocated
# TYPE localrun_kv_cache_cells gauge
localrun_kv_cache_cells{{model="tiny:latest"}} 2048.0
"""


class FakeBackend:
    base_url = "http://127.0.0.1:1"

    def __init__(self, reply: str = "Hello **there**! Here is code:\n\n```python\nprint('hi')\n```\n",
                 models: tuple[str, ...] = ("tiny:latest", "other:latest")) -> None:
        self.reply = reply
        self.models = {m: {"name": m, "model": m, "size": 12_345_678, "digest": "sha256:" + "ab" * 32}
                       for m in models}
        self.pullable: dict[str, dict[str, Any]] = {}
        self.loaded: list[str] = []
        self.gate: asyncio.Event | None = None
        self.down = False
        self.uptime = 100.0
        self.generated = 1000.0
        self.chats: list[dict[str, Any]] = []
        self.created: dict[str, str] = {}
        self.expires_at = "2099-01-01T00:04:00Z"
        self.thinking = ""
        self.tool_calls: list[dict[str, Any]] = []
        self.base_models: set[str] = set()
        self.vision_models: set[str] = set()

    def _check(self) -> None:
        if self.down:
            raise DaemonUnavailable(f"no localrun daemon answers at {self.base_url} (connection refused)")

    def _full(self, name: str) -> str:
        return name if ":" in name else f"{name}:latest"

    async def chat(self, model: str, messages: list[dict[str, Any]], **fields: Any) -> AsyncIterator[dict[str, Any]]:
        self._check()
        if self._full(model) not in self.models:
            raise ModelNotFound(f"model {model!r} not found, try pulling it first")
        self.chats.append({"model": model, "messages": messages, **fields})
        for piece in re.findall(r"\S+\s*|\s+", self.thinking):
            yield {"model": model, "message": {"role": "assistant", "content": "", "thinking": piece}, "done": False}
        pieces = re.findall(r"\S+\s*|\s+", self.reply)
        for call in self.tool_calls:
            yield {"model": model, "message": {"role": "assistant", "content": "", "tool_calls": [call]},
                   "done": False}
        for i, piece in enumerate(pieces):
            yield {"model": model, "message": {"role": "assistant", "content": piece}, "done": False}
            if i == 0 and self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(0)
        self.generated += len(pieces)
        yield {"model": model, "message": {"role": "assistant", "content": ""}, "done": True,
               "done_reason": "stop", "total_duration": 500_000_000, "load_duration": 1_000_000,
               "prompt_eval_count": 12, "prompt_eval_duration": 20_000_000, "eval_count": len(pieces),
               "eval_duration": 250_000_000, "prompt_eval_cached_count": 8}

    async def list(self) -> list[dict[str, Any]]:
        self._check()
        return list(self.models.values())

    async def show(self, model: str) -> dict[str, Any]:
        self._check()
        if self._full(model) not in self.models:
            raise ModelNotFound(f"model {model!r} not found")
        return {"modelfile": f"FROM {model}\nPARAMETER temperature 0.7\n", "parameters": "temperature 0.7",
                "template": "{{ .Prompt }}", "system": "", "license": "MIT License",
                "details": {"family": "llama", "parameter_size": "1M", "quantization_level": "F32",
                            **({"base_model": True} if self._full(model) in self.base_models else {})},
                "defaults": {"temperature": 0.7, "top_k": 20, "top_p": 0.8, "num_ctx": 4096, "seed": None,
                             "stop": []},
                "model_info": {"general.architecture": "llama", "llama.context_length": 2048,
                               "llama.embedding_length": 64},
                "capabilities": ["completion", *(["vision"] if self._full(model) in self.vision_models else []),
                                 *(["thinking"] if self.thinking else [])]}

    async def ps(self) -> list[dict[str, Any]]:
        self._check()
        return [{"name": m, "model": m, "size": 30_000_000, "size_vram": 0, "processor": "100% CPU",
                 "context_length": 2048, "active": 1, "queued": 0, "expires_at": self.expires_at}
                for m in self.loaded]

    async def pulls(self) -> list[dict[str, Any]]:
        """Downloads started elsewhere (none in these tests)."""
        self._check()
        return []

    async def pull(self, model: str) -> AsyncIterator[dict[str, Any]]:
        self._check()
        if self._full(model) not in self.pullable:
            raise ModelNotFound(f"model {model!r} not found in any registry")
        yield {"status": "pulling manifest"}
        for done in (0, 50, 100):
            yield {"status": "pulling abc", "digest": "sha256:abc", "total": 100, "completed": done}
        self.models[self._full(model)] = self.pullable.pop(self._full(model))
        yield {"status": "success"}

    async def create(self, model: str, modelfile: str) -> AsyncIterator[dict[str, Any]]:
        self._check()
        if not modelfile.startswith("FROM "):
            raise InvalidRequest("line 1: expected FROM")
        self.created[model] = modelfile
        self.models[self._full(model)] = {"name": self._full(model), "size": 1}
        yield {"status": "writing manifest"}
        yield {"status": "success"}

    async def health(self) -> dict[str, Any]:
        self._check()
        return {"status": "ok", "version": "0.1.0", "models_loaded": len(self.loaded), "queue_depth": 1,
                "uptime_seconds": self.uptime}

    async def metrics(self) -> str:
        self._check()
        return METRICS.format(generated=self.generated)

    async def load(self, model: str, keep_alive: str | None = None) -> None:
        self._check()
        if self._full(model) not in self.models:
            raise ModelNotFound(f"model {model!r} not found, try pulling it first")
        if self._full(model) not in self.loaded:
            self.loaded.append(self._full(model))

    async def aclose(self) -> None:
        pass
