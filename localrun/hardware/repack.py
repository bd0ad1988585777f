"""Whether this CPU can run llama.cpp's repacked weight layouts, probed once per CPU model.

llama.cpp repacks CPU weights into layouts its fastest kernels read (the Q4_0/IQ4_NL/Q4_K
interleavings, AMX tiles): llama-server and Ollama do it by default, and it is worth ~20 % of decode
speed (a Zen 3 EPYC, Qwen2.5-Coder 0.5B: 23.6 -> 28.3 tok/s at one sequence). One Xeon VM
advertised AMX that it did not let processes use, and the first decode died with SIGSEGV in
``ggml_backend_amx_mul_mat`` (ENGINE_NOTES.md), so repacking used to be off everywhere.

Now :func:`allowed` decides per CPU: the first time a CPU model is seen, a child process
(:mod:`.repack_probe`) loads a small random-weight model in the quantisations the repacking kernels
take (Q4_0, Q8_0, Q4_K) with repacking on and decodes with it. Exit 0 means yes; a crash or a
hang means no, logged once. The answer is kept in the user cache directory keyed by the CPU's
model name and flags, so a VM moved to another host asks again. ``LOCALRUN_REPACK=0`` (or ``1``)
skips the probe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import config
from ..errors import ConfigError
from .cpuinfo import cpu_flags

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 120.0  # seconds: a probe still running then counts as a failure


def cpu_key() -> str:
    """The CPU's model name and a digest of the flags that matter to llama.cpp's kernels (cpuinfo.py)."""
    name, flags = cpu_flags()
    digest = hashlib.sha256(" ".join(flags).encode()).hexdigest()[:12]
    return f"{name or 'unknown CPU'} [{platform.machine()} {digest}]"


def _cache_file() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("localrun")) / "cpu-probes.json"


def _read(path: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def probe(timeout: float = PROBE_TIMEOUT) -> tuple[bool, str]:
    """Run the probe child; (True, "") when it decoded with repacked weights, else (False, why).

    The child writes its model into a directory this process owns and removes: a probe that dies of
    the crash it looks for cannot clean up after itself."""
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="localrun-repack-") as tmp:
            done = subprocess.run([sys.executable, "-m", "localrun.hardware.repack_probe", tmp], capture_output=True,
                                  timeout=timeout, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return False, f"the probe did not finish in {timeout:.0f} s"
    except OSError as exc:
        return False, f"the probe could not start: {exc}"
    if done.returncode == 0:
        log.info("repacked CPU weights work on this CPU (probed in %.1f s)", time.monotonic() - started)
        return True, ""
    tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    why = (f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}")
    return False, f"{why} {tail[0]}".strip()


def known(cache: Path | None = None) -> tuple[bool | None, str]:
    """The remembered answer for this CPU without probing: (True/False, why), or (None, "") if never asked."""
    entry = _read(cache or _cache_file()).get(cpu_key())
    if isinstance(entry, dict) and isinstance(entry.get("repack"), bool):
        return bool(entry["repack"]), str(entry.get("why") or "")
    return None, ""


def allowed(cache: Path | None = None) -> bool:
    """Whether models load with repacked weights here (``LOCALRUN_REPACK``, else the probe's
    remembered or fresh answer). Never raises: a failure to probe or to remember means no."""
    try:
        forced = config.repack()
    except ConfigError as exc:  # the daemon refuses to start on it; elsewhere: as if unset
        log.warning("%s", exc)
        forced = None
    if forced is not None:
        return forced
    path = cache or _cache_file()
    remembered, _ = known(path)
    if remembered is not None:
        return remembered
    key = cpu_key()
    ok, why = probe()
    if not ok:
        log.warning("llama.cpp's repacked CPU weights crash on this CPU (%s): loading without them, "
                    "as llama.cpp's --no-repack does", why)
    try:
        entries = _read(path)
        entries[key] = {"repack": ok, "why": why, "probed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entries, indent=1))
        os.replace(tmp, path)
    except OSError as exc:
        log.debug("could not remember the repack probe: %s", exc)
    return ok


__all__ = ["allowed", "cpu_key", "known", "probe"]
