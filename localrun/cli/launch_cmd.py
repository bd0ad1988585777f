"""``localrun launch claude|codex|opencode [--model M] [-- AGENT ARGS...]``: a coding agent on a local model.

As ``ollama launch`` does: check that the agent is installed (a clear error with the install
command when it is not), make sure a daemon answers (starting one in the background) and that
the model is in the store (pulling it), then run the agent with what points it at localrun.
Everything goes through the agent's environment and command line, so no config file of the
user's is read or written (the agent's own settings still apply where these do not override
them):

- Claude Code (``claude``): ``ANTHROPIC_BASE_URL`` at the daemon (Anthropic Messages API), the
  model for every tier (``ANTHROPIC_MODEL``, ``ANTHROPIC_DEFAULT_{OPUS,SONNET,HAIKU}_MODEL``,
  ``ANTHROPIC_SMALL_FAST_MODEL``, ``CLAUDE_CODE_SUBAGENT_MODEL``), ``ANTHROPIC_AUTH_TOKEN`` (the
  API key, or a placeholder) with ``ANTHROPIC_API_KEY`` emptied so a real key is never sent
  here, ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`` (no telemetry, error reports or update
  checks: nothing leaves the machine), and request / stream timeouts of an hour instead of
  10 / 5 minutes (a CPU may take minutes to read Claude Code's long prompt).
- Codex CLI (``codex``): a ``localrun`` model provider given with ``-c`` overrides
  (``base_url`` at ``/v1``, ``wire_api = "responses"``, an hour's stream timeout) and ``-m MODEL``;
  the key, when one is set, through ``LOCALRUN_API_KEY`` (``env_key``); update checks and
  analytics off.
- opencode (``opencode``): ``OPENCODE_CONFIG_CONTENT``, an inline config that opencode merges
  over the user's own, with a ``localrun`` provider (``@ai-sdk/openai-compatible`` at ``/v1``)
  and ``model = "localrun/MODEL"``, an hour's request timeout; update checks and model-list
  downloads off.

Each agent is also told the model's context window (``agent_context.py`` says how large it is
made: the trained context, or at least 64k tokens where memory allows, through a derived model
with ``PARAMETER num_ctx`` when the daemon would give less), in the one setting it reads for it,
and compacts its conversation before the window is full:

- Claude Code: ``CLAUDE_CODE_MAX_CONTEXT_TOKENS``, its context window for a model whose name does
  not start with ``claude-`` (``/context`` shows it; its bundle compacts at the window less the
  reply's room, up to 20k, less 13k). Not ``CLAUDE_CODE_AUTO_COMPACT_WINDOW``: Claude Code raises
  that to at least 100,000 tokens.
- Codex: ``-c model_context_window=N`` (it uses 95% of it) and
  ``-c model_auto_compact_token_limit=`` 80% of N.
- opencode: ``limit = {context: N, output: N/5 (at most 32,000)}`` on the provider's model; it
  compacts at ``context - output``, and sends ``output`` as each request's ``max_tokens``
  (without a ``limit`` it never compacts, and asks for 32,000).

When even that window cannot hold the agent's first prompt, one line says so before the agent
starts; so does one when the model is too small to do an agent's work (:func:`small_model_note`:
the starter checks the set-up, a 7B+ coder model does the work). Arguments after ``--`` go to the
agent unchanged (``localrun launch claude -- -p "hi"``). The exit code is the agent's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .. import config
from ..errors import AgentNotFound, InvalidRequest, LocalrunError
from ..jsontypes import JSONObject, as_object
from .agent_context import ContextPlan, ModelContext, derived_modelfile, derived_name, plan_context

if TYPE_CHECKING:
    from ..client import Client

SMALL_FOR_AGENTS = 3e9  # parameters: below this a model follows an agent's long prompt poorly (README, "Coding agents")
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMBT])", re.IGNORECASE)
_SCALE = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
PLACEHOLDER_KEY = "localrun"  # agents insist on some key; the daemon ignores it unless LOCALRUN_API_KEY is set
AGENT_TIMEOUT_MS = 60 * 60 * 1000  # how long an agent waits for a reply before giving up (a local CPU is slow)
COMPACT_AT = 0.8  # the share of the window at which Codex and opencode are told to compact
OPENCODE_MAX_OUTPUT = 32_000  # opencode's own cap on a request's max_tokens (OUTPUT_TOKEN_MAX)


@dataclass(frozen=True, slots=True)
class Agent:
    """A coding agent localrun can start: how to find it and how to install it."""

    name: str                          # what the user types: ``localrun launch NAME``
    title: str
    executable: str
    fallbacks: tuple[str, ...]         # install locations off PATH, relative to the home directory
    install: str                       # the command that installs it
    prompt_tokens: int                 # its first request before the user's words: system prompt and tool
    # schemas (benchmarks/agents/captures, counted with the gemma3 tokenizer: 19.5k, 9.3k, 2.2k + 5.2k of tools)


AGENTS: dict[str, Agent] = {
    "claude": Agent("claude", "Claude Code", "claude", (".local/bin/claude", ".claude/local/claude"),
                    "npm install -g @anthropic-ai/claude-code", 19_000),
    "codex": Agent("codex", "Codex CLI", "codex", (), "npm install -g @openai/codex", 9_000),
    "opencode": Agent("opencode", "opencode", "opencode", (".opencode/bin/opencode",), "npm install -g opencode-ai",
                      7_500),
}


@dataclass(frozen=True, slots=True)
class Launch:
    """What to run: the agent's argv and the environment variables set (or emptied) for it."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` (the user's environment) with this launch's variables on top."""
        return {**base, **self.env}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "launch", help="start a coding agent (Claude Code, Codex, opencode) on a local model",
        description="Start a coding agent pointed at the localrun daemon: checks the agent is installed, starts the "
                    "daemon and pulls the model when needed. Only the agent's environment and command line are "
                    "set; no config file is written.",
        epilog="Arguments after -- go to the agent, e.g. localrun launch claude -- -p \"explain main.py\". "
               "Exit code: the agent's; 1 when the agent is not installed or the daemon cannot start.",
    )
    p.add_argument("agent", choices=sorted(AGENTS), help="the agent to start")
    p.add_argument("--model", "-m", default=None, help="model to use (default: the starter model)")
    # Options may come anywhere (cli/parsing.py); after "--" everything is the agent's, its own flags too.
    p.add_argument("agent_args", nargs="*", metavar="-- AGENT_ARGS",
                   help="arguments for the agent, after --")
    p.set_defaults(func=run)


def find_agent(agent: Agent, which: Callable[[str], str | None] = shutil.which,
               home: Path | None = None) -> Path:
    """The agent's executable: on PATH, else in its usual install locations; AgentNotFound otherwise."""
    found = which(agent.executable)
    if found:
        return Path(found)
    base = home if home is not None else Path.home()
    for relative in agent.fallbacks:
        candidate = base / relative
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise AgentNotFound(f"{agent.title} is not installed ('{agent.executable}' is not on PATH). "
                        f"Install it with: {agent.install}")


def plan(agent: Agent, executable: Path, model: str, base_url: str, api_key: str | None,
         extra: Sequence[str], window: int | None = None) -> Launch:
    """The command and environment that point ``agent`` at the daemon at ``base_url`` (pure).

    ``window``: the model's per-request context in tokens, told to the agent; None tells it nothing.
    """
    argv = [str(executable)]
    if agent.name == "claude":
        return Launch([*argv, "--model", model, *extra], claude_env(model, base_url, api_key, window))
    if agent.name == "codex":
        return Launch([*argv, *codex_overrides(base_url, api_key, window), "-m", model, *extra],
                      {"LOCALRUN_API_KEY": api_key} if api_key else {})
    if agent.name == "opencode":
        return Launch([*argv, *extra], opencode_env(model, base_url, api_key, window))
    raise InvalidRequest(f"unknown agent {agent.name!r}")


def claude_env(model: str, base_url: str, api_key: str | None, window: int | None = None) -> dict[str, str]:
    env = {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_AUTH_TOKEN": api_key or PLACEHOLDER_KEY,
        "ANTHROPIC_API_KEY": "",  # a real Anthropic key in the user's environment must not be sent here
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_SMALL_FAST_MODEL": model,
        "CLAUDE_CODE_SUBAGENT_MODEL": model,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # Reading Claude Code's ~19k-token prompt can take minutes on a CPU; its own defaults give up
        # on a silent stream after 5 minutes and on a request after 10.
        "API_TIMEOUT_MS": str(AGENT_TIMEOUT_MS),
        "CLAUDE_STREAM_IDLE_TIMEOUT_MS": str(AGENT_TIMEOUT_MS),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    for tier in ("OPUS", "SONNET", "HAIKU"):
        env[f"ANTHROPIC_DEFAULT_{tier}_MODEL"] = model
    if window is not None:
        env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(window)  # else it assumes 200k and never compacts in time
    return env


def codex_overrides(base_url: str, api_key: str | None, window: int | None = None) -> list[str]:
    """``-c key=value`` arguments defining and selecting a ``localrun`` provider (TOML values)."""
    settings: dict[str, str | int | bool] = {
        "model_provider": "localrun",
        "model_providers.localrun.name": "localrun",
        "model_providers.localrun.base_url": f"{base_url}/v1",
        "model_providers.localrun.wire_api": "responses",
        # Codex drops a stream silent for 5 minutes; reading its ~8k-token prompt on a CPU can take longer.
        "model_providers.localrun.stream_idle_timeout_ms": AGENT_TIMEOUT_MS,
        "check_for_update_on_startup": False,  # nothing leaves the machine
        "analytics.enabled": False,
    }
    if api_key:
        settings["model_providers.localrun.env_key"] = "LOCALRUN_API_KEY"
    if window is not None:  # else it assumes 272k for a model it does not know
        settings["model_context_window"] = window
        settings["model_auto_compact_token_limit"] = int(window * COMPACT_AT)
    out: list[str] = []
    for key, value in settings.items():
        out += ["-c", f"{key}={json.dumps(value)}"]
    return out


def opencode_env(model: str, base_url: str, api_key: str | None, window: int | None = None) -> dict[str, str]:
    entry: dict[str, object] = {"name": model}
    if window is not None:  # else it never compacts (a custom model's context is 0, "unknown")
        entry["limit"] = {"context": window, "output": min(OPENCODE_MAX_OUTPUT, window - int(window * COMPACT_AT))}
    inline = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {"localrun": {
            "npm": "@ai-sdk/openai-compatible", "name": "localrun",
            # its default request timeout (5 minutes) is shorter than a CPU may take to read its prompt
            "options": {"baseURL": f"{base_url}/v1", "apiKey": api_key or PLACEHOLDER_KEY,
                        "timeout": AGENT_TIMEOUT_MS},
            "models": {model: entry},
        }},
        "model": f"localrun/{model}",
        "small_model": f"localrun/{model}",
        "autoupdate": False,
        "share": "disabled",
    }
    return {"OPENCODE_CONFIG_CONTENT": json.dumps(inline), "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1"}


def give_context(client: Client, agent: Agent, model: str) -> tuple[str, ContextPlan]:
    """The model ``agent`` runs on and the context its requests get (``agent_context.plan_context``).

    Makes (again) the derived model the plan asks for; the window is then what the daemon
    reports for it. When it cannot be made (an upstream model, say), one line says why and the
    agent runs on ``model`` with what the daemon reports for that.
    """
    context = ModelContext.from_show(client.show(model))
    wanted = plan_context(context, model, agent.title, agent.prompt_tokens)
    if wanted.num_ctx is None:
        return model, wanted
    derived = derived_name(model, wanted.num_ctx)
    try:
        for _ in client.create(derived, derived_modelfile(model, wanted.num_ctx)):
            pass
        made = ModelContext.from_show(client.show(derived))
    except LocalrunError as exc:
        _err(f"Could not make {derived} ({model} with a {wanted.num_ctx:,}-token context): {exc}")
        return model, plan_context(context, model, agent.title, agent.prompt_tokens, derive=False)
    _err(f"Using {derived}: {model} with PARAMETER num_ctx {wanted.num_ctx} "
         f"(a request to {model} gets {context.per_request or context.trained:,} tokens of context)")
    return derived, plan_context(made, derived, agent.title, agent.prompt_tokens, derive=False)


def parameter_count(show: JSONObject) -> float | None:
    """The model's parameters from an ``/api/show`` reply (``details.parameter_size``, Ollama's
    ``494.03M`` / ``7.6B`` form); None when it does not say (an upstream model, say)."""
    size = as_object(show.get("details")).get("parameter_size")
    match = _SIZE.fullmatch(size.strip()) if isinstance(size, str) else None
    return float(match[1]) * _SCALE[match[2].upper()] if match else None


def small_model_note(agent: Agent, model: str, show: JSONObject) -> str | None:
    """One line when ``model`` is too small to be ``agent``'s model for real work; None otherwise.

    A model under :data:`SMALL_FOR_AGENTS` parameters reaches the agent and answers, so it checks
    the set-up, but it follows a 7k-19k-token agent prompt poorly: it writes tool calls out as text
    and copies the prompt's examples (the starter with all three agents, README "Coding agents").
    """
    count = parameter_count(show)
    if count is None or count >= SMALL_FOR_AGENTS:
        return None
    size = as_object(show.get("details")).get("parameter_size")
    return (f"Note: {model} ({size} parameters) is small for an agent: it will answer, which checks the set-up, "
            f"but it follows {agent.title}'s long prompt poorly. For real work use a 7B or larger coder "
            f"model: localrun launch {agent.name} --model MODEL")


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from .connect import connect
    from .run_cmd import ensure_model

    agent = AGENTS[args.agent]
    model = args.model or config.STARTER_MODEL
    extra = list(args.agent_args)
    executable = find_agent(agent)  # before starting anything: a missing agent is the likeliest problem
    client = connect()
    try:
        ensure_model(client, model)
        note = small_model_note(agent, model, client.show(model))
        served, context = give_context(client, agent, model)
    finally:
        client.close()
    if note:
        _err(note)
    if context.shortfall:
        _err(context.shortfall)
    launch = plan(agent, executable, served, config.host().url, config.api_key(), extra, context.window)
    names = ", ".join(launch.env) or "command-line options only"
    window = f" ({context.window:,}-token context)" if context.window else ""
    _err(f"Starting {agent.title} with {served}{window} from localrun at {config.host().url} "
         f"(set for it: {names}; no config file is changed)")
    try:
        return subprocess.call(launch.argv, env=launch.environment(os.environ))
    except KeyboardInterrupt:
        return 130
