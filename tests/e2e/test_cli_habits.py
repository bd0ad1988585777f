"""The command line as users' fingers expect it (issue #16): options anywhere, model names as Ollama users
type them, honest "not found" errors, Ctrl+C, and bench's default model. Through the real CLI and daemon."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from clirun import ENTRY, localrun
from fakehub import FakeHub

from localrun.client import Client

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


@pytest.fixture
def hub(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A stand-in hub serving the tiny model as curated llama3.2:1b's file."""
    with FakeHub() as h:
        h.add_file("bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-Q4_K_M.gguf", tiny_gguf.read_bytes())
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


def test_options_after_the_prompt_as_in_the_issue(store_with_tiny: None) -> None:
    result = localrun("run", "tiny", "--verbose", "why", "is", "the", "sky", "blue?", "--keepalive", "1m")
    assert result.returncode == 0, result.stderr
    assert result.stdout == " w0 w1 w2 w3 w4\n" and "eval rate:" in result.stderr
    mistake = localrun("run", "tiny", "hi", "--bogus")
    assert mistake.returncode == 2 and mistake.stdout == ""
    assert mistake.stderr.startswith("usage: localrun run ") and "unrecognized arguments: --bogus" in mistake.stderr


def test_an_untagged_curated_name_means_its_default_tag(hub: FakeHub) -> None:
    pulled = localrun("pull", "llama3.2", env={"NO_COLOR": "1"})
    assert pulled.returncode == 0, pulled.stderr
    assert "llama3.2:1b" in pulled.stderr
    listed = localrun("list")
    assert "llama3.2:1b" in listed.stdout and "llama3.2:latest" not in listed.stdout
    shown = localrun("show", "llama3.2", "--modelfile")  # the untagged name finds it in the store
    assert shown.returncode == 0 and "FROM " in shown.stdout
    again = localrun("pull", "llama3.2:latest")
    assert again.returncode == 0 and "already up to date" in again.stderr


def test_a_misspelled_name_gets_a_suggestion() -> None:
    result = localrun("pull", "lama3.2")
    assert result.returncode == 1
    assert "did you mean 'llama3.2:1b'" in result.stderr
    shown = localrun("show", "gemma3:27m")
    assert shown.returncode == 1 and "did you mean 'gemma3:270m'" in shown.stderr


def test_rm_of_a_missing_model_says_only_that(store_with_tiny: None) -> None:
    result = localrun("rm", "nothing-here")
    assert result.returncode == 1
    assert result.stderr == "Error: model 'nothing-here:latest' is not in the store\n"
    _warm()  # the same through a running daemon
    through = localrun("rm", "nothing-here")
    assert through.returncode == 1
    assert through.stderr == "Error: model 'nothing-here:latest' is not in the store\n"


def _warm() -> None:
    result = localrun("run", "tiny", "hello")
    assert result.returncode == 0, result.stderr


def test_ctrl_c_during_a_one_shot_answer_ends_the_line(store_with_tiny: None) -> None:
    _warm()
    # bufsize=0: no reader buffer, so communicate() below sees every byte after the first three.
    # A suite started in the background (`cmd &` in a script) runs with SIGINT ignored, which children
    # inherit and Python then leaves ignored: give the CLI the default handler a terminal would.
    proc = subprocess.Popen([*ENTRY, "run", "tiny", "tell me a SLOW story"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=os.environ.copy(), bufsize=0,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    try:
        first = proc.stdout.read(3)  # " w0": the answer has started
        assert first == b" w0"
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    out = (first + rest).decode()
    assert out.endswith("\n") and not out.endswith("\n\n")
    assert b"Traceback" not in err


def test_bench_measures_the_loaded_model_and_says_so(store_with_tiny: None, tiny_gguf: Path) -> None:
    _warm()
    created = localrun("cp", "tiny", "newer")  # the newest model, listed first by /v1/models
    assert created.returncode == 0, created.stderr
    bench = localrun("bench", "--concurrency", "1", "--requests", "1", "--input-tokens", "8",
                     "--output-tokens", "4", "--json", "-")
    assert bench.returncode == 0, bench.stderr
    assert "tiny:latest" in bench.stderr and "loaded" in bench.stderr
    report = json.loads(bench.stdout)
    assert [t["model"] for t in report["targets"]] == ["tiny:latest"]
    with Client() as client:
        assert [m["name"] for m in client.ps()] == ["tiny:latest"]  # no second model loaded
