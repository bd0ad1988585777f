"""``localrun launch``'s pure parts: finding the agent, splitting arguments, the environment each agent gets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from localrun.cli.launch_cmd import AGENTS, Launch, find_agent, plan
from localrun.cli.main import build_parser
from localrun.errors import AgentNotFound

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
