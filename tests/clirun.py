"""Run the ``localrun`` command in a child process, as a user types it (stdin piped, output captured)."""

from __future__ import annotations

import os
import subprocess
import sys

ENTRY = [sys.executable, "-c", "import sys; from localrun.cli.main import main; sys.exit(main())"]


def localrun(*args: str, stdin: str | None = None, env: dict[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``localrun ARGS`` (the console script's entry point) with piped stdin/stdout; never raises on exit codes."""
    return subprocess.run(
        [*ENTRY, *args], input=stdin if stdin is not None else "", capture_output=True, text=True, check=False,
        timeout=timeout, env={**os.environ, **(env or {})},
    )
