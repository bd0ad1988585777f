"""No dead code: vulture, configured by [tool.vulture] in pyproject.toml, finds nothing unused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vulture")  # the dev extra; `.ci/run` installs it

REPO = Path(__file__).resolve().parents[2]


def test_vulture_finds_no_unused_code() -> None:
    proc = subprocess.run([sys.executable, "-m", "vulture"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (
        "unused code (delete it, or list a false positive in vulture_whitelist.py with its reason):\n" + proc.stdout)
