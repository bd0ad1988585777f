"""Property-based fuzzing of a real daemon from docs/openapi.yaml (schemathesis + hypothesis).

For every documented operation, schemathesis generates requests that follow the description
(positive) and requests that break it (negative: wrong types, missing fields, out-of-range values).
They go over loopback to a real ``localrun serve`` whose store holds the tiny model, so generated
requests that name it reach the scheduler, a runner process and the engine. Every answer must be:

- no 5xx, except the documented upstream/resource answers (502 ``pull_failed`` from pull/create
  while the hub is unreachable, 503 busy, 507 cannot fit);
- an error (4xx) that is well-formed JSON in its API's shape (``{"error": "..."}`` on /api, an
  OpenAI error object on /v1);
- a 2xx JSON body that matches the response schema the description documents;
- within the client timeout (no hang), with the daemon still answering /health afterwards.

Bounded: ``LOCALRUN_FUZZ_EXAMPLES`` examples per operation and mode (default 10) and a wall-clock
budget of ``LOCALRUN_FUZZ_SECONDS`` (default 75) for the whole run.

Reproducible by default: every run replays the same generated examples (hypothesis'
``derandomize``), so a gate never fails on a draw it has not seen before. ``LOCALRUN_FUZZ_RANDOM=1``
explores fresh examples; run it with more examples before a release, and turn each find into a
named regression test (test_bad_input.py) before fixing it.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hardening_helpers import LiveDaemon, add_model, engine_kind, free_port, load_spec, record_figures

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

EXAMPLES = int(os.environ.get("LOCALRUN_FUZZ_EXAMPLES", "10"))
BUDGET_S = float(os.environ.get("LOCALRUN_FUZZ_SECONDS", "75"))
RANDOM = os.environ.get("LOCALRUN_FUZZ_RANDOM") == "1"
REQUEST_TIMEOUT_S = 60.0
MODEL = "tiny"
HOSTILE_NAMES = ["missing:1b", "../../etc/passwd", "/etc/passwd", "tiny:../x", "hf.co/a/b:Q4_0", "x" * 400,
                 "tiny\u0000"]
UPSTREAM_OK = {"/api/pull", "/api/create"}  # 502 here means "the hub cannot be reached", documented
NAMED_EVENT_STREAMS = {  # how each named-event stream may end
    "/v1/responses": {"response.completed", "response.incomplete", "response.failed"},
    "/v1/messages": {"message_stop", "error"},
}


def fuzz_spec() -> dict[str, Any]:
    """The description, with model names drawn from the stored model and hostile names (see below)."""
    spec = copy.deepcopy(load_spec())
    # A valid request would stop the daemon under test; its input checks are in test_daemon_lifecycle.py.
    del spec["paths"]["/api/shutdown"]
    # An enum, not anyOf [enum, string]: hypothesis-jsonschema would merge that into "any string".
    # Negative mode still sends arbitrary strings (anything outside the enum).
    spec["components"]["schemas"]["ModelName"] = {"enum": [MODEL, f"{MODEL}:latest", "TINY", "Tiny:latest",
                                                           *HOSTILE_NAMES]}
    spec["paths"]["/v1/models/{model}"]["parameters"][0]["schema"] = {
        "enum": [MODEL, f"{MODEL}:latest", "hf.co/a/b:Q4_0", "../x", "%2e%2e/etc/passwd", "a/b/../../c"]}
    # Keep generations short so the run stays bounded in time; enormous values have their own tests
    # (test_bad_input.py), here the point is breadth.
    schemas = spec["components"]["schemas"]
    schemas["Options"]["properties"]["num_predict"]["maximum"] = 64
    schemas["Options"]["properties"]["num_thread"]["maximum"] = 8
    schemas["OpenAISampling"]["properties"]["max_tokens"]["maximum"] = 64
    schemas["OpenAISampling"]["properties"]["n"]["maximum"] = 4
    schemas["OpenAIChatRequest"]["allOf"][1]["properties"]["max_completion_tokens"]["maximum"] = 64
    schemas["ResponsesRequest"]["properties"]["max_output_tokens"]["maximum"] = 64
    schemas["AnthropicMessagesRequest"]["allOf"][1]["properties"]["max_tokens"]["maximum"] = 64
    return spec


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path) -> Iterator[LiveDaemon]:
    base = tmp_path_factory.mktemp("fuzz")
    models = base / "models"
    add_model(models, MODEL, tiny_gguf, "PARAMETER num_predict 16\n")
    live = LiveDaemon(models, base / "daemon.log", env={
        # The hub is a closed port: pulls fail fast with a clear error instead of reaching the internet.
        "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "LOCALRUN_KEEP_ALIVE": "30s",
        "LOCALRUN_MAX_LOADED_MODELS": "1",
    })
    live.start()
    yield live
    live.stop()
    assert "Traceback" not in live.log_text(), live.log_text()[-4000:]


class Tally:
    def __init__(self) -> None:
        self.statuses: Counter[int] = Counter()
        self.requests = 0
        self.started: float | None = None  # the first request, not import time (other modules run first)
        self.skipped = 0

    def out_of_time(self) -> bool:
        if self.started is None:
            self.started = time.monotonic()
        return time.monotonic() - self.started > BUDGET_S

    def seconds(self) -> float:
        return 0.0 if self.started is None else round(time.monotonic() - self.started, 1)


TALLY = Tally()


def _ctype(response: Any) -> str:
    """schemathesis keeps headers as lower-cased lists."""
    value = response.headers.get("content-type") or [""]
    return str(value[0] if isinstance(value, list) else value)


def _check(case: Any, response: Any, daemon: LiveDaemon, mode: str) -> None:
    path = case.operation.path
    status = response.status_code
    where = f"{mode} {case.operation.method.upper()} {path} -> {status}: {case.body!r:.300}"
    assert daemon.proc is not None and daemon.proc.poll() is None, f"daemon died after {where}"
    if status >= 500:
        body = response.json()
        if path.startswith("/v1/messages"):  # Anthropic's shape has a type, no code
            code = body["error"]["type"]
            allowed = {503: {"overloaded_error"}, 507: {"api_error"}}
        else:
            code = body["error"]["code"] if path.startswith("/v1") else body.get("code")
            allowed = {503: {"server_busy"}, 507: {"insufficient_memory"}}
        if path in UPSTREAM_OK:
            allowed[502] = {"pull_failed"}
        assert code in allowed.get(status, set()), f"server error {where}: {response.text[:500]}"
    if status >= 400 and case.operation.method.upper() != "HEAD":
        assert _ctype(response).startswith("application/json"), where
        body = response.json()
        if path.startswith("/v1"):
            error = body["error"]
            assert isinstance(error, dict) and error["message"] and error["type"], where
            if path.startswith("/v1/messages"):
                assert body["type"] == "error", where
        else:
            assert isinstance(body["error"], str) and body["error"], where
    ctype = _ctype(response)
    if 200 <= status < 300 and ctype.startswith("application/x-ndjson"):
        lines = [json.loads(line) for line in response.text.splitlines() if line.strip()]
        assert lines, where
        # A stream ends with its final chunk, or with an {"error": ...} line that says why.
        last = lines[-1]
        assert last.get("done") is True or last.get("status") == "success" or isinstance(last.get("error"), str), \
            where
    if 200 <= status < 300 and ctype.startswith("text/event-stream"):
        if path in NAMED_EVENT_STREAMS:  # named events, no [DONE]: the last event says how it ended
            names = [line[7:] for line in response.text.splitlines() if line.startswith("event: ")]
            assert names and names[-1] in NAMED_EVENT_STREAMS[path], where
        else:
            assert response.text.rstrip().endswith("data: [DONE]"), where


def _operations() -> list[Any]:
    schema = schemathesis.openapi.from_dict(fuzz_spec())
    return [result.ok() for result in schema.get_all_operations()]


OPERATIONS = _operations()


@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op.method.upper()} {op.path}")
def test_fuzz_operation(daemon: LiveDaemon, operation: Any, mode: str) -> None:
    from schemathesis import GenerationMode
    from schemathesis.specs.openapi.checks import response_schema_conformance

    if mode == "negative" and operation.method.upper() in ("GET", "HEAD") and "{" not in operation.path:
        pytest.skip("nothing to break: no body, no parameters")
    gen_mode = GenerationMode.POSITIVE if mode == "positive" else GenerationMode.NEGATIVE
    session = __import__("requests").Session()

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not RANDOM,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=gen_mode))
    def run(case: Any) -> None:
        if TALLY.out_of_time():
            TALLY.skipped += 1
            return
        response = case.call(base_url=daemon.url, session=session, timeout=REQUEST_TIMEOUT_S)
        TALLY.requests += 1
        TALLY.statuses[response.status_code] += 1
        _check(case, response, daemon, mode)
        if (mode == "positive" and 200 <= response.status_code < 300
                and _ctype(response).startswith("application/json")):
                case.validate_response(response, checks=[response_schema_conformance])

    run()
    assert httpx.get(daemon.url + "/health", timeout=10).status_code == 200


def test_fuzz_summary(daemon: LiveDaemon) -> None:
    """Runs last in this module: the daemon is still up, and the figures for RELIABILITY.md."""
    assert daemon.proc is not None and daemon.proc.poll() is None
    assert httpx.get(daemon.url + "/health", timeout=10).json()["status"] == "ok"
    record_figures("fuzz", engine=engine_kind(), requests=TALLY.requests, skipped_for_time=TALLY.skipped,
                   operations=len(OPERATIONS), statuses=dict(sorted(TALLY.statuses.items())),
                   seconds=TALLY.seconds())
    assert TALLY.requests > 0
