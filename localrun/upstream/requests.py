"""What localrun asks an upstream: chat, completion, embedding and rerank requests at the chat level.

An upstream applies its own chat template, so it gets messages, tools and ``tool_choice``, the
output ``format`` and only the sampling options the client set (:class:`Sampling`: None means
"the upstream's default", so a vLLM model keeps its generation_config). Messages are in
localrun's native shape (Ollama's: ``role``, ``content``, ``tool_calls`` with ``function.name``
and ``function.arguments``, ``tool_call_id`` / ``tool_name`` on tool results, ``thinking``),
already validated by the server's API adapters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..chat.think import Think
from ..engine.limits import token_limit
from ..errors import OptionError
from ..jsontypes import JSONMapping

Format = str | JSONMapping | None  # None, "json" or a JSON Schema object
ToolChoice = str | JSONMapping | None  # "none" / "auto" / "required" / {"type": "function", "function": {...}}


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling options the client set; None (or an empty ``stop``) leaves the upstream's default."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_penalty: float | None = None
    num_ctx: int | None = None  # Ollama upstreams only (a /v1 server fixes its context at start)
    ignore_eos: bool = False    # vLLM's extras (localrun's and llama.cpp's servers have them too): /v1 only
    min_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat turn for an upstream; ``model`` is the upstream's own name for the model."""

    model: str
    messages: Sequence[JSONMapping]
    tools: Sequence[JSONMapping] | None = None
    tool_choice: ToolChoice = None
    format: Format = None
    think: Think | None = None
    sampling: Sampling = field(default_factory=Sampling)


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """A raw prompt continued as is (``/v1/completions``, ``/api/generate`` with ``raw``)."""

    model: str
    prompt: str
    suffix: str | None = None
    format: Format = None
    sampling: Sampling = field(default_factory=Sampling)


@dataclass(frozen=True, slots=True)
class EmbedRequest:
    model: str
    inputs: Sequence[str]
    truncate: bool = True


@dataclass(frozen=True, slots=True)
class RerankRequest:
    """Score every one of ``documents`` against ``query`` (``/v1/rerank``: /v1 upstreams only)."""

    model: str
    query: str
    documents: Sequence[str]
    truncate: bool = True


def _number(options: Mapping[str, object], name: str) -> float | None:
    value = options.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OptionError(f"option {name!r} must be a number, got {value!r}")
    return float(value)


def _whole(options: Mapping[str, object], name: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(f"option {name!r} must be a whole number, got {value!r}")
    return value


def sampling_from_options(options: Mapping[str, object] | None) -> Sampling:
    """The sampling fields of an Ollama ``options`` object (localrun's native request options).

    ``num_predict`` -1 (or -2) means "no limit": no ``max_tokens`` is sent. Options only a local
    engine has (``num_gpu``, ``num_thread``...) are ignored: the upstream decides those.
    """
    if not options:
        return Sampling()
    stop = options.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) for s in stop)):
        raise OptionError("option 'stop' must be a string or a list of strings")
    max_tokens = token_limit(_whole(options, "num_predict"))
    num_ctx = _whole(options, "num_ctx")
    if num_ctx is not None and num_ctx < 1:
        raise OptionError("option 'num_ctx' must be at least 1")
    return Sampling(
        temperature=_number(options, "temperature"), top_p=_number(options, "top_p"),
        top_k=_whole(options, "top_k"), min_p=_number(options, "min_p"), seed=_whole(options, "seed"),
        max_tokens=max_tokens or None,  # 0 too: not sent, as before
        stop=tuple(stop or ()), presence_penalty=_number(options, "presence_penalty"),
        frequency_penalty=_number(options, "frequency_penalty"), repeat_penalty=_number(options, "repeat_penalty"),
        num_ctx=num_ctx,
    )
