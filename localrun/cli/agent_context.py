"""How large a context ``localrun launch`` gives a coding agent's model, and how the agent learns it.

A coding agent sends thousands of tokens before the user's words (its system prompt and its
tools' schemas: Claude Code about 19k, Codex 9k, opencode 7.5k), so a model run with a small
per-request context fails the agent's first request. ``launch`` therefore reads what the daemon
says about the model (``POST /api/show``) into a :class:`ModelContext`:

- ``model_info["<arch>.context_length"]``: the context the model was trained with;
- ``defaults.num_ctx``: the per-request maximum a request without options gets (the trained
  context capped by the KV pool, or a Modelfile's ``PARAMETER num_ctx``); when absent, the
  trained context is assumed;
- ``defaults.context_pool``: the KV pool, in tokens, that requests share (sized from free memory,
  or from an explicit ``num_ctx``); absent on daemons that do not report it (then memory is not
  taken to be the limit).

:func:`plan_context` turns that into a :class:`ContextPlan`. The goal is the trained context,
or at least :data:`TARGET_WINDOW` where memory allows. When the daemon's per-request maximum is
already ``min(trained, TARGET_WINDOW)``, or memory is what limits it (it fills the whole pool:
:attr:`ModelContext.memory_bound`), the agent runs on the model as it is. When a setting holds
it lower (a Modelfile's ``PARAMETER num_ctx``, ``LOCALRUN_CONTEXT_LENGTH``, a daemon with a fixed
default), the agent runs on a model derived from it with ``PARAMETER num_ctx`` set to the goal
(:func:`derived_name`, :func:`derived_modelfile`) and is told what the daemon reports for that
model; a goal memory cannot hold is the daemon's to refuse, with its own error.

Why a derived model: an agent cannot send Ollama's ``options``, and a derived model works with
any daemon, one already running included, and for the agent's model only;
``LOCALRUN_CONTEXT_LENGTH`` would reach only a daemon that ``launch`` itself starts, and every
model it serves. The derived model shares the base model's blobs (a manifest and a parameters
layer are all it adds) and is made again on each launch, so it follows the base model when that
is pulled again.

The plan's ``window`` is what the agent is told; ``shortfall`` is one line for the user when
even that window cannot hold the agent's first prompt, naming both numbers and the cause (the
model's trained context, or the memory free for its KV cache).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..jsontypes import JSONObject, JSONValue, as_number, as_object
from ..store.names import DEFAULT_HOST, ModelName

TARGET_WINDOW = 65_536  # the context a coding agent gets where the model and memory allow: room for
# its ~19k-token prompt, the files it reads and its replies before it has to compact


@dataclass(frozen=True, slots=True)
class ModelContext:
    """What the daemon reports about a model's context, in tokens (None: not reported)."""

    trained: int | None      # the GGUF's ``<arch>.context_length``
    per_request: int | None  # ``defaults.num_ctx``: what a request without options may hold
    pool: int | None         # ``defaults.context_pool``: the KV pool free memory allows

    @property
    def memory_bound(self) -> bool:
        """True when memory, not a setting, limits a request: it may already fill the whole pool.

        Where a Modelfile's (or ``LOCALRUN_CONTEXT_LENGTH``'s) ``num_ctx`` is below the pool, the
        pool was sized from that setting, and says nothing of how much more memory would hold.
        """
        return self.pool is not None and self.per_request is not None and self.per_request >= self.pool

    @classmethod
    def from_show(cls, show: JSONObject) -> ModelContext:
        """Read an ``/api/show`` reply; a missing or non-numeric field is None."""
        info = as_object(show.get("model_info"))
        defaults = as_object(show.get("defaults"))
        arch = info.get("general.architecture")
        trained = info.get(f"{arch}.context_length") if isinstance(arch, str) else None
        return cls(_tokens(trained), _tokens(defaults.get("num_ctx")), _tokens(defaults.get("context_pool")))


def _tokens(value: JSONValue) -> int | None:
    number = as_number(value)
    return int(number) if number is not None and number >= 1 else None


@dataclass(frozen=True, slots=True)
class ContextPlan:
    """The context an agent's requests will get, and what ``launch`` must do for it.

    ``window`` is None when the daemon reported no context at all (the agent is told nothing);
    ``num_ctx`` is set when the agent must run on a derived model with that ``PARAMETER num_ctx``;
    ``shortfall`` is the one line to print when ``window`` is below the agent's first prompt.
    """

    window: int | None
    num_ctx: int | None = None
    shortfall: str | None = None


def plan_context(context: ModelContext, model: str, agent_title: str, prompt_tokens: int,
                 *, derive: bool = True) -> ContextPlan:
    """The window for an agent whose first prompt is about ``prompt_tokens`` (pure).

    With ``derive`` False (the derived model could not be made) the window is what the daemon
    reports, however small.
    """
    trained = context.trained or context.per_request
    if trained is None:
        return ContextPlan(None)
    reported = context.per_request or trained
    goal = reported if context.memory_bound else min(trained, TARGET_WINDOW)
    num_ctx = goal if derive and reported < goal else None
    window = num_ctx or reported
    return ContextPlan(window, num_ctx, shortfall(context, window, model, agent_title, prompt_tokens))


def shortfall(context: ModelContext, window: int, model: str, agent_title: str, prompt_tokens: int) -> str | None:
    """One line when ``window`` cannot hold the agent's first prompt, naming both and the cause."""
    if window >= prompt_tokens:
        return None
    if context.trained is not None and context.trained < prompt_tokens:
        cause, advice = "its trained context", "choose a model trained on a longer context"
    elif context.memory_bound:
        cause, advice = "what free memory allows for its KV cache", "free memory or choose a smaller model"
    else:
        cause, advice = "its num_ctx", f"set PARAMETER num_ctx {prompt_tokens * 2} or more in its Modelfile"
    return (f"Warning: {model} holds {window:,} tokens per request ({cause}), less than {agent_title}'s first "
            f"prompt of about {prompt_tokens:,} tokens; its requests will fail: {advice}.")


def derived_name(model: str, num_ctx: int) -> str:
    """The derived model's name: the tag gets ``-ctx64k`` (``-ctx40000`` when not whole KiB).

    It lives under the default host, so a name from hf.co or another registry names a local
    model (its tag would otherwise read as a quant to fetch).
    """
    name = ModelName.parse(model)
    size = f"{num_ctx // 1024}k" if num_ctx % 1024 == 0 else str(num_ctx)
    return str(ModelName(DEFAULT_HOST, name.namespace, name.model, f"{name.tag}-ctx{size}"))


def derived_modelfile(model: str, num_ctx: int) -> str:
    """The Modelfile of the derived model: the base model with ``num_ctx`` tokens per request."""
    return f"FROM {model}\nPARAMETER num_ctx {num_ctx}\n"
