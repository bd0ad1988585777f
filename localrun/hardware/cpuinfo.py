"""What the CPU is: its model name and the flags worth knowing, from one reader of ``/proc/cpuinfo``.

``localrun info`` shows them (sysinfo.py) and the repack probe keys its answers by them (repack.py).
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

# CPU flags worth showing (Linux /proc/cpuinfo names); AMX is the one with a workaround.
_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16",
          "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "asimd", "asimddp", "i8mm", "sve", "sve2", "sme")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str | None, list[str]]:
    """CPU model name and the interesting flags the OS reports (Linux /proc/cpuinfo, macOS sysctl)."""
    model: str | None = None
    flags: set[str] = set()
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip().lower()
            if key in ("model name", "hardware") and model is None:
                model = value.strip()
            elif key in ("flags", "features"):
                flags.update(value.split())
                break
    except OSError:
        if sys.platform == "darwin":
            model = _sysctl("machdep.cpu.brand_string")
            feats = f"{_sysctl('machdep.cpu.features') or ''} {_sysctl('machdep.cpu.leaf7_features') or ''}"
            flags.update(f.lower().replace(".", "_") for f in feats.split())
    return model or platform.processor() or None, [f for f in _FLAGS if f in flags]


def _sysctl(name: str) -> str | None:
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


__all__ = ["cpu_flags"]
