"""Retrieval models through the real app and runner processes (issue #30 points 1, 2 and 5): tiny
random-weight embedding models and rerankers (tests/tinyencoder.py) on /api/embed, /api/embeddings,
/v1/embeddings and /v1/rerank, what each model says it can do, and hostile retrieval requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinyencoder import write_tiny_bert, write_tiny_bert_reranker, write_tiny_qwen3_reranker

from localrun.config import models_dir

pytestmark = pytest.mark.timeout(300)

DOCS = ["the quick brown fox", "hello world", "water and oil", "local models run fast"]
LONG = " ".join(["water"] * 200)


@pytest.fixture(scope="module")
def retrieval_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("retrieval")
    return {"emb": write_tiny_bert(folder / "emb.gguf"), "rr": write_tiny_bert_reranker(folder / "rr.gguf"),
            "qrr": write_tiny_qwen3_reranker(folder / "qrr.gguf")}


@pytest.fixture
def store(tiny_gguf: Path, retrieval_files: dict[str, Path]) -> Any:
    from localrun.store import ModelStore

    s = ModelStore(models_dir())
    s.create("tiny", f"FROM {tiny_gguf}\nPARAMETER num_ctx 512\n")
    s.create("emb", f"FROM {retrieval_files['emb']}\nPARAMETER num_ctx 64\n")
    s.create("rr", f"FROM {retrieval_files['rr']}\nPARAMETER num_ctx 64\n")
    s.create("qrr", f"FROM {retrieval_files['qrr']}\n")
    return s


async def test_each_model_says_what_it_can_do(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    for name, caps in (("emb", ["embedding"]), ("rr", ["rerank"]), ("qrr", ["rerank"])):
        body = await (await client.post("/api/show", json={"model": name})).json()
        assert body["capabilities"] == caps, name
    assert "completion" in (await (await client.post("/api/show", json={"model": "tiny"})).json())["capabilities"]
    tags = {m["name"]: m["details"] for m in (await (await client.get("/api/tags")).json())["models"]}
    assert (tags["emb:latest"]["kind"], tags["rr:latest"]["kind"]) == ("embedding", "rerank")
    assert "kind" not in tags["tiny:latest"] and not tags["emb:latest"].get("base_model")  # not "completion only"
    assert {e.name: str(e.kind) for e in store.list()}["qrr:latest"] == "rerank"


async def test_every_embedding_route_gives_the_same_unit_vectors(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    ollama = await (await client.post("/api/embed", json={"model": "emb", "input": DOCS})).json()
    openai = await (await client.post("/v1/embeddings", json={"model": "emb", "input": DOCS})).json()
    legacy = await (await client.post("/api/embeddings", json={"model": "emb", "prompt": DOCS[1]})).json()
    vectors = np.array(ollama["embeddings"])
    assert vectors.shape == (4, 64) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert np.allclose(vectors, [d["embedding"] for d in openai["data"]])
    assert np.allclose(vectors[1], legacy["embedding"])
    assert ollama["prompt_eval_count"] == openai["usage"]["prompt_tokens"] > 0
    assert "truncated" not in ollama and "truncated" not in openai
    ps = (await (await client.get("/api/ps")).json())["models"]
    assert [(m["name"], m["context_pool"], m["num_parallel"]) for m in ps] == [("emb:latest", None, 1)]  # no pool


async def test_a_long_input_is_cut_only_where_the_api_allows_it_and_the_reply_says_so(serve_app: Any,
                                                                                     store: Any) -> None:
    client = await serve_app(store)
    r = await client.post("/v1/embeddings", json={"model": "emb", "input": ["short", LONG]})
    assert r.status == 400 and "input 1 is" in (await r.json())["error"]["message"]
    r = await client.post("/v1/embeddings", json={"model": "emb", "input": ["short", LONG], "truncate": True})
    assert r.status == 200 and (await r.json())["truncated"] == [1]
    ollama = await (await client.post("/api/embed", json={"model": "emb", "input": ["short", LONG]})).json()
    assert ollama["truncated"] == [1] and len(ollama["embeddings"]) == 2  # Ollama's default: truncate
    r = await client.post("/api/embed", json={"model": "emb", "input": ["short", LONG], "truncate": False})
    assert r.status == 400 and "input 1 is" in (await r.json())["error"]
    r = await client.post("/api/embeddings", json={"model": "emb", "prompt": LONG})
    assert r.status == 400 and "truncate" in (await r.json())["error"]


async def test_rerank_sorts_by_score_in_the_jina_and_cohere_shapes(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    body = {"model": "rr", "query": "what does the fox do", "documents": DOCS}
    reply = await (await client.post("/v1/rerank", json=body)).json()
    results = reply["results"]
    scores = [r["relevance_score"] for r in results]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3] and scores == sorted(scores, reverse=True)
    assert all(r["document"] == {"text": DOCS[r["index"]]} for r in results)
    assert reply["usage"]["prompt_tokens"] > 0 and reply["model"] == "rr:latest" and "meta" not in reply
    top = await (await client.post("/rerank", json={**body, "top_n": 2, "return_documents": False})).json()
    assert [r["index"] for r in top["results"]] == [r["index"] for r in results[:2]]
    assert all("document" not in r for r in top["results"])
    cohere = await (await client.post("/v2/rerank", json={**body, "documents": [{"text": d} for d in DOCS]})).json()
    assert [r["index"] for r in cohere["results"]] == [r["index"] for r in results]
    assert all("document" not in r for r in cohere["results"])  # Cohere v2 returns them only when asked
    qwen = await (await client.post("/v1/rerank", json={**body, "model": "qrr"})).json()
    assert all(0.0 <= r["relevance_score"] <= 1.0 for r in qwen["results"])  # P(yes)


async def test_a_long_document_is_cut_and_named_in_the_reply(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    body = {"model": "rr", "query": "water", "documents": ["short", LONG]}
    reply = await (await client.post("/v1/rerank", json=body)).json()
    assert reply["meta"]["warnings"] == ["document 1 was cut to fit the model's context"]
    r = await client.post("/v1/rerank", json={**body, "truncate": False})
    assert r.status == 400 and "document 1 with the query" in (await r.json())["error"]["message"]


async def test_a_model_asked_for_what_it_cannot_do_is_a_400_naming_it(serve_app: Any, store: Any) -> None:
    client = await serve_app(store)
    cases = [
        ("/api/chat", {"model": "emb", "messages": [{"role": "user", "content": "hi"}]}, "emb:latest is an embedding"),
        ("/v1/chat/completions", {"model": "rr", "messages": [{"role": "user", "content": "hi"}]},
         "rr:latest is a reranking model"),
        ("/api/generate", {"model": "emb", "prompt": "hi"}, "cannot generate text"),
        ("/v1/completions", {"model": "qrr", "prompt": "hi"}, "cannot generate text"),
        ("/api/embed", {"model": "rr", "input": "hi"}, "makes no embeddings"),
        ("/v1/rerank", {"model": "emb", "query": "q", "documents": DOCS}, "emb:latest is not a reranking model"),
        ("/v1/rerank", {"model": "tiny", "query": "q", "documents": DOCS}, "is not a reranking model"),
    ]
    for path, body, words in cases:
        r = await client.post(path, json=body)
        text = await r.text()
        assert r.status == 400 and words in text, (path, body["model"], text)


async def test_hostile_retrieval_requests_get_a_clear_400_and_leave_the_daemon_serving(serve_app: Any,
                                                                                      store: Any) -> None:
    client = await serve_app(store)
    base = {"model": "rr", "query": "q", "documents": DOCS}
    cases = [
        ({**base, "documents": ["d"] * 100_000}, "at most 2048 documents"),
        ({**base, "query": ""}, "'query' must be a non-empty string"),
        ({**base, "query": 5}, "'query' must be"),
        ({**base, "documents": ["ok", 7]}, "documents[1] must be a string"),
        ({**base, "documents": [{"title": "x"}]}, "documents[0] must be a string"),
        ({**base, "documents": []}, "non-empty list"),
        ({**base, "documents": "one string"}, "non-empty list"),
        ({**base, "top_n": -1}, "'top_n' must be between 1 and 2048"),
        ({**base, "top_n": 10**15}, "'top_n' must be between 1 and 2048"),
        ({**base, "top_n": "3"}, "'top_n' must be"),
        ({**base, "return_documents": "yes"}, "'return_documents' must be"),
    ]
    for body, words in cases:
        r = await client.post("/v1/rerank", json=body)
        text = await r.text()
        assert r.status == 400 and words in text, (words, text[:300])
    ten_mb = "word " * 2_000_000
    for path, body in (("/api/embed", {"model": "emb", "input": [ten_mb]}),
                       ("/v1/embeddings", {"model": "emb", "input": ten_mb}),
                       ("/v1/embeddings", {"model": "emb", "input": ["x"] * 3000})):
        r = await client.post(path, json=body)
        assert r.status == 400 and ("characters" in await r.text() or "at most 2048" in await r.text())
    reply = await (await client.post("/v1/rerank", json={**base, "top_n": 99})).json()
    assert len(reply["results"]) == len(DOCS)  # a top_n above the count returns them all
