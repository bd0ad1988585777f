"""Retrieval through the official ``openai`` and ``ollama`` packages and the ``localrun embed`` /
``localrun rerank`` commands, against a real ``localrun serve`` (issue #30 points 2 and 3).

Tiny random-weight models (tests/tinyencoder.py) imported through the ollama client itself: a BERT
embedding model and a BERT cross-encoder reranker. Reranking has no official OpenAI or Ollama
client; Cohere's SDK and LangChain's CohereRerank were checked by hand (BENCHMARKS.md, issue #30).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import httpx
import numpy as np
import ollama
import openai
import pytest
from ports import free_port
from servedaemon import Daemon
from tinyencoder import write_tiny_bert, write_tiny_bert_reranker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DOCS = ["the quick brown fox jumps", "hello world", "water and oil", "local models run fast"]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    home = tmp_path_factory.mktemp("daemon")
    live = Daemon(home, free_port(), {"LOCALRUN_MODELS": str(home / "models")})
    try:
        client = ollama.Client(host=live.url)
        for name, write in (("emb", write_tiny_bert), ("rr", write_tiny_bert_reranker)):
            digest = client.create_blob(write(home / f"{name}.gguf"))
            client.create(model=name, files={f"{name}.gguf": digest})
        yield live
    finally:
        live.stop()


def test_the_openai_and_ollama_clients_get_the_same_vectors(daemon: Daemon) -> None:
    oai = openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0)
    reply = oai.embeddings.create(model="emb", input=DOCS)
    ours = np.array([d.embedding for d in reply.data])
    assert ours.shape == (4, 64) and reply.usage.prompt_tokens > 0
    oll = ollama.Client(host=daemon.url)
    assert np.allclose(ours, oll.embed(model="emb", input=DOCS).embeddings, atol=1e-6)
    assert np.allclose(ours[1], oll.embeddings(model="emb", prompt=DOCS[1]).embedding, atol=1e-6)
    assert oll.show("emb").capabilities == ["embedding"] and oll.show("rr").capabilities == ["rerank"]
    with pytest.raises(openai.BadRequestError, match="input 1 is"):
        oai.embeddings.create(model="emb", input=["short", "water " * 600])
    with pytest.raises(ollama.ResponseError, match="is an embedding model"):
        oll.chat(model="emb", messages=[{"role": "user", "content": "hi"}])


def test_rerank_over_http_and_from_the_command_line_agree(daemon: Daemon) -> None:
    reply = httpx.post(daemon.url + "/v1/rerank", json={"model": "rr", "query": "what does the fox do",
                                                         "documents": DOCS, "top_n": 2}, timeout=60).json()
    best = [r["index"] for r in reply["results"]]
    env = daemon.env
    out = subprocess.run([sys.executable, "-m", "localrun", "rerank", "rr", "what does the fox do", *DOCS,
                          "--top-n", "2"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = out.stdout.splitlines()
    assert rows[0].split() == ["RANK", "SCORE", "DOC", "TEXT"]
    assert [int(row.split()[2]) for row in rows[1:]] == best
    piped = subprocess.run([sys.executable, "-m", "localrun", "embed", "emb"], input="hello world\n\nwater\n",
                           env=env, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and len(piped.stdout.splitlines()) == 2  # one JSON array a non-empty line
    wrong = subprocess.run([sys.executable, "-m", "localrun", "rerank", "emb", "q", "d"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 1 and "emb:latest is not a reranking model" in wrong.stderr
    once = subprocess.run([sys.executable, "-m", "localrun", "run", "emb", "hello", "world"], env=env,
                          capture_output=True, text=True, timeout=120)  # as `ollama run` answers an embedding model
    assert once.returncode == 0, once.stderr
    assert json.loads(once.stdout) == pytest.approx(json.loads(piped.stdout.splitlines()[0]), abs=1e-6)
    chat = subprocess.run([sys.executable, "-m", "localrun", "run", "rr", "hello"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert chat.returncode == 1 and "try `localrun rerank rr QUERY DOC...`" in chat.stderr


def test_a_daemon_in_front_reranks_and_embeds_through_its_upstream(daemon: Daemon,
                                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    home = tmp_path_factory.mktemp("front")
    front = Daemon(home, free_port(), {"LOCALRUN_MODELS": str(home / "models"), "XDG_CONFIG_HOME": str(home / "config"),
                                       "LOCALRUN_UPSTREAMS": f"near={daemon.url}"})
    try:
        ask = {"query": "what does the fox do", "documents": DOCS}
        direct = httpx.post(daemon.url + "/v1/rerank", json={"model": "rr", **ask}, timeout=60).json()
        through = httpx.post(front.url + "/v1/rerank", json={"model": "near/rr", **ask}, timeout=60).json()
        assert through["model"] == "near/rr" and through["usage"] == direct["usage"]
        assert [(r["index"], r["document"]) for r in through["results"]] == \
            [(r["index"], r["document"]) for r in direct["results"]]
        assert [r["relevance_score"] for r in through["results"]] == \
            pytest.approx([r["relevance_score"] for r in direct["results"]], abs=1e-6)
        long_docs = ["fox " * 2000, "hello world"]
        cut = httpx.post(front.url + "/v1/rerank", json={"model": "near/rr", "query": "fox", "documents": long_docs},
                         timeout=60).json()
        assert cut["meta"]["warnings"] == ["document 0 was cut to fit the model's context"]
        refused = httpx.post(front.url + "/v1/rerank", json={"model": "near/rr", "query": "fox", "truncate": False,
                                                             "documents": long_docs}, timeout=60)
        assert refused.status_code == 400 and "upstream near" in refused.json()["error"]["message"]
        oai = openai.OpenAI(base_url=front.url + "/v1", api_key="unused", max_retries=0)
        vectors = np.array([d.embedding for d in oai.embeddings.create(model="near/emb", input=DOCS).data])
        direct_vectors = openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0).embeddings
        assert np.allclose(vectors, [d.embedding for d in direct_vectors.create(model="emb", input=DOCS).data],
                           atol=1e-6)
    finally:
        front.stop()
