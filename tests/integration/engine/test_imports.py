"""The daemon imports the engine's contract and templates without loading native code."""

from __future__ import annotations

import subprocess
import sys


def test_pure_engine_modules_do_not_import_llama_cpp() -> None:
    code = (
        "import sys\n"
        "import localrun.engine.types, localrun.chat.template, localrun.engine.radix, localrun.engine.detok\n"
        "assert 'llama_cpp' not in sys.modules, 'llama_cpp was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
