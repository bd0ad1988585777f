"""Embeddings: many inputs pooled into vectors in few llama_decode calls (:mod:`.pooled`).

The pooling comes from the model (mean, CLS or last token; mean when it declares none). Vectors are
L2-normalised, as Ollama and llama-server return them. An input longer than the context is cut
(and reported in ``truncated``) when the caller allows it, else ContextOverflow names the input.
Thread-safe: calls are serialised by a lock; the engine thread's context is never touched.
"""

from __future__ import annotations

import threading

import llama_cpp as lc
import numpy as np

from ..errors import ContextOverflow, InvalidRequest
from .limits import MAX_POOLED_CTX, MAX_TEXTS
from .native import Vocab
from .pooled import PooledContext
from .threads import ThreadPolicy
from .types import EmbedInput, EmbedResult


class Embedder:
    def __init__(self, model: lc.llama_model_p, vocab: Vocab, arch: str, num_ctx: int, threads: ThreadPolicy) -> None:
        self._vocab = vocab
        self.pooled = PooledContext(model, arch, min(num_ctx, MAX_POOLED_CTX), threads)
        self.n_ctx = self.pooled.n_ctx
        self._lock = threading.Lock()

    def embed(self, inputs: list[EmbedInput], *, truncate: bool = True) -> EmbedResult:
        """Embed texts and token-id lists (ids outside the vocabulary are an InvalidRequest)."""
        if not isinstance(inputs, list) or not inputs:
            raise InvalidRequest("input must be a non-empty list of strings or token-id lists")
        if len(inputs) > MAX_TEXTS:
            raise InvalidRequest(f"at most {MAX_TEXTS} inputs per request, got {len(inputs)}")
        for i, item in enumerate(inputs):
            if not isinstance(item, str):
                self._check_ids(item, i)
        token_lists, cut = [], []
        for i, item in enumerate(inputs):
            tokens = (self._vocab.tokenize(item, add_special=True) or [self._vocab.bos]) if isinstance(item, str) \
                else list(item)
            if len(tokens) > self.n_ctx and not truncate:
                raise ContextOverflow(f"input {i} is {len(tokens)} tokens; the model embeds at most {self.n_ctx} "
                                      "(ask with truncate: true to cut it)",
                                      prompt_tokens=len(tokens), max_tokens=self.n_ctx)
            cut.append(len(tokens) > self.n_ctx)
            token_lists.append(self._cut(tokens, from_text=isinstance(item, str)))
        with self._lock:
            rows = self.pooled.run(token_lists)
        vectors = []
        for row in rows:
            norm = float(np.sqrt(row @ row))
            vectors.append((row / norm if norm > 0 else row).tolist())
        return EmbedResult(embeddings=vectors, prompt_eval_count=sum(map(len, token_lists)), truncated=cut)

    def _cut(self, tokens: list[int], *, from_text: bool) -> list[int]:
        """``tokens`` cut to the context; a text's closing special token (BERT's [SEP]) stays, as
        sentence-transformers keeps it when it truncates."""
        if len(tokens) <= self.n_ctx:
            return tokens
        if from_text and self._vocab.add_eos and tokens[-1] == self._vocab.eos:
            return [*tokens[: self.n_ctx - 1], self._vocab.eos]
        return tokens[: self.n_ctx]

    def _check_ids(self, tokens: object, index: int) -> None:
        n = self._vocab.n_vocab
        if not isinstance(tokens, list) or not tokens:
            raise InvalidRequest(f"input {index} must be a string or a non-empty list of token ids")
        for t in tokens:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n:
                raise InvalidRequest(f"input {index}: token id {t!r} is not in the vocabulary (0..{n - 1})")

    def close(self) -> None:
        with self._lock:
            self.pooled.close()
