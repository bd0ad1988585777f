"""Greedy sampling inside llama.cpp's graph, for models whose output layer runs on a GPU.

A greedy request's host-side sample (greedy.py) reads the whole logits row: 600 KB for a 152k
vocabulary, first copied from the GPU by llama.cpp, then scanned by numpy while the GPU waits for
the next step. On an H200 at 64 streams the engine's work after each ``llama_decode`` was 0.13 ms a
row; on a CPU with Gemma's 262k vocabulary the sample is 274 of its 346 us a row (BENCHMARKS.md).
llama.cpp can instead run a sequence's sampler chain as part of the decode graph
(``llama_set_sampler``, its experimental "backend sampling"): the argmax then happens on the GPU
and only the chosen token comes back, and when every output row of a step is sampled so, the
logits are not copied at all.

:class:`BackendSamplers` keeps one chain per sequence id of the context: logit bias (``ignore_eos``
masks the end-of-generation tokens) -> penalties -> greedy, the same pick as
:class:`~localrun.engine.greedy.GreedyPenalties` (which keeps the history as well, so a request can
move back to the host path at any point). Attaching a chain makes llama.cpp re-plan its compute
buffers (a scheduler reserve), so a chain stays on its id after a request ends, and the next request
on that id with the same settings only resets it; a request that cannot be sampled so (sampled,
constrained, logprobs, min_tokens, drafting) takes the id's chain off first.

llama.cpp's penalties sampler runs on the backend only with one output row per sequence and
step, so the context is created with ``n_outputs_max_per_seq = 1`` when this is on (native.py) and
a sequence with a drafter is never attached. On a CPU the graph's sampling ops cost more than the
host argmax they replace (Gemma 3 270M, 16 rows: +35 ms a step against -3.6 ms). On a GPU it has not
been measured yet (benchmarks/gpu/serve_run.sh's ALT_ENV measures it against the host path), so
LOCALRUN_BACKEND_SAMPLING=1 turns it on; off by default.

Owned by the engine thread.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llama_cpp as lc

from ..errors import EngineError
from .greedy import GreedyPenalties


@dataclass(frozen=True, slots=True)
class ChainKey:
    """What a sequence's chain is built from: two requests with equal keys share a chain by reset."""

    penalised: bool  # GreedyPenalties.active: the penalties change some logit
    last_n: int
    repeat: float
    frequency: float
    presence: float
    mask_eog: bool

    @classmethod
    def of(cls, greedy: GreedyPenalties, mask_eog: bool) -> ChainKey:
        return cls(greedy.active, greedy.last_n, float(greedy.repeat), float(greedy.frequency),
                   float(greedy.presence), mask_eog)


class BackendSamplers:
    """The chains attached to a context's sequence ids (see the module docstring)."""

    def __init__(self, ctx: lc.llama_context_p, n_vocab: int, eog: list[int]) -> None:
        self._ctx = ctx
        self._n_vocab = n_vocab
        self._eog = eog
        self._chains: dict[int, tuple[ChainKey, int]] = {}

    def attach(self, seq_id: int, key: ChainKey | None, history: list[int]) -> int:
        """Give ``seq_id`` the chain for ``key`` with ``history`` (the penalty window's tokens, oldest
        first) accepted; ``key`` None takes its chain off. Returns the chain (0 when none: the host
        samples), also when llama.cpp refused it."""
        held = self._chains.get(seq_id)
        if held is not None and (key is None or held[0] != key):
            lc.llama_set_sampler(self._ctx, seq_id, None)
            lc.llama_sampler_free(held[1])
            del self._chains[seq_id]
            held = None
        if key is None:
            return 0
        if held is None:
            chain = self._build(key)
            if not lc.llama_set_sampler(self._ctx, seq_id, chain):
                lc.llama_sampler_free(chain)
                return 0
            held = self._chains[seq_id] = (key, chain)
        else:
            lc.llama_sampler_reset(held[1])
        for token in history:
            lc.llama_sampler_accept(held[1], token)
        return held[1]

    def _build(self, key: ChainKey) -> int:
        params = lc.llama_sampler_chain_default_params()
        params.no_perf = True
        chain = lc.llama_sampler_chain_init(params)
        if key.mask_eog and self._eog:
            bias = (lc.llama_logit_bias * len(self._eog))(
                *[lc.llama_logit_bias(token, float("-inf")) for token in self._eog])
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_logit_bias(
                self._n_vocab, len(self._eog), ctypes.cast(bias, ctypes.POINTER(lc.llama_logit_bias))))
        if key.penalised:
            lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_penalties(
                self._n_vocab, key.last_n, key.repeat, key.frequency, key.presence))
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
        return chain  # type: ignore[no-any-return]

    def close(self) -> None:
        """Free every chain; call after the context is freed (it holds them until then)."""
        for _, chain in self._chains.values():
            lc.llama_sampler_free(chain)
        self._chains.clear()


def sampled_token(ctx: lc.llama_context_p, row: int, chain: int) -> int:
    """The token the graph picked for output ``row``, accepted into ``chain`` (its penalty history)."""
    token = int(lc.llama_get_sampled_token_ith(ctx, row))
    if token < 0:
        raise EngineError(f"llama.cpp sampled no token for output row {row}")
    lc.llama_sampler_accept(chain, token)
    return token
