"""The fuzz run both fuzz modules share: the description with its model names replaced, the checks
every answer must pass, and one operation fuzzed in one mode (schemathesis + hypothesis).

Every answer must be:

- no 5xx, except the documented upstream/resource answers (502 ``pull_failed`` from pull/create
  while the hub is unreachable, 503 busy, 507 cannot fit); the suite's 5xx guard
  (tests/serverguard.py) reads the daemons' logs too, so a 5xx or a traceback anywhere fails the test;
- an error (4xx) that is well-formed JSON in its API's shape (``{"error": "..."}`` on /api, an
  OpenAI error object on /v1, Anthropic's on /v1/messages);
- a 2xx JSON body that matches the response schema the description documents, a stream that ends
  the way its API says;
- within the client timeout (no hang), with the daemon still answering /health afterwards.

Bounded: ``LOCALRUN_FUZZ_EXAMPLES`` examples per operation and mode (default 10) and a wall-clock
budget of ``LOCALRUN_FUZZ_SECONDS`` (default 75) for each module's run. Reproducible by default
(hypothesis' ``derandomize``); ``LOCALRUN_FUZZ_RANDOM=1`` explores fresh examples.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import requests
from hardening_helpers import LiveDaemon, load_spec

from localrun.server.middleware import LLAMA_SERVER_PATHS

EXAMPLES = int(os.environ.get("LOCALRUN_FUZZ_EXAMPLES", "10"))
BUDGET_S = float(os.environ.get("LOCALRUN_FUZZ_SECONDS", "75"))
RANDOM = os.environ.get("LOCALRUN_FUZZ_RANDOM") == "1"
REQUEST_TIMEOUT_S = 60.0
# schemathesis stops reading an event stream after 20 events by default; ours end by themselves (a
# generation is at most 64 tokens here) and must be read to their last event to check how they end.
MAX_STREAM_EVENTS = 10_000
HOSTILE_NAMES = ["missing:1b", "../../etc/passwd", "/etc/passwd", "tiny:../x", "hf.co/a/b:Q4_0", "x" * 400,
                 "tiny\u0000"]
UPSTREAM_OK = {"/api/pull", "/api/create"}  # 502 here means "the hub cannot be reached", documented
NAMED_EVENT_STREAMS = {  # how each named-event stream may end
    "/v1/responses": {"response.completed", "response.incomplete", "response.failed"},
    "/v1/messages": {"message_stop", "error"},
}


def fuzz_spec(model_names: Sequence[str], path_models: Sequence[str]) -> dict[str, Any]:
    """The description, with model names drawn from ``model_names`` (bodies) and ``path_models``
    (``/v1/models/{model}``), and generations kept short."""
    spec = copy.deepcopy(load_spec())
    # A valid request would stop the daemon under test; its input checks are in test_daemon_lifecycle.py.
    del spec["paths"]["/api/shutdown"]
    # An enum, not anyOf [enum, string]: hypothesis-jsonschema would merge that into "any string".
    # Negative mode still sends arbitrary strings (anything outside the enum).
    spec["components"]["schemas"]["ModelName"] = {"enum": list(model_names)}
    spec["paths"]["/v1/models/{model}"]["parameters"][0]["schema"] = {"enum": list(path_models)}
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
    for field in ("n_predict", "max_tokens"):
        schemas["LlamaSampling"]["properties"][field]["maximum"] = 64
    schemas["LlamaSampling"]["properties"]["n_cmpl"]["maximum"] = 4
    # llama-server's routes answer a request without a model with the starter, which would import it here
    for name in ("LlamaCompletionRequest", "LlamaInfillRequest"):
        schemas[name]["allOf"][1]["required"].append("model")
    return spec


def operations(spec: dict[str, Any]) -> list[Any]:
    """schemathesis' operations of ``spec``, reading event streams to their end."""
    import schemathesis

    schema = schemathesis.openapi.from_dict(spec)
    schema.config.max_stream_events = MAX_STREAM_EVENTS
    results: list[Any] = list(schema.get_all_operations())  # Ok | Err; .ok() raises on an Err
    return [result.ok() for result in results]


class Tally:
    """What one module's run sent and got, and its wall-clock budget."""

    def __init__(self) -> None:
        self.statuses: Counter[int] = Counter()
        self.by_operation: Counter[str] = Counter()
        self.requests = 0
        self.started: float | None = None  # the first request, not import time (other modules run first)
        self.skipped = 0

    def out_of_time(self) -> bool:
        if self.started is None:
            self.started = time.monotonic()
        return time.monotonic() - self.started > BUDGET_S

    def seconds(self) -> float:
        return 0.0 if self.started is None else round(time.monotonic() - self.started, 1)


def _ctype(response: Any) -> str:
    """schemathesis keeps headers as lower-cased lists."""
    value = response.headers.get("content-type") or [""]
    return str(value[0] if isinstance(value, list) else value)


def check(case: Any, response: Any, daemons: Sequence[LiveDaemon], mode: str) -> None:
    """The answer's contract (the module docstring); ``daemons``: every process that must survive it."""
    path = case.operation.path
    status = response.status_code
    where = f"{mode} {case.operation.method.upper()} {path} -> {status}: {case.body!r:.300}"
    for daemon in daemons:
        assert daemon.proc is not None and daemon.proc.poll() is None, f"daemon {daemon.url} died after {where}"
    if status >= 500:
        body = response.json()
        if path.startswith("/v1/messages"):  # Anthropic's shape has a type, no code
            code = body["error"]["type"]
            allowed = {503: {"overloaded_error"}, 507: {"api_error"}}
        elif path in LLAMA_SERVER_PATHS:  # llama-server's: the status as its code, a type
            code = body["error"]["type"]
            allowed = {503: {"unavailable_error"}, 507: {"server_error"}}
        else:
            code = body["error"]["code"] if path.startswith("/v1") else body.get("code")
            allowed = {503: {"server_busy"}, 507: {"insufficient_memory"}}
        if path in UPSTREAM_OK:
            allowed[502] = {"pull_failed"}
        assert code in allowed.get(status, set()), f"server error {where}: {response.text[:500]}"
    if status >= 400 and case.operation.method.upper() != "HEAD":
        assert _ctype(response).startswith("application/json"), where
        body = response.json()
        if path.startswith("/v1") or path in LLAMA_SERVER_PATHS:
            error = body["error"]
            assert isinstance(error, dict) and error["message"] and error["type"], where
            if path in LLAMA_SERVER_PATHS:
                assert error["code"] == status, where
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
        if path in LLAMA_SERVER_PATHS:  # llama-server's chunks, no [DONE]: the last one ends it, or an error
            last = json.loads([line for line in response.text.splitlines() if line.startswith("data: ")][-1][6:])
            assert last.get("stop") is True or isinstance(last.get("error"), dict), f"{where}\n{response.text[-800:]}"
        elif path in NAMED_EVENT_STREAMS:  # named events, no [DONE]: the last event says how it ended
            names = [line[7:] for line in response.text.splitlines() if line.startswith("event: ")]
            assert names and names[-1] in NAMED_EVENT_STREAMS[path], f"{where}\n...{response.text[-1500:]}"
        else:
            assert response.text.rstrip().endswith("data: [DONE]"), f"{where}\n...{response.text[-1500:]}"


def fuzz(operation: Any, mode: str, url: str, daemons: Sequence[LiveDaemon], tally: Tally,
         examples: int = EXAMPLES) -> None:
    """Send ``examples`` of ``operation``'s generated requests (``mode``: positive or negative) to
    ``url``, and check each answer."""
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis import GenerationMode
    from schemathesis.specs.openapi.checks import response_schema_conformance

    gen_mode = GenerationMode.POSITIVE if mode == "positive" else GenerationMode.NEGATIVE
    session = requests.Session()
    name = f"{operation.method.upper()} {operation.path}"

    @settings(max_examples=examples, deadline=None, database=None, derandomize=not RANDOM,
              phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=operation.as_strategy(generation_mode=gen_mode))
    def run(case: Any) -> None:
        if tally.out_of_time():
            tally.skipped += 1
            return
        response = case.call(base_url=url, session=session, timeout=REQUEST_TIMEOUT_S)
        tally.requests += 1
        tally.by_operation[name] += 1
        tally.statuses[response.status_code] += 1
        check(case, response, daemons, mode)
        if (mode == "positive" and 200 <= response.status_code < 300
                and _ctype(response).startswith("application/json")):
            case.validate_response(response, checks=[response_schema_conformance])

    run()
