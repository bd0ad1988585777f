"""Property-based fuzzing of a real daemon from docs/openapi.yaml (schemathesis + hypothesis).

For every documented operation, schemathesis generates requests that follow the description
(positive) and requests that break it (negative: wrong types, missing fields, out-of-range values).
They go over loopback to a real ``localrun serve`` whose store holds the tiny model, so generated
requests that name it reach the scheduler, a runner process and the engine. What every answer must
be, the budget and how to explore fresh examples: fuzzing.py. The routes added since (Responses,
Messages, the two token counts) and upstream-served models get a run of their own:
test_fuzz_new_routes.py.

Turn each find into a named regression test (test_bad_input.py) before fixing it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakehub import FakeHub
from fuzzing import HOSTILE_NAMES, Tally, fuzz, fuzz_spec, operations
from hardening_helpers import LiveDaemon, add_model, engine_kind, record_figures

from localrun.config import STARTER_MODEL

pytest.importorskip("schemathesis")
pytest.importorskip("hypothesis")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

MODEL = "tiny"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path) -> Iterator[LiveDaemon]:
    base = tmp_path_factory.mktemp("fuzz")
    models = base / "models"
    add_model(models, MODEL, tiny_gguf, "PARAMETER num_predict 16\n")
    # llama-server's routes answer a request whose model is null (as absent) with the starter when no
    # single text model is loaded; here that is the tiny model too, so its generations stay short (the
    # real starter with ignore_eos and no n_predict would write until the client gave up).
    add_model(models, STARTER_MODEL, tiny_gguf, "PARAMETER num_predict 16\n")
    with FakeHub() as hub:
        live = LiveDaemon(models, base / "daemon.log", env={
            # An empty stand-in hub: a pull of any hf.co name the fuzzer makes up is a 404 (a closed port
            # would be a 502 "cannot reach the hub", a fault of the network, not of the request).
            "HF_ENDPOINT": hub.url,
            "LOCALRUN_KEEP_ALIVE": "30s",
            "LOCALRUN_MAX_LOADED_MODELS": "1",
        })
        live.start()
        yield live
        live.stop()
    assert "Traceback" not in live.log_text(), live.log_text()[-4000:]


TALLY = Tally()


def _operations() -> list[Any]:
    spec = fuzz_spec([MODEL, f"{MODEL}:latest", "TINY", "Tiny:latest", *HOSTILE_NAMES],
                     [MODEL, f"{MODEL}:latest", "hf.co/a/b:Q4_0", "../x", "%2e%2e/etc/passwd", "a/b/../../c"])
    return operations(spec)


OPERATIONS = _operations()


@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op.method.upper()} {op.path}")
def test_fuzz_operation(daemon: LiveDaemon, operation: Any, mode: str) -> None:
    if mode == "negative" and operation.method.upper() in ("GET", "HEAD") and "{" not in operation.path:
        pytest.skip("nothing to break: no body, no parameters")
    fuzz(operation, mode, daemon.url, [daemon], TALLY)
    assert httpx.get(daemon.url + "/health", timeout=10).status_code == 200


def test_fuzz_summary(daemon: LiveDaemon) -> None:
    """Runs last in this module: the daemon is still up, and the figures for RELIABILITY.md."""
    assert daemon.proc is not None and daemon.proc.poll() is None
    assert httpx.get(daemon.url + "/health", timeout=10).json()["status"] == "ok"
    record_figures("fuzz", engine=engine_kind(), requests=TALLY.requests, skipped_for_time=TALLY.skipped,
                   operations=len(OPERATIONS), statuses=dict(sorted(TALLY.statuses.items())),
                   seconds=TALLY.seconds())
    assert TALLY.requests > 0
