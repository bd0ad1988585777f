"""``localrun launch``'s pure parts: finding the agent, splitting arguments, the environment each agent gets,
the context its model gets and how the agent is told it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from localrun.cli.agent_context import ModelContext, derived_modelfile, derived_name, plan_context
from localrun.cli.launch_cmd import (
    AGENTS,
    Launch,
    find_agent,
    give_context,
    parameter_count,
    plan,
    small_model_note,
)
from localrun.cli.main import build_parser
from localrun.client import Client
from localrun.errors import AgentNotFound, InvalidRequest, LocalrunError

URL = "http://127.0.0.1:11435"


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_the_agent_is_found_on_path_then_in_its_install_locations(tmp_path: Path) -> None:
    on_path = _exe(tmp_path / "bin" / "claude")
    assert find_agent(AGENTS["claude"], which=lambda name: str(on_path), home=tmp_path) == on_path
    local = _exe(tmp_path / "home" / ".claude" / "local" / "claude")
    assert find_agent(AGENTS["claude"], which=lambda name: None, home=tmp_path / "home") == local


def test_a_missing_agent_says_how_to_install_it(tmp_path: Path) -> None:
    (tmp_path / ".opencode" / "bin").mkdir(parents=True)
    (tmp_path / ".opencode" / "bin" / "opencode").write_text("not executable")
    with pytest.raises(AgentNotFound, match="npm install -g opencode-ai"):
        find_agent(AGENTS["opencode"], which=lambda name: None, home=tmp_path)


@pytest.mark.parametrize(("argv", "model", "extra"), [
    (["claude"], None, []),
    (["claude", "--", "-p", "hi"], None, ["-p", "hi"]),
    (["claude", "--model", "m1", "--", "-p", "hi", "--model", "x"], "m1", ["-p", "hi", "--model", "x"]),
    (["--model", "m2", "codex", "--", "exec", "hi"], "m2", ["exec", "hi"]),
    (["opencode", "-m", "m3"], "m3", []),
])
def test_our_options_anywhere_the_agents_after_dashdash(argv: list[str], model: str | None, extra: list[str]) -> None:
    args = build_parser().parse_args(["launch", *argv])
    assert (args.model, args.agent_args) == (model, extra)


def test_agent_flags_before_dashdash_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["launch", "claude", "-p", "hi"])
    assert info.value.code == 2 and "after --" in capsys.readouterr().err


def test_claude_gets_the_anthropic_base_url_and_the_model_for_every_tier() -> None:
    launch = plan(AGENTS["claude"], Path("/x/claude"), "qwen2.5-coder:0.5b", URL, None, ["-p", "hi"])
    assert launch.argv == ["/x/claude", "--model", "qwen2.5-coder:0.5b", "-p", "hi"]
    env = launch.env
    assert env["ANTHROPIC_BASE_URL"] == URL and env["ANTHROPIC_API_KEY"] == "" and env["ANTHROPIC_AUTH_TOKEN"]
    for name in ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
                 "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "CLAUDE_CODE_SUBAGENT_MODEL"):
        assert env[name] == "qwen2.5-coder:0.5b"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    keyed = plan(AGENTS["claude"], Path("/x/claude"), "m", URL, "s3cret", [])
    assert keyed.env["ANTHROPIC_AUTH_TOKEN"] == "s3cret"


def test_a_real_anthropic_key_in_the_users_environment_is_not_passed_on() -> None:
    launch = plan(AGENTS["claude"], Path("/x/claude"), "m", URL, None, [])
    env = launch.environment({"ANTHROPIC_API_KEY": "sk-ant-real", "PATH": "/usr/bin"})
    assert env["ANTHROPIC_API_KEY"] == "" and env["PATH"] == "/usr/bin"


def test_codex_gets_a_responses_provider_on_the_command_line() -> None:
    launch = plan(AGENTS["codex"], Path("/x/codex"), "m:1b", URL, None, ["exec", "say hi"])
    args = launch.argv
    overrides = [args[i + 1] for i, a in enumerate(args) if a == "-c"]
    assert 'model_provider="localrun"' in overrides
    assert f'model_providers.localrun.base_url="{URL}/v1"' in overrides
    assert 'model_providers.localrun.wire_api="responses"' in overrides
    assert "check_for_update_on_startup=false" in overrides and "analytics.enabled=false" in overrides
    assert args[-4:] == ["-m", "m:1b", "exec", "say hi"] and launch.env == {}
    keyed = plan(AGENTS["codex"], Path("/x/codex"), "m", URL, "k", [])
    assert 'model_providers.localrun.env_key="LOCALRUN_API_KEY"' in keyed.argv and keyed.env == {
        "LOCALRUN_API_KEY": "k"}


def test_opencode_gets_an_inline_config_merged_over_the_users() -> None:
    launch = plan(AGENTS["opencode"], Path("/x/opencode"), "m:1b", URL, None, ["run", "hi"])
    assert launch.argv == ["/x/opencode", "run", "hi"]
    inline = json.loads(launch.env["OPENCODE_CONFIG_CONTENT"])
    provider = inline["provider"]["localrun"]
    assert provider["options"]["baseURL"] == f"{URL}/v1" and "m:1b" in provider["models"]
    assert inline["model"] == "localrun/m:1b"


def test_launch_environment_keeps_the_users_variables() -> None:
    launch = Launch(["x"], {"A": "1"})
    assert launch.environment({"A": "0", "HOME": os.sep}) == {"A": "1", "HOME": os.sep}


# --- the context an agent gets (agent_context.py) and how each agent is told it ---

def _show(trained: int | None = None, num_ctx: int | None = None, pool: int | None = None) -> dict[str, Any]:
    """An /api/show reply with the fields launch reads (each left out when None)."""
    info: dict[str, Any] = {"general.architecture": "qwen2"}
    if trained is not None:
        info["qwen2.context_length"] = trained
    defaults: dict[str, Any] = {"temperature": 0.8}
    if num_ctx is not None:
        defaults["num_ctx"] = num_ctx
    if pool is not None:
        defaults["context_pool"] = pool
    return {"model_info": info, "defaults": defaults}


def test_the_context_is_read_from_show_and_missing_fields_are_none() -> None:
    assert ModelContext.from_show(_show(32768, 4096, 90000)) == ModelContext(32768, 4096, 90000)
    assert ModelContext.from_show(_show(32768)) == ModelContext(32768, None, None)
    assert ModelContext.from_show({"model_info": {"qwen2.context_length": 8}}) == ModelContext(None, None, None)
    assert ModelContext.from_show({"defaults": "junk"}) == ModelContext(None, None, None)


@pytest.mark.parametrize(("context", "window", "num_ctx"), [
    # the daemon already gives the trained context: the agent runs on the model as it is, told its window
    (ModelContext(32768, 32768, 200_000), 32768, None),
    (ModelContext(131072, 131072, None), 131072, None),   # more than 64k when the daemon gives it
    (ModelContext(131072, 81920, 81920), 81920, None),    # memory caps it above 64k: enough
    # an old daemon (4096 by default, no pool) or a Modelfile's num_ctx: a derived model asks for more
    (ModelContext(32768, 4096, None), 32768, 32768),      # the trained context, when under 64k
    (ModelContext(131072, 4096, None), 65536, 65536),     # else 64k
    (ModelContext(131072, 4096, 16384), 65536, 65536),    # a pool sized from that num_ctx: memory may hold more
    (ModelContext(131072, 12000, 12000), 12000, None),    # the request fills the pool: memory is the limit
    (ModelContext(32768, None, None), 32768, None),       # no per-request maximum reported: the trained one
    (ModelContext(None, 8192, None), 8192, None),         # no trained context reported: nothing to ask for
    (ModelContext(None, None, None), None, None),         # nothing reported: the agent is told nothing
])
def test_the_window_is_the_trained_context_or_64k_where_memory_allows(
        context: ModelContext, window: int | None, num_ctx: int | None) -> None:
    planned = plan_context(context, "m", "Codex CLI", 9_000)
    assert (planned.window, planned.num_ctx) == (window, num_ctx)


def test_one_line_names_both_numbers_when_the_model_cannot_hold_the_agents_prompt() -> None:
    claude = AGENTS["claude"]
    short = plan_context(ModelContext(8192, 8192, None), "tiny", claude.title, claude.prompt_tokens).shortfall
    assert short is not None and "\n" not in short
    assert "8,192 tokens" in short and "19,000 tokens" in short and "trained context" in short
    memory = plan_context(ModelContext(131072, 12000, 12000), "big", claude.title, claude.prompt_tokens).shortfall
    assert memory is not None and "12,000" in memory and "free memory" in memory
    opencode = AGENTS["opencode"]  # 7,500 tokens fit in the same 12,000
    assert plan_context(ModelContext(131072, 12000, 12000), "big", opencode.title,
                        opencode.prompt_tokens).shortfall is None
    kept = plan_context(ModelContext(32768, 4096, None), "m", claude.title, claude.prompt_tokens, derive=False)
    assert (kept.window, kept.num_ctx) == (4096, None) and kept.shortfall and "num_ctx" in kept.shortfall


@pytest.mark.parametrize(("model", "num_ctx", "derived"), [
    ("qwen2.5-coder:0.5b", 65536, "qwen2.5-coder:0.5b-ctx64k"),
    ("gemma3", 32768, "gemma3:latest-ctx32k"),
    ("me/mine:q8", 40000, "me/mine:q8-ctx40000"),
    ("hf.co/Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M", 65536, "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M-ctx64k"),
])
def test_the_derived_model_is_named_by_its_context(model: str, num_ctx: int, derived: str) -> None:
    assert derived_name(model, num_ctx) == derived
    assert derived_modelfile(model, num_ctx) == f"FROM {model}\nPARAMETER num_ctx {num_ctx}\n"


def test_each_agent_is_told_the_window_in_the_setting_it_reads() -> None:
    claude = plan(AGENTS["claude"], Path("/x/claude"), "m", URL, None, [], window=65536)
    assert claude.env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "65536"
    codex = plan(AGENTS["codex"], Path("/x/codex"), "m", URL, None, [], window=65536)
    overrides = [codex.argv[i + 1] for i, a in enumerate(codex.argv) if a == "-c"]
    assert "model_context_window=65536" in overrides and "model_auto_compact_token_limit=52428" in overrides
    opencode = plan(AGENTS["opencode"], Path("/x/opencode"), "m", URL, None, [], window=65536)
    model = json.loads(opencode.env["OPENCODE_CONFIG_CONTENT"])["provider"]["localrun"]["models"]["m"]
    assert model["limit"] == {"context": 65536, "output": 13108}  # compacts at 80%
    big = plan(AGENTS["opencode"], Path("/x/opencode"), "m", URL, None, [], window=1_000_000)
    assert json.loads(big.env["OPENCODE_CONFIG_CONTENT"])["provider"]["localrun"]["models"]["m"]["limit"][
        "output"] == 32_000  # opencode's own cap on max_tokens


def test_without_a_window_no_agent_is_told_one() -> None:
    assert "CLAUDE_CODE_MAX_CONTEXT_TOKENS" not in plan(AGENTS["claude"], Path("/x"), "m", URL, None, []).env
    assert not any("model_context_window" in a for a in plan(AGENTS["codex"], Path("/x"), "m", URL, None, []).argv)
    inline = json.loads(plan(AGENTS["opencode"], Path("/x"), "m", URL, None, []).env["OPENCODE_CONFIG_CONTENT"])
    assert "limit" not in inline["provider"]["localrun"]["models"]["m"]


class FakeClient:
    """The two daemon calls ``give_context`` makes: show (a reply per model), and create (which may fail)."""

    def __init__(self, shows: dict[str, dict[str, Any]], create_error: LocalrunError | None = None) -> None:
        self.shows, self.create_error = shows, create_error
        self.created: list[tuple[str, str]] = []

    def show(self, model: str) -> dict[str, Any]:
        return self.shows[model]

    def create(self, model: str, modelfile: str) -> Iterator[dict[str, Any]]:
        if self.create_error is not None:
            raise self.create_error
        self.created.append((model, modelfile))
        yield {"status": "success"}


def test_a_small_context_gets_a_derived_model(capsys: pytest.CaptureFixture[str]) -> None:
    derived = "qwen2.5-coder:0.5b-ctx32k"
    client = FakeClient({"qwen2.5-coder:0.5b": _show(32768, 4096), derived: _show(32768, 32768)})
    served, context = give_context(cast(Client, client), AGENTS["claude"], "qwen2.5-coder:0.5b")
    assert (served, context.window, context.shortfall) == (derived, 32768, None)
    assert client.created == [("qwen2.5-coder:0.5b-ctx32k", "FROM qwen2.5-coder:0.5b\nPARAMETER num_ctx 32768\n")]
    assert "4,096 tokens" in capsys.readouterr().err


def test_the_agent_is_told_what_the_daemon_reports_for_the_derived_model() -> None:
    derived = "m:latest-ctx64k"  # the daemon holds less than was asked for: that is the window
    client = FakeClient({"m": _show(131072, 4096, 16384), derived: _show(131072, 20000, 20000)})
    served, context = give_context(cast(Client, client), AGENTS["claude"], "m")
    assert (served, context.window, context.shortfall) == (derived, 20000, None)


def test_a_large_enough_context_makes_no_model() -> None:
    client = FakeClient({"m": _show(32768, 32768, 65536)})
    assert give_context(cast(Client, client), AGENTS["codex"], "m")[0] == "m" and client.created == []


def test_when_the_derived_model_cannot_be_made_the_agent_runs_on_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    client = FakeClient({"up/m": _show(32768, 4096)}, create_error=InvalidRequest("FROM up/m: not in the store"))
    served, context = give_context(cast(Client, client), AGENTS["claude"], "up/m")
    assert (served, context.window) == ("up/m", 4096)
    assert context.shortfall and "19,000" in context.shortfall
    assert "not in the store" in capsys.readouterr().err


@pytest.mark.parametrize(("size", "count"), [("494.03M", 494.03e6), ("0.5B", 0.5e9), ("7.62B", 7.62e9),
                                             (" 70b ", 70e9), ("8x7B", None), ("", None), (4, None)])
def test_the_parameter_count_is_read_from_ollamas_size_label(size: object, count: float | None) -> None:
    assert parameter_count({"details": {"parameter_size": size}}) == count
    assert parameter_count({}) is None


def test_a_model_too_small_for_an_agents_work_is_named_once() -> None:
    note = small_model_note(AGENTS["codex"], "qwen2.5-coder:0.5b", {"details": {"parameter_size": "494.03M"}})
    assert note is not None and "qwen2.5-coder:0.5b (494.03M parameters)" in note
    assert "localrun launch codex --model MODEL" in note
    assert small_model_note(AGENTS["claude"], "big", {"details": {"parameter_size": "7.6B"}}) is None
    assert small_model_note(AGENTS["claude"], "up/m", {"model_info": {}}) is None  # not said: no guess
