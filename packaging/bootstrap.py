#!/usr/bin/env python3
"""Install localrun into a virtual environment and start a chat with the starter model.

    python3 packaging/bootstrap.py [--venv DIR] [--dry-run] [--no-run] [-- ARGS for `localrun run`]

This is the README's first command. It needs only Python 3.11+ and its standard library (it runs
before any virtual environment exists) plus a C/C++ compiler. Steps:

1. create the virtual environment (default: ``.venv`` in the repository), unless it exists;
2. ``pip install -e '.[starter]'`` into it. The first time, pip compiles llama-cpp-python from
   source, which is most of the set-up time on a small machine; while it compiles, the build's
   step counter is shown (``compiling llama.cpp: step 97/193 (50%), 14:09``). pip keeps the wheel
   it built in its cache and later installs, in any virtual environment, reuse it (no compile).
   pip's whole output goes to ``<venv>/install.log``; when the install fails its end is printed;
3. replace this process with ``<venv>/bin/localrun run ARGS``.

Running it again skips step 2 while pyproject.toml is unchanged since the last install.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
MARKER = ".localrun-installed"  # in the venv: the pyproject.toml digest of the last install
NOTE = ("The first install compiles llama-cpp-python from source: up to 30 minutes on a busy 2-core machine "
        "(measured 26 and 30), less on a quiet one or with more cores. Later installs reuse the wheel pip "
        "caches (about 2 minutes).")
_STEP = re.compile(r"^\s*\[(\d+)/(\d+)\]\s")
_CACHED = re.compile(r"^\s*Using cached (llama_cpp_python-\S+\.whl)")


class BuildProgress:
    """Turns ``pip install -v`` output into the few lines a person wants to see; None hides a line.

    Compiler commands and warnings are hidden; the ninja step counter becomes
    ``compiling llama.cpp: step N/M (P%), m:ss``; a wheel reused from pip's cache is said so.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._build_started: float | None = None
        self._resolving = False

    def feed(self, line: str) -> str | None:
        step = _STEP.match(line)
        if step:
            done, total = int(step.group(1)), int(step.group(2))
            if self._build_started is None:
                self._build_started = self._clock()
            elapsed = int(self._clock() - self._build_started)
            return (f"compiling llama.cpp: step {done}/{total} ({100 * done // total}%), "
                    f"{elapsed // 60}:{elapsed % 60:02d}")
        cached = _CACHED.match(line)
        if cached:
            return f"reusing the llama-cpp-python wheel pip built before ({cached.group(1)}): no compile"
        if "Building wheel for llama-cpp-python" in line and line.rstrip().endswith("started"):
            self._build_started = self._clock()
            return "compiling llama-cpp-python from source (the long step; the counter follows)…"
        if line.startswith("Collecting ") and not self._resolving:
            self._resolving = True
            return "collecting localrun's dependencies…"
        if line.startswith("Installing collected packages:"):
            return f"installing {len(line.split(':', 1)[1].split(','))} packages…"
        if line.startswith(("Successfully installed ", "ERROR: ")):
            return line.rstrip()
        return None


class Display:
    """Writes progress to ``out``: step counters on one rewritten line in a terminal, every 10% in a log."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._tty = out.isatty()
        self._open_line = False
        self._last_decile = -1

    def show(self, note: str) -> None:
        step = re.search(r"\((\d+)%\)", note) if note.startswith("compiling llama.cpp:") else None
        if step is not None and self._tty:
            self._out.write("\r\033[K" + note)
            self._open_line = True
        elif step is not None:
            decile = int(step.group(1)) // 10
            if decile == self._last_decile:
                return
            self._last_decile = decile
            self._out.write(note + "\n")
        else:
            self._out.write(("\n" if self._open_line else "") + note + "\n")
            self._open_line = False
        self._out.flush()

    def close(self) -> None:
        if self._open_line:
            self._out.write("\n")
            self._out.flush()


def _bin(venv: Path, name: str) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / (f"{name}.exe" if os.name == "nt" else name)


def _digest() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()


def plan(venv: Path, run_args: Sequence[str]) -> list[list[str]]:
    """The commands the bootstrap runs, in order."""
    commands = []
    if not _bin(venv, "python").exists():
        commands.append([sys.executable, "-m", "venv", str(venv)])
    commands.append([str(_bin(venv, "python")), "-m", "pip", "install", "-v", "-e", f"{ROOT}[starter]"])
    commands.append([str(_bin(venv, "localrun")), "run", *run_args])
    return commands


def install(command: list[str], log_path: Path, display: Display) -> int:
    """Run pip with its output in ``log_path`` and the progress shown; returns pip's exit code."""
    progress = BuildProgress()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            note = progress.feed(line)
            if note:
                display.show(note)
        code = proc.wait()
    display.close()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bootstrap.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv", help="the virtual environment (default: .venv)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    parser.add_argument("--no-run", action="store_true", help="install only; do not start the chat")
    parser.add_argument("run_args", nargs="*", help="arguments for `localrun run` (after --)")
    args = parser.parse_args(argv)
    if sys.version_info < (3, 11):
        print(f"localrun needs Python 3.11 or newer; this is {sys.version.split()[0]} ({sys.executable})",
              file=sys.stderr)
        return 2
    venv = args.venv.resolve()
    commands = plan(venv, args.run_args)
    if args.no_run:
        commands.pop()
    if args.dry_run:
        print(NOTE)
        print("\n".join(shlex.join(c) for c in commands))
        return 0
    if commands[0][1:3] == ["-m", "venv"]:
        print(f"creating the virtual environment {venv}", file=sys.stderr, flush=True)
        subprocess.run(commands.pop(0), check=True)
    pip, start = commands[0], commands[1] if len(commands) > 1 else None
    marker = venv / MARKER
    if marker.exists() and marker.read_text().strip() == _digest() and _bin(venv, "localrun").exists():
        print("localrun is installed and up to date", file=sys.stderr, flush=True)
    else:
        print(f"installing localrun into {venv}\n{NOTE}", file=sys.stderr, flush=True)
        log_path = venv / "install.log"
        code = install(pip, log_path, Display(sys.stderr))
        if code != 0:
            tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-30:]
            print("\n".join(["", *tail, "", f"the install failed (exit {code}); pip's whole output: {log_path}"]),
                  file=sys.stderr)
            return code
        marker.write_text(_digest() + "\n")
    if start is None:
        return 0
    sys.stderr.flush()
    os.execv(start[0], start)  # the chat replaces this process: Ctrl+C and exit codes are localrun's own
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
