"""tests/tinyencoder.py: the tiny retrieval models are deterministic, carry the keys llama.cpp reads
for encoders and rerankers, and load and run in llama-cpp-python (vectors and scores of the right size)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import llama_cpp
import pytest
from gguf import GGUFReader
from tinyencoder import (
    QWEN3_RERANK_TEMPLATE,
    bert_vocab,
    write_tiny_bert,
    write_tiny_bert_reranker,
    write_tiny_qwen3_embedding,
    write_tiny_qwen3_reranker,
)

WRITERS: dict[str, Callable[..., Path]] = {
    "bert": write_tiny_bert,
    "bert-cls": lambda path, **kw: write_tiny_bert(path, pooling="cls", **kw),
    "bert-reranker": write_tiny_bert_reranker,
    "qwen3-reranker": write_tiny_qwen3_reranker,
    "qwen3-embedding": write_tiny_qwen3_embedding,
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tinyencoder")
    return {kind: write(root / f"{kind}.gguf") for kind, write in WRITERS.items()}


def fields(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metadata key -> value, tensor name -> ggml shape) of a GGUF file."""
    reader = GGUFReader(path)
    return ({k: f.contents() for k, f in reader.fields.items()},
            {t.name: [int(n) for n in t.shape] for t in reader.tensors})


@pytest.mark.parametrize("kind", list(WRITERS))
def test_same_seed_same_bytes_other_seed_other_weights(tmp_path: Path, models: dict[str, Path], kind: str) -> None:
    again = WRITERS[kind](tmp_path / "again.gguf")
    other = WRITERS[kind](tmp_path / "other.gguf", seed=1)
    assert again.read_bytes() == models[kind].read_bytes()
    assert other.read_bytes() != models[kind].read_bytes()
    assert other.stat().st_size == again.stat().st_size


@pytest.mark.parametrize(("kind", "pooling"), [("bert", 1), ("bert-cls", 2), ("bert-reranker", 4)])
def test_bert_headers_are_what_the_converter_writes(models: dict[str, Path], kind: str, pooling: int) -> None:
    kv, tensors = fields(models[kind])
    assert kv["general.architecture"] == "bert"
    assert kv["bert.attention.causal"] is False
    assert kv["bert.pooling_type"] == pooling
    assert kv["bert.attention.layer_norm_epsilon"] == pytest.approx(1e-12)
    assert kv["tokenizer.ggml.token_type_count"] == 2
    assert kv["tokenizer.ggml.model"] == "bert"
    tokens = kv["tokenizer.ggml.tokens"]
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert (kv["tokenizer.ggml.bos_token_id"], kv["tokenizer.ggml.eos_token_id"],
            kv["tokenizer.ggml.seperator_token_id"]) == (2, 3, 3)
    assert kv["tokenizer.ggml.add_bos_token"] is True and kv["tokenizer.ggml.add_eos_token"] is True
    # phantom-space form: "the" is "\u2581the", "##ing" is "ing"
    assert "\u2581the" in tokens and "ing" in tokens and "##ing" not in tokens
    assert "bert.classifier.output_labels" not in kv
    n_embd = kv["bert.embedding_length"]
    for name in ("token_embd.weight", "token_types.weight", "position_embd.weight", "token_embd_norm.bias",
                 "blk.1.attn_q.bias", "blk.1.attn_output_norm.bias", "blk.1.ffn_down.bias",
                 "blk.1.layer_output_norm.weight"):
        assert name in tensors
    assert tensors["token_types.weight"] == [n_embd, 2]
    if kind == "bert-reranker":
        assert tensors["cls.weight"] == [n_embd, n_embd] and tensors["cls.output.weight"] == [n_embd, 1]
        assert "cls.bias" in tensors and "cls.output.bias" in tensors
    else:
        assert not any(name.startswith("cls.") for name in tensors)


def test_qwen3_headers_are_what_the_converter_writes(models: dict[str, Path]) -> None:
    kv, tensors = fields(models["qwen3-reranker"])
    assert kv["general.architecture"] == "qwen3"
    assert kv["qwen3.pooling_type"] == 4
    assert kv["qwen3.classifier.output_labels"] == ["yes", "no"]
    assert kv["tokenizer.chat_templates"] == ["rerank"]
    assert kv["tokenizer.chat_template.rerank"] == QWEN3_RERANK_TEMPLATE
    assert "{query}" in QWEN3_RERANK_TEMPLATE and "{document}" in QWEN3_RERANK_TEMPLATE
    assert tensors["cls.output.weight"] == [kv["qwen3.embedding_length"], 2]
    assert "blk.1.attn_q_norm.weight" in tensors and "blk.1.attn_k_norm.weight" in tensors

    kv, tensors = fields(models["qwen3-embedding"])
    assert kv["qwen3.pooling_type"] == 3
    assert kv["tokenizer.ggml.add_eos_token"] is True
    assert "qwen3.classifier.output_labels" not in kv and "cls.output.weight" not in tensors


def test_vocab_padding_keeps_the_built_in_ids() -> None:
    base = bert_vocab()
    padded = bert_vocab(2000)
    assert len(padded) == len(set(padded)) == 2000
    assert padded[: len(base)] == base
    with pytest.raises(ValueError):
        bert_vocab(10)


@pytest.fixture(scope="module")
def loaded(models: dict[str, Path]) -> Iterator[Callable[[str], llama_cpp.Llama]]:
    cache: dict[str, llama_cpp.Llama] = {}

    def load(kind: str) -> llama_cpp.Llama:
        if kind not in cache:
            cache[kind] = llama_cpp.Llama(model_path=str(models[kind]), embedding=True, n_ctx=512, n_threads=2,
                                          verbose=False)
        return cache[kind]

    yield load
    for llm in cache.values():
        llm.close()


@pytest.mark.parametrize("kind", ["bert", "bert-cls", "qwen3-embedding"])
def test_embedders_give_one_vector_per_text(loaded: Callable[[str], llama_cpp.Llama], kind: str) -> None:
    llm = loaded(kind)
    words = llm.tokenize(b"the quick brown fox", add_bos=False)
    assert llm.token_bos() not in words
    assert [llm.detokenize([t]).decode().strip() for t in words[:4]] == ["the", "quick", "brown", "fox"]
    a, b = llm.embed("hello world"), llm.embed("the cat")
    assert len(a) == len(b) == llm.n_embd() == 64
    assert a != b


def rank_scores(llm: llama_cpp.Llama, text: str, n_cls_out: int) -> list[float]:
    """The pooled rank output of one sequence (Llama.embed would read n_embd floats from it)."""
    llm._batch.reset()  # type: ignore[no-untyped-call]
    llm._ctx.kv_cache_clear()  # type: ignore[no-untyped-call]
    llm._batch.add_sequence(llm.tokenize(text.encode(), special=True), 0, True)
    llm._ctx.decode(llm._batch)
    return list(llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0)[:n_cls_out])


@pytest.mark.parametrize(("kind", "n_cls_out"), [("bert-reranker", 1), ("qwen3-reranker", 2)])
def test_rerankers_score_each_pair(loaded: Callable[[str], llama_cpp.Llama], kind: str, n_cls_out: int) -> None:
    llm = loaded(kind)
    assert int(llm.pooling_type()) == llama_cpp.LLAMA_POOLING_TYPE_RANK  # annotated str, an int
    if kind == "qwen3-reranker":
        prompt = llm.metadata["tokenizer.chat_template.rerank"]
        texts = [prompt.format(query="capital of france", document=d) for d in ("paris is the capital", "the cat")]
    else:
        texts = ["capital of france [SEP] paris is the capital", "capital of france [SEP] the cat"]
    first, second = (rank_scores(llm, t, n_cls_out) for t in texts)
    assert len(first) == len(second) == n_cls_out
    assert first != second
    if n_cls_out == 2:  # llama.cpp soft-maxes Qwen3's yes/no logits
        assert sum(first) == pytest.approx(1.0, abs=1e-5)
