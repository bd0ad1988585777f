"""A pooled-output context: one row of floats per sequence, many sequences per llama_decode.

Embedding models (an embedding per input) and rerankers (class scores per query-document pair)
both run here: each input is its own sequence in a batch, llama.cpp pools every sequence's hidden
states (mean, CLS, last token, or rank: the classification head over the pooled state), and
:meth:`PooledContext.run` returns the pooled rows. Inputs are packed, shortest first, into passes
of about :data:`PASS_TOKENS` tokens, so 256 short texts are about fifteen decode calls, not 256. A
causal model pooled from the last token reads a prefix all of a request's inputs share (Qwen3-Reranker's
template and query) once, and each input continues from its cells.

Not thread-safe: the owner (:class:`~.embedding.Embedder`, :class:`~.rerank.Reranker`) serialises
calls. The context is created on first use and never touches the engine thread's context.
"""

from __future__ import annotations

import logging

import llama_cpp as lc
import numpy as np

from ..errors import EngineError
from . import native
from .native import Batch
from .threads import ThreadPolicy

log = logging.getLogger(__name__)

MAX_SEQS_PER_PASS = 32
# llama.cpp's attention in a pass spans all of its tokens (other inputs are masked, not skipped): 32
# short texts packed into 512 tokens spent ~15 % of the pass there. Passes of 256 tokens halve that
# and still fill the matmuls (bge-small shape on a Zen 4: short texts +5-10 %, rerank pairs +5-10 %).
PASS_TOKENS = 256
# A causal model pooled from its last token (Qwen3-Reranker's pairs, Qwen3-Embedding's instructed
# queries) reads a prefix every input of a request shares once, and each input continues from it
# (its cells are shared, llama_memory_seq_cp): worth it from this many tokens.
MIN_SHARED_PREFIX = 16
# llama.cpp pads an embeddings context to a multiple of 32 cells; with mean pooling its graph
# then aborts (GGML_ASSERT in build_pooling) when n_batch is not padded alike. Measured: every
# n_ctx of 16-32 or a multiple of 32 works, 33, 48, 100, 1000, 1618 abort the process.
CTX_ALIGN = 32


def aligned_ctx(n: int) -> int:
    """The largest context llama.cpp pools safely that is at most ``n`` (``n`` >= 16)."""
    return n if n <= CTX_ALIGN else n // CTX_ALIGN * CTX_ALIGN


class PooledContext:
    """Pools each of many token lists into one output row.

    ``n_ctx`` is the most tokens one pass (and so one input) may hold; ``pooling`` a llama.cpp
    pooling type, or None for the model's own (mean when it declares none). A row is ``width``
    floats: the embedding size, or the number of classes for rank pooling.
    """

    def __init__(self, model: lc.llama_model_p, arch: str, n_ctx: int, threads: ThreadPolicy,
                 *, pooling: int | None = None) -> None:
        self._model = model
        self._arch = arch
        self._threads = threads
        self._n_threads = 0
        self._pooling = pooling
        self.n_ctx = aligned_ctx(n_ctx)
        self.max_seqs = min(MAX_SEQS_PER_PASS, self.n_ctx)  # a batch below n_seq_max aborts llama.cpp
        self.last_token = False  # pooled from each sequence's last token by a causal model (set on creation)
        self.share_prefix = True  # read a prefix every input shares once (MIN_SHARED_PREFIX); False: each alone
        self._ctx: lc.llama_context_p | None = None
        self._batch: Batch | None = None
        self.width = 0
        self.passes = 0  # llama_decode calls so far
        self.tokens_read = 0  # tokens those calls computed (a shared prefix once)

    def _context(self) -> lc.llama_context_p:
        if self._ctx is None:
            pooling = self._pooling
            if pooling is None:
                declared = native.meta(self._model, f"{self._arch}.pooling_type")
                pooling = int(declared) if declared and declared.isdigit() and int(declared) > 0 \
                    else lc.LLAMA_POOLING_TYPE_MEAN
            self._n_threads = self._threads.update().prefill
            spec = native.ContextSpec(n_ctx=self.n_ctx, n_seq_max=self.max_seqs, n_batch=self.n_ctx,
                                      n_threads=self._n_threads, swa_full=False, embeddings=True, pooling=pooling)
            self._ctx = native.create_context(self._model, spec)
            # keep self.n_ctx as asked: llama.cpp may round the context up, but n_batch stays
            self._batch = Batch(self.n_ctx)
            rank = pooling == lc.LLAMA_POOLING_TYPE_RANK
            causal = bool(lc.llama_get_memory(self._ctx))  # encoders keep no KV cache
            self.last_token = causal and (rank or pooling == lc.LLAMA_POOLING_TYPE_LAST)
            self.width = int(lc.llama_model_n_cls_out(self._model)) if rank else int(lc.llama_model_n_embd(self._model))
            log.info("pooled context ready (%d tokens, %d per pass, pooling %d, %d floats a row)",
                     self.n_ctx, self.max_seqs, pooling, self.width)
        return self._ctx

    def run(self, token_lists: list[list[int]]) -> list[np.ndarray]:
        """The pooled row of each token list, in order. Each list holds 1..n_ctx tokens (the caller
        cuts or refuses longer ones); EngineError when llama.cpp fails."""
        ctx = self._context()
        rows: list[np.ndarray] = [np.empty(0)] * len(token_lists)
        shared = self._shared_prefix(token_lists)
        mem = lc.llama_get_memory(ctx)
        if mem:  # causal models (Qwen3-Embedding, Qwen3-Reranker) keep a KV cache: start each request empty
            lc.llama_memory_clear(mem, True)
        passes, read = self.passes, self.tokens_read
        first = 1 if shared else 0  # sequence 0 holds the shared prefix; the inputs take the ids after it
        if shared:
            self._decode(ctx, [(0, token_lists[0][:shared])], 0)
        previous = 0
        for group in self._passes(token_lists, shared):
            if mem:  # the last pass's inputs go; the shared prefix stays, and each new input starts from it
                for seq in range(first, first + previous):
                    lc.llama_memory_seq_rm(mem, seq, -1, -1)
                for seq in range(first, first + len(group)) if shared else ():
                    lc.llama_memory_seq_cp(mem, 0, seq, -1, -1)
            previous = len(group)
            self._decode(ctx, [(first + k, token_lists[i][shared:]) for k, i in enumerate(group)], shared)
            for seq, i in enumerate(group, first):
                ptr = lc.llama_get_embeddings_seq(ctx, seq)
                if not ptr:
                    raise EngineError("the model produced no pooled output")
                rows[i] = np.ctypeslib.as_array(ptr, shape=(self.width,)).astype(np.float64)
        log.debug("pooled %d inputs in %d passes, %d tokens read (a prefix of %d shared)", len(token_lists),
                  self.passes - passes, self.tokens_read - read, shared)
        self._threads.idle()  # until the next request: what runs meanwhile is no sample of this work
        return rows

    def _shared_prefix(self, token_lists: list[list[int]]) -> int:
        """How many leading tokens every input shares, when reading them once gives the same rows (a
        causal model pooled from the last token) and there are enough of them; else 0. Each input
        keeps at least its last token of its own."""
        if not (self.last_token and self.share_prefix) or len(token_lists) < 2:
            return 0
        first = token_lists[0]
        shared = min(len(t) for t in token_lists) - 1
        for tokens in token_lists[1:]:
            n = 0
            while n < shared and tokens[n] == first[n]:
                n += 1
            shared = n
        return shared if shared >= MIN_SHARED_PREFIX else 0

    def _passes(self, token_lists: list[list[int]], shared: int = 0) -> list[list[int]]:
        """Indices of ``token_lists`` grouped into passes: shortest first, so inputs of like length
        share a pass, each pass at most :data:`PASS_TOKENS` tokens (or one longer input) beyond the
        ``shared`` prefix, which stays in the cache beside them."""
        groups: list[list[int]] = [[]]
        used = 0
        budget = min(PASS_TOKENS, self.n_ctx - shared)
        most = self.max_seqs - (1 if shared else 0)
        for i in sorted(range(len(token_lists)), key=lambda i: len(token_lists[i])):
            n = len(token_lists[i]) - shared
            if groups[-1] and (used + n > budget or len(groups[-1]) >= most):
                groups.append([])
                used = 0
            groups[-1].append(i)
            used += n
        return groups

    def _decode(self, ctx: lc.llama_context_p, parts: list[tuple[int, list[int]]], start: int) -> None:
        """One llama_decode of ``(sequence, tokens)`` parts, each from position ``start``, every token an
        output (pooling reads them); the threads follow the free cores (threads.py)."""
        batch = self._batch
        assert batch is not None
        n = self._threads.update().prefill
        if n != self._n_threads:
            lc.llama_set_n_threads(ctx, n, n)
            self._n_threads = n
        batch.clear()
        for seq, tokens in parts:
            batch.add_all(seq, start, tokens)
        rc = batch.decode(ctx)
        self.passes += 1
        self.tokens_read += batch.n_tokens
        if rc != 0:
            raise EngineError(f"pooling failed: llama_decode returned {rc}")

    def close(self) -> None:
        if self._ctx is not None:
            lc.llama_free(self._ctx)
            self._ctx = None
