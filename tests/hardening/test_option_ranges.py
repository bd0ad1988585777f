"""Every option of the one table (engine/limits.py), out of range, through every API of a real daemon.

Issue #26 point 3: ``{"num_thread": 0}`` and ``{"num_ctx": 1}`` passed the server and failed the
engine's assertions in the runner, a 500 carrying ``AssertionError: num_ctx=1 < 16``. Here each
option the table holds is sent outside its range (below, above, the wrong type) on each API that
takes options, and must come back as a 400 in that API's shape naming the option; then every option
is sent at the values an attacker tries first (0, -1, 1, 2**63, a float, a string, a bool, null) on
/api/chat and /v1/chat/completions, and every answer is a 200 or a 400. A GGUF that claims a trained
context under the engine's smallest loads too. The daemon's log must hold no traceback and no
AssertionError.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hardening_helpers import LiveDaemon, add_model, is_json_error
from tinymodel import write_tiny_gguf

from localrun.engine import limits
from localrun.server.options import ACCEPTED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

OPTIONS = sorted(ACCEPTED)


def out_of_range(name: str) -> list[Any]:
    """Values the table refuses for ``name``: each side of its range, and the wrong types."""
    limit = limits.OPTIONS[name]
    if limit.kind is limits.Kind.FLAG:
        return ["yes", 1]
    if limit.kind is limits.Kind.STOP:
        return [[1], ["x"] * (limits.MAX_STOP + 1), 5]
    step = 1 if limit.kind is limits.Kind.WHOLE else 0.5
    values: list[Any] = ["5", True, [1]]
    if limit.low is not None:
        values.append(limit.low - step)
    if limit.high is not None:
        values.append(limit.high + step)
    if limit.kind is limits.Kind.WHOLE:
        values.append(2.5)
    return values


ATTACKS: list[Any] = [0, -1, 1, 2**63, -(2**63) - 1, 0.5, 3.0, "x", True, False, None]


def _body(path: str, name: str, value: Any) -> dict[str, Any]:
    """A small valid request on ``path`` whose ``options`` hold ``name: value``."""
    options = {name: value}
    chat = [{"role": "user", "content": "hi"}]
    bodies: dict[str, dict[str, Any]] = {
        "/api/generate": {"prompt": "hi", "stream": False},
        "/api/chat": {"messages": chat, "stream": False},
        "/api/embed": {"input": "hi"},
        "/api/embeddings": {"prompt": "hi"},
        "/v1/chat/completions": {"messages": chat, "max_tokens": 2},
        "/v1/completions": {"prompt": "hi", "max_tokens": 2},
        "/v1/embeddings": {"input": "hi"},
        "/v1/responses": {"input": "hi", "max_output_tokens": 16},
        "/v1/messages": {"messages": chat, "max_tokens": 2},
    }
    body = {"model": "tiny", **bodies[path], "options": options}
    if name == "num_predict":  # a /v1 length field would override the option
        for field in ("max_tokens", "max_output_tokens"):
            body.pop(field, None)
    elif path.startswith("/api/") and "embed" not in path:
        options.setdefault("num_predict", 2)
    return body


def _message(response: httpx.Response) -> str:
    error = response.json()["error"]
    return str(error["message"] if isinstance(error, dict) else error)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path) -> Iterator[LiveDaemon]:
    base = tmp_path_factory.mktemp("option_ranges")
    models = base / "models"
    add_model(models, "tiny", tiny_gguf)
    add_model(models, "tiny-ctx", write_tiny_gguf(base / "ctx8.gguf", context_length=8, name="ctx8"))
    live = LiveDaemon(models, base / "daemon.log", env={"LOCALRUN_KEEP_ALIVE": "60s"})
    live.start()
    yield live
    live.stop()
    log = live.log_text()
    assert "Traceback" not in log and "AssertionError" not in log, log[-4000:]


def _post(daemon: LiveDaemon, path: str, body: dict[str, Any]) -> httpx.Response:
    response = httpx.post(daemon.url + path, json=body, timeout=120)
    assert daemon.proc is not None and daemon.proc.poll() is None, f"daemon died on {path} {body}"
    return response


ROUTES = ["/api/generate", "/api/chat", "/api/embed", "/api/embeddings", "/v1/chat/completions",
          "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages"]


@pytest.mark.parametrize("path", ROUTES)
def test_every_option_out_of_range_is_a_400_naming_it_on_every_api(daemon: LiveDaemon, path: str) -> None:
    wrong = []
    for name in OPTIONS:
        if name == "num_predict" and path == "/v1/messages":
            continue  # max_tokens is required there and is the length; it has its own check
        for value in out_of_range(name):
            r = _post(daemon, path, _body(path, name, value))
            if r.status_code != 400 or not is_json_error(r) or repr(name) not in _message(r):
                wrong.append(f"{name}={value!r:.40} -> {r.status_code} {r.text[:200]}")
    assert not wrong, f"{path}:\n" + "\n".join(wrong)


@pytest.mark.parametrize("path", ["/api/chat", "/v1/chat/completions"])
def test_an_attackers_first_values_are_answered_or_refused_never_a_server_error(daemon: LiveDaemon,
                                                                                path: str) -> None:
    wrong = []
    for name in [*OPTIONS, *limits.IGNORED]:
        for value in ATTACKS:
            r = _post(daemon, path, _body(path, name, value))
            refused_right = r.status_code == 400 and repr(name) in _message(r)
            if r.status_code != 200 and not refused_right:
                wrong.append(f"{name}={value!r:.40} -> {r.status_code} {r.text[:200]}")
    assert not wrong, f"{path}:\n" + "\n".join(wrong)


def test_num_thread_zero_is_ollamas_every_core_and_num_ctx_one_names_its_range(daemon: LiveDaemon) -> None:
    """The two requests of the issue, as a user sends them."""
    ok = _post(daemon, "/api/chat", _body("/api/chat", "num_thread", 0))
    assert ok.status_code == 200 and ok.json()["done"] is True
    refused = _post(daemon, "/v1/chat/completions", _body("/v1/chat/completions", "num_ctx", 1))
    assert refused.status_code == 400 and refused.json()["error"]["type"] == "invalid_request_error"
    assert "'num_ctx' must be a whole number of at least 16, got 1" in _message(refused)


@pytest.mark.parametrize("path", ["/api/chat", "/api/embed"])
def test_a_model_trained_on_eight_tokens_loads(daemon: LiveDaemon, path: str) -> None:
    body = _body(path, "seed", 1) | {"model": "tiny-ctx"}
    r = _post(daemon, path, body)
    assert r.status_code == 200, r.text[:300]
