"""`localrun verify [--repair]` as a user runs it: bit rot found, hub weights fetched again, the rest removed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakehub import FakeHub
from storefixtures import rot

from localrun import config
from localrun.store import ModelStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hub(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHub() as h:
        h.add_file("org/Tiny-GGUF", "tiny-Q4_K_M.gguf", tiny_gguf.read_bytes())
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


def cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "localrun", *argv], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


def test_verify_and_repair(hub: FakeHub, tiny_gguf: Path, tmp_path: Path) -> None:
    assert cli("pull", "hf.co/org/Tiny-GGUF").returncode == 0
    local = tmp_path / "local.gguf"
    local.write_bytes(tiny_gguf.read_bytes()[:-1] + b"\x01")  # other bytes, same shape: its own blob
    (tmp_path / "Modelfile").write_text(f"FROM {local}\n")
    assert cli("create", "mine", "-f", str(tmp_path / "Modelfile")).returncode == 0
    ok = cli("verify")
    assert ok.returncode == 0 and "CORRUPT" not in ok.stdout, ok.stdout + ok.stderr

    store = ModelStore(config.models_dir())
    hub_blob = store.resolve("hf.co/org/Tiny-GGUF").model_path
    mine_blob = store.resolve("mine").model_path
    for blob in (hub_blob, mine_blob):
        rot(blob)
    found = cli("verify")
    assert found.returncode == 1 and found.stdout.count("CORRUPT") == 2
    assert "localrun verify --repair" in found.stderr

    repaired = cli("verify", "--repair")
    assert repaired.returncode == 1  # the local model cannot be fetched again
    assert "repaired" in repaired.stdout and "create mine:latest again" in repaired.stdout
    assert hub_blob.read_bytes() == tiny_gguf.read_bytes()  # downloaded again and verified
    assert not mine_blob.exists()  # never served again
    assert len(hub.downloads("tiny-Q4_K_M.gguf")) == 2

    after = cli("verify", "hf.co/org/Tiny-GGUF")
    assert after.returncode == 0, after.stdout + after.stderr
