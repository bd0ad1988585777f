"""Real ``localrun serve`` processes on 127.0.0.1 for multi-process tests (peers, fronts, RPC)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import serverguard
from daemonproc import listener_pid


class Daemon:
    """A ``localrun serve`` process in its own session (so its runners die with it)."""

    def __init__(self, home: Path, port: int, env: dict[str, str]) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log = home / "serve.log"
        full = {k: v for k, v in os.environ.items() if not k.startswith(("LOCALRUN_", "OLLAMA_"))}
        full.update({"LOCALRUN_HOST": f"127.0.0.1:{port}", "XDG_DATA_HOME": str(home / "data"),
                     "XDG_STATE_HOME": str(home / "state"), "XDG_CACHE_HOME": str(home / "cache"),
                     "HF_HUB_OFFLINE": "1", **env})
        self.env = full  # what a CLI run against this daemon needs (LOCALRUN_HOST, ...)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "localrun", "serve"], env=full, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        serverguard.watch_log(self.log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    self._check_listener(port)
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"daemon did not start: {self.log.read_text()[-2000:]}")

    def _check_listener(self, port: int) -> None:
        """Fail unless this daemon is what answered: another process on the port would pass for it."""
        owner = listener_pid(port)
        if owner != self.proc.pid:
            self.kill()
            raise RuntimeError(f"port {port} is answered by pid {owner}, not by this daemon (pid {self.proc.pid}): "
                               f"{self.log.read_text()[-2000:]}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the daemon's whole process group (the daemon and its runners), then reap it."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM (the daemon unloads its models), SIGKILL if it is not gone in 30 s."""
        try:
            self.kill(signal.SIGTERM)
        except subprocess.TimeoutExpired:
            self.kill()
