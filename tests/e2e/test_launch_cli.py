"""``localrun launch`` end to end, with fake agents on PATH that talk to the daemon the way the real ones do.

Each fake agent (a small Python script named ``claude``, ``codex`` or ``opencode``) records its
arguments and environment, then sends one request where the launch pointed it: the Anthropic
Messages API for Claude Code, the Responses API for Codex, chat completions for opencode. The
daemon is real (``localrun launch`` starts it); its runners host the fake engine, which answers
``SAY:`` prompts with the rest of the line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemonproc import stop_daemon
from tinymodel import write_tiny_gguf

from localrun import config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
FAKES = Path(__file__).parents[1] / "integration" / "server"

FAKE_AGENT = '''#!{python}
"""A stand-in for the {name} agent: record argv and env, then ask the daemon one question."""
import json, os, sys, urllib.request

name = {name!r}
record = {{"argv": sys.argv[1:], "env": {{k: v for k, v in os.environ.items()
                                      if k.startswith(("ANTHROPIC_", "CLAUDE_", "OPENCODE_", "LOCALRUN_API",
                                                       "DISABLE_"))}}}}
if name == "claude":
    url = os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages"
    body = {{"model": os.environ["ANTHROPIC_MODEL"], "max_tokens": 50,
             "messages": [{{"role": "user", "content": "SAY:hello from claude"}}]}}
    headers = {{"x-api-key": os.environ["ANTHROPIC_AUTH_TOKEN"], "anthropic-version": "2023-06-01"}}
elif name == "codex":
    args = sys.argv[1:]
    overrides = dict(a.split("=", 1) for a in args[1::2] if "=" in a)
    url = json.loads(overrides["model_providers.localrun.base_url"]) + "/responses"
    body = {{"model": args[args.index("-m") + 1], "input": "SAY:hello from codex"}}
    headers = {{}}
else:
    config = json.loads(os.environ["OPENCODE_CONFIG_CONTENT"])
    provider = config["provider"]["localrun"]
    url = provider["options"]["baseURL"] + "/chat/completions"
    body = {{"model": config["model"].split("/", 1)[1],
             "messages": [{{"role": "user", "content": "SAY:hello from opencode"}}]}}
    headers = {{"Authorization": "Bearer " + provider["options"]["apiKey"]}}
request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={{"Content-Type": "application/json", **headers}})
with urllib.request.urlopen(request, timeout=60) as response:
    record["reply"] = json.loads(response.read())
with open(os.environ["FAKE_AGENT_RECORD"], "w") as f:
    json.dump(record, f)
sys.exit(7)
'''


@pytest.fixture
def agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_gguf: Path) -> Iterator[Path]:
    """Fake agents on PATH, a store holding ``tiny`` and a fake-engine daemon for ``launch`` to start."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("claude", "codex", "opencode"):
        script = bin_dir / name
        script.write_text(FAKE_AGENT.format(python=sys.executable, name=name))
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_AGENT_RECORD", str(tmp_path / "record.json"))
    monkeypatch.setenv("LOCALRUN_RUNNER_FACTORY", "fake_engine:FakeEngine")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-must-not-leak")
    from localrun.store import ModelStore

    ModelStore(config.models_dir()).create("tiny", f"FROM {tiny_gguf}\n")
    yield tmp_path / "record.json"
    stop_daemon()


def launch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from localrun.cli.main import main; sys.exit(main())", "launch", *args],
        capture_output=True, text=True, timeout=120, env=dict(os.environ), stdin=subprocess.DEVNULL)


def _record(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_claude_is_started_against_the_anthropic_api(agents: Path) -> None:
    result = launch("claude", "--model", "tiny", "--", "-p", "say hi")
    assert result.returncode == 7, result.stderr  # the agent's own exit code
    assert "Starting the localrun daemon" in result.stderr and "no config file is changed" in result.stderr
    record = _record(agents)
    assert record["argv"] == ["--model", "tiny", "-p", "say hi"]
    env = record["env"]
    assert env["ANTHROPIC_BASE_URL"] == config.host().url and env["ANTHROPIC_API_KEY"] == ""
    assert env["ANTHROPIC_MODEL"] == "tiny" and env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    reply = record["reply"]
    assert reply["type"] == "message" and reply["content"][0]["text"] == "hello from claude"
    # tiny was trained on 2,048 tokens: Claude Code is told so, and the user is told it is too few
    assert env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "2048"
    assert "tiny holds 2,048 tokens per request (its trained context)" in result.stderr
    assert "first prompt of about 19,000 tokens" in result.stderr


def test_codex_is_started_against_the_responses_api(agents: Path) -> None:
    result = launch("codex", "-m", "tiny", "--", "exec", "say hi")
    assert result.returncode == 7, result.stderr
    record = _record(agents)
    assert record["argv"][-4:] == ["-m", "tiny", "exec", "say hi"]
    assert record["reply"]["object"] == "response" and record["reply"]["output"][0]["content"][0]["text"] == \
        "hello from codex"


def test_opencode_is_started_with_an_inline_config(agents: Path, tmp_path: Path) -> None:
    user_config = tmp_path / "xdg_config_home" / "opencode" / "opencode.json"
    user_config.parent.mkdir(parents=True, exist_ok=True)
    user_config.write_text('{"theme": "mine"}')
    result = launch("opencode", "--model=tiny", "--", "run", "say hi")
    assert result.returncode == 7, result.stderr
    record = _record(agents)
    assert record["argv"] == ["run", "say hi"]
    assert record["reply"]["choices"][0]["message"]["content"] == "hello from opencode"
    assert user_config.read_text() == '{"theme": "mine"}'  # the user's own config is untouched


def test_a_missing_agent_or_model_fails_before_starting_it(agents: Path, tmp_path: Path) -> None:
    (tmp_path / "bin" / "codex").unlink()
    result = launch("codex")
    assert result.returncode == 1 and "npm install -g @openai/codex" in result.stderr
    assert not agents.exists()
    result = launch("claude", "--model", "nothing-here:1b")
    assert result.returncode == 1 and "nothing-here" in result.stderr
    assert not agents.exists()  # the agent never ran
    result = launch("claude", "-p", "hi")
    assert result.returncode == 2 and "after --" in result.stderr


def test_a_model_run_with_less_than_it_was_trained_on_gets_a_derived_model(agents: Path, tmp_path: Path) -> None:
    from localrun.store import ModelStore

    long_gguf = write_tiny_gguf(tmp_path / "long.gguf", context_length=32768)
    store = ModelStore(config.models_dir())
    store.create("long", f"FROM {long_gguf}\nPARAMETER num_ctx 1024\n")
    result = launch("codex", "-m", "long", "--", "exec", "say hi")
    assert result.returncode == 7, result.stderr
    assert "Using long:latest-ctx32k: long with PARAMETER num_ctx 32768" in result.stderr
    assert "Warning" not in result.stderr  # 32,768 tokens hold Codex's first prompt
    record = _record(agents)
    assert record["argv"][-4:] == ["-m", "long:latest-ctx32k", "exec", "say hi"]
    assert "model_context_window=32768" in record["argv"]
    assert record["reply"]["output"][0]["content"][0]["text"] == "hello from codex"
    assert store.show("long:latest-ctx32k").parameters["num_ctx"] == 32768
    assert store.show("long").parameters["num_ctx"] == 1024  # the user's model is as it was
