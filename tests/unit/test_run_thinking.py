"""How ``localrun run PROMPT`` frames a thinking model's reasoning before the answer (ollama run's frame)."""

from __future__ import annotations

import io

import pytest

from localrun.cli.run_cmd import ThinkingWriter


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_reasoning_is_framed_once_and_dimmed_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    piped = io.StringIO()
    writer = ThinkingWriter(piped)
    writer.write("Let me see")
    writer.write(", two and two.")
    writer.close()
    writer.close()  # the answer's every chunk closes it: only the first counts
    writer.write("more reasoning after the answer began")  # left out: the answer stays whole
    assert piped.getvalue() == "Thinking...\nLet me see, two and two.\n...done thinking.\n\n"
    terminal = _Terminal()
    shown = ThinkingWriter(terminal)
    shown.write("Hm.\n")
    shown.close()
    assert terminal.getvalue() == "\x1b[2mThinking...\nHm.\n...done thinking.\n\n\x1b[0m"


def test_no_color_keeps_the_terminal_frame_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    terminal = _Terminal()
    shown = ThinkingWriter(terminal)
    shown.write("Hm.")
    shown.close()
    assert terminal.getvalue() == "Thinking...\nHm.\n...done thinking.\n\n"


def test_nothing_is_written_when_hidden_or_when_the_model_did_not_think() -> None:
    hidden = ThinkingWriter(None)
    hidden.write("secret")
    hidden.close()
    quiet = io.StringIO()
    ThinkingWriter(quiet).close()
    assert quiet.getvalue() == ""
