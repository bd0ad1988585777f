"""The README's first command: one command, stdlib-only, that shows progress while llama.cpp compiles (issue #16)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "packaging" / "bootstrap.py"


def _bootstrap() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bootstrap", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_starts_with_one_command_that_runs_the_bootstrap() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", readme, re.DOTALL)
    assert first_block is not None
    commands = [line for line in first_block.group(1).splitlines() if line.strip()]
    assert commands == ["python3 packaging/bootstrap.py"]
    assert re.search(r"\d+ (to \d+ )?minutes", readme[: first_block.start()])  # the set-up time, stated


def test_it_runs_on_a_bare_interpreter_and_says_what_it_will_do(tmp_path: Path) -> None:
    # -S: no site-packages at all, as with a system python3 before any venv exists.
    done = subprocess.run([sys.executable, "-S", str(SCRIPT), "--dry-run", "--venv", str(tmp_path / "v")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "-m venv" in out and "pip install" in out and "-e" in out and "[starter]" in out
    assert "localrun run" in out
    assert "--no-cache-dir" not in out  # a wheel pip built before is reused


SAMPLE = """\
Collecting llama-cpp-python<0.4,>=0.3.36
  Downloading llama_cpp_python-0.3.36.tar.gz (50.1 MB)
Building wheels for collected packages: llama-cpp-python, localrun
  Building wheel for llama-cpp-python (pyproject.toml): started
  Running command Building wheel for llama-cpp-python (pyproject.toml)
  -- Configuring done (1.2s)
  [1/193] /usr/bin/g++ -DGGML_BUILD -c ggml.cpp
  /tmp/x/ggml.c:12:3: warning: unused variable
  [97/193] /usr/bin/g++ -c llama.cpp
  [193/193] : && /usr/bin/g++ -shared -o bin/libllama.so
  Building wheel for llama-cpp-python (pyproject.toml): finished with status 'done'
Successfully installed llama-cpp-python-0.3.36 localrun-0.1.0
"""


def test_the_build_output_becomes_a_step_counter() -> None:
    progress = _bootstrap().BuildProgress()
    shown = [progress.feed(line) for line in SAMPLE.splitlines()]
    notes = [s for s in shown if s]
    assert any("compiling llama.cpp" in s and "1/193" in s for s in notes)
    assert any("97/193" in s and "50%" in s for s in notes)
    assert any("193/193" in s for s in notes)
    assert not any("warning" in s or "-DGGML_BUILD" in s for s in notes)  # compiler noise stays in the log
    assert any(s.startswith("Successfully installed") for s in notes)


def test_a_cached_wheel_is_reported_as_reused() -> None:
    progress = _bootstrap().BuildProgress()
    note = progress.feed("  Using cached llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl")
    assert note is not None and "reusing" in note and "llama" in note
