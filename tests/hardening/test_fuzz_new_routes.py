"""Fuzzing the routes added since the last hardening round, and models an upstream serves (issue #26 point 7).

The same run as test_fuzz_openapi.py (fuzzing.py: positive and negative requests from
docs/openapi.yaml, the same checks on every answer), with a budget of its own, against a front
daemon that serves ``tiny`` itself and knows one upstream, another real ``localrun serve``, twice:
as ``peer`` (spoken to in OpenAI's /v1) and as ``olla`` (in Ollama's /api). Model names are drawn
from the local model, the upstream's (``peer/tiny``, ``olla/tiny``), a model the upstream lacks and
hostile names, so generated requests reach the local engine and both upstream adapters.

Fuzzed: ``/v1/responses``, ``/v1/responses/input_tokens``, ``/v1/messages``,
``/v1/messages/count_tokens`` (every model), and the older routes that take a model an upstream
serves (the generation, embedding, token and show routes); the four new routes get three times
the examples of the others. The suite's 5xx guard reads both
daemons' logs: a 5xx or a traceback in the upstream fails the test as one in the front does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakehub import FakeHub
from fuzzing import EXAMPLES, HOSTILE_NAMES, Tally, fuzz, fuzz_spec, operations
from hardening_helpers import LiveDaemon, add_model, engine_kind, record_figures

pytest.importorskip("schemathesis")
pytest.importorskip("hypothesis")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

MODEL = "tiny"
UPSTREAM_MODELS = ["peer/tiny", "olla/tiny", "peer/tiny:latest", "olla/missing:1b", "nobody/tiny"]
NEW_ROUTES = {"/v1/responses", "/v1/responses/input_tokens", "/v1/messages", "/v1/messages/count_tokens"}
UPSTREAM_ROUTES = {  # older routes that take a model an upstream may serve
    ("POST", "/api/generate"), ("POST", "/api/chat"), ("POST", "/api/embed"), ("POST", "/api/embeddings"),
    ("POST", "/api/show"), ("POST", "/api/tokenize"), ("POST", "/api/detokenize"),
    ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("POST", "/v1/embeddings"),
    ("GET", "/v1/models/{model}"),
}


@pytest.fixture(scope="module")
def daemons(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path) -> Iterator[tuple[LiveDaemon, LiveDaemon]]:
    """(front, upstream): both real daemons holding ``tiny``; the front reaches the upstream as peer and olla."""
    hub = FakeHub().__enter__()  # empty: a pull of a made-up hf.co name is a 404, not "cannot reach the hub"
    empty_hub = {"HF_ENDPOINT": hub.url, "LOCALRUN_KEEP_ALIVE": "30s", "LOCALRUN_MAX_LOADED_MODELS": "1"}
    up_dir = tmp_path_factory.mktemp("fuzz-upstream")
    add_model(up_dir / "models", MODEL, tiny_gguf, "PARAMETER num_predict 16\n")
    upstream = LiveDaemon(up_dir / "models", up_dir / "daemon.log", env=empty_hub).start()
    front_dir = tmp_path_factory.mktemp("fuzz-front")
    add_model(front_dir / "models", MODEL, tiny_gguf, "PARAMETER num_predict 16\n")
    front = LiveDaemon(front_dir / "models", front_dir / "daemon.log", env={
        **empty_hub, "LOCALRUN_UPSTREAMS": f"peer={upstream.url}/v1,olla={upstream.url}/api"})
    try:
        front.start()
        yield front, upstream
    finally:
        front.stop()
        upstream.stop()
        hub.__exit__(None, None, None)


TALLY = Tally()


def _operations() -> list[Any]:
    spec = fuzz_spec([MODEL, f"{MODEL}:latest", *UPSTREAM_MODELS, *HOSTILE_NAMES[:3]],
                     [MODEL, *UPSTREAM_MODELS, "peer/../x", "peer/%2e%2e/etc/passwd"])
    return [op for op in operations(spec)
            if op.path in NEW_ROUTES or (op.method.upper(), op.path) in UPSTREAM_ROUTES]


OPERATIONS = _operations()


def test_the_new_routes_are_all_fuzzed() -> None:
    """A route renamed in the description must not drop out of this run silently."""
    fuzzed = {(op.method.upper(), op.path) for op in OPERATIONS}
    assert {("POST", path) for path in NEW_ROUTES} | UPSTREAM_ROUTES == fuzzed


@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op.method.upper()} {op.path}")
def test_fuzz_new_route_or_upstream_model(daemons: tuple[LiveDaemon, LiveDaemon], operation: Any,
                                          mode: str) -> None:
    front, upstream = daemons
    examples = 3 * EXAMPLES if operation.path in NEW_ROUTES else EXAMPLES  # what this run is for
    fuzz(operation, mode, front.url, [front, upstream], TALLY, examples)
    for daemon in daemons:
        assert httpx.get(daemon.url + "/health", timeout=10).status_code == 200


def test_fuzz_new_routes_summary(daemons: tuple[LiveDaemon, LiveDaemon]) -> None:
    """Runs last in this module: both daemons are still up, and the figures for RELIABILITY.md."""
    front, _ = daemons
    assert httpx.get(front.url + "/health", timeout=10).json()["status"] == "ok"
    record_figures("fuzz-new-routes", engine=engine_kind(), requests=TALLY.requests,
                   skipped_for_time=TALLY.skipped, operations=len(OPERATIONS),
                   statuses=dict(sorted(TALLY.statuses.items())), by_operation=dict(TALLY.by_operation),
                   seconds=TALLY.seconds())
    assert TALLY.requests > 0
