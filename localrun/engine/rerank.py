"""Reranking: a relevance score for each (query, document) pair, many pairs per llama_decode.

A reranker GGUF (bge-reranker, jina-reranker, Qwen3-Reranker) declares rank pooling: llama.cpp
pools each sequence and applies the model's classification head, and the first class is the score,
as llama-server reports it: a raw logit for BERT-style cross-encoders, P("yes") for Qwen3-Reranker
(its head is a softmax over "yes" and "no").

A pair is written as llama-server writes it, so both servers score the same tokens: through the
model's ``rerank`` template (``tokenizer.chat_template.rerank``, with ``{query}`` and
``{document}``) when it has one, else ``[BOS] query [EOS] [SEP] document [EOS]`` with each special
token where the vocabulary adds it. A pair longer than the context has its document cut from the
end when the caller allows it (reported in ``truncated``), else ContextOverflow names the document.
Thread-safe: calls are serialised by a lock.
"""

from __future__ import annotations

import threading

import llama_cpp as lc

from ..errors import ContextOverflow, InvalidRequest
from ..modelkind import POOLING_RANK
from . import native
from .limits import MAX_POOLED_CTX, MAX_TEXTS
from .native import Vocab
from .pooled import PooledContext
from .threads import ThreadPolicy
from .types import RerankResult

_CUT_TRIES = 4  # re-tokenizing a cut document can grow it by a token or two at the seam


class Reranker:
    def __init__(self, model: lc.llama_model_p, vocab: Vocab, num_ctx: int, threads: ThreadPolicy) -> None:
        self._vocab = vocab
        arch = native.meta(model, "general.architecture") or "unknown"
        self.pooled = PooledContext(model, arch, min(num_ctx, MAX_POOLED_CTX), threads, pooling=POOLING_RANK)
        self.n_ctx = self.pooled.n_ctx
        self._template = native.meta(model, "tokenizer.chat_template.rerank")
        self._lock = threading.Lock()

    def rerank(self, query: str, documents: list[str], *, truncate: bool = True) -> RerankResult:
        """Score each document against ``query``; scores come back in the documents' order."""
        if not isinstance(query, str) or not query:
            raise InvalidRequest("query must be a non-empty string")
        if not isinstance(documents, list) or not documents:
            raise InvalidRequest("documents must be a non-empty list of strings")
        if len(documents) > MAX_TEXTS:
            raise InvalidRequest(f"at most {MAX_TEXTS} documents per request, got {len(documents)}")
        for i, doc in enumerate(documents):
            if not isinstance(doc, str):
                raise InvalidRequest(f"document {i} must be a string")
        pairs: list[list[int]] = []
        cut: list[bool] = []
        for i, doc in enumerate(documents):
            tokens = self.pair_tokens(query, doc)
            cut.append(len(tokens) > self.n_ctx)
            if cut[-1]:
                if not truncate:
                    raise ContextOverflow(f"document {i} with the query is {len(tokens)} tokens; the model reads "
                                          f"at most {self.n_ctx} (ask with truncate: true to cut the document)",
                                          prompt_tokens=len(tokens), max_tokens=self.n_ctx)
                tokens = self._fit(query, doc, tokens, i)
            pairs.append(tokens)
        with self._lock:
            rows = self.pooled.run(pairs)
        return RerankResult(scores=[float(row[0]) for row in rows], prompt_eval_count=sum(map(len, pairs)),
                            truncated=cut)

    def pair_tokens(self, query: str, document: str) -> list[int]:
        """The tokens the model reads for one pair (module docstring)."""
        v = self._vocab
        if self._template is not None:
            text = self._template.replace("{query}", query).replace("{document}", document)
            return v.tokenize(text, add_special=False, parse_special=True)
        end = v.eos if v.eos >= 0 else v.sep
        tokens = [v.bos] if v.add_bos else []
        tokens += v.tokenize(query, add_special=False, parse_special=False)
        tokens += [end] if v.add_eos else []
        tokens += [v.sep] if v.add_sep else []
        tokens += v.tokenize(document, add_special=False, parse_special=False)
        tokens += [end] if v.add_eos else []
        return tokens

    def _fit(self, query: str, document: str, tokens: list[int], index: int) -> list[int]:
        """The pair with its document cut from the end until it fits the context."""
        doc_tokens = self._vocab.tokenize(document, add_special=False, parse_special=False)
        over = len(tokens) - self.n_ctx
        for attempt in range(_CUT_TRIES):
            keep = len(doc_tokens) - over - attempt * 2
            if keep <= 0:
                break
            tokens = self.pair_tokens(query, self._vocab.detokenize(doc_tokens[:keep]))
            if len(tokens) <= self.n_ctx:
                return tokens
        raise ContextOverflow(f"the query (with the model's pair format) leaves no room for document {index}: "
                              f"the model reads at most {self.n_ctx} tokens a pair", prompt_tokens=len(tokens),
                              max_tokens=self.n_ctx)

    def close(self) -> None:
        with self._lock:
            self.pooled.close()
