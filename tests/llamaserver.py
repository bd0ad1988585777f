"""llama.cpp's own server for tests that compare localrun with it on the same file.

:func:`binary` finds ``llama-server`` (``LLAMA_SERVER``, the PATH, or where
``../shared/bench/build_llama_server.sh /tmp/llama-server`` builds it); a test calls
:func:`require_binary` to skip where there is none. :func:`serving` starts it on a free 127.0.0.1
port, waits for ``/health`` and stops it on exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import httpx
import pytest
from ports import free_port

BUILD_HINT = ("needs llama.cpp's llama-server (../shared/bench/build_llama_server.sh /tmp/llama-server; "
              "LLAMA_SERVER=path)")


def binary() -> str | None:
    return os.environ.get("LLAMA_SERVER") or shutil.which("llama-server") or next(
        (str(p) for p in Path("/tmp/llama-server").glob("*/vendor/llama.cpp/build/bin/llama-server")), None)


def require_binary() -> str:
    found = binary()
    if found is None:
        pytest.skip(BUILD_HINT)
    return found


@contextlib.contextmanager
def serving(args: Sequence[str], log: Path, env: Mapping[str, str] | None = None,
            start_timeout: float = 60.0) -> Iterator[str]:
    """llama-server with ``args`` (``-m MODEL ...``; the port is added) on 127.0.0.1: its base URL.
    Its output goes to ``log``; a server that does not answer ``/health`` in time fails the test."""
    exe = require_binary()
    port = free_port()
    environment = {**os.environ, "LD_LIBRARY_PATH": str(Path(exe).parent), **(env or {})}
    with log.open("wb") as out:
        server = subprocess.Popen([exe, *args, "--port", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                  env=environment)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline and server.poll() is None:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        else:
            pytest.fail(f"llama-server did not start (see {log})")
        yield url
    finally:
        server.terminate()
        server.wait(30)
