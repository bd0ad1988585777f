"""A model split over two llama.cpp RPC workers on loopback (LOCALRUN_RPC_SERVERS).

Needs llama-cpp-python built with ``-DGGML_RPC=on`` and llama.cpp's ``rpc-server`` (named by
LOCALRUN_TEST_RPC_SERVER, else found on PATH as ``rpc-server`` or ``ggml-rpc-server``); skipped
without them (packaging/README.md says how to build both). Run by hand:
``LOCALRUN_TEST_RPC_SERVER=.../ggml-rpc-server <rpc venv>/bin/python -m pytest tests/e2e/test_rpc_split.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import llama_cpp
import pytest
from ports import free_port
from servedaemon import Daemon

from localrun.store import ModelStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

RPC_SERVER = (os.environ.get("LOCALRUN_TEST_RPC_SERVER") or shutil.which("rpc-server")
              or shutil.which("ggml-rpc-server"))
if not llama_cpp.llama_supports_rpc() or not RPC_SERVER:
    pytest.skip("needs an RPC-enabled llama-cpp-python (-DGGML_RPC=on) and rpc-server", allow_module_level=True)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[str]]:
    """Two ``rpc-server`` processes on 127.0.0.1, each with one thread."""
    procs: list[subprocess.Popen[bytes]] = []
    endpoints: list[str] = []
    try:
        for i in range(2):
            port = free_port()
            log = (tmp_path / f"rpc{i}.log").open("wb")
            procs.append(subprocess.Popen([str(RPC_SERVER), "-H", "127.0.0.1", "-p", str(port), "-t", "1"],
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            endpoints.append(f"127.0.0.1:{port}")
        time.sleep(1.0)  # rpc-server has no health endpoint; the daemon's load checks each is reachable
        yield endpoints
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(10)


def test_a_model_loads_across_two_rpc_workers_and_answers(tmp_path: Path, tiny_gguf: Path,
                                                         workers: list[str]) -> None:
    models = tmp_path / "models"
    ModelStore(models).create("tiny", f"FROM {tiny_gguf}\n")
    daemon = Daemon(tmp_path, free_port(), {"LOCALRUN_MODELS": str(models), "LOCALRUN_NUM_PARALLEL": "1",
                                            "LOCALRUN_RPC_SERVERS": ",".join(workers),
                                            "XDG_CONFIG_HOME": str(tmp_path / "config")})
    try:
        reply = httpx.post(daemon.url + "/api/generate", timeout=120, json={
            "model": "tiny", "prompt": "hello", "stream": False, "options": {"num_predict": 8, "temperature": 0}})
        assert reply.status_code == 200, reply.text
        assert reply.json()["eval_count"] > 0
        [model] = httpx.get(daemon.url + "/api/ps").json()["models"]
        assert model["rpc_servers"] == workers
        print("split:", model["split"])
        on_workers = {s["device"] for s in model["split"] if s["device"].startswith("RPC") and s["bytes"] > 0}
        assert {w for w in workers if any(w in d for d in on_workers)} == set(workers), model["split"]
        status = httpx.get(daemon.url + "/api/status").json()
        assert status["settings"]["LOCALRUN_RPC_SERVERS"] == ",".join(workers)
    finally:
        daemon.kill(signal.SIGTERM)
