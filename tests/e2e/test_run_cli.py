"""``localrun run`` and ``localrun top`` end to end through the installed entry point, as a user types them.

The daemon is real (started in the background by ``localrun run`` itself); its runner processes
host the fake engine (LOCALRUN_RUNNER_FACTORY), which answers " w0 w1 w2 w3 w4", so these stay
fast. Each test has its own port, store and data dirs (tests/conftest.py).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import ENTRY, localrun
from daemonproc import listener_pid, stop_daemon

from localrun import __version__, config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
ANSI = re.compile(r"\x1b\[")


def test_pipe_mode_starts_the_daemon_and_prints_the_answer(store_with_tiny: None) -> None:
    result = localrun("run", "tiny", stdin="hello there\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == " w0 w1 w2 w3 w4\n"
    assert "Starting the localrun daemon in the background" in result.stderr
    assert listener_pid(config.host().port) is not None  # it keeps running for the next command
    again = localrun("run", "tiny", "say", "more", stdin="")
    assert again.returncode == 0 and again.stdout == " w0 w1 w2 w3 w4\n"
    assert "Starting" not in again.stderr  # the running daemon is reused


def test_prompt_argument_with_verbose_timings_on_stderr(store_with_tiny: None) -> None:
    result = localrun("run", "tiny", "why", "is", "the", "sky", "blue?", "--verbose", "--keepalive", "10m")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "w0 w1 w2 w3 w4"
    for line in ("total duration:", "prompt eval count:", "eval count:           5 token(s)", "eval rate:"):
        assert line in result.stderr
    top = localrun("top", "--once")
    assert top.returncode == 0, top.stderr
    header, row = top.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "PROCESSOR", "RAM", "VRAM", "CONTEXT", "ACTIVE", "QUEUED", "UNTIL"]
    assert row.startswith("tiny:latest") and "100% CPU" in row and re.search(r"\d+m \d\ds", row)
    assert "requests:" in top.stdout and "prefix cache hit rate:" in top.stdout


def test_a_base_model_is_named_as_such_on_stderr(store_with_tiny: None, tiny_gguf_b: Path) -> None:
    from localrun.store import ModelStore

    ModelStore(config.models_dir()).create("plain", f"FROM {tiny_gguf_b}\n")  # no chat template, no chat tuning
    result = localrun("run", "plain", "Once upon a time")
    assert result.returncode == 0 and result.stdout == " w0 w1 w2 w3 w4\n"
    assert "plain is a base model" in result.stderr and "localrun run qwen2.5-coder:0.5b" in result.stderr
    chat_model = localrun("run", "tiny", "hi")
    assert "base model" not in chat_model.stderr


def test_a_thinking_models_reasoning_is_framed_off_the_answer(store_with_tiny: None, thinking_gguf: Path) -> None:
    """As ``ollama run`` shows it: Thinking... / the reasoning / ...done thinking., then the answer; piped,
    stdout holds only the answer and the reasoning goes to stderr; --hidethinking shows none of it."""
    from localrun.store import ModelStore

    ModelStore(config.models_dir()).create("thinker", f"FROM {thinking_gguf}\n")
    said = "SAY:France's capital city.</think>Paris."
    result = localrun("run", "thinker", said)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Paris.\n"
    assert "Thinking...\nFrance's capital city.\n...done thinking.\n" in result.stderr
    hidden = localrun("run", "thinker", said, "--hidethinking")
    assert hidden.stdout == "Paris.\n" and "Thinking" not in hidden.stderr
    plain = localrun("run", "thinker", said, "--think=false")
    assert plain.returncode == 0 and "Thinking" not in plain.stderr
    not_a_thinker = localrun("run", "tiny", "hi", "--think")
    assert not_a_thinker.returncode == 1 and "does not support thinking" in not_a_thinker.stderr
    bad = localrun("run", "thinker", "hi", "--think=maybe")
    assert bad.returncode == 2 and "--think" in bad.stderr


def test_unknown_model_fails_with_a_message_and_exit_1(store_with_tiny: None) -> None:
    result = localrun("run", "no-such-model", "hi", env={"NO_COLOR": "1"})
    assert result.returncode == 1
    assert "Error:" in result.stderr and "no-such-model" in result.stderr
    assert result.stdout == ""
    assert not ANSI.search(result.stderr)


def test_bad_keepalive_is_a_usage_error_before_any_work() -> None:
    result = localrun("run", "tiny", "hi", "--keepalive", "soon")
    assert result.returncode == 2
    assert "--keepalive" in result.stderr
    assert listener_pid(config.host().port) is None  # no daemon was started for a typo


def test_top_without_a_daemon_exits_1() -> None:
    result = localrun("top", "--once")
    assert result.returncode == 1
    assert "no localrun daemon answers" in result.stderr and "localrun serve" in result.stderr


def test_version_and_help_per_command() -> None:
    version = localrun("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"localrun {__version__}"
    for command in ("run", "top"):
        result = localrun(command, "--help")
        assert result.returncode == 0 and f"usage: localrun {command}" in result.stdout
        assert "Exit codes" in result.stdout
    assert localrun("run", "--format", "yaml").returncode == 2
    bad_option = localrun("run", "tiny", "hi", "-o", "temperature=hot")
    assert bad_option.returncode == 2 and "expects a number" in bad_option.stderr


@pytest.mark.skipif(importlib.util.find_spec("localrun.engine.engine") is None, reason="real engine not there yet")
def test_pipe_mode_on_the_real_engine(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from localrun.store import ModelStore

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ModelStore(config.models_dir()).create("tiny", f"FROM {tiny_gguf}\nPARAMETER num_ctx 512\n")
    try:
        result = localrun("run", "tiny", "--verbose", "-o", "num_predict=8", stdin="hello world")
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() and result.stdout.endswith("\n")
        assert "eval rate:" in result.stderr
        as_json = localrun("run", "tiny", "give me json", "--format", "json", "-o", "num_predict=32")
        assert as_json.returncode == 0, as_json.stderr
    finally:
        stop_daemon()


@pytest.mark.starter
def test_no_model_means_the_starter_pulled_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's first command on an empty store: the daemon starts, the starter is imported from
    its PyPI packages (no network), and a question gets its answer."""
    from localrun.store.starter import QWEN_CODER

    if QWEN_CODER.locate() is None:
        pytest.skip(f"the starter's packages are not installed ({QWEN_CODER.pip_install})")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        result = localrun("run", "--keepalive", "0", "-o", "temperature=0", stdin="What is the capital of France?",
                          timeout=170)
        assert result.returncode == 0, result.stderr
        assert "Paris" in result.stdout
        listing = localrun("list")
        assert "qwen2.5-coder:0.5b" in listing.stdout  # brought into the store from the PyPI packages
    finally:
        stop_daemon()


def _read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    import select
    import time

    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and needle not in seen:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_in_a_terminal_it_opens_the_chat_ui(store_with_tiny: None) -> None:
    import fcntl
    import struct
    import termios

    main_fd, child_fd = os.openpty()
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    proc = subprocess.Popen(
        [*ENTRY, "run", "tiny"],
        stdin=child_fd, stdout=child_fd, stderr=child_fd, env={**os.environ, "TERM": "xterm-256color"},
        start_new_session=True,
    )
    os.close(child_fd)
    try:
        assert b"Chatting with tiny" in _read_until(main_fd, b"Chatting with tiny", 60)
        os.write(main_fd, b"hello\r")
        assert b"w4" in _read_until(main_fd, b"w4", 60)  # the streamed reply, drawn in the UI
        os.write(main_fd, b"/bye\r")
        assert proc.wait(30) == 0
        saved = list((config.data_dir() / "conversations").glob("*.json"))
        assert len(saved) == 1 and (saved[0].stat().st_mode & 0o777) == 0o600
        assert "hello" in saved[0].read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(main_fd)
