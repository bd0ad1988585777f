"""Pulling hf.co GGUFs from a stand-in hub on 127.0.0.1: pick, stream, resume, verify."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakehub import FakeHub

from localrun.errors import DigestMismatch, InvalidModelFile, ModelNotFound, PullError
from localrun.store import ModelStore, Progress, curated, hfdownload, pull

REPO = "test-org/Tiny-GGUF"


@pytest.fixture
def hub(tiny_gguf: Path, tiny_gguf_b: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHub() as h:
        h.add_file(REPO, "tiny-Q4_K_M.gguf", tiny_gguf.read_bytes())
        h.add_file(REPO, "tiny-Q8_0.gguf", tiny_gguf_b.read_bytes())
        h.add_file(REPO, "README.md", b"# tiny\n")
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


def _size(path: Path) -> int:
    return path.stat().st_size


def test_pull_default_quant_with_progress(store: ModelStore, hub: FakeHub, tiny_gguf: Path) -> None:
    reports: list[Progress] = []
    entry = pull(store, f"hf.co/{REPO}", progress=reports.append)
    assert entry.name == f"hf.co/{REPO}:latest"
    r = store.resolve(entry.name)
    assert r.model_path.read_bytes() == tiny_gguf.read_bytes()
    assert r.template is None  # the engine uses the GGUF's own chat template
    downloading = [p for p in reports if p.status == "downloading"]
    assert downloading[-1].completed == downloading[-1].total == _size(tiny_gguf)
    assert any(p.rate for p in downloading)
    assert [p.status for p in reports][-1] == "success"
    assert "verifying sha256 digest" in [p.status for p in reports]


def test_quant_tag_is_case_insensitive(store: ModelStore, hub: FakeHub, tiny_gguf_b: Path) -> None:
    entry = pull(store, f"hf.co/{REPO}:q8_0")
    assert store.resolve(entry.name).model_path.read_bytes() == tiny_gguf_b.read_bytes()


def test_unknown_quant_lists_available(store: ModelStore, hub: FakeHub, snap) -> None:  # type: ignore[no-untyped-def]
    before = snap(store.root)
    with pytest.raises(ModelNotFound, match="available: Q4_K_M, Q8_0"):
        pull(store, f"hf.co/{REPO}:Q2_K")
    with pytest.raises(ModelNotFound, match="not found on the hub"):
        pull(store, "hf.co/nobody/nothing")
    assert snap(store.root) == before


def test_present_model_is_not_downloaded_again(store: ModelStore, hub: FakeHub) -> None:
    pull(store, f"hf.co/{REPO}:Q4_K_M")
    gets = len(hub.downloads("tiny-Q4_K_M.gguf"))
    reports: list[Progress] = []
    pull(store, f"hf.co/{REPO}:Q4_K_M", progress=reports.append)
    assert len(hub.downloads("tiny-Q4_K_M.gguf")) == gets == 1
    assert reports[0].status == "already up to date"
    # Another name for the same file: a new manifest, but the blob is not fetched again.
    pull(store, f"hf.co/{REPO}")
    assert len(hub.downloads("tiny-Q4_K_M.gguf")) == 1


def test_connection_cut_mid_file_resumes(store: ModelStore, hub: FakeHub, tiny_gguf: Path) -> None:
    size = _size(tiny_gguf)
    hub.cut_after["tiny-Q4_K_M.gguf"] = [size // 3, size // 3]
    entry = pull(store, f"hf.co/{REPO}:Q4_K_M")
    ranges = hub.downloads("tiny-Q4_K_M.gguf")
    assert ranges[0] is None and ranges[1] == f"bytes={size // 3}-" and ranges[2] == f"bytes={2 * (size // 3)}-"
    assert hub.body_bytes_sent == size  # every byte sent once: resumed, not restarted
    store.verify(entry.name)
    assert store.resolve(entry.name).model_path.read_bytes() == tiny_gguf.read_bytes()


def test_interrupted_pull_resumes_on_the_next_run(store: ModelStore, hub: FakeHub, tiny_gguf: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    size = _size(tiny_gguf)
    monkeypatch.setattr(hfdownload, "MAX_RETRIES", 0)
    hub.cut_after["tiny-Q4_K_M.gguf"] = [size // 2]
    with pytest.raises(PullError, match="run the same pull again to resume"):
        pull(store, f"hf.co/{REPO}:Q4_K_M")
    partials = [p for p in store.blobs.dir.iterdir() if p.name.endswith("-partial")]
    assert len(partials) == 1 and _size(partials[0]) == size // 2
    assert store.list() == []
    entry = pull(store, f"hf.co/{REPO}:Q4_K_M")
    assert hub.downloads("tiny-Q4_K_M.gguf")[-1] == f"bytes={size // 2}-"
    assert store.resolve(entry.name).model_path.read_bytes() == tiny_gguf.read_bytes()
    assert not [p for p in store.blobs.dir.iterdir() if p.name.endswith("-partial")]


def test_bytes_not_matching_the_advertised_hash(store: ModelStore, hub: FakeHub, snap) -> None:  # type: ignore[no-untyped-def]
    hub.advertise_sha["tiny-Q4_K_M.gguf"] = "ab" * 32
    store.blobs.ensure_dirs()
    before = snap(store.root)
    with pytest.raises(DigestMismatch, match="advertises"):
        pull(store, f"hf.co/{REPO}:Q4_K_M")
    assert {k: v for k, v in snap(store.root).items() if not k.endswith(".lock")} == before
    assert store.list() == []


def test_token_is_sent(store: ModelStore, hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> None:
    hub.required_token = "hf_secret"
    with pytest.raises((ModelNotFound, PullError)):
        pull(store, f"hf.co/{REPO}:Q4_K_M")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    pull(store, f"hf.co/{REPO}:Q4_K_M")


def test_curated_name_resolves_through_modelfiles(store: ModelStore, hub: FakeHub, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "modelfiles"
    (root / "tinychat").mkdir(parents=True)
    (root / "tinychat" / "1m.Modelfile").write_text(
        f'FROM hf.co/{REPO}:Q4_K_M\nTEMPLATE """{{{{ range .Messages }}}}{{{{ .Content }}}}{{{{ end }}}}"""\n'
        'PARAMETER stop "<|im_end|>"\n'
    )
    monkeypatch.setattr(curated, "modelfiles_dir", lambda: root)
    entry = pull(store, "tinychat:1m")
    assert [e.name for e in store.list()] == ["tinychat:1m"]  # no extra hf.co entry
    r = store.resolve(entry.name)
    assert r.parameters == {"stop": ["<|im_end|>"]} and "range .Messages" in (r.template or "")
    # An uncurated tag of a curated family names the nearest known model (issue #16's suggestions).
    with pytest.raises(ModelNotFound, match=r"'tinychat:2m' not found; did you mean 'tinychat:1m'\?"):
        pull(store, "tinychat:2m")


def test_unreachable_hub_is_a_clear_error(store: ModelStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(PullError, match="cannot reach the hub"):
        pull(store, f"hf.co/{REPO}")


def _pull_in_process(root: str, endpoint: str) -> None:
    os.environ["HF_ENDPOINT"] = endpoint
    pull(ModelStore(Path(root)), f"hf.co/{REPO}:Q4_K_M")


def test_two_processes_pulling_the_same_file(store: ModelStore, hub: FakeHub, tiny_gguf: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_pull_in_process, args=(str(store.root), hub.url)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert len(hub.downloads("tiny-Q4_K_M.gguf")) == 1  # the second waited and found the blob
    assert store.resolve(f"hf.co/{REPO}:Q4_K_M").model_path.read_bytes() == tiny_gguf.read_bytes()


def test_hub_file_that_is_not_a_gguf(store: ModelStore, hub: FakeHub, snap) -> None:  # type: ignore[no-untyped-def]
    hub.add_file("org/Broken-GGUF", "broken-Q4_K_M.gguf", b"<html>not a model</html>" * 100)
    store.blobs.ensure_dirs()
    before = snap(store.root)
    with pytest.raises(InvalidModelFile, match="magic"):
        pull(store, "hf.co/org/Broken-GGUF")
    assert {k: v for k, v in snap(store.root).items() if not k.endswith(".lock")} == before


def test_sha_from_paths_info_when_the_listing_lacks_it(store: ModelStore, hub: FakeHub, tiny_gguf: Path) -> None:
    hub.omit_lfs_in_info = True
    entry = pull(store, f"hf.co/{REPO}:Q4_K_M")
    assert any(m == "POST" and "/paths-info/" in p for m, p, _ in hub.requests)
    assert store.resolve(entry.name).model_path.read_bytes() == tiny_gguf.read_bytes()
