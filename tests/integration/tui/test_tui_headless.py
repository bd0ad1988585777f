"""The headless parts stay headless, and the UI honours NO_COLOR."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tui_fakes import FakeBackend

from localrun.tui.app import LocalrunApp
from localrun.tui.session import ChatSession


def test_cli_and_headless_modules_do_not_import_textual() -> None:
    code = (
        "import sys\n"
        "import localrun.cli.main, localrun.cli.run_cmd, localrun.cli.top_cmd, localrun.tui.conversations\n"
        "import localrun.tui.backend, localrun.tui.commands, localrun.tui.session, localrun.tui.stats\n"
        "import localrun.tui.model_ops\n"
        "localrun.cli.main.build_parser()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


async def test_no_color_is_respected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = LocalrunApp(FakeBackend(), session=ChatSession.start("tiny:latest"), health_interval=0)
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.no_color
