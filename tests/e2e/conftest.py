"""Fixtures for the CLI/daemon tests: a store holding the tiny model, served by the fake engine."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemonproc import stop_daemon

from localrun import config

FAKES = Path(__file__).parents[1] / "integration" / "server"


@pytest.fixture
def store_with_tiny(monkeypatch: pytest.MonkeyPatch, tiny_gguf: Path) -> Iterator[None]:
    """``tiny`` in the test's store; daemons started by the test run the fake engine and are stopped after.

    The fake engine answers " w0 w1 w2 w3 w4"; a prompt containing SLOW streams a token every 20 ms.
    """
    monkeypatch.setenv("LOCALRUN_RUNNER_FACTORY", "fake_engine:FakeEngine")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKES), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from localrun.store import ModelStore

    ModelStore(config.models_dir()).create("tiny", f"FROM {tiny_gguf}\n")
    yield
    stop_daemon()
