"""Start-up and switching, localrun beside llama.cpp's server (issue #15 point 5).

    python benchmarks/startup.py --model-a GGUF_A --model-b GGUF_B [--llama-server BIN] [--runs 3] [--json FILE]

Measures, each ``--runs`` times, with both GGUFs read once first so they sit in the page cache:

- **cold start**: no daemon running, ``localrun run a "PROMPT"`` until its first byte of answer on
  stdout (the CLI starts the daemon, which starts a runner and loads the model); beside it,
  ``llama-server -m A`` from its start until the first streamed token of the same prompt;
- **switch**: a daemon with ``LOCALRUN_MAX_LOADED_MODELS=1`` that has served model a, asked for
  b, then for a again: time to the first streamed token of each (the unload, the load and the
  prompt); llama-server serves one model per process, so its switch is a stop and a cold start;
- **daemon RSS**: the daemon process's resident memory (runners excluded) right after start
  and idle after the switches.

Every process it starts runs in a temporary HOME and store on its own port, and is stopped
(process group) before it exits, also on failure. About one minute on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

PROMPT = "Why is the sky blue? Answer in one sentence."
HERE = Path(__file__).resolve().parent


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def warm(path: Path) -> None:
    """Read the whole file so it is in the page cache (the condition the targets are stated for)."""
    with path.open("rb") as f:
        while f.read(16 << 20):
            pass


class Env:
    """A throwaway HOME, model store and port for one daemon; ``stop`` ends every daemon it started."""

    def __init__(self, model_a: Path, model_b: Path, **extra: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="localrun-startup-"))
        self.port = free_port()
        self.env = {**os.environ, "HOME": str(self.dir), "LOCALRUN_MODELS": str(self.dir / "models"),
                    "LOCALRUN_HOST": f"127.0.0.1:{self.port}", "XDG_CACHE_HOME": str(self.dir / "cache"),
                    "XDG_DATA_HOME": str(self.dir / "data"), "XDG_STATE_HOME": str(self.dir / "state"), **extra}
        self.url = f"http://127.0.0.1:{self.port}"
        for name, path in (("a", model_a), ("b", model_b)):
            modelfile = self.dir / f"Modelfile.{name}"
            modelfile.write_text(f"FROM {path}\n")
            self.localrun("create", name, "-f", str(modelfile))

    def localrun(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "localrun", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=True)

    def daemon_pid(self) -> int | None:
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info["cmdline"] or []
            if cmd[1:4] == ["-m", "localrun", "serve"]:  # also the one `localrun run` starts (--log-file ...)
                try:
                    if proc.environ().get("LOCALRUN_HOST") == self.env["LOCALRUN_HOST"]:
                        return int(proc.pid)
                except psutil.Error:
                    continue
        return None

    def stop(self) -> None:
        pid = self.daemon_pid()
        if pid is not None:
            try:
                os.killpg(os.getpgid(pid), signal.SIGTERM)
                psutil.Process(pid).wait(15)
            except (ProcessLookupError, psutil.Error):
                pass

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def first_byte(cmd: list[str], env: dict[str, str]) -> float:
    """Seconds from start until ``cmd`` writes its first byte to stdout (it then runs to its end)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    proc.stdout.read(1)
    elapsed = time.perf_counter() - started
    proc.communicate(timeout=300)
    return elapsed


def stream_ttft(url: str, model: str, path: str = "/v1/completions") -> float:
    """Seconds until the first streamed token of PROMPT (8 tokens asked)."""
    body = {"model": model, "prompt": PROMPT, "max_tokens": 8, "stream": True, "temperature": 0, "ignore_eos": True}
    started = time.perf_counter()
    with httpx.stream("POST", url + path, json=body, timeout=300) as resp:
        resp.raise_for_status()
        lines = resp.iter_lines()
        for line in lines:
            if line.startswith("data:") and '"text":' in line and '"text":""' not in line.replace(" ", ""):
                elapsed = time.perf_counter() - started
                for _ in lines:  # read the stream to its end
                    pass
                return elapsed
    raise RuntimeError("no token streamed")


def localrun_cold(env: Env) -> float:
    env.stop()
    cmd = [sys.executable, "-m", "localrun", "run", "a", PROMPT, "-o", "num_predict=8"]
    return first_byte(cmd, env.env)


def rss_mb(pid: int | None) -> float | None:
    return None if pid is None else psutil.Process(pid).memory_info().rss / 2**20


def localrun_switch(env: Env) -> dict[str, float]:
    stream_ttft(env.url, "a")  # a is resident
    return {"a -> b": stream_ttft(env.url, "b"), "b -> a": stream_ttft(env.url, "a")}


def llama_server_cold(binary: Path, model: Path) -> float:
    port = free_port()
    env = {**os.environ, "LD_LIBRARY_PATH": str(binary.parent)}
    started = time.perf_counter()
    from localrun.hardware import repack  # llama-server at its defaults, unless repacking crashes this CPU

    proc = subprocess.Popen([str(binary), "-m", str(model), *([] if repack.allowed() else ["--no-repack"]),
                             "--host", "127.0.0.1", "--port", str(port), "-np", "1", "-c", "4096"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.perf_counter() - started > 120:
                raise RuntimeError("llama-server did not start")
            time.sleep(0.02)
        body = {"prompt": PROMPT, "max_tokens": 8, "stream": True, "temperature": 0, "ignore_eos": True}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=300) as resp:
            for line in resp.iter_lines():
                if line.startswith("data:") and '"text"' in line:
                    return time.perf_counter() - started
        raise RuntimeError("no token streamed")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-a", type=Path, required=True, help="the starter GGUF")
    parser.add_argument("--model-b", type=Path, required=True, help="a second GGUF to switch to")
    parser.add_argument("--llama-server", type=Path, help="llama-server binary to compare with")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    warm(args.model_a)
    warm(args.model_b)
    out: dict[str, Any] = {"runs": args.runs}
    env = Env(args.model_a, args.model_b, LOCALRUN_MAX_LOADED_MODELS="1", LOCALRUN_KEEP_ALIVE="-1")
    try:
        localrun_cold(env)  # the first run may import the store's manifests; not counted
        out["localrun cold start s"] = [localrun_cold(env) for _ in range(args.runs)]
        env.stop()
        daemon = subprocess.Popen([sys.executable, "-m", "localrun", "serve"], env=env.env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        for _ in range(200):
            try:
                httpx.get(env.url + "/api/version", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        time.sleep(1.0)
        out["daemon RSS at start MB"] = rss_mb(daemon.pid)
        switches = [localrun_switch(env) for _ in range(args.runs)]
        out["localrun switch s"] = {k: [s[k] for s in switches] for k in switches[0]}
        time.sleep(2.0)
        out["daemon RSS idle after switching MB"] = rss_mb(daemon.pid)
    finally:
        env.close()
    if args.llama_server:
        out["llama-server cold start s"] = [llama_server_cold(args.llama_server, args.model_a)
                                            for _ in range(args.runs)]
        out["llama-server switch (stop, cold start of b) s"] = [llama_server_cold(args.llama_server, args.model_b)
                                                                for _ in range(args.runs)]
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    print("| measure | median | runs |\n|---|---|---|")
    for key, value in out.items():
        if isinstance(value, dict):
            for sub, vals in value.items():
                print(f"| {key}, {sub} | {statistics.median(vals):.2f} | {', '.join(f'{v:.2f}' for v in vals)} |")
        elif isinstance(value, list):
            print(f"| {key} | {statistics.median(value):.2f} | {', '.join(f'{v:.2f}' for v in value)} |")
        elif isinstance(value, float):
            print(f"| {key} | {value:.1f} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
