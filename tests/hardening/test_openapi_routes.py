"""docs/openapi.yaml describes exactly the routes the daemon serves (paths and methods).

A route added to the app without documenting it, a documented route that no longer exists, or a
method that differs fails here, so the description clients and the fuzz run rely on stays true.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hardening_helpers import HTTP_METHODS, app_operations, load_spec, spec_operations

from localrun.config import load_settings
from localrun.server.app import create_app
from localrun.server.middleware import LLAMA_SERVER_PATHS


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return load_spec()


def _implicit_heads(ops: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """aiohttp's add_get also registers HEAD; those are implied by GET, not listed one by one."""
    return {("HEAD", path) for method, path in ops if method == "GET"}


def test_every_app_route_is_documented_and_every_documented_route_exists(spec: dict[str, Any]) -> None:
    app = create_app(load_settings(), store=object())
    served = app_operations(app)
    documented = spec_operations(spec)
    undocumented = served - documented - _implicit_heads(served)
    assert not undocumented, f"routes served but missing from docs/openapi.yaml: {sorted(undocumented)}"
    missing = documented - served
    assert not missing, f"routes in docs/openapi.yaml the app does not serve: {sorted(missing)}"


def test_the_issue_routes_are_all_there(spec: dict[str, Any]) -> None:
    """The routes the daemon issue names, so neither the app nor the file can drop one silently."""
    wanted = {
        ("GET", "/"), ("HEAD", "/"), ("GET", "/health"), ("GET", "/metrics"), ("GET", "/api/version"),
        ("POST", "/api/generate"), ("POST", "/api/chat"), ("POST", "/api/embed"), ("POST", "/api/embeddings"),
        ("GET", "/api/tags"), ("POST", "/api/show"), ("POST", "/api/pull"), ("POST", "/api/create"),
        ("POST", "/api/copy"), ("DELETE", "/api/delete"), ("GET", "/api/ps"), ("HEAD", "/api/blobs/{digest}"),
        ("POST", "/api/blobs/{digest}"), ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
        ("POST", "/v1/embeddings"), ("GET", "/v1/models"), ("GET", "/v1/models/{model}"),
        ("POST", "/v1/responses"), ("POST", "/v1/messages"), ("POST", "/v1/messages/count_tokens"),
    }
    assert wanted <= spec_operations(spec)


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_the_description_is_well_formed(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.1")
    for ref in _refs(spec):
        assert ref.startswith("#/"), ref
        node: Any = spec
        for part in ref[2:].split("/"):
            assert part in node, f"dangling $ref {ref}"
            node = node[part]
    for schema in spec["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    operation_ids = [op["operationId"] for item in spec["paths"].values()
                     for method, op in item.items() if method in HTTP_METHODS]
    assert len(operation_ids) == len(set(operation_ids)), "operationId values must be unique"
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method not in HTTP_METHODS:
                continue
            assert op.get("responses"), f"{method.upper()} {path} documents no responses"
            for param in item.get("parameters", []) + op.get("parameters", []):
                if param["in"] == "path":
                    assert "{" + param["name"] + "}" in path


def test_error_statuses_are_documented_with_the_error_shape(spec: dict[str, Any]) -> None:
    """Each /v1 route documents OpenAI error objects (Anthropic's under /v1/messages), llama-server's own
    routes its error objects, each other route Ollama's {"error": ...}."""
    responses = spec["components"]["responses"]
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method not in HTTP_METHODS:
                continue
            for status, response in op["responses"].items():
                if int(status) < 400 or "$ref" not in response:
                    continue
                name = response["$ref"].rsplit("/", 1)[-1]
                assert name in responses
                if path.startswith("/v1/messages"):
                    assert name.startswith("Anthropic"), f"{method} {path} {status}"
                elif path.startswith("/v1"):
                    assert name.startswith("OpenAI"), f"{method} {path} {status}"
                elif path in LLAMA_SERVER_PATHS:
                    assert name.startswith("Llama"), f"{method} {path} {status}"
                else:
                    assert name.startswith("Ollama"), f"{method} {path} {status}"


def test_schemathesis_accepts_the_description() -> None:
    schemathesis = pytest.importorskip("schemathesis")
    schema = schemathesis.openapi.from_dict(load_spec())
    assert len(list(schema.get_all_operations())) == len(spec_operations(load_spec()))
