"""Embeddings: a batch of inputs in one llama_decode on a dedicated embeddings context.

The context is created on first use (``embeddings = True``), with the model's pooling, or mean
pooling when the model declares none. Each input is its own sequence in the batch; inputs are
packed into as few passes as the context allows. Vectors are L2-normalised. An input longer than
the context is cut (and reported in ``truncated``) or rejected with ContextOverflow.
Thread-safe: calls are serialised by a lock; the engine thread's context is never touched.
"""

from __future__ import annotations

import logging
import math
import threading

import llama_cpp as lc
import numpy as np

from ..errors import ContextOverflow, EngineError, InvalidRequest
from . import native
from .native import Batch, Vocab
from .types import EmbedInput, EmbedResult

log = logging.getLogger(__name__)

MAX_EMBED_CTX = 8192
MAX_SEQS_PER_PASS = 32
MAX_INPUTS = 2048
# llama.cpp pads an embeddings context to a multiple of 32 cells; with mean pooling its graph
# then aborts (GGML_ASSERT in build_pooling) when n_batch is not padded alike. Measured: every
# n_ctx of 16-32 or a multiple of 32 works, 33, 48, 100, 1000, 1618 abort the process.
CTX_ALIGN = 32


def aligned_ctx(n: int) -> int:
    """The largest context llama.cpp embeds safely that is at most ``n`` (``n`` >= 16)."""
    return n if n <= CTX_ALIGN else n // CTX_ALIGN * CTX_ALIGN


class Embedder:
    def __init__(self, model: lc.llama_model_p, vocab: Vocab, arch: str, num_ctx: int, threads: int) -> None:
        self._model = model
        self._vocab = vocab
        self._arch = arch
        self._threads = threads
        self.n_ctx = aligned_ctx(min(num_ctx, MAX_EMBED_CTX))
        self._ctx: lc.llama_context_p | None = None
        self._batch: Batch | None = None
        self._lock = threading.Lock()
        self.max_seqs = MAX_SEQS_PER_PASS

    def _context(self) -> lc.llama_context_p:
        if self._ctx is None:
            declared = native.meta(self._model, f"{self._arch}.pooling_type")
            pooling = int(declared) if declared and declared.isdigit() and int(declared) > 0 else None
            self.max_seqs = min(MAX_SEQS_PER_PASS, self.n_ctx)  # a batch below n_seq_max aborts llama.cpp
            spec = native.ContextSpec(n_ctx=self.n_ctx, n_seq_max=self.max_seqs, n_batch=self.n_ctx,
                                      n_threads=self._threads, swa_full=False, embeddings=True,
                                      pooling=pooling if pooling is not None else lc.LLAMA_POOLING_TYPE_MEAN)
            self._ctx = native.create_context(self._model, spec)
            # keep self.n_ctx as asked: llama.cpp may round the context up, but n_batch stays
            self._batch = Batch(self.n_ctx)
            log.info("embeddings context ready (%d tokens, pooling %s)", self.n_ctx,
                     "model" if pooling is not None else "mean")
        return self._ctx

    def embed(self, inputs: list[EmbedInput], *, truncate: bool = True) -> EmbedResult:
        """Embed texts and token-id lists (ids outside the vocabulary are an InvalidRequest)."""
        if not isinstance(inputs, list) or not inputs:
            raise InvalidRequest("input must be a non-empty list of strings or token-id lists")
        if len(inputs) > MAX_INPUTS:
            raise InvalidRequest(f"at most {MAX_INPUTS} inputs per request, got {len(inputs)}")
        for i, item in enumerate(inputs):
            if not isinstance(item, str):
                self._check_ids(item, i)
        with self._lock:
            ctx = self._context()
            n_embd = int(lc.llama_model_n_embd(self._model))
            token_lists, cut = [], []
            for i, item in enumerate(inputs):
                if isinstance(item, str):
                    tokens = self._vocab.tokenize(item, add_special=True) or [self._vocab.bos]
                else:
                    tokens = list(item)
                if len(tokens) > self.n_ctx:
                    if not truncate:
                        raise ContextOverflow(f"input {i} is {len(tokens)} tokens; the context holds {self.n_ctx}")
                    tokens = tokens[: self.n_ctx]
                    cut.append(True)
                else:
                    cut.append(False)
                token_lists.append(tokens)
            vectors: list[list[float]] = [[] for _ in inputs]
            for group in self._passes(token_lists):
                self._run_pass(ctx, group, token_lists, vectors, n_embd)
            return EmbedResult(embeddings=vectors, prompt_eval_count=sum(map(len, token_lists)), truncated=cut)

    def _check_ids(self, tokens: object, index: int) -> None:
        n = self._vocab.n_vocab
        if not isinstance(tokens, list) or not tokens:
            raise InvalidRequest(f"input {index} must be a string or a non-empty list of token ids")
        for t in tokens:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n:
                raise InvalidRequest(f"input {index}: token id {t!r} is not in the vocabulary (0..{n - 1})")

    def _passes(self, token_lists: list[list[int]]) -> list[list[int]]:
        groups: list[list[int]] = [[]]
        used = 0
        for i, tokens in enumerate(token_lists):
            if groups[-1] and (used + len(tokens) > self.n_ctx or len(groups[-1]) >= self.max_seqs):
                groups.append([])
                used = 0
            groups[-1].append(i)
            used += len(tokens)
        return groups

    def _run_pass(self, ctx: lc.llama_context_p, group: list[int], token_lists: list[list[int]],
                  vectors: list[list[float]], n_embd: int) -> None:
        batch = self._batch
        assert batch is not None
        mem = lc.llama_get_memory(ctx)
        if mem:
            lc.llama_memory_clear(mem, True)
        batch.clear()
        for seq, i in enumerate(group):
            n = batch.n_tokens
            batch.add(seq, 0, token_lists[i], want_last_logits=False)
            batch.logits[n: batch.n_tokens] = 1
        rc = batch.decode(ctx)
        if rc != 0:
            raise EngineError(f"embedding failed: llama_decode returned {rc}")
        for seq, i in enumerate(group):
            ptr = lc.llama_get_embeddings_seq(ctx, seq)
            if not ptr:
                raise EngineError("the model produced no pooled embedding")
            vec = np.ctypeslib.as_array(ptr, shape=(n_embd,)).astype(np.float64)
            norm = math.sqrt(float(vec @ vec))
            vectors[i] = (vec / norm if norm > 0 else vec).tolist()

    def close(self) -> None:
        with self._lock:
            if self._ctx is not None:
                lc.llama_free(self._ctx)
                self._ctx = None
