"""What a model does: generate text, embed, or rerank, read from its GGUF metadata.

Pure (no llama.cpp): the store reads the kind from a file's header for ``/api/show`` and the
server's early 400s; the engine reads it from the loaded model to choose its contexts. Both apply
:func:`model_kind`, and every API words a refusal with :func:`kind_refusal`.
"""

from __future__ import annotations

import enum


class ModelKind(enum.StrEnum):
    """What a model does, from its GGUF metadata (:func:`model_kind`): one kind per model."""

    GENERATION = "generation"  # continues text: chat, completions
    EMBEDDING = "embedding"    # one vector per input: /api/embed, /v1/embeddings
    RERANK = "rerank"          # one relevance score per (query, document) pair: /v1/rerank


ENCODER_ARCHITECTURES = ("bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "neo-bert",
                         "modern-bert", "eurobert", "t5encoder")  # encoder-only: vectors or scores, never text
POOLING_RANK = 4  # llama.cpp's LLAMA_POOLING_TYPE_RANK: a classification head scores the pooled state


def model_kind(architecture: str, pooling_type: int | None, causal: bool | None) -> ModelKind:
    """The kind of a model whose GGUF says ``general.architecture``, ``{arch}.pooling_type`` (None when
    absent) and ``{arch}.attention.causal`` (None when absent).

    A rank pooling type makes a reranker (bge-reranker, Qwen3-Reranker); an encoder architecture, any
    other pooling type or non-causal attention makes an embedding model (BERT, nomic-bert,
    Qwen3-Embedding); anything else generates text.
    """
    if pooling_type == POOLING_RANK:
        return ModelKind.RERANK
    if architecture in ENCODER_ARCHITECTURES or pooling_type is not None or causal is False:
        return ModelKind.EMBEDDING
    return ModelKind.GENERATION


def kind_detail(kind: ModelKind) -> dict[str, str]:
    """A model's ``details`` entry (a localrun extra in /api/tags, /api/show and /api/ps): ``{"kind":
    "embedding"}`` or ``{"kind": "rerank"}``; nothing for a text model, as Ollama's details."""
    return {} if kind is ModelKind.GENERATION else {"kind": str(kind)}


def kind_refusal(kind: ModelKind, asked: ModelKind, name: str = "this model") -> str | None:
    """Why model ``name`` of ``kind`` cannot serve a request for ``asked``; None when it can (a
    text model also embeds, as in Ollama). The one wording of every API's 400."""
    if kind is asked or (kind is ModelKind.GENERATION and asked is ModelKind.EMBEDDING):
        return None
    if asked is ModelKind.RERANK:
        return (f"{name} is not a reranking model: /v1/rerank needs one whose GGUF declares rank pooling "
                "(bge-reranker, jina-reranker, Qwen3-Reranker)")
    if kind is ModelKind.RERANK:
        cannot = "cannot generate text" if asked is ModelKind.GENERATION else "makes no embeddings"
        return f"{name} is a reranking model: it scores documents against a query at /v1/rerank and {cannot}"
    return f"{name} is an embedding model: it makes vectors at /api/embed and /v1/embeddings and cannot generate text"
