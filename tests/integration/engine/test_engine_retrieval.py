"""Retrieval models in the engine (issue #30 points 1-3): tiny random-weight encoder embedding models,
causal embedding models and rerankers (tests/tinyencoder.py) load as their own kind, batch many
inputs into few decode calls, cut long inputs only when allowed, and give the vectors and scores
llama.cpp's own server (``llama-server --embedding`` / ``--rerank``) gives on the same files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import llamaserver
import numpy as np
import pytest
from tinyencoder import write_tiny_bert, write_tiny_bert_reranker, write_tiny_qwen3_embedding, write_tiny_qwen3_reranker

from localrun.engine.engine import Engine
from localrun.engine.types import LoadOptions
from localrun.errors import ContextOverflow, UnsupportedCapability
from localrun.hardware.memory import read_geometry
from localrun.modelkind import ModelKind

TEXTS = ["hello world", "the quick brown fox jumps over the lazy dog", "water", "a b c d e f g",
         "local models run fast with a cache", "x"]
QUERY = "what does the fox do"
WRITERS = {
    "bert-mean": lambda p: write_tiny_bert(p, pooling="mean"),
    "bert-cls": lambda p: write_tiny_bert(p, pooling="cls", seed=1),
    "qwen3-embedding": write_tiny_qwen3_embedding,
    "bert-reranker": write_tiny_bert_reranker,
    "qwen3-reranker": write_tiny_qwen3_reranker,
}
KINDS = {"bert-mean": ModelKind.EMBEDDING, "bert-cls": ModelKind.EMBEDDING, "qwen3-embedding": ModelKind.EMBEDDING,
         "bert-reranker": ModelKind.RERANK, "qwen3-reranker": ModelKind.RERANK}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("retrieval")
    out = {}
    for name, write in WRITERS.items():
        out[name] = folder / f"{name}.gguf"
        write(out[name])
    return out


@pytest.fixture(scope="module")
def engines(files: dict[str, Path]) -> Iterator[dict[str, Engine]]:
    loaded = {name: Engine(str(path), LoadOptions(num_ctx=512)) for name, path in files.items()}
    yield loaded
    for engine in loaded.values():
        engine.close()


def test_each_model_loads_as_its_kind_in_the_engine_and_in_its_header(files: dict[str, Path],
                                                                     engines: dict[str, Engine]) -> None:
    for name, kind in KINDS.items():
        assert engines[name].info.kind is kind, name
        assert read_geometry(str(files[name])).kind is kind, name


def test_vectors_are_unit_length_and_tell_texts_apart(engines: dict[str, Engine]) -> None:
    for name in ("bert-mean", "bert-cls", "qwen3-embedding"):
        result = engines[name].embed([*TEXTS, TEXTS[0]])
        vectors = np.array(result.embeddings)
        assert vectors.shape == (len(TEXTS) + 1, engines[name].info.n_embd)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
        assert np.allclose(vectors[0], vectors[-1]) and not np.allclose(vectors[0], vectors[1])
        assert result.truncated == [False] * (len(TEXTS) + 1)


def test_many_inputs_share_few_decode_calls_and_get_the_vectors_they_get_alone(engines: dict[str, Engine]) -> None:
    engine = engines["bert-mean"]
    assert engine.embedder is not None
    texts = [f"{TEXTS[i % len(TEXTS)]} {i}" for i in range(256)]
    before = engine.embedder.pooled.passes
    together = np.array(engine.embed(texts).embeddings)
    assert engine.embedder.pooled.passes - before <= 16  # not 256 sequential decodes
    alone = np.array([engine.embed([t]).embeddings[0] for t in texts[:8]])
    # a 32-sequence pass takes other matmul kernels than a lone one: float sums in another order
    assert np.abs(together[:8] - alone).max() < 1e-3


def test_a_long_input_is_cut_only_when_allowed_and_keeps_its_closing_separator(files: dict[str, Path]) -> None:
    with Engine(str(files["bert-mean"]), LoadOptions(num_ctx=64)) as engine:
        long_text = " ".join(["water"] * 200)
        with pytest.raises(ContextOverflow, match="input 1 is"):
            engine.embed(["short", long_text], truncate=False)
        result = engine.embed(["short", long_text], truncate=True)
        assert result.truncated == [False, True]
        ids = engine.vocab.tokenize(long_text)
        assert ids[-1] == engine.vocab.eos
        expected = engine.embed([[*ids[:63], engine.vocab.eos]]).embeddings[0]
        assert np.allclose(result.embeddings[1], expected)


def test_rerank_scores_each_document_as_it_scores_it_alone(engines: dict[str, Engine]) -> None:
    for name in ("bert-reranker", "qwen3-reranker"):
        engine = engines[name]
        result = engine.rerank(QUERY, TEXTS)
        assert len(result.scores) == len(TEXTS) and len(set(result.scores)) > 1
        alone = [engine.rerank(QUERY, [doc]).scores[0] for doc in TEXTS]
        # A pass of many pairs runs llama.cpp's tiled attention kernels (f16 tiles) where a lone pair
        # runs the row kernel: on this random model scores of about 6 move by up to 7e-3, as
        # llama-server's own do between -np 1 and -np 8 (measured); the order stays.
        assert np.abs(np.array(result.scores) - alone).max() < 2e-2, name
        assert list(np.argsort(result.scores)) == list(np.argsort(alone)), name
        assert result.prompt_eval_count == sum(len(engine.reranker.pair_tokens(QUERY, d))  # type: ignore[union-attr]
                                               for d in TEXTS)


def test_a_causal_reranker_reads_the_prefix_every_pair_shares_once(files: dict[str, Path]) -> None:
    with Engine(str(files["qwen3-reranker"]), LoadOptions(num_ctx=512)) as engine:
        pooled = engine.reranker.pooled  # type: ignore[union-attr]
        shared = engine.rerank(QUERY, TEXTS)
        read_shared = pooled.tokens_read
        pooled.share_prefix = False
        whole = engine.rerank(QUERY, TEXTS)
        read_whole = pooled.tokens_read - read_shared
    assert read_whole == whole.prompt_eval_count == shared.prompt_eval_count  # usage counts every pair whole
    assert read_shared < 0.5 * read_whole  # the template and the query are most of each pair
    # the prefix's cells are reused from the f16 cache: the last digits move, as with batching
    assert np.abs(np.array(shared.scores) - whole.scores).max() < 2e-2
    assert list(np.argsort(shared.scores)) == list(np.argsort(whole.scores))


def test_a_long_document_is_cut_to_fit_only_when_allowed(files: dict[str, Path]) -> None:
    with Engine(str(files["bert-reranker"]), LoadOptions(num_ctx=64)) as engine:
        docs = ["short", "fine", " ".join(["water"] * 200)]
        with pytest.raises(ContextOverflow, match="document 2 with the query"):
            engine.rerank(QUERY, docs, truncate=False)
        result = engine.rerank(QUERY, docs)
        assert result.truncated == [False, False, True]
        with pytest.raises(ContextOverflow, match="leaves no room for document 0"):
            engine.rerank(" ".join(["fox"] * 100), ["short"])


def test_a_model_asked_for_what_it_cannot_do_says_what_it_is(engines: dict[str, Engine],
                                                             tiny_gguf: Path) -> None:
    with pytest.raises(UnsupportedCapability, match="is not a reranking model"):
        engines["bert-mean"].rerank(QUERY, TEXTS)
    with pytest.raises(UnsupportedCapability, match="is a reranking model"):
        engines["bert-reranker"].embed(TEXTS)
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=256, num_parallel=1)) as chat_model:
        assert chat_model.info.kind is ModelKind.GENERATION
        with pytest.raises(UnsupportedCapability, match="is not a reranking model"):
            chat_model.rerank(QUERY, TEXTS)
        assert len(chat_model.embed(["hello"]).embeddings[0]) == chat_model.info.n_embd  # a text model also embeds


# --- the same files in llama.cpp's own server --------------------------------------------------


@pytest.mark.parametrize("name", ["bert-mean", "bert-cls", "qwen3-embedding"])
def test_vectors_equal_llama_servers(name: str, files: dict[str, Path], engines: dict[str, Engine],
                                     tmp_path: Path) -> None:
    args = ["-m", str(files[name]), "--embedding", "-t", "2", "-c", "2048", "-np", "1", "--no-warmup"]
    with llamaserver.serving(args, tmp_path / "log") as url:
        reply = httpx.post(url + "/v1/embeddings", json={"input": TEXTS}, timeout=60).json()
    theirs = np.array([d["embedding"] for d in reply["data"]])
    ours = np.array(engines[name].embed(TEXTS).embeddings)
    assert np.abs(theirs - ours).max() < 1e-4


@pytest.mark.parametrize("name", ["bert-reranker", "qwen3-reranker"])
def test_scores_equal_llama_servers(name: str, files: dict[str, Path], engines: dict[str, Engine],
                                    tmp_path: Path) -> None:
    # One pair a pass on both sides (-np 1 there): how many pairs share a pass moves the last digits
    # (test_rerank_scores_each_document_as_it_scores_it_alone), so like is compared with like.
    args = ["-m", str(files[name]), "--rerank", "-t", "2", "-c", "2048", "-np", "1", "--no-warmup"]
    with llamaserver.serving(args, tmp_path / "log") as url:
        reply = httpx.post(url + "/v1/rerank", json={"query": QUERY, "documents": TEXTS, "top_n": len(TEXTS)},
                           timeout=60).json()
    theirs = np.zeros(len(TEXTS))
    for item in reply["results"]:
        theirs[item["index"]] = item["relevance_score"]
    assert [item["index"] for item in reply["results"]] == list(np.argsort(-theirs))
    with Engine(str(files[name]), LoadOptions(num_ctx=512)) as engine:
        assert engine.reranker is not None
        engine.reranker.pooled.max_seqs = 1
        engine.reranker.pooled.share_prefix = False  # each pair read whole, as llama-server reads it
        ours = engine.rerank(QUERY, TEXTS)
    assert np.abs(theirs - np.array(ours.scores)).max() < 1e-4
    assert ours.prompt_eval_count == reply["usage"]["prompt_tokens"]
