"""Store fixtures shared by tests/unit/store and tests/integration/store: a fresh store, a snapshot
helper to prove "the store is unchanged", and a tiny model."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from localrun.store import ModelStore


def snapshot(root: Path) -> dict[str, int]:
    """Every file under ``root`` (except the lock file) with its size."""
    if not root.exists():
        return {}
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            rel = str(p.relative_to(root))
            if rel != ".lock":
                out[rel] = p.stat().st_size
    return out


def rot(path: Path) -> None:
    """Flip one byte in place keeping size, inode and mtime: what bit rot looks like to the store."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture
def snap() -> object:
    """The snapshot function, as a fixture (test modules here are not importable packages)."""
    return snapshot


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "models")


@pytest.fixture
def tiny_model(store: ModelStore, tiny_gguf: Path, tmp_path: Path) -> str:
    """A model 'tiny' created from the tiny GGUF with a system prompt and parameters."""
    mf = tmp_path / "Modelfile"
    mf.write_text(f"FROM {tiny_gguf}\nSYSTEM You are tiny.\nPARAMETER temperature 0.2\nPARAMETER stop <|im_end|>\n")
    store.create("tiny", mf.read_text(), base_dir=tmp_path)
    return "tiny:latest"
