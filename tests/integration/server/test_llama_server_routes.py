"""llama-server's own routes, ``/completion`` and ``/infill``, through the real app and llama.cpp on a
tiny model with Qwen2.5-Coder's FIM tokens: llama-server's reply shapes (what llama.vim and
llama.vscode read), its options and errors, and the same completions llama-server itself gives on the
same file (when it is built)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import llamaserver
import pytest
from tinymodel import write_tiny_gguf

from localrun.config import models_dir

pytestmark = pytest.mark.timeout(300)
GREEDY = {"temperature": 0, "repeat_penalty": 1.0}
# llama.vim's request (autoload/llama.vim), its cursor in a small Python file
VIM = {"input_prefix": "def f(x):\n    ", "input_suffix": "\n\nprint(f(2))\n",
       "input_extra": [{"filename": "util.py", "text": "def g(y):\n    return y\n"}], "prompt": "ret",
       "n_predict": 24, "stop": [], "n_indent": 4, "top_k": 40, "top_p": 0.90, "samplers": ["top_k", "top_p", "infill"],
       "stream": False, "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1000, "id_slot": 0,
       "seed": 5, "response_fields": ["content", "timings/prompt_n", "timings/prompt_ms", "timings/predicted_n",
                                      "timings/predicted_ms", "truncated", "tokens_cached"]}


@pytest.fixture(scope="module")
def fim_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("fim") / "fim.gguf", fim=True, context_length=8192)


@pytest.fixture
def store(fim_gguf: Path, tiny_gguf: Path) -> Any:
    from localrun.store import ModelStore

    s = ModelStore(models_dir())
    s.create("coder", f"FROM {fim_gguf}\nPARAMETER num_ctx 4096\n")
    s.create("plain", f"FROM {tiny_gguf}\nPARAMETER num_ctx 4096\n")
    return s


def _sse(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


async def test_infill_answers_what_llama_vim_reads(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    r = await client.post("/infill", json={**VIM, "model": "coder"})
    assert r.status == 200
    raw = await r.text()
    assert '"content":"' in raw  # llama.vim's fast check before it parses
    reply = json.loads(raw)
    assert set(reply) == set(VIM["response_fields"])
    assert reply["timings/prompt_n"] > 0 and reply["truncated"] is False
    assert reply["tokens_cached"] == reply["timings/prompt_n"] + reply["timings/predicted_n"]


async def test_infill_streams_llama_servers_chunks_and_ends_with_the_whole_reply(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    body = {"model": "coder", "input_prefix": "the ", "input_suffix": " world", "n_predict": 12, **GREEDY}
    whole = await (await client.post("/infill", json=body)).json()
    assert whole["stop"] is True and whole["model"] == "coder:latest" and whole["tokens_evaluated"] > 0
    assert whole["stop_type"] in ("eos", "limit") and whole["tokens_cut"] == 0
    assert set(whole["timings"]) >= {"prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second"}
    text = await (await client.post("/infill", json={**body, "stream": True})).text()
    assert "[DONE]" not in text  # llama-server's own stream ends without it
    chunks = _sse(text)
    assert all(c["stop"] is False for c in chunks[:-1]) and chunks[-1]["stop"] is True
    assert "".join(c["content"] for c in chunks) == whole["content"]
    assert chunks[-1]["timings"]["cache_n"] > 0  # the same prompt again: from the prefix cache


async def test_completion_takes_text_token_ids_and_many_prompts(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    one = await (await client.post("/completion", json={"model": "coder", "prompt": [1, 300, 301],
                                                        "n_predict": 4, **GREEDY})).json()
    assert one["tokens_evaluated"] == 3 and one["tokens_predicted"] == 4 and one["stop_type"] == "limit"
    many = await (await client.post("/completions", json={"model": "coder", "prompt": ["the", "water"],
                                                          "n_cmpl": 2, "n_predict": 3})).json()
    assert isinstance(many, list) and [m["index"] for m in many] == [0, 1, 2, 3]
    stopped = await (await client.post("/completion", json={"model": "coder", "prompt": "the", "n_predict": 40,
                                                            "stop": ["e"], **GREEDY})).json()
    if stopped["stop_type"] == "word":
        assert stopped["stopping_word"] == "e" and "e" not in stopped["content"]


async def test_without_a_model_the_one_loaded_answers(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    await client.post("/completion", json={"model": "coder", "prompt": "the", "n_predict": 1})
    for model in ({}, {"model": ""}):  # llama.vim sends "" when its model_fim is unset
        body = {"input_prefix": "a", "input_suffix": "b", "n_predict": 2, **model}
        assert (await (await client.post("/infill", json=body)).json())["model"] == "coder:latest"


async def test_bad_requests_get_llama_servers_error_shape(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/infill", {"model": "plain", "input_prefix": "a", "input_suffix": "b"}, "does not support insert"),
        ("/infill", {"model": "coder", "input_prefix": "a"}, "'input_suffix' are required"),
        ("/infill", {"model": "coder", "input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": 1}]},
         "'input_extra' item 0"),
        ("/completion", {"model": "coder", "prompt": [1, "a"]}, "mixing text and token ids"),
        ("/completion", {"model": "coder", "prompt": "a", "mirostat": 2}, "'mirostat' is not supported"),
        ("/completion", {"model": "coder", "prompt": "a", "return_tokens": True}, "'return_tokens' is not supported"),
        ("/completion", {"model": "coder", "prompt": "a", "samplers": ["top_k", "bogus"]}, "sampler names"),
        ("/completion", {"model": "coder", "prompt": "a", "n_cmpl": 99}, "'n_cmpl' must be between"),
        ("/completion", {"model": "coder", "prompt": [5] * 5000}, "5000 tokens"),
    ]
    for path, body, words in cases:
        r = await client.post(path, json=body)
        error = (await r.json())["error"]
        assert r.status == 400 and words in error["message"] and error["code"] == 400, (body, error)
    r = await client.post("/completion", json={"model": "coder", "prompt": [5] * 5000})
    error = (await r.json())["error"]
    assert error["type"] == "exceed_context_size_error" and (error["n_prompt_tokens"], error["n_ctx"]) == (5000, 4096)
    assert error["message"].startswith("the request exceeds the available context size")


async def test_the_same_completions_as_llama_server_on_the_same_file(serve_app: Any, store: Any, fim_gguf: Path,
                                                                   tmp_path: Path) -> None:
    """Greedy, and sampled through llama.vim's own chain (top_k, top_p, infill) with a seed: the same text."""
    client = await serve_app(store)
    bodies = [
        {**VIM, "response_fields": ["content", "tokens_evaluated"]},
        {"input_prefix": "the ", "input_suffix": " world", "n_predict": 16, **GREEDY},
        {"input_prefix": "one two", "input_suffix": "", "prompt": "th", "n_predict": 16,
         "samplers": ["top_k", "temperature"], "temperature": 0.7, "top_k": 40, "seed": 9},
    ]
    completion = {"prompt": "the water", "n_predict": 16, **GREEDY}
    with llamaserver.serving(["-m", str(fim_gguf), "-c", "4096", "-np", "1", "-b", "1024"], tmp_path / "ls.log") as url:
        async with httpx.AsyncClient(base_url=url, timeout=120) as theirs:
            for body in bodies:
                mine = await (await client.post("/infill", json={**body, "model": "coder"})).json()
                assert mine == (await theirs.post("/infill", json=body)).json() if "response_fields" in body \
                    else mine["content"] == (await theirs.post("/infill", json=body)).json()["content"], body
            mine = await (await client.post("/completion", json={**completion, "model": "coder"})).json()
            assert mine["content"] == (await theirs.post("/completion", json=completion)).json()["content"]


# a file of 60 lines (~500 tokens); the next request's prefix has its second line deleted
FILE = [f"the water {i} one two\n" for i in range(60)]


async def test_infill_reuses_a_cached_prefix_whose_lines_moved_and_completion_when_asked(
        serve_app: Any, store: Any) -> None:
    """A line deleted near the top of the file: /infill reads the new prompt's changed part only, as
    llama-server does in llama.vim's preset (--cache-reuse 256); /completion only with n_cache_reuse."""
    client = await serve_app(store)

    async def infill(lines: list[str], **extra: Any) -> dict[str, Any]:
        body = {"model": "coder", "input_prefix": "".join(lines), "input_suffix": "\n", "n_predict": 4, **GREEDY}
        return await (await client.post("/infill", json={**body, **extra})).json()  # type: ignore[no-any-return]

    first = await infill(FILE)
    moved = await infill(FILE[:1] + FILE[2:])
    assert moved["timings"]["prompt_n"] < first["timings"]["prompt_n"] // 4  # the rest came from the cache
    assert moved["tokens_cached"] >= first["timings"]["prompt_n"] - moved["timings"]["prompt_n"] - 16
    exact = await infill(FILE[:2] + FILE[3:], n_cache_reuse=0)  # asked not to: the file is read again
    assert exact["timings"]["prompt_n"] > first["timings"]["prompt_n"] * 3 // 4

    head, block, tail = [1, 300, 301, 302], list(range(400, 440)), list(range(500, 600))
    body = {"model": "coder", "n_predict": 2, **GREEDY}
    await client.post("/completion", json={**body, "prompt": head + block + tail})
    plain = await (await client.post("/completion", json={**body, "prompt": head + tail + [7]})).json()
    await client.post("/completion", json={**body, "prompt": head + block + tail})
    asked = await (await client.post("/completion", json={**body, "prompt": head + tail + [8],
                                                          "n_cache_reuse": 64})).json()
    assert plain["timings"]["cache_n"] == len(head)
    assert asked["timings"]["cache_n"] == len(head) + len(tail) and asked["timings"]["prompt_n"] == 1


async def test_shifted_reuse_says_what_llama_server_says_with_its_cache_reuse(serve_app: Any, store: Any,
                                                                               fim_gguf: Path, tmp_path: Path) -> None:
    """The same file, then with its second line deleted: the same text from both servers, the second
    reading the same few tokens (both reuse the rest shifted, so both give the same approximation)."""
    client = await serve_app(store)
    bodies = [{"input_prefix": "".join(lines), "input_suffix": "\n", "n_predict": 8, **GREEDY}
              for lines in (FILE, FILE[:1] + FILE[2:])]
    args = ["-m", str(fim_gguf), "-c", "4096", "-np", "1", "-b", "1024", "--cache-reuse", "256"]
    with llamaserver.serving(args, tmp_path / "ls.log") as url:
        async with httpx.AsyncClient(base_url=url, timeout=120) as theirs:
            for body in bodies:
                mine = await (await client.post("/infill", json={**body, "model": "coder"})).json()
                their = (await theirs.post("/infill", json=body)).json()
                assert mine["content"] == their["content"]
                assert mine["timings"]["cache_n"] == their["timings"]["cache_n"]
                assert mine["timings"]["prompt_n"] == their["timings"]["prompt_n"]
