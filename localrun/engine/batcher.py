"""Continuous batching: one llama_decode per step for every running sequence.

A step reads: retire cancelled requests, admit waiting ones (prefix-cache match), build one
batch (a decode token per generating sequence, then prompt chunks within the token budget),
decode, then sample, stream and retire. Long prompts are split across steps so generating
sequences keep producing a token every step.

Speculative decoding (greedy sequences, on by default: ``speculative``): a generating sequence
whose recent tokens occurred earlier in its text adds the tokens that followed them then as
draft rows behind its decode token (drafter.py). After the decode, greedy sampling runs row by
row and keeps each draft token it confirms; the first row it contradicts ends the run with the
token greedy picked there, and the cells of the drafts it did not reach are dropped. The
sequence gets 1 to ``k + 1`` tokens from the step, the very tokens greedy decoding picks.

The KV pool is shared by admission, not by slot (admission.py): a request joins while the pool
can hold it and what the running requests still need; generating requests that outgrow the pool
pause the lowest-priority one, which resumes from the prefix cache.

A waiting request whose prompt shares a long prefix with a prompt still being prefilled waits
for that prefill (it is registered in the prefix tree chunk by chunk) instead of computing the
same prefix again: eight requests with one system prompt compute it once.

A request with an explicit seed repeats its text when it runs alone, also with llama.cpp's fastest
kernels (the deterministic mode covers the rest): its last prompt token is always computed in a
step of its own, as a repeat computes it after a prefix-cache hit, and while it decodes alone a
placeholder token rides along, because a batch of exactly one token makes llama.cpp split F16
attention at cell-index boundaries that move as the cache fills (BENCHMARKS.md, Known limits).

Streaming overlaps the next decode (helperthread.py). A sampled token is appended to its sequence
at once, and sequences that ended by the end-of-generation token, ``num_predict`` or the context
leave the batch at once; its text (detokenizing, stop strings, the event) is *published* by a helper
thread while the engine thread is inside the next step's ``llama_decode`` (a reply's first token at
once: it is the time to first token). A sequence whose stop string that reveals
has decoded one token too many: it ends after that decode, its tokens cut back to the stop and the
extra cells dropped with the rest of its tail, so what it streams, counts and caches is what it
would have been. Only where a sequence's tail cells can be dropped (``KVCache.can_draft``); else,
and when nothing was sampled, tokens are published as they are sampled.

Images (vision.py): a prefilling sequence that reaches an image waits while the vision encoder runs
on its own thread (the others go on decoding), then the image's embeddings are decoded into its
cells at the start of a step and its text continues in the batch.

Owned by the engine thread (nothing here is thread-safe); ``RequestHandle.cancel`` only sets
a flag that the next step reads.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import llama_cpp as lc

from .. import trace
from ..errors import EngineError, GrammarError, LocalrunError
from . import admission
from .backend_sampler import BackendSamplers, ChainKey
from .drafter import MAX_DRAFT, NgramDrafter, Offer, choose
from .helperthread import HelperThread
from .kvcache import KVCache
from .native import Batch, Vocab
from .radix import common_prefix_len
from .sampling import GrammarDeadEnd, TokenData, accept_prompt, sample, token_logprobs
from .sequence import SeqState, Sequence
from .stepcost import StepCost, attended
from .threads import ThreadPolicy
from .types import MAX_UBATCH, DoneEvent, DoneReason, ErrorEvent, TokenEvent, TokenLogprob
from .vision import ImageSpan, Projector

log = logging.getLogger(__name__)

SHARE_MIN = 32  # tokens of shared prefix worth waiting for another prefill
EXPLORE_EVERY = 128  # pure decode steps between two that draft one row whatever the cost model says
MAX_BATCH_WAIT = 30.0  # seconds: a waiting batch request is then served like an interactive one
SHORT_STEP = 0.004  # seconds: a step priced under this runs with the decode thread count (Batcher._short)
# Burst admission (Engine._gather_burst): an idle engine that receives a request waits up to
# BURST_GAP for the next one, and so on while they keep coming, at most BURST_MAX in all, so a
# burst's prefills share one step (8 x 128 tokens fit one num_batch of 2,048) instead of seven
# requests waiting behind the first one's prefill.
BURST_GAP = 0.004  # seconds
BURST_MAX = 0.050  # seconds
# An idle engine with released paths to copy to host RAM (KVCache.stage_idle) waits this long first, so
# the rest of a burst, or the next request of a client sending one after another, is not held behind it.
STAGE_AFTER = 0.002  # seconds


class Batcher:
    def __init__(self, ctx: lc.llama_context_p, vocab: Vocab, kv: KVCache, *, n_batch: int,
                 num_parallel: int, speculative: bool = True, projector: Projector | None = None,
                 wake: Callable[[], None] = lambda: None, threads: ThreadPolicy | None = None,
                 backend: BackendSamplers | None = None, overlap: bool = True) -> None:
        """``threads``: the thread counts to decode and prefill with, re-checked between steps (threads.py;
        None: llama.cpp's context keeps the count it was created with). ``speculative``: greedy
        sequences draft tokens (module docstring) where the KV cache can drop a sequence's tail
        cells (not in the deterministic mode, not for recurrent models).
        ``projector``: a vision model's mmproj; its encodes run on a thread that calls ``wake``
        when one is done. ``backend``: greedy sequences are sampled in llama.cpp's graph (backend_sampler.py).
        ``overlap``: publish a step's tokens while the next one decodes (module docstring)."""
        self.ctx = ctx
        self.vocab = vocab
        self.kv = kv
        self.n_batch = n_batch
        self.num_parallel = num_parallel
        self.batch = Batch(n_batch)
        self.scratch = TokenData(vocab.n_vocab)
        self._placeholder = False  # the batch holds a placeholder token (a seeded sequence decoding alone)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.speculative = speculative
        self.step_cost = StepCost()  # what a decode row costs here (stepcost.py): how much to draft
        self._decode_steps = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.generated_tokens = 0
        self.draft_tokens = 0      # cumulative: draft rows decoded
        self.accepted_tokens = 0   # cumulative: draft tokens greedy sampling confirmed
        self.preemptions = 0       # cumulative: requests paused because the pool was full (admission.py)
        self.projector = projector
        self._wake = wake
        self._encoder = ThreadPoolExecutor(1, thread_name_prefix="vision") if projector is not None else None
        self.image_tokens = 0      # cumulative: image positions computed (not taken from the cache)
        self.threads = threads
        self.backend = backend
        self._n_threads = threads.current().prefill if threads is not None else 0  # the context's count now
        self._defer = overlap and kv.can_draft  # publish while the next step decodes (module docstring)
        self._unpublished: list[Sequence] = []  # sequences holding sampled tokens not streamed yet
        self._publisher = HelperThread("publish") if self._defer else None

    # -- accounting --------------------------------------------------------------------
    def used_cells(self) -> int:
        private = sum(s.n_past - s.lease.shared_len + s.lease.held for s in self.running if s.lease is not None)
        return self.kv.cached_cells + private

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- the step ----------------------------------------------------------------------
    def step(self) -> bool:
        """Run one step; returns False when there was nothing to decode."""
        self._retire_cancelled()
        self._admit()
        if self.running:
            self.kv.trim_idle()  # idle cached cells slow every decode: keep few (host_cache.py)
        decoded_images = self._images()
        participants = self._build()
        if not participants:  # (a sequence holding unpublished tokens is always in the batch)
            self._publish_all()
            for seq in [s for s in self.running if s.stop_at is not None]:
                self._finish(seq, DoneReason.STOP)
            return decoded_images
        trace.mark("step", 0, self.batch.n_tokens)
        if not self._decode(participants):
            return True
        trace.mark("decoded", 0, len(participants))
        for seq in participants:
            try:
                self._advance(seq)
            except LocalrunError as exc:
                self._fail(seq, exc)
        trace.mark("advanced")
        return True

    def _retire_cancelled(self) -> None:
        for seq in [s for s in self.waiting if s.handle.cancelled]:
            self.waiting.remove(seq)
            seq.sampler.free()
            seq.state = SeqState.DONE
            seq.handle.put(self._done_event(seq, DoneReason.CANCELLED))
        for seq in [s for s in self.running if s.handle.cancelled]:
            self._finish(seq, DoneReason.CANCELLED)

    def _admit(self) -> None:
        if self.waiting and not self.running:
            self.kv.reset_if_fragmented()
        if len(self.waiting) > 1 and len(self.running) + len(self.waiting) > self.num_parallel:
            self._order_waiting()
        deferred: list[Sequence] = []
        try:
            while self.waiting and len(self.running) < self.num_parallel:
                seq = self.waiting.popleft()
                if self._should_wait_for_shared_prefill(seq):
                    deferred.append(seq)
                    continue
                if not self._has_room(seq):  # the pool is full: it and those behind it wait, in order
                    deferred.append(seq)
                    break
                try:
                    self._start(seq)
                except BaseException:
                    if seq not in self.running:  # back in the queue, where fail_all() reaches it
                        deferred.append(seq)
                    raise
        finally:  # even when a bug raised: a request out of both queues would never get an answer
            self.waiting.extendleft(reversed(deferred))

    def _has_room(self, seq: Sequence) -> bool:
        """Whether the pool can hold waiting ``seq`` beside the running requests (admission.fits)."""
        kv = self.kv
        prompt = seq.tokens[: seq.prefill_end]
        cached, held = 0, True
        if kv.enabled and len(prompt) >= 2:
            match = kv.tree.match_prefix(prompt[:-1])
            cached, held = match.length, match.node.lock_ref > 0  # an unlocked match stops being evictable
        reclaimable = kv.n_cells - self.used_cells() + kv.tree.evictable_size - (0 if held else cached)
        return admission.fits(seq, cached, reclaimable, self.running)

    def _start(self, seq: Sequence) -> None:
        """Admit ``seq``: a sequence id, its cached prefix, and (the first time) its prompt's accounting."""
        seq.lease = self.kv.acquire(seq.tokens[: seq.prefill_end], self.step_cost.prompt_token_seconds,
                                    reuse=seq.cache_reuse)
        seq.n_past = seq.lease.cached
        seq.state = SeqState.PREFILL
        seq.t_admit = time.perf_counter()
        trace.mark("admitted", seq.handle.request_id, seq.lease.cached)
        self.running.append(seq)
        if not seq.t_start:  # its first admission (resuming after a preemption, its sampler and drafter carry on)
            seq.t_start = seq.t_admit
            prompt = seq.tokens[: seq.prompt_len]
            accept_prompt(seq.sampler, [t for t in prompt if t >= 0] if seq.spans else prompt, seq.last_n)
            if self.speculative and self.kv.can_draft and seq.sampler.fast_greedy is not None and not seq.spans:
                seq.drafter = NgramDrafter()
            self.prompt_tokens += seq.prompt_len
            self.cached_tokens += seq.lease.cached + seq.lease.gapped_cached
        self._attach(seq)

    def _attach(self, seq: Sequence) -> None:
        """Sample ``seq`` in llama.cpp's graph when it is greedy with one output row a step (no drafts,
        no logprobs, no min_tokens), else make sure its sequence id carries no chain (backend_sampler.py).
        At every admission: a resumed request may hold another id."""
        if self.backend is None:
            return
        assert seq.lease is not None
        sampler, greedy = seq.sampler, seq.sampler.fast_greedy
        if greedy is not None and seq.drafter is None and not sampler.logprobs and sampler.min_tokens == 0:
            key = ChainKey.of(greedy, mask_eog=sampler.ignore_eos and sampler.eog is not None)
            sampler.backend = self.backend.attach(seq.lease.seq_id, key, greedy.history())
        else:
            sampler.backend = self.backend.attach(seq.lease.seq_id, None, [])

    def _preempt(self, seq: Sequence) -> None:
        """Pause running ``seq`` because the pool is full (admission.py): its cells become an unlocked
        cached prefix, and it waits at the head of the queue to resume where it stopped."""
        assert seq.lease is not None
        if (seq.unpublished and not self._publish(seq)) or seq.stop_at is not None:
            self._finish(seq, DoneReason.STOP)  # its reply is complete: ended, not paused
            return
        self.running.remove(seq)
        if seq.state is SeqState.DECODE:
            seq.resume_decode = True
        self.kv.release(seq.lease, seq.tokens[: seq.n_past], keep=True)
        seq.lease, seq.n_past, seq.row, seq.chunk, seq.draft = None, 0, None, 0, []
        seq.sampler.backend = 0  # its id's chain may go to another request: attached again on resuming
        seq.state = SeqState.WAITING
        self.waiting.appendleft(seq)
        self.preemptions += 1
        log.info("KV pool full: request %d paused after %d tokens (it resumes from the prefix cache)",
                 seq.handle.request_id, len(seq.tokens))

    def _order_waiting(self) -> None:
        """More requests than free slots: interactive ones first, each class in arrival order.

        A batch request that has waited :data:`MAX_BATCH_WAIT` seconds counts as interactive, so a
        steady stream of chat turns delays long jobs but never starves them.
        """
        now = time.perf_counter()
        self.waiting = deque(sorted(
            self.waiting, key=lambda s: (not (s.interactive or now - s.t_submit >= MAX_BATCH_WAIT), s.t_submit)))

    def _should_wait_for_shared_prefill(self, seq: Sequence) -> bool:
        if not self.kv.enabled:
            return False
        prompt = seq.tokens[: seq.prefill_end]
        cached = self.kv.tree.match_prefix(prompt[:-1]).length
        for other in self.running:
            if other.state is SeqState.PREFILL and other.n_past < other.prefill_end:
                shared = common_prefix_len(prompt[:-1], other.tokens[: other.prefill_end])
                if shared >= cached + SHARE_MIN and other.n_past < shared:
                    return True
        return False

    def _make_room(self) -> int:
        """Free cells for this step's tokens: evict unlocked cache when short of them, and pause
        requests (admission.victim) while the generating ones alone outgrow the pool. Returns the
        free cells."""
        wanted = sum(1 if s.state is SeqState.DECODE else s.prefill_end - s.n_past for s in self.running)
        free = self.kv.n_cells - self.used_cells()
        if free < min(wanted, self.n_batch):
            self.kv.evict(min(wanted, self.n_batch) - free)
            self.kv.release_parked()  # memory is needed now: free what eviction parked
            free = self.kv.n_cells - self.used_cells()
        while len(self.running) > 1 and free < (decoding := sum(s.state is SeqState.DECODE for s in self.running)):
            self._preempt(admission.victim(self.running))
            self.kv.evict(decoding - free)
            self.kv.reguard()  # the paused request's evicted cells are free for llama.cpp too (kvcache.py)
            free = self.kv.n_cells - self.used_cells()
        return free

    def _build(self) -> list[Sequence]:
        batch = self.batch
        batch.clear()
        self.kv.reguard()  # cells removed since the last step are free for llama.cpp too (kvcache.py)
        free = self._make_room()
        decoding = [s for s in self.running if s.state is SeqState.DECODE]
        # Interactive prompts first, then the shortest remaining: a chat turn admitted behind a long
        # batch prompt gets its first token without waiting for all of that prompt's chunks.
        prefilling = sorted((s for s in self.running if s.state is SeqState.PREFILL),
                            key=lambda s: (not s.interactive, s.prefill_end - s.n_past))
        self._draft(decoding, min(self.n_batch, free) - len(decoding))
        for seq in decoding:
            seq.chunk = 0
            if seq.draft:
                seq.row = batch.add_all(seq.lease.seq_id, seq.n_past, [seq.tokens[-1], *seq.draft])  # type: ignore[union-attr]
            else:
                seq.row = batch.add_one(seq.lease.seq_id, seq.n_past, seq.tokens[-1])  # type: ignore[union-attr]
        budget = min(self._prefill_budget() - batch.n_tokens, free - batch.n_tokens)
        participants = list(decoding)
        for seq in prefilling:
            if budget <= 0:
                break
            gapped = seq.lease.gapped  # type: ignore[union-attr]
            if gapped:  # cached runs past what it read: its own once it reaches them (kvcache.py)
                seq.n_past = self.kv.join(seq.lease, seq.n_past)  # type: ignore[arg-type]
            take = min(budget, seq.prefill_end - seq.n_past)
            if gapped:
                take = min(take, gapped[0].start - seq.n_past)
            span = seq.next_span() if seq.spans else None
            if span is not None:  # text up to the next image; the image itself is decoded by _images
                take = min(take, span.start - seq.n_past)
                if take <= 0:
                    continue
            if seq.seeded and take > 1 and seq.n_past + take == seq.prefill_end:
                take -= 1  # the last prompt token in a step of its own (module docstring)
            last = seq.n_past + take == seq.prefill_end and not seq.resume_decode
            row = batch.add(seq.lease.seq_id, seq.n_past,  # type: ignore[union-attr]
                            seq.tokens[seq.n_past: seq.n_past + take], want_last_logits=last)
            seq.row = row if last else None
            seq.chunk = take
            budget -= take
            participants.append(seq)
        if batch.n_tokens == 1 and participants[0].seeded and free > 1:
            batch.add(self.kv.scratch_id, 0, [self.vocab.bos if self.vocab.bos >= 0 else 0], want_last_logits=False)
            self._placeholder = True
        return participants

    def _prefill_budget(self) -> int:
        """Tokens this step may hold: ``n_batch``, or one physical batch while the thread count is
        unsettled (threads.py: the engine just sat idle), so the count is checked again after that
        much work instead of after a step that can take seconds."""
        if self.threads is None:
            return self.n_batch
        self.threads.update()
        return self.n_batch if self.threads.settled else min(self.n_batch, MAX_UBATCH)

    def _images(self) -> bool:
        """Images of prefilling sequences (module docstring): start the encode of each one's next
        image, and decode those encoded whose sequence has reached them. True when one was decoded."""
        decoded = False
        for seq in [s for s in self.running if s.state is SeqState.PREFILL and s.spans]:
            span = seq.next_span()
            if span is None:
                continue
            if not span.pending:
                self._encode(span)
            if span.start != seq.n_past or not span.ready.is_set():
                if span.start < seq.n_past:  # a cache hit never ends inside an image (vision.py)
                    self._fail(seq, EngineError("the prefix cache ended inside an image"), keep=False)
                continue
            if span.error is not None:
                self._fail(seq, span.error)
                continue
            assert self.projector is not None and seq.lease is not None
            if not self.projector.decode(self.ctx, span, seq.lease.seq_id, self.n_batch):
                self.kv.evict(span.n_tokens)  # no room in llama.cpp's cache this step: retry at the next
                continue
            seq.n_past = span.end
            self.image_tokens += span.n_tokens
            self.kv.guard(seq.lease, seq.n_past, now=True)
            self.kv.register(seq.lease, seq.tokens[: seq.n_past])
            decoded = True
        return decoded

    def _encode(self, span: ImageSpan) -> None:
        assert self._encoder is not None and self.projector is not None
        span.pending = True
        projector, wake = self.projector, self._wake

        def run() -> None:
            projector.encode(span)
            wake()

        self._encoder.submit(run)

    def close(self) -> None:
        """Stop the publishing thread and the encoder thread (an encode in flight finishes; nobody reads it)."""
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None
        if self._encoder is not None:
            self._encoder.shutdown(wait=True, cancel_futures=True)

    def _draft(self, decoding: list[Sequence], room: int) -> None:
        """Set each decoding sequence's draft for this step, within ``room`` spare cells: the draft
        tokens worth their rows by the measured cost of a row (drafter.choose)."""
        offered: list[tuple[Sequence, list[int]]] = []
        for seq in decoding:
            seq.draft = []
            if seq.drafter is None:
                continue
            limit = seq.num_ctx - len(seq.tokens) - 1  # the step's last token must still fit
            if seq.num_predict is not None:
                limit = min(limit, seq.num_predict - seq.generated - 1)
            proposal = seq.drafter.propose(seq.tokens, min(MAX_DRAFT, limit))
            if proposal:
                offered.append((seq, proposal))
        if not offered:
            return
        self._decode_steps += 1
        counts = choose([Offer(len(p), s.policy.accept_rate, s.n_past) for s, p in offered], len(decoding),
                        sum(s.n_past + 1 for s in decoding), self.step_cost.model(), room,
                        explore=self._decode_steps % EXPLORE_EVERY == 0)
        for (seq, proposal), count in zip(offered, counts, strict=True):
            seq.draft = proposal[:count]
            if not count:
                seq.policy.skipped()

    def _decode(self, participants: list[Sequence]) -> bool:
        """Decode the batch, publishing the last step's tokens meanwhile; a step of decode rows only
        is timed for the cost model (stepcost.py)."""
        pure_decode = not self._placeholder and all(s.state is SeqState.DECODE for s in participants)
        rows = self.batch.n_tokens
        cells = sum(attended(s.n_past, s.chunk if s.state is SeqState.PREFILL else 1 + len(s.draft))
                    for s in participants)
        self._set_threads(prefill=not pure_decode and not self._short(rows, cells))
        started = time.perf_counter()  # after the thread policy's own sampling: the step alone is timed
        try:
            decoded = self._decode_batch(participants)
        finally:
            if self._placeholder:  # its one cell goes back at once
                self._placeholder = False
                self.kv.clear_scratch()
        if not decoded or self.batch.n_tokens != rows:  # shrunk by a full cache: not this step's cost
            return decoded
        # llama_decode returns once a GPU step is queued; sampling waits for it anyway, so waiting here
        # costs nothing and times the step itself (the queueing alone misled the model on CUDA). A step
        # of prompt chunks that samples nothing yet is not waited for: that would stall a GPU.
        if pure_decode:
            lc.llama_synchronize(self.ctx)
            self.step_cost.record(rows, cells, time.perf_counter() - started)
        elif any(s.state is SeqState.PREFILL and s.n_past + s.chunk >= s.prefill_end for s in participants):
            lc.llama_synchronize(self.ctx)
            self.step_cost.record_prompt(rows, time.perf_counter() - started)
        return decoded

    def _short(self, rows: int, cells: int) -> bool:
        """Whether a step with prompt tokens of ``rows`` rows attending ``cells`` cells takes under
        :data:`SHORT_STEP`: thread hand-offs, not arithmetic, decide its time, so it runs with the
        decode count, which the policy keeps off contended cores (a tiny model's prompt, a chat
        turn's last chunk), where the prefill count would spin a thread on one (threads.py). What
        such steps of that size took says so; before one was timed, the decode rows' cost model."""
        measured = self.step_cost.prompt_seconds(rows)
        if measured is not None:
            return measured < SHORT_STEP
        model = self.step_cost.model()
        return model is not None and model.seconds(rows, cells) < SHORT_STEP

    def _set_threads(self, *, prefill: bool) -> None:
        """Give this step the threads its kind gets now (threads.py); llama.cpp takes the change at once."""
        if self.threads is None:
            return
        chosen = self.threads.update()
        n = chosen.prefill if prefill else chosen.decode
        if n != self._n_threads:
            lc.llama_set_n_threads(self.ctx, n, n)
            trace.mark("threads", 0, n)
            self._n_threads = n

    def _decode_batch(self, participants: list[Sequence]) -> bool:
        rc = self._first_decode()
        if rc == 1 and self.kv.release_parked():  # parked cells are not counted as used
            rc = self.batch.decode(self.ctx)
        if rc == 1:  # no KV slot: drop all unlocked cache and retry, then decode tokens only
            self.kv.evict_all()
            self.kv.release_parked()
            self.kv.reguard()
            rc = self.batch.decode(self.ctx)
            if rc == 1 and any(s.chunk for s in participants):
                log.warning("KV cache full: postponing prompt chunks this step")
                for seq in participants:
                    if seq.state is SeqState.PREFILL:
                        seq.chunk, seq.row = 0, None
                participants[:] = [s for s in participants if s.state is SeqState.DECODE]
                rc = self._decode_only(participants) if participants else 0
            while rc == 1 and len(participants) > 1:  # llama.cpp found no room after all: pause one, retry
                self._preempt(admission.victim(participants))
                participants[:] = [s for s in participants if s in self.running]
                self.kv.evict_all()
                self.kv.reguard()
                rc = self._decode_only(participants)
        if rc == 0:
            return True
        why = "the KV cache is full" if rc == 1 else f"llama_decode failed ({rc})"
        log.error("decode of %d tokens failed: %s", self.batch.n_tokens, why)
        for seq in list(participants):
            self._fail(seq, EngineError(f"generation failed: {why}"), keep=False)
        return False

    def _first_decode(self) -> int:
        """The batch's decode, the last step's tokens published meanwhile on the helper thread (or
        first, where there is no helper)."""
        if self._publisher is None or not self._unpublished:
            self._publish_all()
            return self.batch.decode(self.ctx)
        self._publisher.start(self._publish_all)
        try:
            return self.batch.decode(self.ctx)
        finally:  # the sequences are the publisher's until it is done
            self._publisher.wait()

    def _decode_only(self, decoding: list[Sequence]) -> int:
        """Decode just the decode token of each sequence in ``decoding`` (no drafts, no prompt chunks)."""
        self.batch.clear()
        for seq in decoding:
            seq.draft = []
            seq.row = self.batch.add_one(seq.lease.seq_id, seq.n_past, seq.tokens[-1])  # type: ignore[union-attr]
        return self.batch.decode(self.ctx)

    def _advance(self, seq: Sequence) -> None:
        if seq.stop_at is not None:  # publishing found its stop string while this step decoded
            self._finish(seq, DoneReason.STOP)
            return
        if seq.state is SeqState.PREFILL:
            seq.n_past += seq.chunk
            self.kv.guard(seq.lease, seq.n_past, now=True)  # type: ignore[arg-type]
            self.kv.register(seq.lease, seq.tokens[: seq.n_past])  # type: ignore[arg-type]
            if seq.n_past < seq.prefill_end:
                return
            seq.state = SeqState.DECODE
            if seq.resume_decode:  # back where it was paused: the next step decodes tokens[-1]
                seq.resume_decode = False
                return
            seq.t_first = time.perf_counter()
            trace.mark("prefilled", seq.handle.request_id)
            if seq.num_predict == 0:
                self._finish(seq, DoneReason.LENGTH)
                return
        else:
            seq.n_past += 1
            self.kv.guard(seq.lease, seq.n_past)  # type: ignore[arg-type]
        assert seq.row is not None
        if seq.handle.cancelled:  # cancelled while this step decoded: sample nothing for nobody
            self._finish(seq, DoneReason.CANCELLED)
            return
        draft, seq.draft = seq.draft, []
        picked = self._verify(seq, draft)
        if draft:  # picked[:-1] are confirmed drafts: their cells hold the right KV; the rest go
            accepted = len(picked) - 1
            seq.n_past += accepted
            self.kv.drop_tail(seq.lease, seq.n_past)  # type: ignore[arg-type]
            seq.policy.record(len(draft), accepted)
            self.draft_tokens += len(draft)
            self.accepted_tokens += accepted
        for i, token in enumerate(picked):
            if not self._accept(seq, token, seq.row + i):
                return

    def _verify(self, seq: Sequence, draft: list[int]) -> list[int]:
        """Sample the sequence's rows in order while they confirm ``draft``: the tokens to emit,
        each sampled from the row after the previous one (the last one from the first row that
        contradicts the draft, or from the row after the whole draft)."""
        assert seq.row is not None
        picked: list[int] = []
        for i in range(len(draft) + 1):
            try:
                token = sample(seq.sampler, self.ctx, seq.row + i, self.scratch, self.vocab, seq.generated + i)
            except GrammarDeadEnd as exc:
                raise GrammarError(f"constrained output cannot continue: {exc}") from exc
            picked.append(token)
            if i == len(draft) or token != draft[i] or self.vocab.is_eog(token):
                break
        return picked

    def _accept(self, seq: Sequence, token: int, row: int) -> bool:
        """Append ``token`` (sampled from output ``row``), to be published with the next decode (or
        now); False when that ended the sequence (end of generation, a stop string published now,
        num_predict or the context)."""
        if self.vocab.is_eog(token):  # never while the sampler masks EOG (ignore_eos, min_tokens)
            self._finish(seq, DoneReason.STOP)
            return False
        logprobs: tuple[TokenLogprob, ...] = ()
        if seq.sampler.logprobs:  # from the row, which the next decode overwrites
            logprobs = (token_logprobs(self.ctx, row, self.vocab.n_vocab, token,
                                       seq.sampler.top_logprobs, self.vocab),)
        if self._defer and not seq.unpublished and seq.generated:
            self._unpublished.append(seq)
        seq.unpublished.append((len(seq.tokens), token, logprobs))
        seq.tokens.append(token)
        seq.generated += 1
        self.generated_tokens += 1
        # a reply's first token goes out now: waiting for the next step's admissions and batch would
        # put them on the time to first token (+2.6 ms at 8 streams on the tiny model)
        if (not self._defer or seq.generated == 1) and not self._publish(seq):
            self._finish(seq, DoneReason.STOP)
            return False
        if (seq.num_predict is not None and seq.generated >= seq.num_predict) or len(seq.tokens) >= seq.num_ctx:
            self._finish(seq, DoneReason.LENGTH)
            return False
        return True

    # -- publishing --------------------------------------------------------------------
    def _publish_all(self) -> None:
        """Publish every sequence's sampled tokens (on the helper thread while the engine thread decodes: no
        context calls here)."""
        for seq in self._unpublished:
            self._publish(seq)
        self._unpublished.clear()

    def _publish(self, seq: Sequence) -> bool:
        """Stream ``seq``'s unpublished tokens as text events; False once a stop string appeared
        (``stop_at`` is then set, and the tokens after it are not streamed)."""
        for index, token, logprobs in seq.unpublished:
            text = seq.text.push(self.vocab.piece(token))
            if text or logprobs:
                seq.handle.put(TokenEvent(text, logprobs))
            if seq.text.stopped:
                seq.stop_at = index
                break
        seq.unpublished.clear()
        return seq.stop_at is None

    def _cut_at_stop(self, seq: Sequence) -> None:
        """Forget what ``seq`` sampled after the token that completed its stop string: the tokens,
        their count, and the cells past it (released with the tail: ``KVCache.release``)."""
        assert seq.stop_at is not None
        extra = len(seq.tokens) - seq.stop_at - 1
        if extra > 0:
            del seq.tokens[seq.stop_at + 1:]
            seq.generated -= extra
            self.generated_tokens -= extra
        seq.n_past = min(seq.n_past, seq.stop_at)

    # -- retiring ----------------------------------------------------------------------
    def _finish(self, seq: Sequence, reason: DoneReason) -> None:
        """End ``seq`` with ``reason``: its tokens published first (a stop string among them makes it STOP)."""
        if seq.unpublished:
            self._publish(seq)
        if seq.stop_at is not None:
            self._cut_at_stop(seq)
            reason = DoneReason.STOP
        tail = seq.text.flush()
        if tail:
            seq.handle.put(TokenEvent(tail))
        self._retire(seq, keep=True)
        seq.handle.put(self._done_event(seq, reason))

    def _fail(self, seq: Sequence, error: Exception, keep: bool = True) -> None:
        if seq.unpublished:  # what it wrote before the error still reaches the client
            try:
                self._publish(seq)
            except Exception:
                log.exception("publishing request %d's last tokens failed", seq.handle.request_id)
        if seq.stop_at is not None:  # its reply was complete before the failed step: it ends as it would have
            self._finish(seq, DoneReason.STOP)
            return
        self._retire(seq, keep=keep)
        seq.handle.put(ErrorEvent(error))

    def _retire(self, seq: Sequence, keep: bool) -> None:
        if seq in self.running:
            self.running.remove(seq)
        if seq.lease is not None:
            self.kv.release(seq.lease, seq.tokens[: seq.n_past], keep=keep)
        seq.sampler.free()
        seq.state = SeqState.DONE

    def fail_all(self, error: Exception) -> None:
        for seq in list(self.running):
            self._fail(seq, error, keep=False)
        while self.waiting:
            seq = self.waiting.popleft()
            seq.sampler.free()
            seq.handle.put(ErrorEvent(error))

    def _done_event(self, seq: Sequence, reason: DoneReason) -> DoneEvent:
        now = time.perf_counter()
        first = seq.t_first or now
        start = seq.t_start or first
        return DoneEvent(
            done_reason=reason,
            prompt_eval_count=seq.counted(seq.prompt_len),
            cached_tokens=seq.counted(seq.cached),
            eval_count=seq.generated,
            prompt_eval_duration=int((first - start) * 1e9),
            eval_duration=int((now - first) * 1e9) if seq.t_first else 0,
            truncated_tokens=seq.truncated,
            context=tuple(seq.tokens),
            stop_string=seq.text.matched,
        )

