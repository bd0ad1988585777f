"""The public engine: one loaded model, one llama context, one engine thread.

``Engine(model_path, options)`` loads the GGUF and creates one context with a
unified KV cache of ``options.pool`` cells (the pool) shared by up to ``num_parallel`` running
sequences and the prefix cache; one request may hold up to ``num_ctx`` of them (capped at the
model's trained context and the pool). Requests are admitted while the pool can hold them
(admission.py): a long one does not need every slot reserved at its size. The engine thread
owns the context and runs the :class:`~localrun.engine.batcher.Batcher` loop; callers on any
thread ``submit()`` requests (refused synchronously: GrammarError, ContextOverflow,
InvalidRequest; option ranges are the server's job, asserted here) and read events from the
returned :class:`RequestHandle`. ``embed()`` uses a second, lazily created context and is
serialised by its own lock. ``close()`` stops the thread and frees native memory.
With a ``prefix_cache`` location, the prefix cache is restored from disk at load and saved there
by ``close()`` (prefix_store.py), so a model reloaded later answers cached prompts at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path

import llama_cpp as lc

from .. import trace
from ..errors import ContextOverflow, EngineError, InvalidRequest, UnsupportedCapability
from ..modelkind import ModelKind, kind_refusal, model_kind
from . import limits, native, prefix_store, vocab_store
from .backend_sampler import BackendSamplers
from .batcher import BURST_GAP, BURST_MAX, STAGE_AFTER, Batcher
from .detok import TextStream
from .embedding import Embedder
from .grammar import grammar_for
from .host_cache import HostCache
from .infill import infill_tokens
from .kvcache import KVCache
from .load_report import parse_load_report
from .prefix_store import PrefixStore
from .rerank import Reranker
from .sampling import assert_valid, build_sampler, eog_tokens
from .sequence import RequestHandle, Sequence
from .threads import ThreadPolicy
from .tokencache import PromptTokenizer
from .types import (
    EmbedInput,
    EmbedResult,
    EngineStats,
    ErrorEvent,
    GenerateRequest,
    Infill,
    LoadOptions,
    ModelInfo,
    PrefixCacheLocation,
    RerankResult,
    Truncation,
)
from .vision import MediaPrompt, Projector
from .vocab_store import VocabStore

log = logging.getLogger(__name__)

MAX_SEQ_IDS = 256  # llama.cpp's LLAMA_MAX_SEQ: running sequences and cached prefixes share them
# Sequence ids for cached prefixes beside the slots' own: two a slot, at most this many. Every
# llama_decode checks each pair of the context's ids (llama_batch_allocr::init, n_seq_max squared):
# at 64 slots with 128 more ids that was 450,000 instructions a step whatever the model (callgrind:
# the tiny test model's whole decode is 1.24 million with one slot); with 64 more, 210,000.
MAX_CACHE_IDS = 64
LONE_BEFORE_SKIP = 2  # lone arrivals in a row after which an idle engine stops waiting for a burst
INTERACTIVE_PROMPT_TOKENS = 512  # a request that does not say counts as interactive up to this prompt length


def kind_of(model: lc.llama_model_p, arch: str) -> ModelKind:
    """What a loaded model does: :func:`~.types.model_kind` on its metadata; an encoder without a
    decoder (T5's encoder) embeds whatever its metadata says."""
    pooling = native.meta(model, f"{arch}.pooling_type")
    causal = native.meta(model, f"{arch}.attention.causal")
    kind = model_kind(arch, int(pooling) if pooling and pooling.lstrip("-").isdigit() else None,
                      {"true": True, "false": False}.get((causal or "").lower()))
    if kind is ModelKind.GENERATION and lc.llama_model_has_encoder(model) and not lc.llama_model_has_decoder(model):
        return ModelKind.EMBEDDING
    return kind


def kv_type(options: LoadOptions) -> str:
    """The KV cache type ``options.kv_cache_type`` asks for; ``auto`` is bf16 on CPU with
    ``batch_invariant``, f16 otherwise (the fast default, and GPU layers).

    bf16 keys keep seeded output reproducible on llama.cpp's CPU attention kernels whatever
    runs alongside (native.py); f16 prefills long prompts faster there. GPU kernels are built
    around f16 caches, and their reproducibility is another matter.
    """
    if options.kv_cache_type != "auto":
        return options.kv_cache_type
    gpu = lc.llama_supports_gpu_offload() and options.num_gpu != 0
    return "bf16" if options.batch_invariant and not gpu else "f16"


def check_load_options(options: LoadOptions) -> None:
    """Assert the invariants the daemon established (the server's option parsing and the scheduler's
    slot sizing set these; Settings checks kv_cache_type): a violation is a caller's bug, not user input."""
    for name, value, low in (("num_ctx", options.num_ctx, limits.MIN_CTX), ("num_batch", options.num_batch, 1),
                             ("num_parallel", options.num_parallel, 1), ("context_pool", options.pool, limits.MIN_CTX)):
        assert isinstance(value, int) and not isinstance(value, bool) and value >= low, f"{name}={value!r} < {low}"
    assert options.num_thread is None or limits.within("num_thread", options.num_thread), \
        f"num_thread={options.num_thread!r}"
    assert options.num_parallel <= limits.MAX_PARALLEL, f"num_parallel={options.num_parallel} > {limits.MAX_PARALLEL}"
    assert options.kv_cache_type in native.KV_CACHE_TYPES, f"kv_cache_type={options.kv_cache_type!r}"


class Engine:
    """A loaded model serving many concurrent requests by continuous batching."""

    def __init__(self, model_path: str, options: LoadOptions, *,
                 prefix_cache: PrefixCacheLocation | None = None) -> None:
        check_load_options(options)
        self.options = options
        self._prefix_store: PrefixStore | None = None
        self._vocab_store: VocabStore | None = None
        self._vocab_restored = native.VocabScans()
        if options.batch_invariant:
            native.use_batch_invariant_matmuls()
        model = native.load_model(model_path, options)
        self._model: lc.llama_model_p | None = model  # None once freed
        trace.mark("model_loaded")
        self._ctx: lc.llama_context_p | None = None
        self._closed = False
        self.batcher: Batcher | None = None     # set by _setup for generation models
        self.embedder: Embedder | None = None   # set by _setup unless a reranker (None once freed)
        self.reranker: Reranker | None = None   # set by _setup for rerank models (None once freed)
        self.projector: Projector | None = None  # set by _setup when the options name an mmproj
        self._backend: BackendSamplers | None = None  # set by _setup where greedy samples in the graph
        try:
            self._setup(model, model_path, options, prefix_cache)
        except BaseException:
            self._free_native()
            raise

    def _setup(self, model: lc.llama_model_p, model_path: str, options: LoadOptions,
               prefix_cache: PrefixCacheLocation | None) -> None:
        self.vocab = native.Vocab(model)
        # the file's fingerprint, which the saved scans and prefix cache must both name (read once)
        fingerprint = prefix_store.fingerprint(Path(model_path)) if prefix_cache is not None else ""
        if prefix_cache is not None:  # what earlier loads of this file scanned in its vocabulary
            self._vocab_store = VocabStore(Path(prefix_cache.directory), prefix_cache.model_digest, fingerprint)
            self._vocab_restored = vocab_store.restore(self._vocab_store, self.vocab)
        # a long prompt's shared start is tokenized once; texts are remembered off the request's path
        self.prompts = PromptTokenizer(self.vocab, background=True)
        n_ctx_train = int(lc.llama_model_n_ctx_train(model))
        pool = options.pool
        num_ctx = min(options.num_ctx, pool, n_ctx_train if n_ctx_train > 0 else pool)
        if num_ctx < options.num_ctx:
            log.info("num_ctx %d capped at %d (trained context %d, pool %d)", options.num_ctx, num_ctx,
                     n_ctx_train, pool)
        self.num_ctx = num_ctx
        self.thread_policy = ThreadPolicy(pinned=options.num_thread)
        self.threads = self.thread_policy.current().prefill  # the context's, the embedder's and the projector's
        n_swa = int(lc.llama_model_n_swa(model))
        recurrent = bool(lc.llama_model_is_recurrent(model) or lc.llama_model_is_hybrid(model))
        arch = native.meta(model, "general.architecture") or "unknown"
        self.kind = kind_of(model, arch)
        generation = self.kind is ModelKind.GENERATION
        chat_template = native.meta(model, "tokenizer.chat_template")
        if self.kind is ModelKind.RERANK:
            self.reranker = Reranker(model, self.vocab, num_ctx, self.thread_policy)
        else:
            self.embedder = Embedder(model, self.vocab, arch, num_ctx, self.thread_policy)
        self._cond = threading.Condition()
        self._incoming: deque[Sequence] = deque()
        self._lone_arrivals = 0  # idle arrivals in a row that found no companion (_gather_burst)
        self._watch_first_step = False  # the request being started was not waited on (_gather_burst)
        self._next_id = 0
        report = parse_load_report(native.last_load_log)
        if options.batch_invariant and report.gpu_layers:
            log.warning("deterministic mode: %d of %d layers run on a GPU, whose kernels do not keep a row's "
                        "result independent of the batch; a seeded request repeats its text there only when it "
                        "runs alone", report.gpu_layers, report.total_layers)
        if generation:
            n_seq_max = min(MAX_SEQ_IDS, options.num_parallel + max(8, min(2 * options.num_parallel, MAX_CACHE_IDS)))
            # llama.cpp aborts (GGML_ASSERT on n_outputs_max) when a batch is smaller than n_seq_max;
            # above the whole context a batch buys nothing and its buffers could exhaust memory.
            n_batch = max(min(options.num_batch, pool), n_seq_max)
            if n_batch != options.num_batch:
                log.info("num_batch %d clamped to %d", options.num_batch, n_batch)
            spec = native.ContextSpec(n_ctx=pool, n_seq_max=n_seq_max,
                                      n_batch=n_batch, n_threads=self.threads, swa_full=n_swa > 0,
                                      kv_type=kv_type(options), backend_sampling=options.backend_sampling)
            self._ctx = native.create_context(model, spec)
            if spec.backend_sampling:
                self._backend = BackendSamplers(self._ctx, self.vocab.n_vocab, eog_tokens(self.vocab).tolist())
            trace.mark("context_created", 0, spec.n_ctx)
            n_cells = int(lc.llama_n_ctx(self._ctx))
            host = HostCache(options.prefix_cache_ram) if options.prefix_cache_ram > 0 else None
            kv = KVCache(lc.llama_get_memory(self._ctx), n_cells, n_seq_max, enabled=not recurrent,
                         reorder_when_idle=options.batch_invariant, ctx=self._ctx, host=host, guard=n_swa > 0,
                         slots=options.num_parallel)
            if options.projector:
                self.projector = Projector(options.projector, model, n_threads=self.threads,
                                           use_gpu=bool(options.num_gpu))
            self.batcher = Batcher(self._ctx, self.vocab, kv, n_batch=n_batch,
                                   num_parallel=options.num_parallel, speculative=options.speculative,
                                   projector=self.projector, wake=self._wake, threads=self.thread_policy,
                                   backend=self._backend)
            if prefix_cache is not None and kv.enabled:
                self._prefix_store = PrefixStore(Path(prefix_cache.directory), prefix_cache.model_digest,
                                                 fingerprint, spec.kv_type,
                                                 n_cells // 2)
                prefix_store.restore(self._prefix_store, self._ctx, kv)
                trace.mark("prefix_restored", 0, kv.cached_cells)
        self._info = ModelInfo(
            architecture=arch, n_params=int(lc.llama_model_n_params(model)), n_ctx_train=n_ctx_train,
            n_embd=int(lc.llama_model_n_embd(model)), n_layer=int(lc.llama_model_n_layer(model)),
            n_vocab=self.vocab.n_vocab, chat_template=chat_template,
            bos_text=self.vocab.special_text(self.vocab.bos), eos_text=self.vocab.special_text(self.vocab.eos),
            size_bytes=int(lc.llama_model_size(model)), num_ctx=num_ctx, num_parallel=options.num_parallel,
            context_pool=pool if generation else 0, vision=self.projector is not None,
            n_swa=n_swa, kind=self.kind, prefix_cache=generation and not recurrent,
            gpu_layers=report.gpu_layers, offload_layers=report.total_layers,
            gpu_buffer_bytes=report.gpu_bytes, cpu_buffer_bytes=report.cpu_bytes,
            buffer_bytes=dict(report.buffers), rpc_servers=options.rpc_servers,
        )
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        if generation:
            self._thread.start()
        log.info("loaded %s (%s, up to %d parallel in a pool of %d tokens, at most %d per request, %d threads, "
                 "prefix cache %s, greedy sampling %s)", arch, model_path, options.num_parallel, pool, num_ctx,
                 self.threads, "on" if self._info.prefix_cache else "off",
                 "in the graph" if self._backend is not None else "on the host")

    # -- public API ----------------------------------------------------------------------
    @property
    def info(self) -> ModelInfo:
        return self._info

    def submit(self, request: GenerateRequest) -> RequestHandle:
        """Validate and queue ``request``; it joins the running batch at the next step."""
        if self._closed:
            raise EngineError("the model is unloaded")
        if self.batcher is None:
            raise UnsupportedCapability(kind_refusal(self.kind, ModelKind.GENERATION) or "no text model")
        options = request.sampling
        assert_valid(options)
        media = self._media_prompt(request) if request.images else None
        num_predict = limits.token_limit(options.num_predict)
        cut = 0
        if media is not None:
            tokens = media.tokens
        elif isinstance(request.prompt, Infill):
            tokens, cut = infill_tokens(self.vocab, request.prompt, n_ctx=self.num_ctx, n_predict=num_predict)
        else:
            tokens = self._prompt_tokens(request)
        tokens, truncated = self._fit(tokens, request, num_predict, media=media)
        truncated += cut
        gbnf = grammar_for(request.format, request.grammar, request.format_frame)
        sampler = build_sampler(options, self.vocab, gbnf, self.num_ctx)
        last_n = limits.penalty_window(options.repeat_last_n, self.num_ctx)
        with self._cond:
            self._next_id += 1
            handle = RequestHandle(self._next_id, self._wake)
            interactive = request.interactive if request.interactive is not None \
                else len(tokens) <= INTERACTIVE_PROMPT_TOKENS
            seq = Sequence(handle=handle, tokens=tokens, prompt_len=len(tokens), truncated=truncated,
                           sampler=sampler, text=TextStream(options.stop), num_ctx=self.num_ctx,
                           num_predict=num_predict, last_n=last_n, interactive=interactive,
                           seeded=options.seed is not None and not self.options.batch_invariant,
                           cache_reuse=(request.cache_reuse or 0) if media is None else 0,
                           spans=media.spans if media is not None else ())
            self._incoming.append(seq)
            self._cond.notify()
        return handle

    def embed(self, inputs: list[EmbedInput], *, truncate: bool = True) -> EmbedResult:
        """One L2-normalised vector per input (embedding.py); UnsupportedCapability on a reranker."""
        if self._closed:
            raise EngineError("the model is unloaded")
        if self.embedder is None:
            raise UnsupportedCapability(kind_refusal(self.kind, ModelKind.EMBEDDING) or "no embedder")
        return self.embedder.embed(inputs, truncate=truncate)

    def rerank(self, query: str, documents: list[str], *, truncate: bool = True) -> RerankResult:
        """One relevance score per document (rerank.py); UnsupportedCapability unless a reranker."""
        if self._closed:
            raise EngineError("the model is unloaded")
        if self.reranker is None:
            raise UnsupportedCapability(kind_refusal(self.kind, ModelKind.RERANK) or "no reranker")
        return self.reranker.rerank(query, documents, truncate=truncate)

    def tokenize(self, text: str, *, add_special: bool = True, images: tuple[bytes, ...] = ()) -> list[int]:
        """``text`` as token ids; with ``images`` (one image marker each in ``text``) the ids a
        request would hold, an image's stand-ins as many as its embeddings (what usage counts; an
        M-RoPE image holds fewer positions: vision.py)."""
        if not isinstance(text, str):
            raise InvalidRequest("text to tokenize must be a string")
        if images:  # what usage counts (an image counts its embeddings: vision.py)
            return self._media_prompt(GenerateRequest(text, images=images, add_special=add_special)).counted()
        return self.prompts.tokenize(text, add_special=add_special)

    def detokenize(self, tokens: list[int]) -> str:
        self._check_ids(tokens)
        return self.vocab.detokenize(tokens)

    def stats(self) -> EngineStats:
        b = self.batcher
        if b is None:
            return EngineStats(0, 0, 0, 0, 0, 0, 0, 0, **self._thread_stats())
        host = b.kv.host
        return EngineStats(
            slots_total=b.num_parallel, slots_active=len(b.running), queued=len(b.waiting) + len(self._incoming),
            kv_cells_total=b.kv.n_cells, kv_cells_used=b.used_cells(), prefix_cache_hit_tokens=b.cached_tokens,
            prompt_tokens=b.prompt_tokens, generated_tokens=b.generated_tokens, kv_cache_resets=b.kv.resets,
            host_cache_tokens=host.n_tokens if host else 0, host_cache_bytes=host.n_bytes if host else 0,
            draft_tokens=b.draft_tokens, accepted_tokens=b.accepted_tokens, preemptions=b.preemptions,
            image_tokens=b.image_tokens, **self._thread_stats(),
        )

    def _thread_stats(self) -> dict[str, int]:
        t = self.thread_policy.current()
        return {"threads_decode": t.decode, "threads_prefill": t.prefill, "threads_cores": t.cores,
                "threads_pinned": int(t.pinned), "other_load_pct": round(t.other_load * 100)}

    def close(self) -> None:
        """Stop the engine thread, end every open request with an error, free native memory."""
        if self._closed:
            return
        self._closed = True
        with self._cond:  # close() is reachable only on an engine whose __init__ returned
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()
        try:
            self.prompts.close()  # its thread reads the vocabulary, which goes with the model
            if self._prefix_store is not None and self.batcher is not None and self._ctx is not None:
                try:
                    prefix_store.save(self._prefix_store, self._ctx, self.batcher.kv)
                except OSError as exc:  # a full or read-only disk costs the saved cache, never the unload
                    log.warning("prefix cache not saved: %s", exc)
            if self._vocab_store is not None:
                try:
                    vocab_store.save(self._vocab_store, self.vocab, self._vocab_restored)
                except OSError as exc:  # the same: it costs only the file
                    log.warning("vocabulary scans not saved: %s", exc)
        finally:  # even when saving met a bug: the native memory goes back
            self._free_native()

    # -- internals -----------------------------------------------------------------------
    def _prompt_tokens(self, request: GenerateRequest) -> list[int]:
        prompt = request.prompt
        if isinstance(prompt, str):
            if not prompt.strip():
                raise InvalidRequest("prompt is empty")
            tokens = self.prompts.tokenize(prompt, add_special=request.add_special)
        elif isinstance(prompt, (list, tuple)):
            tokens = list(prompt)
            self._check_ids(tokens)
        else:
            raise InvalidRequest("prompt must be text or a list of token ids")
        if not tokens:
            raise InvalidRequest("prompt is empty")
        return tokens

    def _media_prompt(self, request: GenerateRequest) -> MediaPrompt:
        """A text prompt with images as tokens and image spans (vision.py)."""
        if self.projector is None:
            raise UnsupportedCapability("this model does not support images (it has no vision projector)")
        if not isinstance(request.prompt, str):
            raise InvalidRequest("a prompt with images must be text (with one image marker per image)")
        media = self.projector.tokenize(request.prompt, list(request.images), add_special=request.add_special)
        if media.spans and media.spans[-1].end >= len(media.tokens):
            raise InvalidRequest("the prompt ends with an image: the model needs text after it to answer")
        return media

    def _check_ids(self, tokens: list[int]) -> None:
        n = self.vocab.n_vocab
        for t in tokens:
            if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n:
                raise InvalidRequest(f"token id {t!r} is not in the vocabulary (0..{n - 1})")

    def _fit(self, tokens: list[int], request: GenerateRequest, num_predict: int | None, *,
             media: MediaPrompt | None = None) -> tuple[list[int], int]:
        """Apply the context limit: FRONT truncation keeps the first num_keep tokens (and BOS). A
        prompt with images is never cut (half an image is no image): it is refused instead. An
        image counts its cells (more than its positions with M-RoPE: vision.py)."""
        num_ctx = self.num_ctx
        size = len(tokens) + (media.extra_cells if media is not None else 0)
        if size < num_ctx:
            return tokens, 0
        if request.truncation is Truncation.REJECT or media is not None:
            raise ContextOverflow(f"the prompt is {size} tokens; a request to this model holds at most "
                                  f"{num_ctx} (shorten it, raise num_ctx, or allow truncation)",
                                  size, num_ctx)
        assert isinstance(request.num_keep, int) and request.num_keep >= 0, f"num_keep={request.num_keep!r}"
        reserve = max(1, min(num_predict if num_predict else num_ctx // 4, num_ctx // 2))
        limit = num_ctx - reserve
        keep = max(request.num_keep, 1 if tokens[0] == self.vocab.bos else 0)
        keep = min(keep, limit - 1)
        kept = tokens[:keep] + tokens[len(tokens) - (limit - keep):]
        log.info("prompt of %d tokens truncated to %d (context %d)", len(tokens), len(kept), num_ctx)
        return kept, len(tokens) - len(kept)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _run(self) -> None:
        batcher = self.batcher
        assert batcher is not None
        idle = False
        while True:
            stage = False
            with self._cond:
                if not self._closed and not self._incoming and (idle or not batcher.has_work()):
                    # a wake (a request, a cancel, an image encoded: batcher.py) or 50 ms of a step with
                    # nothing to decode, then the next step looks at the state again; with nothing to run
                    # and released paths to copy, STAGE_AFTER first (the rest of a burst), then the copy
                    if not batcher.has_work():
                        self.thread_policy.idle()
                    pending = not batcher.has_work() and batcher.kv.staging_pending()
                    self._cond.wait(timeout=0.05 if batcher.has_work() else STAGE_AFTER if pending else None)
                    stage = pending and not self._incoming
                if self._closed:
                    break
                if not stage:
                    if not batcher.has_work():
                        self._gather_burst()
                    elif self._watch_first_step:  # a request came during the first step of a lone one: bursts again
                        self._lone_arrivals = 0 if self._incoming else self._lone_arrivals
                        self._watch_first_step = False
                    batcher.waiting.extend(self._incoming)
                    self._incoming.clear()
            try:
                if stage:  # off the lock: a request arriving meanwhile stops it at the next node
                    batcher.kv.stage_idle(lambda: bool(self._incoming) or self._closed)
                else:
                    idle = not batcher.step()
            except Exception as exc:  # a bug must end requests with an error, never kill the thread silently
                log.exception("engine step failed")
                # an assertion is our bug: its text (e.g. an option's value) stays in the log
                batcher.fail_all(EngineError("engine error (see the daemon's log)" if isinstance(exc, AssertionError)
                                             else f"engine error: {exc}"))
        error = EngineError("the model was unloaded")
        batcher.waiting.extend(self._incoming)
        self._incoming.clear()
        batcher.fail_all(error)

    def _gather_burst(self) -> None:
        """Idle engine, a request arrived: let the rest of a burst arrive before the first prefill.

        Requests sent together reach the engine one or two milliseconds apart (each crosses the
        daemon and the runner pipe). Without this the first one's prefill runs alone and the others
        wait for that whole step; gathered, their prefills share one decode batch. Waits while
        requests keep arriving at most :data:`BURST_GAP` apart, never over :data:`BURST_MAX`.

        A lone request would pay one gap (4 ms of its first token), so the engine stops waiting
        once :data:`LONE_BEFORE_SKIP` arrivals in a row found no companion (one client sending one
        request at a time: a chat, an agent), and waits again as soon as a request arrives during
        the first step of one it did not wait for. Called with ``self._cond`` held (wait releases it).
        """
        seen = len(self._incoming)
        if seen == 1 and self._lone_arrivals >= LONE_BEFORE_SKIP:
            self._watch_first_step = True
            return
        first = seen
        deadline = time.monotonic() + BURST_MAX
        while not self._closed:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(timeout=min(BURST_GAP, left))
            if len(self._incoming) == seen:
                break
            seen = len(self._incoming)
        self._lone_arrivals = self._lone_arrivals + 1 if first == seen == 1 else 0

    def _free_native(self) -> None:
        if self.batcher is not None:
            self.batcher.close()
        self.batcher = None
        if self.projector is not None:
            self.projector.close()
            self.projector = None
        if self.embedder is not None:
            self.embedder.close()
            self.embedder = None
        if self.reranker is not None:
            self.reranker.close()
            self.reranker = None
        if self._ctx is not None:
            lc.llama_free(self._ctx)
            self._ctx = None
        if self._backend is not None:  # the context held its chains until now
            self._backend.close()
            self._backend = None
        if self._model is not None:
            lc.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Engine", "ErrorEvent", "RequestHandle"]
